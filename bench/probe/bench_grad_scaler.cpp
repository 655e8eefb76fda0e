// GradScaler's fused CPU check-and-unscale against the same work done with ATen ops, and
// the gradient monitor's observe() on a 4M-parameter model.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include "precprobe/grad_monitor.h"
#include "scaler/scaler_internal.h"

namespace {

// One gradient of n float32 elements: fused pass (finite check, unscale, two float64 norms).
void BM_FusedUnscale(benchmark::State& state) {
  auto g = torch::randn({state.range(0)});
  for (auto _ : state) {
    auto r = precprobe::detail::check_and_unscale_cpu(g, 1.0f);  // inv 1: values stay put
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(state.iterations() * g.numel() * 4);
}
BENCHMARK(BM_FusedUnscale)->Arg(1 << 16)->Arg(1 << 22);

// The same results from ATen: non-finite check, in-place multiply, finite norms before/after.
void BM_AtenUnscale(benchmark::State& state) {
  auto g = torch::randn({state.range(0)});
  for (auto _ : state) {
    auto fin = g.isfinite();
    bool bad = !fin.all().item<bool>();
    auto before = g.masked_select(fin).to(torch::kDouble).norm().item<double>();
    g.mul_(1.0f);
    auto after = g.masked_select(g.isfinite()).to(torch::kDouble).norm().item<double>();
    benchmark::DoNotOptimize(bad);
    benchmark::DoNotOptimize(before + after);
  }
  state.SetBytesProcessed(state.iterations() * g.numel() * 4);
}
BENCHMARK(BM_AtenUnscale)->Arg(1 << 16)->Arg(1 << 22);

// observe() on an MLP 784-2048-2048-10 (~5.8M parameters), update ratio on and off.
void BM_MonitorObserve(benchmark::State& state) {
  torch::nn::Sequential model(torch::nn::Linear(784, 2048), torch::nn::ReLU(),
                              torch::nn::Linear(2048, 2048), torch::nn::ReLU(),
                              torch::nn::Linear(2048, 10));
  for (auto& p : model->parameters()) p.mutable_grad() = torch::randn_like(p);
  precprobe::GradMonitorOptions o;
  o.update_ratio = state.range(0) != 0;
  precprobe::GradMonitor m(*model, o);
  int64_t step = 0;
  for (auto _ : state) benchmark::DoNotOptimize(m.observe(step++));
}
BENCHMARK(BM_MonitorObserve)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
