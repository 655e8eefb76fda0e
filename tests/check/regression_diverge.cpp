// A regression a new user might write: a small MLP on tabular data whose features are left
// in their raw units (up to ~700, like Boston housing's TAX column), trained with plain SGD.
// The gradients of the first layer scale with the features squared, so the loss diverges to
// NaN within a few steps. Instrumented with the README's three lines only (start, step,
// stop): `precprobe check` must find the unnormalised inputs from the op records.
//
//   precprobe_regression_diverge DUMP_DIR
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) try {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DUMP_DIR\n", argv[0]);
    return 2;
  }
  torch::manual_seed(0);
  // Column j uniform in [0, scale_j]: the ranges of Boston housing's 13 features.
  const std::vector<float> scale = {89, 100, 28, 1, 0.9f, 8.8f, 100, 12, 24, 711, 22, 397, 38};
  const int64_t n = 256, f = static_cast<int64_t>(scale.size());
  const torch::Tensor x = torch::rand({n, f}) * torch::tensor(scale);
  const torch::Tensor w = torch::randn({f, 1}) * 0.05;
  const torch::Tensor y = x.matmul(w) + 22.0 + 0.5 * torch::randn({n, 1});

  torch::nn::Sequential model(torch::nn::Linear(f, 32), torch::nn::LeakyReLU(),
                              torch::nn::Linear(32, 1));
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01));

  precprobe::DebuggerOptions options;
  options.dump_path = argv[1];
  options.overwrite = true;
  precprobe::PrecisionDebugger dbg(options);
  dbg.start(model);
  const int64_t batch = 32;
  for (int64_t step = 0; step < 16; ++step) {
    const int64_t i = (step * batch) % n;
    const auto xb = x.slice(0, i, i + batch);
    const auto yb = y.slice(0, i, i + batch);
    const auto loss = torch::mse_loss(model->forward(xb), yb);
    opt.zero_grad();
    loss.backward();
    opt.step();
    std::printf("step %2lld  loss %g\n", static_cast<long long>(step), loss.item<double>());
    dbg.step();
  }
  dbg.stop();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "precprobe_regression_diverge: %s\n", e.what());
  return 1;
}
