#include "report/downsample.h"

#include <algorithm>
#include <cmath>

namespace precprobe::report {

size_t bucket_size(size_t n, size_t max_buckets) noexcept {
  if (max_buckets == 0) max_buckets = 1;
  return std::max<size_t>(1, (n + max_buckets - 1) / max_buckets);
}

Buckets downsample(const std::vector<int64_t>& step, const std::vector<double>& value,
                   size_t max_buckets) {
  Buckets b;
  const size_t n = std::min(step.size(), value.size());
  b.size = bucket_size(n, max_buckets);
  for (size_t i = 0; i < n; i += b.size) {
    std::optional<double> lo, hi;
    for (size_t j = i; j < std::min(n, i + b.size); ++j) {
      const double v = value[j];
      if (std::isnan(v)) continue;
      lo = lo ? std::min(*lo, v) : v;
      hi = hi ? std::max(*hi, v) : v;
    }
    b.step.push_back(step[i]);
    b.min.push_back(lo);
    b.max.push_back(hi);
  }
  return b;
}

}  // namespace precprobe::report
