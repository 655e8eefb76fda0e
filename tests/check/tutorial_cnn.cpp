// A program nobody here designed: the MNIST CNN of PyTorch's C++ example (pytorch/examples,
// cpp/mnist: two 5x5 convolutions with max pooling, 2-d feature dropout, two linear layers,
// log_softmax + nll_loss, SGD with momentum 0.5), trained on Fashion-MNIST with the README's
// three lines added (start, step, stop) and the loss logged. Its run is healthy: the
// no-false-alarm test requires that no gradient watchpoint fires and that `check` finds no
// problem on it with the default thresholds.
//
//   precprobe_tutorial_cnn DUMP_DIR [STEPS]
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "fashion_mnist.h"

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1(torch::nn::Conv2dOptions(1, 10, /*kernel_size=*/5)),
        conv2(torch::nn::Conv2dOptions(10, 20, /*kernel_size=*/5)),
        fc1(320, 50),
        fc2(50, 10) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("conv2_drop", conv2_drop);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1->forward(x), 2));
    x = torch::relu(torch::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));
    x = x.view({-1, 320});
    x = torch::relu(fc1->forward(x));
    x = torch::dropout(x, /*p=*/0.5, /*train=*/is_training());
    x = fc2->forward(x);
    return torch::log_softmax(x, /*dim=*/1);
  }

  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Dropout2d conv2_drop;
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Net);

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s DUMP_DIR [STEPS]\n", argv[0]);
    return 2;
  }
  const int64_t steps = argc == 3 ? std::stoll(argv[2]) : 300;
  torch::manual_seed(1);
  const fashion_mnist::Split train = fashion_mnist::load("train");
  Net model;
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));

  precprobe::DebuggerOptions options;
  options.dump_path = argv[1];
  options.overwrite = true;
  precprobe::PrecisionDebugger dbg(options);
  dbg.start(model);
  const int64_t batch = 64, n = train.images.size(0);
  const torch::Tensor order = torch::randperm(n);
  model->train();
  for (int64_t step = 0; step < steps; ++step) {
    const torch::Tensor idx = order.slice(0, (step * batch) % n, (step * batch) % n + batch);
    const torch::Tensor data = train.images.index_select(0, idx);
    const torch::Tensor target = train.labels.index_select(0, idx);
    optimizer.zero_grad();
    const torch::Tensor loss = torch::nll_loss(model->forward(data), target);
    loss.backward();
    optimizer.step();
    dbg.log_scalar("loss", loss.item<double>());
    if (step % 100 == 0)
      std::printf("step %4lld  loss %.4f\n", static_cast<long long>(step), loss.item<double>());
    dbg.step();
  }
  dbg.stop();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "precprobe_tutorial_cnn: %s\n", e.what());
  return 1;
}
