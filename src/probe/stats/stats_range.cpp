// The exponent histogram of range statistics (stats_kernels.h: float_exponent_counts,
// double_exponent_counts), run on each block while it is in L1 after its statistics.
//
// A histogram does not vectorise as such. Most values of a block usually lie within a few
// binades below its largest |x|, which the statistics already know: the AVX2 kernel turns 32
// values at a time into their exponent bytes and counts those 8 binades (and exponent 0:
// zeros and subnormals) with byte compares; only the few values below them are counted one
// by one. A block spread wider (an optimizer's second moment) is noticed within its first
// 512 values and finished, like everything on machines without AVX2, by a scalar loop that
// indexes one of four tables in turn (neighbours often share an exponent; one table would
// chain each increment to the store before it).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "stats/stats_kernels.h"

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

// Below this many values, counting straight into `range` is cheaper than clearing and
// summing the four tables (4 KB; the small tensors the training thread summarises itself).
constexpr int kDirect = 128;

// Adds the normal values of bits[0..n) to range; returns how many have exponent 0 (zeros
// and subnormals).
int64_t float_exponents_scalar(const uint32_t* bits, int n, int64_t* range) {
  if (n < kDirect) {  // a bias, a loss, a scalar: the tables would cost more than the values
    int64_t exp0 = 0;
    for (int i = 0; i < n; ++i) {
      const uint32_t e = (bits[i] >> 23) & 0xffu;
      if (e == 0) {
        ++exp0;
      } else if (e != 255) {
        ++range[e + kNormal];
      }
    }
    return exp0;
  }
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
  return int64_t{h[0][0]} + h[1][0] + h[2][0] + h[3][0];
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

// Counts the exponents lo..lo+7 (1 <= lo <= 247) with byte compares, exponent 0 likewise
// (into *exp0), and the values outside the window one by one, 32 values at a time. Gives up
// after the first 512 values when more than 1 in 16 of them lay outside the window (values
// spread too widely for it to pay): returns how many values it counted. Byte counters hold
// up to 255 per lane: n <= kStatsBlock gives at most 128 per lane.
__attribute__((target("avx2"))) int float_exponents_avx2(const uint32_t* bits, int n, int lo,
                                                         int64_t* range, int64_t* exp0) {
  constexpr int kProbe = 512, kProbeOutside = kProbe / 16;
  __m256i key[kWindow], count[kWindow];
  for (int k = 0; k < kWindow; ++k) {
    key[k] = _mm256_set1_epi8(static_cast<char>(lo + k));
    count[k] = _mm256_setzero_si256();
  }
  const __m256i zero_v = _mm256_setzero_si256();
  const __m256i lo_v = _mm256_set1_epi8(static_cast<char>(lo));
  const __m256i last_v = _mm256_set1_epi8(kWindow - 1);
  __m256i zeros = _mm256_setzero_si256();
  alignas(32) uint8_t outside[32];
  int outside_count = 0;
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    if (i == kProbe && outside_count > kProbeOutside) break;
    const __m256i e = exponent_bytes(bits + i);
    for (int k = 0; k < kWindow; ++k)
      count[k] = _mm256_sub_epi8(count[k], _mm256_cmpeq_epi8(e, key[k]));
    const __m256i is0 = _mm256_cmpeq_epi8(e, zero_v);
    zeros = _mm256_sub_epi8(zeros, is0);
    // e - lo <= 7 (unsigned) inside the window; exponent 0 is counted above. The rest (Inf and
    // NaN among them) is looked at one by one.
    const __m256i d = _mm256_sub_epi8(e, lo_v);
    const __m256i skip = _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_min_epu8(d, last_v), d), is0);
    uint32_t m = ~static_cast<uint32_t>(_mm256_movemask_epi8(skip));
    if (m != 0) {
      outside_count += __builtin_popcount(m);
      _mm256_store_si256(reinterpret_cast<__m256i*>(outside), e);
      do {
        const uint8_t b = outside[__builtin_ctz(m)];
        if (b != 0xff) ++range[b + kNormal];
        m &= m - 1;
      } while (m != 0);
    }
  }
  *exp0 += byte_sum(zeros);
  for (int k = 0; k < kWindow; ++k) range[lo + k + kNormal] += byte_sum(count[k]);
  return i;
}

const bool kHaveAvx2 = [] {
  __builtin_cpu_init();  // this initializer may run before libgcc's own
  return __builtin_cpu_supports("avx2") != 0;
}();

#endif

}  // namespace

void float_exponent_counts(const float* p, int n, int64_t zero, double abs_max,
                           int64_t* range) noexcept {
  if (!(abs_max > 0)) return;  // no finite non-zero value (zeros only, or no finite value)
  const auto* bits = reinterpret_cast<const uint32_t*>(p);
  int64_t exp0 = 0;
  int done = 0;
#if PRECPROBE_RANGE_AVX2
  // The window: the 8 binades down from the block's largest |x|, already known.
  uint32_t top_bits;
  const float top_value = static_cast<float>(abs_max);  // a value of the block: exact
  std::memcpy(&top_bits, &top_value, sizeof top_bits);
  const int top = static_cast<int>(top_bits >> 23);
  if (kHaveAvx2 && n >= 256 && top > kWindow)
    done = float_exponents_avx2(bits, n, top - kWindow + 1, range, &exp0);
#endif
  exp0 += float_exponents_scalar(bits + done, n - done, range);
  if (exp0 > zero) count_subnormals(bits, n, range);
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
