// compare's two halves (private to src/core/analysis). compare.cpp judges one (step, rank)
// group of ops present in both runs, or in one run only, into a GroupResult; CompareMerge
// adds the groups' results up, in the order of the groups' keys, into the CompareResult.
// compare_read.cpp reads the runs: both streamed side by side, a group judged as soon as
// both runs' records of it are read, or (without frame digests) both held in memory.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arg_rules.h"
#include "modules.h"
#include "precprobe/analysis.h"

namespace precprobe::analysis_detail {

using GroupKey = std::pair<int64_t, int>;  // (step, rank)

/// What became of a tensor no op of its group had read when it was made or entered the group
/// (compare_dead.h): still open at the group's end, overwritten (zero_, fill_, copy_), read,
/// or accumulated onto by a gradient accumulation that carries its difference on.
enum class Fate : uint8_t { kOpen, kOverwritten, kRead, kCarriedOn };

struct ValueFate {
  Fate fate = Fate::kOpen;
  std::string by;    ///< the op that did it, "aten::zero_"
  int64_t step = 0;  ///< at which step
};

/// A tensor made before its group's step that an op of the group reads (not a parameter):
/// its statistics in run A (side_b false) or B, and what became of it first.
struct EntryTouch {
  bool side_b = false;
  TensorStats stats;
  ValueFate fate;
};

/// A gradient accumulated onto a different value in each run whose difference no op of its
/// step read or overwrote in both runs: what the next step does with it decides whether it is
/// dead (CompareMerge).
struct OpenCarry {
  DeadDifference dead;  ///< reason to be filled
  TensorStats stats_a, stats_b;
  ValueFate fate_a, fate_b;
};

/// What one group adds to the CompareResult: its counts and lists in `part` (ops: the
/// comparisons CompareOptions::keep_ops selects), and its earliest divergent and inexact ops;
/// for the dead differences that cross steps, its open carries and the tensors made before
/// its step that it touched.
struct GroupResult {
  GroupKey key{};
  CompareResult part;
  std::optional<OpCompare> first_divergent, first_inexact;
  std::vector<OpenCarry> open;
  std::vector<EntryTouch> entries;
};

/// What the verdicts of a group asked of the runs' ProgramConstants.
struct ConstantsUse {
  bool asked = false;      ///< whether an argument is a constant of its run
  bool unsettled = false;  ///< ... and groups not yet added could change the answer
};

/// One group present in both runs, each side's ops in seq order. `const_a`/`const_b` hold
/// the non-tensor arguments of the runs' groups (ProgramConstants); `use` (may be null) says
/// what the verdicts asked of them: when unsettled, the result is to be recomputed once every
/// group is added. `first_step`: the group is its rank's first step compared, where a tensor
/// made before the step (the loaded state, data made up front) that differs is reported.
GroupResult compare_group(const GroupKey& key, const std::vector<OpRecord>& a,
                          const std::vector<OpRecord>& b, const CompareOptions& opt,
                          double loss_scale, const ModuleOrder* order_a,
                          const ProgramConstants& const_a, const ProgramConstants& const_b,
                          ConstantsUse* use, bool first_step);

/// A group of run `side` ("a" or "b") only: its ops are unmatched.
GroupResult one_run_group(const GroupKey& key, const std::vector<OpRecord>& ops, const char* side);

/// Adds GroupResults up. Add the groups in compare's order: the groups of A (present in both
/// runs or in A only) by key, then those of B only by key; the result is then the same
/// whatever order they were judged in.
class CompareMerge {
 public:
  explicit CompareMerge(const CompareOptions& opt);
  void add(GroupResult&& g);
  CompareResult finish(int64_t background_a, int64_t background_b);

 private:
  // The open carries of each rank's last group added (its step), resolved by the rank's next
  // group compared, or at the end.
  struct Open {
    int64_t step = 0;
    std::vector<OpenCarry> carries;
  };
  void resolve(Open& open, const std::vector<EntryTouch>* next, int64_t next_step);

  const CompareOptions& opt_;
  CompareResult res_;
  std::optional<OpCompare> first_divergent_, first_inexact_;
  std::map<std::string, size_t> module_index_;
  std::map<int, Open> open_;
};

/// How many compare_dumps calls read both runs side by side (tests: that the streamed path
/// is the one they checked).
uint64_t compare_streamed() noexcept;
/// The most (step, rank) groups the last of them held in memory at once: records read, and
/// results judged but not yet added up.
uint64_t compare_streamed_peak() noexcept;

}  // namespace precprobe::analysis_detail
