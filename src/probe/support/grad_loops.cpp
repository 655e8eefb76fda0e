// The float and double norm_span of grad_loops.h. GCC's target_clones compiles each for
// AVX-512, AVX2 and the baseline and picks one when the library is loaded (an ifunc), so the
// library still runs on any x86-64 while the healthy-step check of "record": "on_anomaly"
// reads a gradient about as fast as memory gives it (1M floats: 0.13 ms with AVX-512, 0.85 ms
// with SSE2, 0.25 ms for ATen's at::sum(kDouble)).
#include "support/grad_loops.h"

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

}  // namespace detail
}  // namespace precprobe
