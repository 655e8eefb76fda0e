// The exponent histogram of range statistics (stats_kernels.h: float_exponent_counts,
// double_exponent_counts), run on each block while it is in L1 after its statistics.
//
// A histogram does not vectorise as such. Most values of a block usually lie within a few
// binades: a sample of the block picks the 8-binade window that holds most of them, and the
// AVX2 kernel turns 32 values at a time into their exponent bytes and counts that window (and
// exponent 0: zeros and subnormals) with byte compares; only the few values outside it are
// counted one by one. Blocks spread wider (an optimizer's second moment), and machines without
// AVX2, take a scalar loop that indexes one of four tables in turn (neighbours often share an
// exponent; one table would chain each increment to the store before it).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "stats_kernels.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define PRECPROBE_RANGE_AVX2 1
#else
#define PRECPROBE_RANGE_AVX2 0
#endif

namespace precprobe {
namespace detail {
namespace {

// Biased exponent E of a float32: E = 1..254 is binade E - 127, stored at range[E + kNormal].
constexpr int kNormal = -127 - kFloatRangeMinExp;

// Subnormals m * 2^-149 (binade floor(log2 m) - 149, i.e. range[floor(log2 m)]).
void count_subnormals(const uint32_t* bits, int n, int64_t* range) {
  for (int k = 0; k < n; ++k) {
    const uint32_t m = bits[k] & 0x7fffffffu;
    if (m != 0 && m < 0x00800000u) ++range[31 - __builtin_clz(m)];
  }
}

void float_exponents_scalar(const uint32_t* bits, int n, int64_t zero, int64_t* range) {
  uint32_t h[4][256] = {};
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    ++h[0][(bits[i] >> 23) & 0xffu];
    ++h[1][(bits[i + 1] >> 23) & 0xffu];
    ++h[2][(bits[i + 2] >> 23) & 0xffu];
    ++h[3][(bits[i + 3] >> 23) & 0xffu];
  }
  for (; i < n; ++i) ++h[0][(bits[i] >> 23) & 0xffu];
  for (int e = 1; e < 255; ++e)  // 255: Inf and NaN, not counted
    range[e + kNormal] += int64_t{h[0][e]} + h[1][e] + h[2][e] + h[3][e];
  if (int64_t{h[0][0]} + h[1][0] + h[2][0] + h[3][0] > zero) count_subnormals(bits, n, range);
}

#if PRECPROBE_RANGE_AVX2
constexpr int kWindow = 8;

__attribute__((target("avx2"), always_inline)) inline __m256i shifted(const uint32_t* p) {
  return _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), 23);
}

// Exponent bytes of 32 float32 values (lane order is of no concern: only counts are kept).
__attribute__((target("avx2"), always_inline)) inline __m256i exponent_bytes(const uint32_t* p) {
  const __m256i low = _mm256_set1_epi16(0xff);  // drops the sign, now bit 8
  const __m256i ab = _mm256_and_si256(_mm256_packus_epi32(shifted(p), shifted(p + 8)), low);
  const __m256i cd = _mm256_and_si256(_mm256_packus_epi32(shifted(p + 16), shifted(p + 24)), low);
  return _mm256_packus_epi16(ab, cd);
}

__attribute__((target("avx2"))) int64_t byte_sum(__m256i v) {
  const __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
  return _mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 1) + _mm256_extract_epi64(s, 2) +
         _mm256_extract_epi64(s, 3);
}

