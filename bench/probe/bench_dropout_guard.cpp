// Cost of DropoutGuard: a training step of a 256-wide MLP with dropout, with and without the
// guard. The guard adds one dispatch key to every op dispatched on the thread (a fallthrough
// for all but the dropout ops), so the two should be within noise. The guarded step also
// skips the dropout mask itself, so it is compared with p = 0 passed explicitly as well.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include "precprobe/dropout.h"

namespace {

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(double p)
      : fc1(register_module("fc1", torch::nn::Linear(784, 256))),
        fc2(register_module("fc2", torch::nn::Linear(256, 256))),
        fc3(register_module("fc3", torch::nn::Linear(256, 10))),
        drop(register_module("drop", torch::nn::Dropout(p))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = drop(torch::relu(fc1(x)));
    x = drop(torch::relu(fc2(x)));
    return fc3(x);
  }
  torch::nn::Linear fc1, fc2, fc3;
  torch::nn::Dropout drop;
};
TORCH_MODULE(Mlp);

void step_loop(benchmark::State& state, double p, bool guard) {
  torch::manual_seed(0);
  Mlp net(p);
  net->train();
  torch::optim::SGD opt(net->parameters(), 0.01);
  auto x = torch::randn({128, 784});
  auto y = torch::randint(0, 10, {128});
  std::unique_ptr<precprobe::DropoutGuard> g;
  if (guard) g = std::make_unique<precprobe::DropoutGuard>();
  for (auto _ : state) {
    auto loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    benchmark::DoNotOptimize(loss.data_ptr());
  }
}

void BM_StepDropout(benchmark::State& s) { step_loop(s, 0.5, false); }
void BM_StepDropoutP0(benchmark::State& s) { step_loop(s, 0.0, false); }
void BM_StepDropoutGuarded(benchmark::State& s) { step_loop(s, 0.5, true); }

}  // namespace

BENCHMARK(BM_StepDropout)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StepDropoutP0)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StepDropoutGuarded)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
