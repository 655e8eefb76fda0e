// The value histogram ("hist") of small integer tensors: see add_histogram in stats.h.
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "stats/stats.h"

namespace precprobe {
namespace detail {
namespace {

// ++counts[v - lo] for every element v of a contiguous tensor of T. Returns false, leaving
// `counts` partly filled, at the first value outside [lo, lo + counts.size()): the caller then
// keeps no histogram. (The bounds are exact, so that never happens; the check keeps a wrong
// bound from ever writing outside `counts`.)
template <typename T>
bool count_values(const at::Tensor& contiguous, int64_t lo, std::vector<int64_t>& counts) {
  const T* p = contiguous.data_ptr<T>();
  const int64_t n = contiguous.numel();
  const uint64_t size = counts.size();
  for (int64_t i = 0; i < n; ++i) {
    // Two's-complement distance from lo, without signed overflow (v - lo can exceed int64).
    const uint64_t d =
        static_cast<uint64_t>(static_cast<int64_t>(p[i])) - static_cast<uint64_t>(lo);
    if (d >= size) return false;
    ++counts[d];
  }
  return true;
}

// The exact smallest and largest value of a contiguous int64 tensor (its float64 min/max
// round above 2^53).
void exact_min_max(const at::Tensor& contiguous, int64_t& lo, int64_t& hi) {
  const int64_t* p = contiguous.data_ptr<int64_t>();
  const int64_t n = contiguous.numel();
  lo = p[0];
  hi = p[0];
  for (int64_t i = 1; i < n; ++i) {
    lo = p[i] < lo ? p[i] : lo;
    hi = p[i] > hi ? p[i] : hi;
  }
}

}  // namespace

void add_histogram(const at::Tensor& t, TensorStats& out) {
  out.hist.clear();
  if (out.numel == 0 || out.numel > kHistogramMaxNumel ||
      !(out.max - out.min < double(kHistogramSpan)))
    return;
  const at::Tensor c = t.is_contiguous() ? t : t.contiguous();
  // The bounds as integers. out.min/out.max are exact within +-2^53; beyond (int64 only:
  // hashes, indices, the INT64_MAX that LibTorch 2.x's deterministic mode writes into every
  // new int64 tensor) they are rounded, and converting 2^63 to int64 is undefined: an exact
  // pass finds them.
  constexpr double kExact = 9007199254740992.0;  // 2^53
  int64_t lo = 0, hi = 0;
  if (out.min >= -kExact && out.max <= kExact) {
    lo = static_cast<int64_t>(out.min);
    hi = static_cast<int64_t>(out.max);
  } else if (c.scalar_type() == at::kLong) {
    exact_min_max(c, lo, hi);
  } else {
    return;
  }
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);  // hi >= lo
  if (hi < lo || span >= static_cast<uint64_t>(kHistogramSpan)) return;
  std::vector<int64_t> counts(static_cast<size_t>(span) + 1, 0);
  bool counted = false;
  switch (c.scalar_type()) {
    case at::kByte:
      counted = count_values<uint8_t>(c, lo, counts);
      break;
    case at::kChar:
      counted = count_values<int8_t>(c, lo, counts);
      break;
    case at::kShort:
      counted = count_values<int16_t>(c, lo, counts);
      break;
    case at::kInt:
      counted = count_values<int32_t>(c, lo, counts);
      break;
    case at::kLong:
      counted = count_values<int64_t>(c, lo, counts);
      break;
    default:
      return;
  }
  if (!counted) return;
  size_t bins = 0;
  for (int64_t k : counts) bins += k > 0;
  if (bins > kHistogramBins) return;
  out.hist.reserve(bins);
  for (size_t i = 0; i < counts.size(); ++i)
    if (counts[i] > 0)  // lo + i without signed overflow
      out.hist.emplace_back(static_cast<int64_t>(static_cast<uint64_t>(lo) + i), counts[i]);
}

}  // namespace detail
}  // namespace precprobe
