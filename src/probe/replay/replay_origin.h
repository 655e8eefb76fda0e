// OriginTracker: during the replay of an anomalous step ("record": "on_anomaly") it keeps,
// for every recorded op whose inputs are finite (or hold a mask's -inf and no NaN/+Inf) and
// whose outputs turn NaN/Inf (the candidates of `precprobe overflow`), a deep copy of the op's
// boxed inputs, so that the origin can be run again in float64 and classified (classify_origin),
// and its inputs saved as the "tensor" task saves them. It also re-runs in float64 every op whose
// float32 / bfloat16 / float16 output holds exact zeros, and remembers the outputs whose zeros are
// underflows (non-zero in float64), so that a division by such a zero is classified
// "underflow" with the op that underflowed. The Observer calls it only while a replay runs;
// nothing of it runs on healthy steps.
//
// Threads: on_start/on_end from any thread that runs ops (autograd threads included);
// the rest from the controlling thread after the replay.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "precprobe/records.h"

namespace precprobe {
namespace detail {

struct OpInfo;

class OriginTracker {
 public:
  /// An op call between its start and end callbacks.
  struct Call;
  /// A candidate: finite inputs, a non-finite output.
  struct Candidate {
    int64_t seq = 0;
    /// Its inputs held -inf and no NaN/+Inf (a mask's, when a mask writer ran before it in
    /// the step: a fully masked softmax row); kept so that its inputs are saved.
    bool minus_inf_inputs = false;
    std::string op, overload;
    std::vector<c10::IValue> inputs;                   ///< deep copies, original dtypes
    at::ScalarType out_dtype = at::ScalarType::Float;  ///< of the first non-finite output
    /// An input holding exact zeros that an earlier op of the replay produced by underflow:
    /// its float64 re-run gives non-zero values there, too small for its dtype.
    struct Underflow {
      size_t input = 0;  ///< position among the op's arguments
      int64_t seq = 0;   ///< the op that underflowed, and its name
      std::string op;
      int64_t zeros = 0;   ///< its output elements that are 0 where float64's are not
      double example = 0;  ///< the largest |float64 value| among them
      at::ScalarType dtype = at::ScalarType::Float;  ///< of that output
    };
    std::optional<Underflow> underflow;
  };

  /// At an op's start (inside the observer's callback): nullptr when the op cannot be a
  /// candidate (an input already holds NaN or +Inf, or its outputs are uninitialized
  /// memory). An op whose inputs hold -inf and no NaN/+Inf stays one (Candidate::
  /// minus_inf_inputs): a mask's -inf turned into NaN there is an origin.
  std::shared_ptr<Call> on_start(const OpInfo& info, const OpRecord& header,
                                 c10::ArrayRef<const c10::IValue> inputs);
  /// At its end: keeps the inputs when an output is non-finite.
  void on_end(Call& call, const std::vector<c10::IValue>& outputs);

  /// The candidate that started as op `seq` of the step, or nullptr.
  const Candidate* find(int64_t seq) const;
  /// True when op `seq` had a non-finite input as the tracker read it (the statistics of
  /// a buffer read inside a kernel may not show it).
  bool had_nonfinite_input(int64_t seq) const;
  /// Problems met while tracking (reported already).
  uint64_t errors() const noexcept { return errors_; }

 private:
  struct Zeros {  // an output with zeros born of underflow, while its storage is unchanged
    uint32_t version = 0;
    std::optional<c10::weak_intrusive_ptr<c10::StorageImpl>> alive;  // pins its address
    Candidate::Underflow what;
  };
  void note_underflow(const Call& call, const std::vector<c10::IValue>& outputs);
  std::optional<Candidate::Underflow> underflow_input(const Call& call);

  mutable std::mutex mu_;
  std::vector<Candidate> candidates_;
  std::unordered_map<const void*, Zeros> zeros_;  // by StorageImpl
  std::vector<int64_t> bad_inputs_;               // seqs, ascending per thread
  uint64_t errors_ = 0;
};

/// What a float64 re-run says about an origin op.
struct OriginVerdict {
  /// By the IEEE 754 exception of the float64 re-run: "range" (overflow of the op's dtype
  /// only: finite in float64), "overflow" (beyond float64 too), "divide_by_zero",
  /// "invalid" (NaN from finite inputs), "underflow" (a division by, or 0/0 of, a zero that
  /// an earlier op produced by underflow: Candidate::underflow), or "unknown".
  std::string classification;
  std::string why;
};

/// Runs `c`'s op through the dispatcher on float64 copies of its inputs; never throws.
OriginVerdict classify_origin(const OriginTracker::Candidate& c);

/// True when every element of `t` is finite (non-floating tensors are).
bool all_finite(const at::Tensor& t);

/// Writes the tensors of `inputs` as `<dir>/<record_name>.in<i>.npy.zst`, `i` counted as
/// the record's "in" array counts (one per argument, one per tensor of a list). Returns
/// the number of files written; errors are reported, not thrown.
int save_inputs(const std::vector<c10::IValue>& inputs, const std::string& dir,
                const std::string& record_name, int zstd_level, int64_t max_bytes);

}  // namespace detail
}  // namespace precprobe
