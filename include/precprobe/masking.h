// What the analyses say of masks: a -inf a program writes on purpose (an attention mask) is
// not an overflow. `precprobe overflow`, `summary`, `check`, `watch` and the report count none
// of it as NaN/Inf and say it as masking (docs/debugger.md, "Masks"); the rule itself is the
// core's (src/core/analysis/masking.h). Torch-free plain values: safe to copy between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "precprobe/records.h"

namespace precprobe {

namespace analysis_detail {
class MaskTracker;
}

/// -inf the program wrote on purpose, an attention mask (`scores.masked_fill(mask, -inf)`, an
/// additive mask made with full(-inf)), and the ops that carried it on (a -inf in, no NaN or
/// +Inf out: an add, a view, a softmax row with some -inf inputs): the program's intent, not
/// an overflow, and not counted as NaN/Inf by overflow, summary, check, the op watchpoints or
/// the report (docs/debugger.md, "Masks"; the rule: src/core/analysis/masking.h).
struct MaskingSummary {
  int64_t writers = 0;   ///< op records that wrote a mask's -inf
  int64_t carriers = 0;  ///< op records that carried it on
  int64_t steps = 0;     ///< steps with a mask writer (on any rank)
  /// The first writer, by (step, seq, rank): its op ("aten::masked_fill"), record name,
  /// where, and the -inf elements of its outputs.
  std::string op, name;
  int64_t step = 0, seq = 0;
  int rank = 0;
  int64_t elements = 0;
  /// The first writer was given the mask (an attention op's attn_mask, an additive mask of 0
  /// and -inf added), not made it: `elements` counts its input's -inf.
  bool given = false;
  /// summary only: the module of the first writer, as every command places it (docs/cli.md,
  /// "Modules"); nullopt when no op of its step reads a named parameter.
  std::optional<std::string> module;
  /// summary only: the tensor_overflow hits the run wrote live (an older writer) at masking
  /// ops, left out of SummaryResult::op_watch_hits.
  int64_t live_watch_hits = 0;

  bool any() const noexcept { return writers > 0; }
  /// For people: "31744 elements set to -inf by aten::masked_fill in b0 (step 0), masks in 30
  /// steps; not counted as overflow".
  std::string describe() const;
  /// null when !any(); else {"writers", "carriers", "steps", "op", "name", "step", "rank",
  /// "seq", "module", "elements", "given", "live_watch_hits", "text"}.
  nlohmann::json to_json() const;
};

/// The mask writer upstream of an origin born from a mask (the latest writer that started
/// before it in its step).
struct MaskedBy {
  std::string op;    ///< "aten::masked_fill"
  std::string name;  ///< "aten::masked_fill.0.forward"
  int64_t step = 0, seq = 0;
  int rank = 0;
  std::optional<std::string> module;  ///< as RankOverflow::origin_module attributes it

  /// {"op", "name", "step", "rank", "seq", "module"}.
  nlohmann::json to_json() const;
};

/// The masking rule one record at a time, for a check that runs while a program records (the
/// probe's "task": "overflow_check"): the same rule as the analyses', so that the live check
/// and `precprobe overflow` on a statistics dump name the same op. Feed each rank's records of
/// a step in seq order. Not thread-safe.
class MaskWatch {
 public:
  enum class Role : uint8_t {
    kNone,     ///< no mask in or out: judged as any op
    kWriter,   ///< wrote a mask's -inf (masked_fill(mask, -inf), full(-inf), ...)
    kCarrier,  ///< carried it on: -inf in, no NaN/+Inf out, a writer earlier in its step
    kBorn,     ///< turned a mask's -inf into NaN/+Inf (a fully masked softmax row): an origin
  };
  MaskWatch();
  ~MaskWatch();
  MaskWatch(const MaskWatch&) = delete;
  MaskWatch& operator=(const MaskWatch&) = delete;

  Role observe(const OpRecord& r);
  /// For the record observe() saw last, when kCarrier or kBorn: the seq of the latest writer
  /// of its step that started before it; else -1.
  int64_t writer_seq() const noexcept;

  /// The ops that may write a mask: they fill with a value argument (masked_fill, where,
  /// full, fill_, index_fill, constant_pad_nd, ...). A cheap first test on an op's name.
  static bool may_write(std::string_view op) noexcept;
  /// The ops that may be given an additive mask of 0 and -inf made before recording (a
  /// causal mask made once, added to the scores): add, add_, baddbmm. Given one with no
  /// writer before it in its step, such an op is where the mask enters the records: a writer.
  static bool may_take_mask(std::string_view op) noexcept;

 private:
  std::unique_ptr<analysis_detail::MaskTracker> t_;
};

}  // namespace precprobe
