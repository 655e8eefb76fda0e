// What the analyses say of masks: a -inf a program writes on purpose (an attention mask) is
// not an overflow. `precprobe overflow`, `summary`, `check`, `watch` and the report count none
// of it as NaN/Inf and say it as masking (docs/debugger.md, "Masks"); the rule itself is the
// core's (src/core/analysis/masking.h). Torch-free plain values: safe to copy between threads.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace precprobe {

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
  /// summary only: the tensor_overflow hits the run wrote live (an older writer) at masking
  /// ops, left out of SummaryResult::op_watch_hits.
  int64_t live_watch_hits = 0;

  bool any() const noexcept { return writers > 0; }
  /// For people: "31744 elements set to -inf by aten::masked_fill (step 0), masks in 30
  /// steps; not counted as overflow".
  std::string describe() const;
  /// null when !any(); else {"writers", "carriers", "steps", "op", "name", "step", "rank",
  /// "seq", "elements", "live_watch_hits", "text"}.
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

}  // namespace precprobe
