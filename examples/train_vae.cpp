// A variational autoencoder on Fashion-MNIST with precprobe's debugger on: 784 -> 400 ->
// (mu, log variance) of a 20-d latent -> 400 -> 784, a sum-reduced binary cross-entropy plus
// the KL divergence (a loss of ~3e4 per batch at first, as the well-known LibTorch tutorial's),
// Adam. Pixels stay in [0, 1]: the binary cross-entropy needs them there. After training it
// samples images from random latents (evaluation mode, no gradients), as the tutorial does.
//
//   train_vae [--steps 300] [--batch-size 100] [--dump DIR] [--seed 1234] [--threads N]
//             [--log-every 50] [--no-debugger]
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "fashion_mnist.h"

namespace {

struct Flags {
  int64_t steps = 300;
  int64_t batch_size = 100;
  std::string dump = "precprobe_dump_vae";
  uint64_t seed = 1234;
  int threads = 0;
  int64_t log_every = 50;
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
    else if (a == "--no-debugger")
      f.debugger = false;
    else
      throw std::invalid_argument(
          "unknown flag " + a +
          "; usage: train_vae [--steps N] [--batch-size N] [--dump DIR] [--seed N] "
          "[--threads N] [--log-every N] [--no-debugger]");
  }
  return f;
}

constexpr int64_t kImage = 28 * 28, kHidden = 400, kLatent = 20;

struct VaeImpl : torch::nn::Module {
  VaeImpl()
      : fc1(register_module("fc1", torch::nn::Linear(kImage, kHidden))),
        fc_mu(register_module("fc_mu", torch::nn::Linear(kHidden, kLatent))),
        fc_logvar(register_module("fc_logvar", torch::nn::Linear(kHidden, kLatent))),
        fc3(register_module("fc3", torch::nn::Linear(kLatent, kHidden))),
        fc4(register_module("fc4", torch::nn::Linear(kHidden, kImage))) {}

  std::pair<torch::Tensor, torch::Tensor> encode(const torch::Tensor& x) {
    auto h = torch::relu(fc1(x));
    return {fc_mu(h), fc_logvar(h)};
  }
  torch::Tensor decode(const torch::Tensor& z) { return torch::sigmoid(fc4(torch::relu(fc3(z)))); }
  // The reconstruction, mu and log variance.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> forward(const torch::Tensor& x) {
    auto [mu, logvar] = encode(x);
    const torch::Tensor z = mu + torch::randn_like(mu) * torch::exp(0.5 * logvar);
    return {decode(z), mu, logvar};
  }

  torch::nn::Linear fc1, fc_mu, fc_logvar, fc3, fc4;
};
TORCH_MODULE(Vae);

}  // namespace

int main(int argc, char** argv) try {
  const Flags flags = parse_flags(argc, argv);
  if (flags.threads > 0) at::set_num_threads(flags.threads);
  precprobe::seed_all(flags.seed, /*deterministic=*/true);

  const torch::Tensor images =
      fashion_mnist::load("train", /*normalise=*/false).images.view({-1, kImage});
  const int64_t n = images.size(0);

  Vae model;
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));

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
  for (int64_t step = 0; step < flags.steps; ++step) {
    const int64_t at = (step * flags.batch_size) % (n - flags.batch_size);
    const torch::Tensor x = images.index_select(0, order.slice(0, at, at + flags.batch_size));
    auto [recon, mu, logvar] = model->forward(x);
    const torch::Tensor bce =
        torch::binary_cross_entropy(recon, x, /*weight=*/{}, torch::Reduction::Sum);
    const torch::Tensor kl = -0.5 * torch::sum(1 + logvar - mu.pow(2) - logvar.exp());
    const torch::Tensor loss = bce + kl;
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (dbg) {
      dbg->log_scalar("loss", loss.item<double>());
      dbg->step();
    }
    if (flags.log_every > 0 && step % flags.log_every == 0) {
      std::printf("step %5lld  loss %.1f  (reconstruction %.1f, KL %.1f)\n",
                  static_cast<long long>(step), loss.item<double>(), bce.item<double>(),
                  kl.item<double>());
      std::fflush(stdout);
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Samples from random latents: evaluation mode, no gradients, no training step.
  {
    torch::NoGradGuard no_grad;
    model->eval();
    const torch::Tensor samples = model->decode(torch::randn({64, kLatent}));
    std::printf("64 samples, mean pixel %.3f\n", samples.mean().item<double>());
    model->train();
  }
  if (dbg) dbg->stop();
  std::printf("trained %lld steps in %.1f s\n", static_cast<long long>(flags.steps), secs);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_vae: %s\n", e.what());
  return 1;
}