// Counts the exponents lo..lo+7 (1 <= lo <= 247) with byte compares, exponent 0 likewise, and
// the values outside the window one by one. Byte counters hold up to 255 per lane: n <=
// kStatsBlock gives at most 128 per lane.
__attribute__((target("avx2"))) void float_exponents_avx2(const uint32_t* bits, int n, int64_t zero,
                                                          int lo, int64_t* range) {
  __m256i key[kWindow], count[kWindow];
  for (int k = 0; k < kWindow; ++k) {
    key[k] = _mm256_set1_epi8(static_cast<char>(lo + k));
    count[k] = _mm256_setzero_si256();
  }
  const __m256i zero_v = _mm256_setzero_si256();
  const __m256i lo_v = _mm256_set1_epi8(static_cast<char>(lo));
  const __m256i hi_v = _mm256_set1_epi8(static_cast<char>(lo + kWindow - 1));
  const __m256i inf_v = _mm256_set1_epi8(static_cast<char>(0xff));
  __m256i exp0 = _mm256_setzero_si256();
  alignas(32) uint8_t outside[32];
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i e = exponent_bytes(bits + i);
    for (int k = 0; k < kWindow; ++k)
      count[k] = _mm256_sub_epi8(count[k], _mm256_cmpeq_epi8(e, key[k]));
    const __m256i is0 = _mm256_cmpeq_epi8(e, zero_v);
    exp0 = _mm256_sub_epi8(exp0, is0);
    // Inside the window, exponent 0 or Inf/NaN: all but the values counted one by one.
    const __m256i inside = _mm256_cmpeq_epi8(_mm256_min_epu8(_mm256_max_epu8(e, lo_v), hi_v), e);
    const __m256i skip = _mm256_or_si256(inside, _mm256_or_si256(is0, _mm256_cmpeq_epi8(e, inf_v)));
    uint32_t m = ~static_cast<uint32_t>(_mm256_movemask_epi8(skip));
    if (m != 0) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(outside), e);
      do {
        ++range[outside[__builtin_ctz(m)] + kNormal];
        m &= m - 1;
      } while (m != 0);
    }
  }
  int64_t e0 = byte_sum(exp0);
  for (int k = 0; k < kWindow; ++k) range[lo + k + kNormal] += byte_sum(count[k]);
  for (; i < n; ++i) {  // the last < 32 values
    const int e = static_cast<int>((bits[i] >> 23) & 0xffu);
    if (e == 0) {
      ++e0;
    } else if (e < 255) {
      ++range[e + kNormal];
    }
  }
  if (e0 > zero) count_subnormals(bits, n, range);
}

const bool kHaveAvx2 = [] {
  __builtin_cpu_init();  // this initializer may run before libgcc's own
  return __builtin_cpu_supports("avx2") != 0;
}();

// The first exponent of the 8-binade window that holds most of a sample of the block (every
// 32nd value), or 0 when more than 1 in 16 of the sample lies outside every window: then the
// values are spread too widely for the window to pay, and the scalar loop is faster.
int choose_window(const uint32_t* bits, int n) {
  uint16_t h[256] = {};
  int sampled = 0, lo_e = 255, hi_e = 0;
  for (int i = 0; i < n; i += 32, ++sampled) {
    const int e = static_cast<int>((bits[i] >> 23) & 0xffu);
    if (e == 0 || e == 255) continue;
    ++h[e];
    lo_e = e < lo_e ? e : lo_e;
    hi_e = e > hi_e ? e : hi_e;
  }
  if (hi_e == 0) return 0;
  int best = 0, best_lo = lo_e, in = 0;
  for (int e = lo_e; e <= hi_e; ++e) {  // sliding sum of h[e - 7..e]
    in += h[e] - (e - kWindow >= lo_e ? h[e - kWindow] : 0);
    if (in > best) best = in, best_lo = e - kWindow + 1;
  }
  int outside = 0;
  for (int e = lo_e; e <= hi_e; ++e) outside += h[e];
  outside -= best;
  if (outside * 16 > sampled) return 0;
  return best_lo < 1 ? 1 : (best_lo > 247 ? 247 : best_lo);
}
#endif

}  // namespace

void float_exponent_counts(const float* p, int n, int64_t zero, double abs_max,
                           int64_t* range) noexcept {
  if (!(abs_max > 0)) return;  // no finite non-zero value (zeros only, or no finite value)
  const auto* bits = reinterpret_cast<const uint32_t*>(p);
#if PRECPROBE_RANGE_AVX2
  if (kHaveAvx2 && n >= 256) {
    const int lo = choose_window(bits, n);
    if (lo > 0) {
      float_exponents_avx2(bits, n, zero, lo, range);
      return;
    }
  }
#endif
  float_exponents_scalar(bits, n, zero, range);
}

void double_exponent_counts(const double* p, int n, int64_t* range) noexcept {
  const auto* bits = reinterpret_cast<const uint64_t*>(p);
  for (int i = 0; i < n; ++i) {
    const uint64_t b = bits[i] & 0x7fffffffffffffffULL;
    const int e = static_cast<int>(b >> 52);
    if (e == 0x7ff || b == 0) continue;
    ++range[e != 0 ? e - 1023 - kDoubleRangeMinExp : 63 - __builtin_clzll(b)];
  }
}

}  // namespace detail
}  // namespace precprobe
