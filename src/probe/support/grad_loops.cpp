// The vectorised loops of grad_loops.h: norm_span (float, double) and the GradMonitor's
// fixed-lane passes (float, double, bfloat16). GCC's target_clones compiles each for
// AVX-512, AVX2 and the baseline and picks one when the library is loaded (an ifunc), so the
// library still runs on any x86-64 while the healthy-step check of "record": "on_anomaly"
// reads a gradient about as fast as memory gives it (1M floats: 0.13 ms with AVX-512, 0.85 ms
// with SSE2, 0.25 ms for ATen's at::sum(kDouble)) and the monitor's pass over 650 000 floats
// takes 0.16 ms (1.23 ms as one running sum).
#include "support/grad_loops.h"

#include <cstring>

// Not under TSan: the ifunc resolver runs during relocation, before TSan's runtime exists,
// and its instrumented entry crashes the process.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__) && \
    !defined(__SANITIZE_THREAD__)
#define PRECPROBE_GRAD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PRECPROBE_GRAD_CLONES
#endif

namespace precprobe {
namespace detail {
namespace {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wfloat-equal"

// The fixed lanes of grad_loops.h (kSumLanes = 16) as two vectors of eight float64 lanes:
// element k of a span goes to lane k % 16, as in the reference loops. GCC lowers the vector
// types to whatever the clone has (one AVX-512 register, two AVX2, four SSE2), and with
// contraction off (src/probe/CMakeLists.txt: -ffp-contract=off) every clone adds and
// multiplies exactly as the reference loops do.
static_assert(kSumLanes == 16, "two vectors of eight lanes");
using V8d = double __attribute__((vector_size(64)));
using V8l = int64_t __attribute__((vector_size(64)));
using V8f = float __attribute__((vector_size(32)));
using V8u = uint32_t __attribute__((vector_size(32)));
using V8h = uint16_t __attribute__((vector_size(16)));

// Eight elements as float64 lanes (out parameters: no vector crosses a call by value).
__attribute__((always_inline)) inline void load8(const float* p, V8d& out) noexcept {
  V8f f;
  std::memcpy(&f, p, sizeof f);
  out = __builtin_convertvector(f, V8d);
}
__attribute__((always_inline)) inline void load8(const double* p, V8d& out) noexcept {
  std::memcpy(&out, p, sizeof out);
}
// bfloat16 is the upper half of a float32: widened by a shift, exactly as c10 converts it.
__attribute__((always_inline)) inline void load8(const c10::BFloat16* p, V8d& out) noexcept {
  V8h h;
  std::memcpy(&h, p, sizeof h);
  const V8u bits = __builtin_convertvector(h, V8u) << 16;
  out = __builtin_convertvector(reinterpret_cast<V8f>(bits), V8d);
}

template <typename T>
__attribute__((always_inline)) inline void finite_stats_vec(const T* p, int64_t n, Lanes& ss,
                                                            Lanes& as, double& am,
                                                            int64_t& zero) noexcept {
  V8d s0, s1, a0, a1;
  load8(ss.v, s0);
  load8(ss.v + 8, s1);
  load8(as.v, a0);
  load8(as.v + 8, a1);
  V8d m0 = V8d{} + am, m1 = m0;  // max |x| per lane; a NaN never enters (`a > m` is false)
  V8l z0 = V8l{}, z1 = V8l{};
  const V8d zero8 = V8d{};
  const V8l magnitude = V8l{} + INT64_MAX;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    V8d x0, x1;
    load8(p + i, x0);
    load8(p + i + 8, x1);
    const V8d b0 = reinterpret_cast<V8d>(reinterpret_cast<V8l>(x0) & magnitude);
    const V8d b1 = reinterpret_cast<V8d>(reinterpret_cast<V8l>(x1) & magnitude);
    s0 += b0 * b0;
    s1 += b1 * b1;
    a0 += b0;
    a1 += b1;
    const V8l g0 = b0 > m0, g1 = b1 > m1;
    m0 =
        reinterpret_cast<V8d>((reinterpret_cast<V8l>(b0) & g0) | (reinterpret_cast<V8l>(m0) & ~g0));
    m1 =
        reinterpret_cast<V8d>((reinterpret_cast<V8l>(b1) & g1) | (reinterpret_cast<V8l>(m1) & ~g1));
    z0 -= x0 == zero8;
    z1 -= x1 == zero8;
  }
  std::memcpy(ss.v, &s0, sizeof s0);
  std::memcpy(ss.v + 8, &s1, sizeof s1);
  std::memcpy(as.v, &a0, sizeof a0);
  std::memcpy(as.v + 8, &a1, sizeof a1);
  for (int l = 0; l < 8; ++l) {
    am = m0[l] > am ? m0[l] : am;
    am = m1[l] > am ? m1[l] : am;
    zero += z0[l] + z1[l];
  }
  finite_stats_lanes(p + i, n - i, 1, ss, as, am, zero);  // the tail: lanes 0.. again
}

template <typename T>
__attribute__((always_inline)) inline void weight_update_vec(const T* w, T* prev, int64_t n,
                                                             Lanes& s, Lanes& sp, Lanes& sd,
                                                             int64_t& zero) noexcept {
  V8d s0, s1, p0, p1, d0, d1;
  load8(s.v, s0);
  load8(s.v + 8, s1);
  load8(sp.v, p0);
  load8(sp.v + 8, p1);
  load8(sd.v, d0);
  load8(sd.v + 8, d1);
  V8l z0 = V8l{}, z1 = V8l{};
  const V8d zero8 = V8d{};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    V8d x0, x1;
    load8(w + i, x0);
    load8(w + i + 8, x1);
    s0 += x0 * x0;
    s1 += x1 * x1;
    z0 -= x0 == zero8;
    z1 -= x1 == zero8;
    if (prev != nullptr) {
      V8d q0, q1;
      load8(prev + i, q0);
      load8(prev + i + 8, q1);
      const V8d e0 = x0 - q0, e1 = x1 - q1;
      p0 += q0 * q0;
      p1 += q1 * q1;
      d0 += e0 * e0;
      d1 += e1 * e1;
      std::memcpy(prev + i, w + i, 16 * sizeof(T));
    }
  }
  std::memcpy(s.v, &s0, sizeof s0);
  std::memcpy(s.v + 8, &s1, sizeof s1);
  std::memcpy(sp.v, &p0, sizeof p0);
  std::memcpy(sp.v + 8, &p1, sizeof p1);
  std::memcpy(sd.v, &d0, sizeof d0);
  std::memcpy(sd.v + 8, &d1, sizeof d1);
  for (int l = 0; l < 8; ++l) zero += z0[l] + z1[l];
  weight_update_lanes(w + i, prev == nullptr ? nullptr : prev + i, n - i, s, sp, sd, zero);
}

PRECPROBE_GRAD_CLONES void finite_stats_float(const float* p, int64_t n, Lanes& ss, Lanes& as,
                                              double& am, int64_t& zero) noexcept {
  finite_stats_vec(p, n, ss, as, am, zero);
}
PRECPROBE_GRAD_CLONES void finite_stats_double(const double* p, int64_t n, Lanes& ss, Lanes& as,
                                               double& am, int64_t& zero) noexcept {
  finite_stats_vec(p, n, ss, as, am, zero);
}
PRECPROBE_GRAD_CLONES void finite_stats_bf16(const c10::BFloat16* p, int64_t n, Lanes& ss,
                                             Lanes& as, double& am, int64_t& zero) noexcept {
  finite_stats_vec(p, n, ss, as, am, zero);
}
PRECPROBE_GRAD_CLONES void weight_update_float(const float* w, float* prev, int64_t n, Lanes& s,
                                               Lanes& sp, Lanes& sd, int64_t& zero) noexcept {
  weight_update_vec(w, prev, n, s, sp, sd, zero);
}
PRECPROBE_GRAD_CLONES void weight_update_double(const double* w, double* prev, int64_t n, Lanes& s,
                                                Lanes& sp, Lanes& sd, int64_t& zero) noexcept {
  weight_update_vec(w, prev, n, s, sp, sd, zero);
}
PRECPROBE_GRAD_CLONES void weight_update_bf16(const c10::BFloat16* w, c10::BFloat16* prev,
                                              int64_t n, Lanes& s, Lanes& sp, Lanes& sd,
                                              int64_t& zero) noexcept {
  weight_update_vec(w, prev, n, s, sp, sd, zero);
}

#pragma GCC diagnostic pop

// norm_loop is inlined into each clone, so that it is vectorised for the clone's instruction
// set; stride 1 is known there.
PRECPROBE_GRAD_CLONES void norm_dense_float(const float* p, int64_t n, NormAcc& acc) noexcept {
  norm_loop(p, n, 1, acc);
}

PRECPROBE_GRAD_CLONES void norm_dense_double(const double* p, int64_t n, NormAcc& acc) noexcept {
  norm_loop(p, n, 1, acc);
}

}  // namespace

