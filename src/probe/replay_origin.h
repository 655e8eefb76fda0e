// OriginTracker: during the replay of an anomalous step ("record": "on_anomaly") it keeps,
// for every recorded op whose inputs are finite and whose outputs turn NaN/Inf (the
// candidates of `precprobe overflow`), a deep copy of the op's boxed inputs, so that the
// origin can be run again in float64 and classified (classify_origin), and its inputs saved
// as the "tensor" task saves them. The Observer calls it only while a replay runs; nothing
// of it runs on healthy steps.
//
// Threads: on_start/on_end from any thread that runs ops (autograd threads included);
// the rest from the controlling thread after the replay.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
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
    std::string op, overload;
    std::vector<c10::IValue> inputs;                   ///< deep copies, original dtypes
    at::ScalarType out_dtype = at::ScalarType::Float;  ///< of the first non-finite output
  };

  /// At an op's start (inside the observer's callback): nullptr when the op cannot be a
  /// candidate (an input is already non-finite, or its outputs are uninitialized memory).
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
  mutable std::mutex mu_;
  std::vector<Candidate> candidates_;
  std::vector<int64_t> bad_inputs_;  // seqs, ascending per thread
  uint64_t errors_ = 0;
};

/// What a float64 re-run says about an origin op.
struct OriginVerdict {
  /// By the IEEE 754 exception of the float64 re-run: "range" (overflow of the op's dtype
  /// only: finite in float64), "overflow" (beyond float64 too), "divide_by_zero",
  /// "invalid" (NaN from finite inputs), or "unknown".
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
