// CUDA tensors through StatsEngine (the fused kernel with PRECPROBE_WITH_CUDA, else the ATen
// path): each record must equal summarize() of the tensor copied to the CPU, schema included.
// Needs a GPU: without one the test case says so (WARN) and checks nothing, or fails when
// PRECPROBE_REQUIRE_CUDA is set (scripts/gpu-check.sh). Written on a machine without a GPU;
// tests/cuda/ has the wider CUDA tests.
#include <torch/torch.h>

// Exact float comparisons are the point here.
#pragma GCC diagnostic ignored "-Wfloat-equal"

#include <cmath>
#include <memory>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "precprobe_catch.h"
#include "stats/stats.h"
#include "stats/stats_engine.h"
#include "support/torch_compat.h"

using namespace precprobe;
using namespace precprobe::detail;

namespace {

bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b;
}

at::Tensor with_specials(at::Tensor t) {
  auto flat = t.view({-1});
  for (int64_t i = 0; i < flat.numel(); i += 89) flat[i].fill_(std::nan(""));
  for (int64_t i = 3; i < flat.numel(); i += 127) flat[i].fill_(INFINITY);
  for (int64_t i = 7; i < flat.numel(); i += 151) flat[i].fill_(-INFINITY);
  for (int64_t i = 11; i < flat.numel(); i += 37) flat[i].fill_(0.0);
  return t;
}

}  // namespace

TEST_CASE("CUDA tensors: engine records equal summarize() of the CPU copy", "[cuda]") {
  if (!precprobe::test::cuda_or_skip()) return;
  torch::manual_seed(3);
  std::vector<at::Tensor> tensors;
  std::vector<at::ScalarType> dtypes = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};
  for (auto dtype : dtypes) {
    const at::Tensor base = with_specials(torch::randn({64, 33, 70}, at::kDouble) * 3);
    const at::Tensor x = base.to(at::kCUDA).to(dtype);
    tensors.push_back(x);                                                // contiguous, large
    tensors.push_back(x.transpose(0, 2).slice(1, 1, 30, 3));             // strided view
    tensors.push_back(x.select(2, 5).unsqueeze(1).expand({64, 4, 33}));  // expanded
    tensors.push_back(x[1][2].slice(0, 0, 17));                          // small (inline capture)
    tensors.push_back(x.slice(0, 0, 0));                                 // empty
  }
  tensors.push_back(
      torch::arange(100, at::TensorOptions(at::kCUDA).dtype(at::kLong)));  // ATen path
  std::vector<std::shared_ptr<Slot>> slots;
  {
    EngineConfig cfg;
    cfg.async = true;
    cfg.inline_numel = 64;
    cfg.emit = [](PendingOp&) {};
    StatsEngine engine(cfg);
    for (const auto& t : tensors) slots.push_back(engine.capture(t));
    engine.drain();  // the only wait for the device
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    INFO("tensor " << i << " " << tensors[i].scalar_type() << " " << tensors[i].sizes());
    REQUIRE(slots[i]->state.load() == Slot::kDone);
    const TensorStats& dev = slots[i]->stats;
    TensorStats cpu;
    summarize(tensors[i].cpu(), cpu, false);
    CHECK(dev.dtype == cpu.dtype);
    CHECK(dev.shape == cpu.shape);
    CHECK(dev.device == tensors[i].device().str());
    CHECK(dev.numel == cpu.numel);
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
  }
}
