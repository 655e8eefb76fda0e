// Vectorised block kernels. Built with -fopenmp-simd and without fast-math: comparisons
// with NaN and Inf must keep their IEEE meaning. Exact float comparisons are the point here.
#include "stats/stats_kernels.h"

#include <cmath>
#include <cstring>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#pragma GCC diagnostic ignored "-Wfloat-equal"

// ThreadSanitizer instruments the clones' ifunc resolver, which the dynamic loader runs
// before the TSan runtime exists (a segfault at load): no clones under TSan.
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) && \
    !defined(PRECPROBE_NO_TARGET_CLONES) && !defined(__SANITIZE_THREAD__)
// One AVX2 clone and a baseline one, picked at load time.
#define PRECPROBE_CLONES __attribute__((target_clones("avx2", "default")))
// The NaN/Inf test is an exact integer OR-reduction: the same answer at any vector width,
// so it also gets an AVX-512 clone (~2x the AVX2 one on data in L2; overflow_check reads
// every output with it on the training thread).
#define PRECPROBE_CLONES_512 __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define PRECPROBE_CLONES
#define PRECPROBE_CLONES_512
#endif
#define PRECPROBE_INLINE inline __attribute__((always_inline))

namespace precprobe {
namespace detail {
namespace {

// Block counters fit 32 bits; narrow lanes let the compiler pack them with float lanes.
template <typename F>
PRECPROBE_INLINE void fast_pass(const F* __restrict p, int n, BlockStats& out) {
  double sum = 0, sumsq = 0;
  F lo = std::numeric_limits<F>::infinity();
  F hi = -std::numeric_limits<F>::infinity();
  int32_t zero = 0, neg = 0, pos = 0;
#pragma omp simd reduction(+ : sum, sumsq, zero, neg, pos) reduction(min : lo) reduction(max : hi)
  for (int i = 0; i < n; ++i) {
    const F x = p[i];
    const double d = x;
    sum += d;
    sumsq += d * d;
    lo = x < lo ? x : lo;
    hi = x > hi ? x : hi;
    zero += x == F(0);
    neg += x < F(0);
    pos += x > F(0);
  }
  out.sum = sum;
  out.sumsq = sumsq;
  out.min = lo;
  out.max = hi;
  out.zero = zero;
  out.neg = neg;
  out.pos = pos;
}

// Masked pass: NaN and +-Inf are counted and replaced by neutral values. Two simple loops
// (classify into a zeroed copy, then the fast pass over it) vectorise well; one loop doing
// both does not with GCC 12 (measured ~8x slower, 3 ns per element).
template <typename F>
PRECPROBE_INLINE void careful_pass(const F* __restrict p, int n, BlockStats& out) {
  constexpr F kInf = std::numeric_limits<F>::infinity();
  alignas(64) F finite_only[kStatsBlock];
  F lo = kInf, hi = -kInf;
  int32_t nan = 0, pinf = 0, ninf = 0;
#pragma omp simd reduction(+ : nan, pinf, ninf) reduction(min : lo) reduction(max : hi)
  for (int i = 0; i < n; ++i) {
    const F x = p[i];
    nan += x != x;
    pinf += x == kInf;
    ninf += x == -kInf;
    const bool finite = x - x == F(0);  // Inf - Inf and NaN - NaN are NaN
    finite_only[i] = finite ? x : F(0);
    const F x_lo = finite ? x : kInf;
    const F x_hi = finite ? x : -kInf;
    lo = x_lo < lo ? x_lo : lo;
    hi = x_hi > hi ? x_hi : hi;
  }
  fast_pass(finite_only, n, out);
  out.zero -= nan + pinf + ninf;  // the zeros that stood in for them
  out.min = lo;
  out.max = hi;
  out.nan = nan;
  out.pinf = pinf;
  out.ninf = ninf;
}

template <typename F>
PRECPROBE_INLINE void float_block(const F* p, int n, BlockStats& out) {
  fast_pass(p, n, out);
  // Any NaN or Inf makes the sum NaN or Inf; a finite but huge float64 block may overflow
  // the sum of squares too, and the careful pass then gives the same (correct) answer.
  if (!std::isfinite(out.sum) || !std::isfinite(out.sumsq)) {
    out = BlockStats{};
    careful_pass(p, n, out);
  }
}

// The block's largest finite |x| (-inf when it has no finite value).
PRECPROBE_INLINE double abs_max(const BlockStats& b) { return std::fmax(-b.min, b.max); }

template <typename I>
PRECPROBE_INLINE void int_block(const I* __restrict p, int n, BlockStats& out) {
  double sum = 0, sumsq = 0;
  I lo = std::numeric_limits<I>::max();
  I hi = std::numeric_limits<I>::lowest();
  int32_t zero = 0, neg = 0, pos = 0;
#pragma omp simd reduction(+ : sum, sumsq, zero, neg, pos) reduction(min : lo) reduction(max : hi)
  for (int i = 0; i < n; ++i) {
    const I x = p[i];
    const double d = static_cast<double>(x);
    sum += d;
    sumsq += d * d;
    lo = x < lo ? x : lo;
    hi = x > hi ? x : hi;
    zero += x == I(0);
    neg += x < I(0);
    pos += x > I(0);
  }
  out.sum = sum;
  out.sumsq = sumsq;
  out.min = static_cast<double>(lo);
  out.max = static_cast<double>(hi);
  out.zero = zero;
  out.neg = neg;
  out.pos = pos;
}

// bfloat16 is the upper half of a float32: a shift, vectorised.
PRECPROBE_INLINE void widen(const c10::BFloat16* __restrict p, int n, float* __restrict out) {
  const auto* bits = reinterpret_cast<const uint16_t*>(p);
#pragma omp simd
  for (int i = 0; i < n; ++i) {
    const uint32_t w = static_cast<uint32_t>(bits[i]) << 16;
    float f;
    std::memcpy(&f, &w, sizeof f);
    out[i] = f;
  }
}

#if defined(__GNUC__) && defined(__x86_64__)
// F16C converts 8 halves per instruction, exactly (denormals, Inf, NaN included).
__attribute__((target("avx2,f16c"))) void widen_f16c(const uint16_t* p, int n, float* out) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = c10::detail::fp16_ieee_to_fp32_value(p[i]);
}
// __builtin_cpu_init first: this initializer may run before libgcc's own.
const bool kHaveF16c = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
}();
#else
const bool kHaveF16c = false;
void widen_f16c(const uint16_t*, int, float*) {}
#endif

// c10's branch-free IEEE half -> float conversion (exact, denormals included), inlined.
PRECPROBE_INLINE void widen(const c10::Half* __restrict p, int n, float* __restrict out) {
  const auto* bits = reinterpret_cast<const uint16_t*>(p);
  if (kHaveF16c) {
    widen_f16c(bits, n, out);
    return;
  }
#pragma omp simd
  for (int i = 0; i < n; ++i) out[i] = c10::detail::fp16_ieee_to_fp32_value(bits[i]);
}

// GCC cannot see that widen() (through the F16C clone) writes buf[0..n): no warning for it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <typename H>
PRECPROBE_INLINE void half_block(const H* p, int n, BlockStats& out, int64_t* range) {
  alignas(64) float buf[kStatsBlock];
  widen(p, n, buf);  // exact: half and bfloat16 values keep their binade in float32
  float_block(buf, n, out);
  if (range != nullptr) float_exponent_counts(buf, n, out.zero, abs_max(out), range);
}
#pragma GCC diagnostic pop

}  // namespace