void norm_span(const float* p, int64_t n, int64_t stride, NormAcc& acc) noexcept {
  if (stride == 1) {
    norm_dense_float(p, n, acc);
  } else {
    norm_span<float>(p, n, stride, acc);
  }
}

void norm_span(const double* p, int64_t n, int64_t stride, NormAcc& acc) noexcept {
  if (stride == 1) {
    norm_dense_double(p, n, acc);
  } else {
    norm_span<double>(p, n, stride, acc);
  }
}

void finite_stats_dense(const float* p, int64_t n, Lanes& ss, Lanes& as, double& am,
                        int64_t& zero) noexcept {
  finite_stats_float(p, n, ss, as, am, zero);
}
void finite_stats_dense(const double* p, int64_t n, Lanes& ss, Lanes& as, double& am,
                        int64_t& zero) noexcept {
  finite_stats_double(p, n, ss, as, am, zero);
}
void finite_stats_dense(const c10::BFloat16* p, int64_t n, Lanes& ss, Lanes& as, double& am,
                        int64_t& zero) noexcept {
  finite_stats_bf16(p, n, ss, as, am, zero);
}
void weight_update_dense(const c10::BFloat16* w, c10::BFloat16* prev, int64_t n, Lanes& s,
                         Lanes& sp, Lanes& sd, int64_t& zero) noexcept {
  weight_update_bf16(w, prev, n, s, sp, sd, zero);
}
void weight_update_dense(const float* w, float* prev, int64_t n, Lanes& s, Lanes& sp, Lanes& sd,
                         int64_t& zero) noexcept {
  weight_update_float(w, prev, n, s, sp, sd, zero);
}
void weight_update_dense(const double* w, double* prev, int64_t n, Lanes& s, Lanes& sp, Lanes& sd,
                         int64_t& zero) noexcept {
  weight_update_double(w, prev, n, s, sp, sd, zero);
}

}  // namespace detail
}  // namespace precprobe
