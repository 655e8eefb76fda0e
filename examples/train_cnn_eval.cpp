// A CNN on Fashion-MNIST that evaluates every 10 steps inside the training step, as most
// training loops do: after the optimizer's step, a test batch runs with gradients off
// (NoGradGuard) and the model in evaluation mode (model->eval()), then model->train() again.
// The model is PyTorch's C++ MNIST example's (two 5x5 convolutions, 2-d feature dropout, two
// linear layers, log_softmax + nll_loss, SGD with momentum 0.5), with the debugger on.
//
//   train_cnn_eval [--steps 300] [--eval-every 10] [--batch-size 64] [--dump DIR] [--seed 1234]
//                  [--threads N] [--log-every 50] [--mnist-normalisation] [--no-debugger]
//
// --mnist-normalisation normalises with MNIST's mean and standard deviation (0.1307, 0.3081)
// instead of Fashion-MNIST's own: the inputs come out with mean 0.50 and standard deviation
// 1.15, a common slip that still trains.
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "fashion_mnist.h"

namespace {

struct Flags {
  int64_t steps = 300;
  int64_t eval_every = 10;
  int64_t batch_size = 64;
  std::string dump = "precprobe_dump_cnn_eval";
  uint64_t seed = 1234;
  int threads = 0;
  int64_t log_every = 50;
  bool mnist_normalisation = false;
  bool debugger = true;
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--steps")
      f.steps = std::stoll(value());
    else if (a == "--eval-every")
      f.eval_every = std::stoll(value());
    else if (a == "--batch-size")
      f.batch_size = std::stoll(value());
    else if (a == "--dump")
      f.dump = value();
    else if (a == "--seed")
      f.seed = std::stoull(value());
    else if (a == "--threads")
      f.threads = std::stoi(value());
    else if (a == "--log-every")
      f.log_every = std::stoll(value());
    else if (a == "--mnist-normalisation")
      f.mnist_normalisation = true;
    else if (a == "--no-debugger")
      f.debugger = false;
    else
      throw std::invalid_argument(
          "unknown flag " + a +
          "; usage: train_cnn_eval [--steps N] [--eval-every N] [--batch-size N] [--dump DIR] "
          "[--seed N] [--threads N] [--log-every N] [--mnist-normalisation] [--no-debugger]");
  }
  if (f.eval_every < 1) throw std::invalid_argument("--eval-every must be >= 1");
  return f;
}

struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 10, 5)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(10, 20, 5)))),
        conv2_drop(register_module("conv2_drop", torch::nn::Dropout2d())),
        fc1(register_module("fc1", torch::nn::Linear(320, 50))),
        fc2(register_module("fc2", torch::nn::Linear(50, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1(x), 2));
    x = torch::relu(torch::max_pool2d(conv2_drop(conv2(x)), 2));
    x = torch::relu(fc1(x.view({-1, 320})));
    x = torch::dropout(x, /*p=*/0.5, /*train=*/is_training());
    return torch::log_softmax(fc2(x), /*dim=*/1);
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Dropout2d conv2_drop;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

fashion_mnist::Split load(const std::string& split, bool mnist_constants) {
  if (!mnist_constants) return fashion_mnist::load(split);
  fashion_mnist::Split s = fashion_mnist::load(split, /*normalise=*/false);
  s.images = (s.images - 0.1307) / 0.3081;
  return s;
}

}  // namespace

int main(int argc, char** argv) try {
  const Flags flags = parse_flags(argc, argv);
  if (flags.threads > 0) at::set_num_threads(flags.threads);
  precprobe::seed_all(flags.seed, /*deterministic=*/true);

  const fashion_mnist::Split train = load("train", flags.mnist_normalisation);
  const fashion_mnist::Split test = load("t10k", flags.mnist_normalisation);
  const int64_t n = train.images.size(0);

  Net model;
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));

  precprobe::DebuggerOptions opts;
  opts.dump_path = flags.dump;
  opts.overwrite = true;
  std::unique_ptr<precprobe::PrecisionDebugger> dbg;
  if (flags.debugger) {
    dbg = std::make_unique<precprobe::PrecisionDebugger>(opts);
    dbg->start(model);
  }

  const torch::Tensor order = torch::randperm(n);
  const auto t0 = std::chrono::steady_clock::now();
  double accuracy = 0;
  model->train();
  for (int64_t step = 0; step < flags.steps; ++step) {
    const int64_t at = (step * flags.batch_size) % (n - flags.batch_size);
    const torch::Tensor idx = order.slice(0, at, at + flags.batch_size);
    opt.zero_grad();
    const torch::Tensor loss = torch::nll_loss(model->forward(train.images.index_select(0, idx)),
                                               train.labels.index_select(0, idx));
    loss.backward();
    opt.step();
    if (step % flags.eval_every == 0) {  // evaluation inside the step
      torch::NoGradGuard no_grad;
      model->eval();
      const int64_t from = (step / flags.eval_every * 500) % (test.images.size(0) - 500);
      const torch::Tensor out = model->forward(test.images.slice(0, from, from + 500));
      accuracy = out.argmax(1)
                     .eq(test.labels.slice(0, from, from + 500))
                     .to(torch::kFloat)
                     .mean()
                     .item<double>();
      model->train();
    }
    if (dbg) {
      dbg->log_scalar("loss", loss.item<double>());
      dbg->step();
    }
    if (flags.log_every > 0 && step % flags.log_every == 0) {
      std::printf("step %5lld  loss %.4f  test accuracy %.1f%%\n", static_cast<long long>(step),
                  loss.item<double>(), 100 * accuracy);
      std::fflush(stdout);
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (dbg) dbg->stop();
  std::printf("trained %lld steps in %.1f s; last test accuracy %.1f%%\n",
              static_cast<long long>(flags.steps), secs, 100 * accuracy);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_cnn_eval: %s\n", e.what());
  return 1;
}