PRECPROBE_CLONES void block_stats(const float* p, int64_t n, BlockStats& out) noexcept {
  float_block(p, static_cast<int>(n), out);
}
PRECPROBE_CLONES void block_stats(const double* p, int64_t n, BlockStats& out) noexcept {
  float_block(p, static_cast<int>(n), out);
}
PRECPROBE_CLONES void block_stats(const c10::BFloat16* p, int64_t n, BlockStats& out) noexcept {
  half_block(p, static_cast<int>(n), out, nullptr);
}
PRECPROBE_CLONES void block_stats(const c10::Half* p, int64_t n, BlockStats& out) noexcept {
  half_block(p, static_cast<int>(n), out, nullptr);
}
PRECPROBE_CLONES void block_stats(const float* p, int64_t n, BlockStats& out,
                                  int64_t* range) noexcept {
  float_block(p, static_cast<int>(n), out);
  if (range != nullptr)
    float_exponent_counts(p, static_cast<int>(n), out.zero, abs_max(out), range);
}
PRECPROBE_CLONES void block_stats(const double* p, int64_t n, BlockStats& out,
                                  int64_t* range) noexcept {
  float_block(p, static_cast<int>(n), out);
  if (range != nullptr) double_exponent_counts(p, static_cast<int>(n), range);
}
PRECPROBE_CLONES void block_stats(const c10::BFloat16* p, int64_t n, BlockStats& out,
                                  int64_t* range) noexcept {
  half_block(p, static_cast<int>(n), out, range);
}
PRECPROBE_CLONES void block_stats(const c10::Half* p, int64_t n, BlockStats& out,
                                  int64_t* range) noexcept {
  half_block(p, static_cast<int>(n), out, range);
}
PRECPROBE_CLONES void block_stats(const uint8_t* p, int64_t n, BlockStats& out) noexcept {
  int_block(p, static_cast<int>(n), out);
}
PRECPROBE_CLONES void block_stats(const int8_t* p, int64_t n, BlockStats& out) noexcept {
  int_block(p, static_cast<int>(n), out);
}
PRECPROBE_CLONES void block_stats(const int16_t* p, int64_t n, BlockStats& out) noexcept {
  int_block(p, static_cast<int>(n), out);
}
PRECPROBE_CLONES void block_stats(const int32_t* p, int64_t n, BlockStats& out) noexcept {
  int_block(p, static_cast<int>(n), out);
}
PRECPROBE_CLONES void block_stats(const int64_t* p, int64_t n, BlockStats& out) noexcept {
  int_block(p, static_cast<int>(n), out);
}

