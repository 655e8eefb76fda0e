// Single-pass CPU loops over gradients and weights, shared by GradScaler (check + unscale),
// GradMonitor (gradient statistics, weight update norms) and AnomalyWatch (gradient norms).
//
// Each loop reads every element once and does all its work in that pass: six ATen
// reductions cost ~35x more on this LibTorch (see libtorch-internals.md). Accumulation is in
// float64. Supported element types: float, double, BFloat16, Half; callers convert anything
// else. Strided tensors are walked one innermost row at a time; contiguous and dense
// (permuted) tensors as one flat span. Pure functions: any thread, no shared state.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

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
#pragma omp simd reduction(+ : ss0, ss1, bad)
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
template <typename T>
void grad_stats_span(const T* p, int64_t n, int64_t stride, GradAcc& acc) {
  using M = typename OpMath<T>::type;
  double ss = 0, as = 0, am = 0;
  int64_t nan = 0, inf = 0, zero = 0;
#pragma omp simd reduction(+ : ss, as, nan, inf, zero) reduction(max : am)
  for (int64_t i = 0; i < n; ++i) {
    const M x = static_cast<M>(p[i * stride]);
    const bool fin = std::isfinite(x);
    const bool is_nan = x != x;
    const double a = fin ? std::fabs(static_cast<double>(x)) : 0.0;
    ss += a * a;
    as += a;
    am = a > am ? a : am;
    nan += is_nan ? 1 : 0;
    inf += (!fin && !is_nan) ? 1 : 0;
    zero += (x == M(0)) ? 1 : 0;
  }
  acc.sumsq += ss;
  acc.abs_sum += as;
  acc.abs_max = std::max(acc.abs_max, am);
  acc.nan += nan;
  acc.inf += inf;
  acc.zero += zero;
  acc.finite += n - nan - inf;
}

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
#pragma omp simd reduction(+ : ss, as) reduction(max : am)
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

/// One pass over w (dense) and prev (same strides): accumulates and copies w into prev.
/// With prev == nullptr only ||w||² and the zero count are computed.
template <typename T>
void weight_update_span(const T* w, T* prev, int64_t n, WeightAcc& acc) {
  double s = 0, sp = 0, sd = 0;
  int64_t zero = 0;
  if (prev == nullptr) {
#pragma omp simd reduction(+ : s, zero)
    for (int64_t i = 0; i < n; ++i) {
      const double x = static_cast<double>(w[i]);
      s += x * x;
      zero += (x == 0.0) ? 1 : 0;
    }
  } else {
#pragma omp simd reduction(+ : s, sp, sd, zero)
    for (int64_t i = 0; i < n; ++i) {
      const T wi = w[i];
      const double x = static_cast<double>(wi);
      const double q = static_cast<double>(prev[i]);
      const double d = x - q;
      s += x * x;
      sp += q * q;
      sd += d * d;
      zero += (x == 0.0) ? 1 : 0;
      prev[i] = wi;
    }
  }
  acc.sumsq += s;
  acc.sumsq_prev += sp;
  acc.sumsq_delta += sd;
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
