// From LibTorch 2.3 on, GradScaler hands CPU gradients to ATen's own kernels
// (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_). These tests hold them to
// the fused host path that 1.13 uses, bit for bit, on the same inputs: every unscaled element
// (a NaN's payload aside, see same_values_bitwise), the found-inf flag, and whole scale/tracker
// sequences. On an older LibTorch they say so and
// check nothing else.
#include <torch/torch.h>

// Exact float comparisons are the point of these tests.
#pragma GCC diagnostic ignored "-Wfloat-equal"

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "precprobe_catch.h"
#include "scaler/scaler_internal.h"
#include "support/torch_compat.h"

#if PRECPROBE_HAS_CPU_AMP_KERNELS  // the helpers of the comparisons below
namespace {

// Values that exercise every branch of the element rule: zeros of both signs, denormals,
// values near the dtype's overflow, infinities, NaN, and ordinary random magnitudes.
at::Tensor gradient(at::ScalarType dtype, int64_t n, uint32_t seed, bool with_specials) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> exp(-40, 40);
  at::Tensor t = at::empty({n}, at::kDouble);
  double* p = t.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = std::ldexp(mant(rng), exp(rng));
  if (with_specials && n >= 8) {
    const double big = dtype == at::kDouble ? 1e300 : 3e38;
    p[0] = 0.0;
    p[1] = -0.0;
    p[2] = 1e-40;  // a float denormal
    p[3] = big;
    p[4] = -big;
    p[5] = std::numeric_limits<double>::infinity();
    p[6] = -std::numeric_limits<double>::infinity();
    p[7] = std::numeric_limits<double>::quiet_NaN();
  }
  return t.to(dtype);
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  REQUIRE(a.scalar_type() == b.scalar_type());
  REQUIRE(a.numel() == b.numel());
  const at::Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.numel() * ca.element_size()) == 0;
}

// Bit for bit, except that a NaN matches any NaN: ATen's own bfloat16 kernels give NaN
// different bit patterns (its AVX2 float->bf16 conversion writes 0xffff for every NaN, its
// scalar tail c10's canonical 0x7fc0), so a NaN's sign and payload carry no information.
// Every non-NaN element, the zeros' signs and the infinities included, must match exactly.
bool same_values_bitwise(const at::Tensor& a, const at::Tensor& b) {
  REQUIRE(a.scalar_type() == b.scalar_type());
  REQUIRE(a.numel() == b.numel());
  const at::Tensor ca = a.contiguous(), cb = b.contiguous();
  const at::Tensor nan_a = ca.isnan().to(at::kBool).contiguous();
  const at::Tensor nan_b = cb.isnan().to(at::kBool).contiguous();
  const auto* pa = static_cast<const unsigned char*>(ca.data_ptr());
  const auto* pb = static_cast<const unsigned char*>(cb.data_ptr());
  const bool* na = nan_a.data_ptr<bool>();
  const bool* nb = nan_b.data_ptr<bool>();
  const auto size = static_cast<size_t>(ca.element_size());
  for (int64_t i = 0; i < ca.numel(); ++i) {
    if (na[i] != nb[i]) return false;
    if (!na[i] && std::memcmp(pa + i * size, pb + i * size, size) != 0) return false;
  }
  return true;
}

}  // namespace
#endif

TEST_CASE("ATen's CPU unscale kernel equals the fused host path bit for bit", "[scaler][aten]") {
#if !PRECPROBE_HAS_CPU_AMP_KERNELS
  WARN("LibTorch " TORCH_VERSION
       " has no CPU _amp_foreach_non_finite_check_and_unscale_ "
       "(added in 2.3): GradScaler uses its fused host path only");
#else
  for (const auto dtype : {at::kFloat, at::kDouble, at::kBFloat16}) {
    for (const float inv : {1.0f / 65536.0f, 1.0f / 3.0f, 2.0f, 1.0f}) {
      for (const bool specials : {false, true}) {
        for (const int64_t n : {1, 7, 8, 33, 1000, 4099}) {
          if (specials && n < 8) continue;
          CAPTURE(c10::toString(dtype), inv, specials, n);
          const at::Tensor original =
              gradient(dtype, n, static_cast<uint32_t>(n * 31 + 7), specials);
          at::Tensor host = original.clone();
          const precprobe::detail::UnscaleResult r =
              precprobe::detail::check_and_unscale_cpu(host, inv, /*write=*/true);

          at::Tensor read_only = original.clone();
          const precprobe::detail::UnscaleResult r2 =
              precprobe::detail::check_and_unscale_cpu(read_only, inv, /*write=*/false);
          CHECK(same_bits(read_only, original));  // write=false reads only
          CHECK(r2.non_finite == r.non_finite);
          CHECK(r2.sumsq_scaled == r.sumsq_scaled);
          CHECK(r2.sumsq_unscaled == r.sumsq_unscaled);

          std::vector<at::Tensor> list{original.clone()};
          at::Tensor found = at::zeros({}, at::kFloat);
          at::_amp_foreach_non_finite_check_and_unscale_(list, found,
                                                         at::full({}, inv, at::kFloat));
          CHECK(same_values_bitwise(list[0], host));
          CHECK((found.item<float>() > 0) == r.non_finite);
          CHECK(r.non_finite == specials);
        }
      }
    }
  }
#endif
}

TEST_CASE("ATen's CPU scale update equals the host update over long sequences", "[scaler][aten]") {
#if !PRECPROBE_HAS_CPU_AMP_KERNELS
  WARN("LibTorch " TORCH_VERSION " has no CPU _amp_update_scale_ (added in 2.3)");
#else
  struct Case {
    double growth, backoff;
    int64_t interval;
    float start;
  };
  for (const Case c : {Case{2.0, 0.5, 3, 65536.0f}, Case{1.7, 0.3, 2, 1000.0f},
                       Case{1.0001, 0.9999, 1, 3.0f}, Case{2.0, 0.5, 1, 1e38f}}) {
    CAPTURE(c.growth, c.backoff, c.interval, c.start);
    std::mt19937 rng(17);
    std::bernoulli_distribution overflow(0.2);
    float host_scale = c.start;
    int32_t host_tracker = 0;
    at::Tensor scale = at::full({}, c.start, at::kFloat);
    at::Tensor tracker = at::zeros({}, at::kInt);
    for (int step = 0; step < 300; ++step) {
      const bool inf = overflow(rng);
      CAPTURE(step, inf);
      precprobe::detail::update_scale_host(host_scale, host_tracker, inf, c.growth, c.backoff,
                                           c.interval);
      at::_amp_update_scale_(scale, tracker, at::full({}, inf ? 1.0f : 0.0f, at::kFloat), c.growth,
                             c.backoff, c.interval);
      const float aten_scale = scale.item<float>();
      REQUIRE(std::memcmp(&aten_scale, &host_scale, sizeof(float)) == 0);
      REQUIRE(tracker.item<int32_t>() == host_tracker);
    }
  }
#endif
}
