// Statistics of CUDA tensors through StatsEngine (the fused kernel of
// src/probe/cuda/stats_kernel.cu): every dtype the kernel reads (float32, float64, float16,
// bfloat16, float8 e4m3fn and e5m2 on LibTorch >= 2.1) with NaN, +Inf, -Inf, +0, -0 and
// denormals, in every layout (contiguous, transposed and sliced, expanded, channels-last,
// scalar, empty, a tensor larger than one launch's 1024 blocks). Each record must equal a
// float64 recomputation of the CPU copy (reference() of probe/debugger_fixture.h) and
// summarize() of it (the CPU path, whose conventions the records keep).
// Built only with PRECPROBE_WITH_CUDA; needs a GPU (cuda_or_skip()). Written without a GPU:
// scripts/gpu-check.sh runs it on one, also under compute-sanitizer.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

// Exact float comparisons are the point here.
#pragma GCC diagnostic ignored "-Wfloat-equal"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "probe/debugger_fixture.h"
#include "stats/stats.h"
#include "stats/stats_engine.h"
#include "support/torch_compat.h"

using namespace precprobe;
using namespace precprobe::detail;
using precprobe::test::cuda_or_skip;
using precprobe::test::reference;
using precprobe::test::RefStats;

namespace {

bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b;
}

bool is_fp8(at::ScalarType t) {
#if PRECPROBE_TORCH_AT_LEAST(2, 1)
  return t == at::ScalarType::Float8_e4m3fn || t == at::ScalarType::Float8_e5m2;
#else
  (void)t;
  return false;
#endif
}

std::vector<at::ScalarType> kernel_dtypes() {
  std::vector<at::ScalarType> v = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};
#if PRECPROBE_TORCH_AT_LEAST(2, 1)
  v.push_back(at::ScalarType::Float8_e4m3fn);
  v.push_back(at::ScalarType::Float8_e5m2);
#endif
  return v;
}

/// The smallest positive subnormal of `t`.
double denorm_min(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return std::numeric_limits<float>::denorm_min();
    case at::kDouble:
      return std::numeric_limits<double>::denorm_min();
    case at::kHalf:
      return std::ldexp(1.0, -24);
    case at::kBFloat16:
      return std::ldexp(1.0, -133);
    default:
      break;
  }
#if PRECPROBE_TORCH_AT_LEAST(2, 1)
  if (t == at::ScalarType::Float8_e4m3fn) return std::ldexp(1.0, -9);
  if (t == at::ScalarType::Float8_e5m2) return std::ldexp(1.0, -16);
#endif
  return 0;
}

/// float64 values on the CPU: normal values of both signs, NaN, +Inf, -Inf, +0, -0 and
/// denormals of `dtype`, rounded to `dtype` there (e4m3fn has no Inf: those become NaN).
at::Tensor special_values(at::ScalarType dtype, at::IntArrayRef shape, uint64_t seed) {
  torch::manual_seed(seed);
  at::Tensor base = torch::randn(shape, at::kDouble) * 3;
  if (is_fp8(dtype)) base.clamp_(-400, 400);  // e4m3fn's largest finite value is 448
  auto flat = base.view({-1});
  auto* p = flat.data_ptr<double>();
  const double dn = denorm_min(dtype);
  for (int64_t i = 0; i < flat.numel(); ++i) {
    if (i % 89 == 0)
      p[i] = std::numeric_limits<double>::quiet_NaN();
    else if (i % 127 == 3)
      p[i] = INFINITY;
    else if (i % 151 == 7)
      p[i] = -INFINITY;
    else if (i % 37 == 11)
      p[i] = 0.0;
    else if (i % 41 == 23)
      p[i] = -0.0;
    else if (i % 53 == 19)
      p[i] = static_cast<double>(1 + i % 3) * dn;
    else if (i % 59 == 29)
      p[i] = -static_cast<double>(1 + i % 3) * dn;
  }
  return base.to(dtype);
}

/// The engine's records of `tensors` (CUDA), computed asynchronously with one drain.
std::vector<std::shared_ptr<Slot>> engine_records(const std::vector<at::Tensor>& tensors) {
  std::vector<std::shared_ptr<Slot>> slots;
  EngineConfig cfg;
  cfg.async = true;
  cfg.inline_numel = 64;
  cfg.emit = [](PendingOp&) {};
  StatsEngine engine(cfg);
  for (const auto& t : tensors) slots.push_back(engine.capture(t));
  engine.drain();  // the only wait for the device
  return slots;
}

void check_record(const at::Tensor& device_tensor, const TensorStats& dev) {
  const at::Tensor host = device_tensor.cpu();
  // summarize() has no CPU kernel for float8: its record of the exact float32 copy.
  const at::Tensor host_readable = is_fp8(host.scalar_type()) ? host.to(at::kFloat) : host;
  TensorStats cpu;
  summarize(host_readable, cpu, false);
  CHECK(dev.dtype == std::string(c10::toString(device_tensor.scalar_type())));
  CHECK(dev.shape == device_tensor.sizes().vec());
  CHECK(dev.device == device_tensor.device().str());
  CHECK(dev.numel == device_tensor.numel());
  CHECK(dev.nan == cpu.nan);
  CHECK(dev.pinf == cpu.pinf);
  CHECK(dev.ninf == cpu.ninf);
  CHECK(dev.zero == cpu.zero);
  CHECK(dev.neg == cpu.neg);
  CHECK(dev.pos == cpu.pos);
  CHECK(same(dev.min, cpu.min));
  CHECK(same(dev.max, cpu.max));
  if (std::isnan(cpu.mean)) {
    CHECK(std::isnan(dev.mean));
  } else {
    CHECK(dev.mean == Approx(cpu.mean).epsilon(1e-10).margin(1e-12));
    CHECK(dev.norm == Approx(cpu.norm).epsilon(1e-10));
  }
  CHECK(!dev.hash.has_value());

  // The independent float64 recomputation.
  const RefStats ref = reference(host_readable);
  CHECK(dev.nan == ref.nan);
  CHECK(dev.pinf == ref.pinf);
  CHECK(dev.ninf == ref.ninf);
  CHECK(dev.zero == ref.zero);
  CHECK(dev.neg == ref.neg);
  CHECK(dev.pos == ref.pos);
  if (ref.pos + ref.neg + ref.zero > 0) {
    CHECK(same(dev.min, ref.min));
    CHECK(same(dev.max, ref.max));
    CHECK(dev.mean == Approx(ref.mean).epsilon(1e-10).margin(1e-12));
    CHECK(dev.norm == Approx(ref.norm).epsilon(1e-10));
  }
}

}  // namespace

