// Judges compare's (step, rank) groups on threads of their own while compare_read.cpp reads
// the runs (private to src/core/analysis). Reading a record (decompressing, decoding, taking
// it into its group) is about a third of compare's work and judging it the rest: the reading
// thread judges too whenever the groups waiting outnumber the judging threads, so no core
// idles while another is behind, and memory holds a bounded number of groups.
//
// The result is the same whatever the threads: each group is judged by compare_group, which
// reads nothing another group writes but the runs' ProgramConstants (thread-safe; an answer
// that later groups could change is marked unsettled and judged again at the end), and the
// groups' results are added up in compare's order, not in the order they were judged.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "arg_rules.h"
#include "compare_group.h"
#include "modules.h"

namespace precprobe::analysis_detail {

/// One group to judge: both runs' records, held by the caller until it is judged.
struct GroupJob {
  GroupKey key;
  const std::vector<OpRecord>* a = nullptr;
  const std::vector<OpRecord>* b = nullptr;
  double loss_scale = 1;
  const ModuleOrder* order_a = nullptr;
  bool first_step = false;
};

/// A group judged: compare_group's result and what it asked of the constants, or the error
/// it threw (rethrown by the caller's thread).
struct JudgedGroup {
  GroupKey key;
  GroupResult result;
  ConstantsUse use;
  std::exception_ptr error;
};

/// The threads compare's groups are judged on: `threads` of them counting the caller's (0: one
/// a core, at most 4); with 1 every group is judged by the caller in take().
class GroupJudges {
 public:
  GroupJudges(unsigned threads, const CompareOptions& opt, const ProgramConstants& const_a,
              const ProgramConstants& const_b);
  /// Waits for the groups being judged; those not started are dropped.
  ~GroupJudges();
  GroupJudges(const GroupJudges&) = delete;
  GroupJudges& operator=(const GroupJudges&) = delete;

  void submit(const GroupJob& job);
  /// The groups judged since the last call, in any order. Judges in the caller's thread the
  /// groups waiting beyond what the threads can take (all of them without threads); with
  /// `wait`, every group submitted, judging here those not started.
  std::vector<JudgedGroup> take(bool wait);
  /// The threads judging, the caller's included.
  unsigned threads() const noexcept { return static_cast<unsigned>(workers_.size()) + 1; }

  /// The threads `requested` means here (0: one a core, at most 4).
  static unsigned resolve(unsigned requested) noexcept;

 private:
  JudgedGroup judge(const GroupJob& job) const;
  void work();
  // Judges the oldest waiting job in this thread; `lock` is held on entry and on return.
  void judge_one(std::unique_lock<std::mutex>& lock);

  const CompareOptions& opt_;
  const ProgramConstants& const_a_;
  const ProgramConstants& const_b_;
  std::mutex mutex_;
  std::condition_variable queued_, finished_;
  std::deque<GroupJob> waiting_;
  std::vector<JudgedGroup> done_;
  size_t running_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace precprobe::analysis_detail
