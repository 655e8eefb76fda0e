// Block kernels of the single-pass statistics (stats.cpp walks a tensor and feeds them
// contiguous runs of at most kStatsBlock elements). Torch-free apart from c10's 16-bit
// float types. Pure functions: callable from any thread.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <limits>

namespace precprobe {
namespace detail {

/// Elements per block: 16 KiB of float32, small enough to stay in L1 while it is hashed
/// after being summarised, large enough to hide the per-block bookkeeping.
inline constexpr int64_t kStatsBlock = 4096;

/// Partial statistics of one block. Sums are over finite values.
struct BlockStats {
  double sum = 0;
  double sumsq = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  int64_t zero = 0;
  int64_t neg = 0;
  int64_t pos = 0;
  int64_t nan = 0;
  int64_t pinf = 0;
  int64_t ninf = 0;
};

/// Binary exponents of finite non-zero values, for range statistics (TensorStats::range):
/// bin[e - kFloatRangeMinExp] counts the values with 2^e <= |x| < 2^(e+1). Float32 (and the
/// half types, widened exactly) span e = -149..127; float64 spans e = -1074..1023.
inline constexpr int kFloatRangeMinExp = -149;
inline constexpr int kFloatRangeBins = 127 - kFloatRangeMinExp + 1;  // 277
inline constexpr int kDoubleRangeMinExp = -1074;
inline constexpr int kDoubleRangeBins = 1023 - kDoubleRangeMinExp + 1;  // 2098

// Each kernel summarises p[0..n), n <= kStatsBlock, into a fresh `out`.
// Floating kernels run a vectorised pass assuming every value is finite and, only when the
// block's sum or sum of squares comes out non-finite, a masked pass that classifies NaN and
// +-Inf and leaves them out of the sums and extremes.
void block_stats(const float* p, int64_t n, BlockStats& out) noexcept;
void block_stats(const double* p, int64_t n, BlockStats& out) noexcept;
void block_stats(const c10::BFloat16* p, int64_t n, BlockStats& out) noexcept;
void block_stats(const c10::Half* p, int64_t n, BlockStats& out) noexcept;
// The same, and with `range` != nullptr also adds the block's exponent counts to range[]
// (kFloatRangeBins entries; kDoubleRangeBins for double), in the same pass over the block.
void block_stats(const float* p, int64_t n, BlockStats& out, int64_t* range) noexcept;
void block_stats(const double* p, int64_t n, BlockStats& out, int64_t* range) noexcept;
void block_stats(const c10::BFloat16* p, int64_t n, BlockStats& out, int64_t* range) noexcept;
void block_stats(const c10::Half* p, int64_t n, BlockStats& out, int64_t* range) noexcept;
void block_stats(const uint8_t* p, int64_t n, BlockStats& out) noexcept;
void block_stats(const int8_t* p, int64_t n, BlockStats& out) noexcept;
void block_stats(const int16_t* p, int64_t n, BlockStats& out) noexcept;
void block_stats(const int32_t* p, int64_t n, BlockStats& out) noexcept;
void block_stats(const int64_t* p, int64_t n, BlockStats& out) noexcept;
void block_stats(const bool* p, int64_t n, BlockStats& out) noexcept;

// Range statistics of one block (called by the block_stats overloads with `range`): adds
// to range[] the exponent counts of p[0..n), n <= kStatsBlock, given the block's number of
// zeros and its largest finite |x| from its statistics (float32 bits; the half types are
// widened first). Exact for every value, subnormals included; Inf and NaN are not counted.
void float_exponent_counts(const float* p, int n, int64_t zero, double abs_max,
                           int64_t* range) noexcept;
void double_exponent_counts(const double* p, int n, int64_t* range) noexcept;

// Whether p[0..n) (any n) holds a NaN or an Inf: an OR over the exponent bits, vectorised,
// reading each element once and writing nothing (overflow_check's fast path).
bool any_non_finite(const float* p, int64_t n) noexcept;
bool any_non_finite(const double* p, int64_t n) noexcept;
bool any_non_finite(const c10::BFloat16* p, int64_t n) noexcept;
bool any_non_finite(const c10::Half* p, int64_t n) noexcept;

}  // namespace detail
}  // namespace precprobe