TEST_CASE("CUDA: every dtype and layout equals a float64 recomputation of the CPU copy",
          "[cuda][stats]") {
  if (!cuda_or_skip()) return;
  uint64_t seed = 1;
  for (const auto dtype : kernel_dtypes()) {
    std::vector<at::Tensor> tensors;
    std::vector<std::string> what;
    const at::Tensor x = special_values(dtype, {64, 33, 70}, seed++).to(at::kCUDA);
    const at::Tensor img = special_values(dtype, {8, 16, 12, 10}, seed++).to(at::kCUDA);
    const at::Tensor cl = img.contiguous(at::MemoryFormat::ChannelsLast);
    tensors = {x,
               x.transpose(0, 2).slice(1, 1, 30, 3),
               x.select(2, 5).unsqueeze(1).expand({64, 4, 33}),
               cl,
               cl.slice(2, 1, 11, 2),
               cl.permute({0, 2, 3, 1}),  // the channels-last memory seen as NHWC contiguous
               x[1][2][3],                // 0-dim
               x[1][2].slice(0, 0, 17),   // small
               x.slice(0, 0, 0)};         // empty
    what = {"contiguous",
            "transposed+sliced",
            "expanded",
            "channels-last",
            "channels-last sliced",
            "NHWC view",
            "scalar",
            "small",
            "empty"};
    if (dtype == at::kFloat) {  // more than 1024 blocks of 4096 elements: grid-stride loops
      tensors.push_back(special_values(dtype, {5 * 1024 * 1024 + 7}, seed++).to(at::kCUDA));
      what.push_back("5M elements");
    }
    const auto slots = engine_records(tensors);
    for (size_t i = 0; i < tensors.size(); ++i) {
      INFO(c10::toString(dtype) << " " << what[i] << " " << tensors[i].sizes());
      REQUIRE(slots[i]->state.load() == Slot::kDone);
      check_record(tensors[i], slots[i]->stats);
    }
  }
}

TEST_CASE("CUDA: -0, +0 and denormals are counted and bound exactly", "[cuda][stats]") {
  if (!cuda_or_skip()) return;
  for (const auto dtype : kernel_dtypes()) {
    INFO(c10::toString(dtype));
    const double dn = denorm_min(dtype);
    const at::Tensor host = torch::tensor({-0.0, 0.0, dn, -dn, 2 * dn, 1.0}, at::kDouble).to(dtype);
    const at::Tensor dev = host.to(at::kCUDA);
    const auto slots = engine_records({dev, dev.flip(0)});
    for (const auto& s : slots) {
      REQUIRE(s->state.load() == Slot::kDone);
      const TensorStats& st = s->stats;
      CHECK(st.zero == 2);
      CHECK(st.neg == 1);
      CHECK(st.pos == 3);
      CHECK(st.nan + st.pinf + st.ninf == 0);
      CHECK(st.min == -dn);
      CHECK(st.max == 1.0);
      CHECK(st.mean == Approx((2 * dn + 1.0) / 6).epsilon(1e-12));
    }
  }
}

TEST_CASE("CUDA: a batch of tensors on a side stream is read after the kernels that wrote them",
          "[cuda][stats]") {
  if (!cuda_or_skip()) return;
  // Produce on a side stream and capture there: the statistics are computed on the stream
  // the tensor was captured on, so they see the values the fill kernels wrote.
  auto side = c10::cuda::getStreamFromPool();
  std::vector<at::Tensor> tensors;
  {
    c10::cuda::CUDAStreamGuard guard(side);
    for (int i = 0; i < 32; ++i) {
      tensors.push_back(torch::full({1 << 16}, static_cast<float>(i),
                                    at::TensorOptions(at::kCUDA).dtype(at::kFloat)));
    }
  }
  std::vector<std::shared_ptr<Slot>> slots;
  {
    EngineConfig cfg;
    cfg.async = true;
    cfg.inline_numel = 64;
    cfg.emit = [](PendingOp&) {};
    StatsEngine engine(cfg);
    {
      c10::cuda::CUDAStreamGuard guard(side);
      for (const auto& t : tensors) slots.push_back(engine.capture(t));
    }
    engine.drain();
  }
  for (int i = 0; i < 32; ++i) {
    INFO("tensor " << i);
    REQUIRE(slots[i]->state.load() == Slot::kDone);
    CHECK(slots[i]->stats.min == i);
    CHECK(slots[i]->stats.max == i);
    CHECK(slots[i]->stats.zero == (i == 0 ? (1 << 16) : 0));
  }
}
