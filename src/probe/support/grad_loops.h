// Single-pass CPU loops over gradients and weights, shared by GradScaler (check + unscale),
// GradMonitor (gradient statistics, weight update norms) and AnomalyWatch (gradient norms).
//
// Each loop reads every element once and does all its work in that pass (a gradient holding
// NaN/Inf is read a second time, to count them): six ATen reductions cost ~35x more.
// Accumulation is in float64; the GradMonitor's sums in
// fixed lanes, the same bits on every machine (below). Supported element types: float, double,
// BFloat16, Half; callers convert anything else. Strided tensors are walked one innermost row at a
// time; contiguous and dense (permuted) tensors as one flat span. Pure functions: any thread, no
// shared state.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

// `omp simd` for the loops that want it, where the translation unit is built to read it
// (the library: src/probe/CMakeLists.txt passes -fopenmp-simd and defines
// PRECPROBE_OPENMP_SIMD). A test that includes this header for other loops gets no
// "ignoring #pragma" warning (GCC 12 cannot silence it with a diagnostic pragma).
#define PRECPROBE_PRAGMA(x) _Pragma(#x)
#ifdef PRECPROBE_OPENMP_SIMD
#define PRECPROBE_OMP_SIMD(...) PRECPROBE_PRAGMA(omp simd __VA_ARGS__)
#else
#define PRECPROBE_OMP_SIMD(...)
#endif

