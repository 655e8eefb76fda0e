// Downsampling of long histories for the HTML report: a series of (step, value) becomes
// buckets of consecutive points, each keeping its first step, its smallest and its largest
// value, so a one-step spike (a NaN burst, a scale collapse) is still drawn after a
// 100 000-step run is cut to a few thousand points. Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace precprobe::report {

struct Buckets {
  size_t size = 1;                         ///< points per bucket (the last may hold fewer)
  std::vector<int64_t> step;               ///< first step of each bucket
  std::vector<std::optional<double>> min;  ///< smallest non-NaN value (none: all NaN)
  std::vector<std::optional<double>> max;  ///< largest non-NaN value
};

/// Points per bucket so that `n` points make at most `max_buckets` buckets (>= 1).
size_t bucket_size(size_t n, size_t max_buckets) noexcept;

/// Buckets of `bucket_size(step.size(), max_buckets)` consecutive points. `step` and
/// `value` have the same length; NaN values are left out of min/max, ±Inf kept.
Buckets downsample(const std::vector<int64_t>& step, const std::vector<double>& value,
                   size_t max_buckets);

}  // namespace precprobe::report