// PyTorch bools are bytes holding 0 or 1; any nonzero byte counts as true.
PRECPROBE_CLONES void block_stats(const bool* p, int64_t n, BlockStats& out) noexcept {
  const auto* bytes = reinterpret_cast<const uint8_t*>(p);
  int32_t ones = 0;
  const int m = static_cast<int>(n);
#pragma omp simd reduction(+ : ones)
  for (int i = 0; i < m; ++i) ones += bytes[i] != 0;
  out.pos = ones;
  out.zero = m - ones;
  out.sum = ones;
  out.sumsq = ones;
  out.min = out.zero > 0 ? 0.0 : 1.0;
  out.max = ones > 0 ? 1.0 : 0.0;
}

namespace {

// An element is non-finite when its exponent bits are all ones: (bits & E) + lowest
// exponent bit carries into the sign bit exactly then. Integer OR-reduction: exact and
// vectorised; one early exit per chunk keeps a broken tensor from being read to the end.
template <typename U>
PRECPROBE_INLINE bool exponent_all_ones(const U* __restrict p, int64_t n, U exp_mask, U exp_low,
                                        U top) {
  constexpr int64_t kChunk = 8192;
  for (int64_t i = 0; i < n; i += kChunk) {
    const int m = static_cast<int>(n - i < kChunk ? n - i : kChunk);
    const U* q = p + i;
    U acc = 0;
#pragma omp simd reduction(| : acc)
    for (int k = 0; k < m; ++k) acc |= static_cast<U>((q[k] & exp_mask) + exp_low);
    if ((acc & top) != 0) return true;
  }
  return false;
}

}  // namespace

PRECPROBE_CLONES_512 bool any_non_finite(const float* p, int64_t n) noexcept {
  return exponent_all_ones(reinterpret_cast<const uint32_t*>(p), n, uint32_t{0x7f800000},
                           uint32_t{0x00800000}, uint32_t{0x80000000});
}
PRECPROBE_CLONES_512 bool any_non_finite(const double* p, int64_t n) noexcept {
  return exponent_all_ones(reinterpret_cast<const uint64_t*>(p), n, uint64_t{0x7ff0000000000000},
                           uint64_t{0x0010000000000000}, uint64_t{0x8000000000000000});
}
PRECPROBE_CLONES_512 bool any_non_finite(const c10::BFloat16* p, int64_t n) noexcept {
  return exponent_all_ones(reinterpret_cast<const uint16_t*>(p), n, uint16_t{0x7f80},
                           uint16_t{0x0080}, uint16_t{0x8000});
}
PRECPROBE_CLONES_512 bool any_non_finite(const c10::Half* p, int64_t n) noexcept {
  return exponent_all_ones(reinterpret_cast<const uint16_t*>(p), n, uint16_t{0x7c00},
                           uint16_t{0x0400}, uint16_t{0x8000});
}

}  // namespace detail
}  // namespace precprobe
