// Masking (private to src/core/analysis): the -inf a program writes on purpose (an attention
// mask's masked_fill(mask, -inf), an additive mask built with full(-inf)) and the ops that carry
// it on, told from an overflow. One rule for overflow, summary, check, the op watchpoints and
// the report, so that they never disagree on what is a mask (docs/debugger.md, "Masks").
//
// The records hold statistics, not tensors: there is no tensor identity to follow a -inf from
// the op that wrote it. So the rule is per op, with the (rank, step) as the only link:
// - a mask *writer* is one of the ops that fill with a value (may_write_mask()) given a
//   non-tensor -inf argument, whose tensor inputs hold no NaN/+Inf (but `self` of an op that
//   does not read its values, overwrites_self()) and whose outputs hold more -inf than its
//   inputs and no NaN/+Inf (a new mask, or a key padding mask filled into a causal one);
// - an op *carries* a mask when its tensor inputs hold -inf and no NaN/+Inf, its outputs no
//   NaN/+Inf, and a writer ran earlier in its (rank, step): an add of an additive mask, a view,
//   a softmax row with some -inf inputs;
// - an op whose inputs are so and whose outputs hold NaN or +Inf turns the mask into a NaN
//   there (a fully masked softmax row): the NaN is born at that op, an origin.
// - an attention op (is_attention_op(): SDPA, its kernels and backward ops, fused multi-head
//   attention) given -inf and no NaN/+Inf with no writer before it takes it as its attn_mask:
//   the mask enters the records there (a writer, MaskWrite::given), or its NaN is born there.
// Any other -inf that arrives with no writer earlier in its step (data, a buffer built before
// the step, an overflow) is judged as any non-finite value; one produced from finite inputs
// without a -inf constant (log(0), x * 1e39) is an origin as before.
//
// Not thread-safe (a MaskTracker is fed by one thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "precprobe/analysis.h"
#include "precprobe/records.h"

namespace precprobe::analysis_detail {

/// In-place ops that overwrite all of `self` (input 0) without reading it: a NaN there is the
/// garbage of an uninitialised allocation, not a value consumed.
bool overwrites_self(const OpRecord& r) noexcept;

/// The ops that may write a mask: those that fill with a value argument (masked_fill,
/// masked_fill_, where, full, full_like, new_full, fill, fill_, scalar_tensor, index_fill,
/// index_fill_, constant_pad_nd, pad). A list of names, so that a reader passing over frames
/// by their digests (whose per-op counts name the ops) decodes exactly the frames that may
/// hold one, and gives the answer it gives decoding every frame.
bool may_write_mask(std::string_view op) noexcept;

/// Whether a non-tensor argument (JSON text, Arg::value) is -inf: the probe writes "-inf" (a
/// JSON string); -Infinity and a number beyond the double range read the same.
bool is_minus_inf_value(std::string_view json) noexcept;

/// A mask's large negative fill: the non-tensor value given to an op that may write a mask
/// when it is at or below float16's lowest, finfo(float16).min = -65504 (Hugging Face fills
/// with finfo(dtype).min, older code with -1e9). Its elements are the program's intent, not
/// values a format must hold (`precprobe precision`, docs/precision.md "Masks").
std::optional<double> mask_fill_value(const OpRecord& r);

/// The op-local half of the rule: `r` wrote a mask's -inf (see above).
bool writes_mask(const OpRecord& r) noexcept;
/// MaskWatch::may_take_mask: add, add_, baddbmm, baddbmm_.
bool may_take_mask(std::string_view op) noexcept;
/// Whether a frame whose digest names these ops with non-finite outputs may hold a mask, which
/// only its records tell: one of them may write a mask, or all of them may write or be given
/// one (an add of a mask made before recording; where other ops made NaN/Inf too, the run
/// has gone non-finite and the adds are counted as the digest counts them).
bool may_hold_mask(const std::vector<std::pair<std::string, int64_t>>& nonfinite_ops) noexcept;
/// Whether `r` is one of those and every -inf among its inputs is in tensors holding only 0
/// and -inf (an additive mask, made before recording or by ops not recorded), and none holds
/// NaN or +Inf.
bool given_additive_mask(const OpRecord& r) noexcept;

/// What an op is to masking.
enum class MaskRole : uint8_t {
  kNone,     ///< no mask in or out: judged as any op
  kWriter,   ///< wrote a mask's -inf
  kCarrier,  ///< carried a mask on: -inf in, no NaN/+Inf out, a writer earlier in the step
  kBorn,     ///< turned a mask's -inf into NaN/+Inf (a fully masked softmax row): an origin
};

/// kWriter and kCarrier: -inf that is the program's intent, never counted as NaN/Inf.
inline bool is_masking(MaskRole r) noexcept {
  return r == MaskRole::kWriter || r == MaskRole::kCarrier;
}

/// A mask writer of a step.
struct MaskWrite {
  std::string op;
  int64_t seq = 0;
  int64_t elements = 0;  ///< -inf elements of its outputs (given: of its inputs)
  size_t index = 0;      ///< the index the caller gave observe()
  /// An attention op given a -inf mask that no recorded op of its step wrote (SDPA's bool
  /// mask turned into -inf inside it, a float mask built before recording).
  bool given = false;
};

/// The roles of a stream of records, per rank and step. Feed each (rank, step)'s records in
/// seq order (overflow sorts each step's records), or in file order (one pass over a dump:
/// a writer then counts for the records after it in the file whose seq is larger; a record
/// ends after the ops nested in it, so the orders differ only for ops nested in a writer).
class MaskTracker {
 public:
  /// The role of `r`; `index` is the caller's, given back in MaskWrite::index.
  MaskRole observe(const OpRecord& r, size_t index = 0);
  /// For the record observe() saw last: the latest writer of its step that started before it
  /// (kCarrier, kBorn), else nullptr. Valid until the next observe().
  const MaskWrite* writer() const noexcept { return writer_; }

 private:
  struct Step {
    int64_t step = 0;
    std::vector<MaskWrite> writers;
  };
  std::map<int, Step> ranks_;
  const MaskWrite* writer_ = nullptr;
};

/// The roles of one (rank, step)'s records (any order: judged in seq order), and for each
/// kCarrier or kBorn record the index in `g` of its writer.
std::vector<MaskRole> mask_roles(const std::vector<OpRecord>& g,
                                 std::vector<std::optional<size_t>>* writers = nullptr);

/// Why a kBorn record's output holds NaN/+Inf. For a softmax (softmax, _softmax, log_softmax,
/// _log_softmax, _safe_softmax) whose NaN count is a whole number K of rows of length L =
/// shape[dim] of its input, all of them -inf: "every element of K of its R rows was -inf:
/// fully masked rows" (R = numel / L); else what its inputs held and what came out.
std::string born_reason(const OpRecord& r);

/// Counts masking over a stream of records: writers, carriers, the first writer, the steps.
class MaskingCounter {
 public:
  void add(const OpRecord& r, MaskRole role);
  /// Adds what another counter holds (another step's, another rank's).
  void merge(const MaskingCounter& o);
  MaskingSummary finish() const;
  /// The first writer so far (writers == 0: none), and the module it ran in.
  const MaskingSummary& first() const noexcept { return m_; }
  void set_module(std::optional<std::string> module) { m_.module = std::move(module); }

 private:
  MaskingSummary m_;
  std::set<int64_t> steps_;
};

}  // namespace precprobe::analysis_detail
