// The value histogram ("hist") of small integer tensors: see add_histogram in stats.h.
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "stats.h"

namespace precprobe {
namespace detail {
namespace {

// ++counts[v - lo] for every element v of a contiguous tensor of T.
template <typename T>
void count_values(const at::Tensor& contiguous, int64_t lo, std::vector<int64_t>& counts) {
  const T* p = contiguous.data_ptr<T>();
  const int64_t n = contiguous.numel();
  for (int64_t i = 0; i < n; ++i) ++counts[static_cast<size_t>(static_cast<int64_t>(p[i]) - lo)];
}

}  // namespace

void add_histogram(const at::Tensor& t, TensorStats& out) {
  out.hist.clear();
  if (out.numel == 0 || out.numel > kHistogramMaxNumel ||
      !(out.max - out.min < double(kHistogramSpan)))
    return;
  const int64_t lo = static_cast<int64_t>(out.min);
  std::vector<int64_t> counts(static_cast<size_t>(static_cast<int64_t>(out.max) - lo + 1), 0);
  const at::Tensor c = t.is_contiguous() ? t : t.contiguous();
  switch (c.scalar_type()) {
    case at::kByte:
      count_values<uint8_t>(c, lo, counts);
      break;
    case at::kChar:
      count_values<int8_t>(c, lo, counts);
      break;
    case at::kShort:
      count_values<int16_t>(c, lo, counts);
      break;
    case at::kInt:
      count_values<int32_t>(c, lo, counts);
      break;
    case at::kLong:
      count_values<int64_t>(c, lo, counts);
      break;
    default:
      return;
  }
  size_t bins = 0;
  for (int64_t k : counts) bins += k > 0;
  if (bins > kHistogramBins) return;
  out.hist.reserve(bins);
  for (size_t i = 0; i < counts.size(); ++i)
    if (counts[i] > 0) out.hist.emplace_back(lo + static_cast<int64_t>(i), counts[i]);
}

}  // namespace detail
}  // namespace precprobe