namespace precprobe {
namespace detail {

/// True for the element types the loops below handle directly.
inline bool fused_dtype_supported(c10::ScalarType t) noexcept {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

/// Calls fn(T* first, int64_t n, int64_t stride) for spans covering every element of `t`
/// exactly once. Order is memory order for dense tensors, row-major otherwise.
template <typename T, typename Fn>
void for_each_span(const at::Tensor& t, Fn&& fn) {
  const int64_t numel = t.numel();
  if (numel == 0) return;
  T* base = static_cast<T*>(t.data_ptr());
  if (t.is_non_overlapping_and_dense()) {
    fn(base, numel, int64_t{1});
    return;
  }
  const int64_t dims = t.dim();
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  const int64_t inner = sizes[dims - 1];
  const int64_t inner_stride = strides[dims - 1];
  std::vector<int64_t> index(static_cast<size_t>(dims - 1), 0);
  for (int64_t row = 0, rows = numel / inner; row < rows; ++row) {
    int64_t offset = 0;
    for (int64_t d = 0; d < dims - 1; ++d) offset += index[d] * strides[d];
    fn(base + offset, inner, inner_stride);
    for (int64_t d = dims - 2; d >= 0; --d) {  // odometer increment of the outer index
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
  }
}

/// The arithmetic type PyTorch's AMP kernels use for an element type.
template <typename T>
struct OpMath {
  using type = float;
};
template <>
struct OpMath<double> {
  using type = double;
};

// ---- GradScaler: fused non-finite check + in-place unscale ----

/// What one check-and-unscale pass saw. Sums of squares cover finite elements only.
struct UnscaleAcc {
  bool non_finite = false;
  double sumsq_scaled = 0;    ///< before the multiplication
  double sumsq_unscaled = 0;  ///< after it
};

// Same element rule as PyTorch's _amp_foreach_non_finite_check_and_unscale_ kernels:
// finiteness is tested on the value converted to opmath, the product is computed in opmath
// (float for float/bf16/half, double for double) and rounded back to the element type.
// With kWrite false the span is only read (ATen's kernel writes: LibTorch >= 2.3).
template <typename T, bool kWrite = true>
void unscale_span(T* p, int64_t n, int64_t stride, float inv_scale, UnscaleAcc& acc) {
  using M = typename OpMath<T>::type;
  const M s = static_cast<M>(inv_scale);
  double ss0 = 0, ss1 = 0;
  int64_t bad = 0;  // a count, not a flag: GCC does not vectorise an |-reduction here
  if (stride == 1) {
    PRECPROBE_OMP_SIMD(reduction(+ : ss0, ss1, bad))
    for (int64_t i = 0; i < n; ++i) {
      const M x = static_cast<M>(p[i]);
      const T y = static_cast<T>(x * s);
      if constexpr (kWrite) p[i] = y;
      const M ym = static_cast<M>(y);
      const bool fx = std::isfinite(x), fy = std::isfinite(ym);
      bad += fx ? 0 : 1;
      ss0 += fx ? static_cast<double>(x) * static_cast<double>(x) : 0.0;
      ss1 += fy ? static_cast<double>(ym) * static_cast<double>(ym) : 0.0;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      T& e = p[i * stride];
      const M x = static_cast<M>(e);
      const T y = static_cast<T>(x * s);
      if constexpr (kWrite) e = y;
      const M ym = static_cast<M>(y);
      const bool fx = std::isfinite(x), fy = std::isfinite(ym);
      bad += fx ? 0 : 1;
      ss0 += fx ? static_cast<double>(x) * static_cast<double>(x) : 0.0;
      ss1 += fy ? static_cast<double>(ym) * static_cast<double>(ym) : 0.0;
    }
  }
  acc.non_finite = acc.non_finite || bad != 0;
  acc.sumsq_scaled += ss0;
  acc.sumsq_unscaled += ss1;
}

// ---- Fixed-lane float64 sums ----

/// The float64 sums of grad_stats_span and weight_update_span are split into kSumLanes lanes:
/// element k of a span goes to lane k % kSumLanes, and the lanes are added in lane order at the
/// end. The order of every addition is thus fixed by the data alone: the vectorised builds
/// (grad_loops.cpp: AVX-512, AVX2, the baseline's SSE2) and the plain loops below give the
/// same bits on every machine, and the lanes let each build keep several registers busy (a
/// single running sum is a chain of dependent additions: ~1.5 ns an element).
constexpr int kSumLanes = 16;

/// Lane-wise float64 accumulators, added up in lane order.
struct Lanes {
  double v[kSumLanes] = {};
  double total() const noexcept {
    double s = 0;
    for (double x : v) s += x;
    return s;
  }
};

// ---- GradMonitor: gradient statistics ----

/// Statistics of one gradient; norm, abs-max and abs-sum over finite elements.
struct GradAcc {
  double sumsq = 0;
  double abs_sum = 0;
  double abs_max = 0;
  int64_t nan = 0;
  int64_t inf = 0;
  int64_t zero = 0;
  int64_t finite = 0;
};

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wfloat-equal"
/// Sums of squares and of |x| (fixed lanes), max |x| and zero count of a span, NaN/Inf
/// included: a non-finite element shows only as a non-finite sum (the reference loop of
/// grad_stats_span's pass over finite spans; grad_loops.cpp vectorises it for float and
/// double).
template <typename T>
void finite_stats_lanes(const T* p, int64_t n, int64_t stride, Lanes& ss, Lanes& as, double& am,
                        int64_t& zero) noexcept {
  using M = typename OpMath<T>::type;
  for (int64_t i = 0; i < n; ++i) {
    const M x = static_cast<M>(p[i * stride]);
    const double a = std::fabs(static_cast<double>(x));
    const int l = static_cast<int>(i % kSumLanes);
    ss.v[l] += a * a;
    as.v[l] += a;
    am = a > am ? a : am;
    zero += (x == M(0)) ? 1 : 0;
  }
}

/// Dense float, double and bfloat16 spans, vectorised for the machine (grad_loops.cpp); the
/// same bits as finite_stats_lanes. float16 takes the plain loop.
void finite_stats_dense(const float* p, int64_t n, Lanes& ss, Lanes& as, double& am,
                        int64_t& zero) noexcept;
void finite_stats_dense(const c10::BFloat16* p, int64_t n, Lanes& ss, Lanes& as, double& am,
                        int64_t& zero) noexcept;
void finite_stats_dense(const double* p, int64_t n, Lanes& ss, Lanes& as, double& am,
                        int64_t& zero) noexcept;
template <typename T>
void finite_stats_dense(const T* p, int64_t n, Lanes& ss, Lanes& as, double& am,
                        int64_t& zero) noexcept {
  finite_stats_lanes(p, n, 1, ss, as, am, zero);
}

/// The pass that also counts NaN and Inf and leaves them out of the sums (fixed lanes).
template <typename T>
void careful_grad_stats(const T* p, int64_t n, int64_t stride, GradAcc& acc) noexcept {
  using M = typename OpMath<T>::type;
  Lanes ss, as;
  double am = 0;
  int64_t nan = 0, inf = 0, zero = 0;
  for (int64_t i = 0; i < n; ++i) {
    const M x = static_cast<M>(p[i * stride]);
    const bool fin = std::isfinite(x);
    const bool is_nan = x != x;
    const double a = fin ? std::fabs(static_cast<double>(x)) : 0.0;
    const int l = static_cast<int>(i % kSumLanes);
    ss.v[l] += a * a;
    as.v[l] += a;
    am = a > am ? a : am;
    nan += is_nan ? 1 : 0;
    inf += (!fin && !is_nan) ? 1 : 0;
    zero += (x == M(0)) ? 1 : 0;
  }
  acc.sumsq += ss.total();
  acc.abs_sum += as.total();
  acc.abs_max = std::max(acc.abs_max, am);
  acc.nan += nan;
  acc.inf += inf;
  acc.zero += zero;
  acc.finite += n - nan - inf;
}

/// One span of a gradient: a pass over its values at memory speed when they are all finite
/// (dense spans vectorised), else a second pass that counts NaN/Inf and sums the finite ones.
/// Both add in the fixed lanes: the same sums for a span whichever pass ran.
template <typename T>
void grad_stats_span(const T* p, int64_t n, int64_t stride, GradAcc& acc) {
  Lanes ss, as;
  double am = 0;
  int64_t zero = 0;
  if (stride == 1) {
    finite_stats_dense(p, n, ss, as, am, zero);
  } else {
    finite_stats_lanes(p, n, stride, ss, as, am, zero);
  }
  const double sumsq = ss.total(), abs_sum = as.total();
  // A NaN or Inf makes a sum non-finite; so may a huge finite float64 square, and the
  // careful pass then gives what it always gave (an infinite sum of finite squares).
  if (!std::isfinite(sumsq) || !std::isfinite(abs_sum)) {
    careful_grad_stats(p, n, stride, acc);
    return;
  }
  acc.sumsq += sumsq;
  acc.abs_sum += abs_sum;
  acc.abs_max = std::max(acc.abs_max, am);
  acc.zero += zero;
  acc.finite += n;
}
#pragma GCC diagnostic pop

// ---- AnomalyWatch: the healthy-step pass ----

/// Sum of squares, sum and max of |x| in float64 over every element, NaN/Inf included: no
/// test per element, so a non-finite element shows only as a non-finite sumsq (a float32,
/// bfloat16 or float16 square cannot overflow float64; a float64 one can). Where sumsq is
/// not finite, grad_stats_span gives the finite part and the counts.
struct NormAcc {
  double sumsq = 0;
  double abs_sum = 0;
  double abs_max = 0;
};

/// The loop of norm_span, inlined where it is used so that each copy is vectorised for its
/// caller's instruction set (grad_loops.cpp's clones call it with stride 1).
template <typename T>
__attribute__((always_inline)) inline void norm_loop(const T* p, int64_t n, int64_t stride,
                                                     NormAcc& acc) noexcept {
  double ss = 0, as = 0, am = 0;
  PRECPROBE_OMP_SIMD(reduction(+ : ss, as) reduction(max : am))
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::fabs(static_cast<double>(p[i * stride]));
    ss += a * a;
    as += a;
    am = a > am ? a : am;
  }
  acc.sumsq += ss;
  acc.abs_sum += as;
  acc.abs_max = std::max(acc.abs_max, am);
}

/// float and double: compiled for AVX-512, AVX2 and the baseline, chosen at load time on x86-64
/// (grad_loops.cpp): the baseline's SSE2 runs this loop ~5x slower than AVX-512, longer than
/// ATen's own (dispatched) float64 sum.
void norm_span(const float* p, int64_t n, int64_t stride, NormAcc& acc) noexcept;
void norm_span(const double* p, int64_t n, int64_t stride, NormAcc& acc) noexcept;

template <typename T>
void norm_span(const T* p, int64_t n, int64_t stride, NormAcc& acc) noexcept {
  norm_loop(p, n, stride, acc);
}

// ---- GradMonitor: weight norm and update norm, refreshing the previous copy ----

/// ||w||², ||w_prev||², ||w - w_prev||² and zero count of w, accumulated in float64.
struct WeightAcc {
  double sumsq = 0;
  double sumsq_prev = 0;
  double sumsq_delta = 0;
  int64_t zero = 0;
};

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wfloat-equal"
/// The reference loop of weight_update_span (fixed lanes); grad_loops.cpp vectorises it for
/// float, double and bfloat16 with the same bits (float16 takes this loop).
template <typename T>
void weight_update_lanes(const T* w, T* prev, int64_t n, Lanes& s, Lanes& sp, Lanes& sd,
                         int64_t& zero) noexcept {
  for (int64_t i = 0; i < n; ++i) {
    const T wi = w[i];
    const double x = static_cast<double>(wi);
    const int l = static_cast<int>(i % kSumLanes);
    s.v[l] += x * x;
    zero += (x == 0.0) ? 1 : 0;
    if (prev != nullptr) {
      const double q = static_cast<double>(prev[i]);
      const double d = x - q;
      sp.v[l] += q * q;
      sd.v[l] += d * d;
      prev[i] = wi;
    }
  }
}

void weight_update_dense(const float* w, float* prev, int64_t n, Lanes& s, Lanes& sp, Lanes& sd,
                         int64_t& zero) noexcept;
void weight_update_dense(const c10::BFloat16* w, c10::BFloat16* prev, int64_t n, Lanes& s,
                         Lanes& sp, Lanes& sd, int64_t& zero) noexcept;
void weight_update_dense(const double* w, double* prev, int64_t n, Lanes& s, Lanes& sp, Lanes& sd,
                         int64_t& zero) noexcept;
template <typename T>
void weight_update_dense(const T* w, T* prev, int64_t n, Lanes& s, Lanes& sp, Lanes& sd,
                         int64_t& zero) noexcept {
  weight_update_lanes(w, prev, n, s, sp, sd, zero);
}

/// One pass over w (dense) and prev (same strides): accumulates and copies w into prev.
/// With prev == nullptr only ||w||² and the zero count are computed.
template <typename T>
void weight_update_span(const T* w, T* prev, int64_t n, WeightAcc& acc) {
  Lanes s, sp, sd;
  int64_t zero = 0;
  weight_update_dense(w, prev, n, s, sp, sd, zero);
  acc.sumsq += s.total();
  acc.sumsq_prev += sp.total();
  acc.sumsq_delta += sd.total();
  acc.zero += zero;
}
#pragma GCC diagnostic pop

/// Calls fn(T{}) with the element type of a supported dtype; false for others.
template <typename Fn>
bool dispatch_fused(c10::ScalarType t, Fn&& fn) {
  switch (t) {
    case at::kFloat:
      fn(float{});
      return true;
    case at::kDouble:
      fn(double{});
      return true;
    case at::kBFloat16:
      fn(c10::BFloat16{});
      return true;
    case at::kHalf:
      fn(c10::Half{});
      return true;
    default:
      return false;
  }
}

}  // namespace detail
}  // namespace precprobe
