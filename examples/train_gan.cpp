// A DCGAN on Fashion-MNIST with precprobe's debugger watching both networks: a generator and
// a discriminator, two Adam optimizers with betas (0.5, 0.999), binary cross-entropy, the loop
// of pytorch/examples' cpp/dcgan. One start() names the parameters of both ("G.fc.weight",
// "D.conv1.weight"); the gradient monitor, dropout forcing and the checklist cover both.
//
//   train_gan [--steps 300] [--batch-size 64] [--dump DIR] [--seed 1234] [--threads N]
//             [--log-every 50] [--no-debugger]
//
// Then: precprobe summary DIR; precprobe grads DIR; precprobe check DIR.
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "fashion_mnist.h"

namespace {

constexpr int64_t kNoise = 64;

struct Flags {
  int64_t steps = 300;
  int64_t batch_size = 64;
  std::string dump = "precprobe_dump_gan";
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
          "; usage: train_gan [--steps N] [--batch-size N] [--dump DIR] [--seed N] "
          "[--threads N] [--log-every N] [--no-debugger]");
  }
  return f;
}

// noise [N, 64] -> fc -> [N, 64, 7, 7] -> deconv -> [N, 32, 14, 14] -> deconv -> [N, 1, 28, 28].
// No bias before a BatchNorm (as DCGAN): the normalisation subtracts it, so its gradient is
// zero up to rounding (~1e-10) and it never learns; the gradient monitor would say so.
struct GeneratorImpl : torch::nn::Module {
  GeneratorImpl()
      : fc(register_module(
            "fc", torch::nn::Linear(torch::nn::LinearOptions(kNoise, 64 * 7 * 7).bias(false)))),
        bn0(register_module("bn0", torch::nn::BatchNorm1d(64 * 7 * 7))),
        deconv1(register_module(
            "deconv1",
            torch::nn::ConvTranspose2d(
                torch::nn::ConvTranspose2dOptions(64, 32, 4).stride(2).padding(1).bias(false)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(32))),
        deconv2(register_module(
            "deconv2", torch::nn::ConvTranspose2d(
                           torch::nn::ConvTranspose2dOptions(32, 1, 4).stride(2).padding(1)))) {}

  torch::Tensor forward(const torch::Tensor& z) {
    auto x = torch::relu(bn0(fc(z))).view({-1, 64, 7, 7});
    x = torch::relu(bn1(deconv1(x)));
    return torch::tanh(deconv2(x));
  }

  torch::nn::Linear fc;
  torch::nn::BatchNorm1d bn0;
  torch::nn::ConvTranspose2d deconv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::ConvTranspose2d deconv2;
};
TORCH_MODULE(Generator);

// [N, 1, 28, 28] -> conv -> [N, 16, 14, 14] -> conv -> [N, 32, 7, 7] -> fc -> probability
struct DiscriminatorImpl : torch::nn::Module {
  DiscriminatorImpl()
      : conv1(register_module(
            "conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 4).stride(2).padding(1)))),
        conv2(register_module(
            "conv2", torch::nn::Conv2d(
                         torch::nn::Conv2dOptions(16, 32, 4).stride(2).padding(1).bias(false)))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(32))),
        fc(register_module("fc", torch::nn::Linear(32 * 7 * 7, 1))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::leaky_relu(conv1(x), 0.2);
    h = torch::leaky_relu(bn2(conv2(h)), 0.2);
    return torch::sigmoid(fc(h.flatten(1))).squeeze(1);
  }

  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Linear fc;
};
TORCH_MODULE(Discriminator);

}  // namespace

int main(int argc, char** argv) try {
  const Flags flags = parse_flags(argc, argv);
  if (flags.threads > 0) at::set_num_threads(flags.threads);
  precprobe::seed_all(flags.seed, /*deterministic=*/true);

  // Pixels in [-1, 1], the range of the generator's tanh.
  const torch::Tensor images = fashion_mnist::load("train", /*normalise=*/false).images * 2 - 1;
  const int64_t n = images.size(0);

  Generator generator;
  Discriminator discriminator;
  torch::optim::Adam g_opt(generator->parameters(),
                           torch::optim::AdamOptions(2e-4).betas(std::make_tuple(0.5, 0.999)));
  torch::optim::Adam d_opt(discriminator->parameters(),
                           torch::optim::AdamOptions(2e-4).betas(std::make_tuple(0.5, 0.999)));

  precprobe::DebuggerOptions opts;
  opts.dump_path = flags.dump;
  opts.overwrite = true;
  opts.enable = flags.debugger;  // off: every call below returns at once, no `if` needed
  precprobe::PrecisionDebugger dbg(opts);
  dbg.start({{"G", generator}, {"D", discriminator}}, {&g_opt, &d_opt});

  const torch::Tensor order = torch::randperm(n);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < flags.steps; ++step) {
    const int64_t at = (step * flags.batch_size) % (n - flags.batch_size);
    const torch::Tensor real = images.index_select(0, order.slice(0, at, at + flags.batch_size));
    const int64_t b = real.size(0);

    // Discriminator: real images towards 1 (smoothed to 0.9), generated ones towards 0.
    discriminator->zero_grad();
    const torch::Tensor d_real = discriminator->forward(real);
    const torch::Tensor d_loss_real =
        torch::binary_cross_entropy(d_real, torch::full({b}, 0.9, torch::kFloat));
    d_loss_real.backward();
    const torch::Tensor fake = generator->forward(torch::randn({b, kNoise}));
    const torch::Tensor d_fake = discriminator->forward(fake.detach());
    const torch::Tensor d_loss_fake = torch::binary_cross_entropy(d_fake, torch::zeros({b}));
    d_loss_fake.backward();
    d_opt.step();

    // Generator: make the discriminator call its images real.
    generator->zero_grad();
    const torch::Tensor g_loss =
        torch::binary_cross_entropy(discriminator->forward(fake), torch::ones({b}));
    g_loss.backward();
    g_opt.step();

    const double d_loss = d_loss_real.item<double>() + d_loss_fake.item<double>();
    dbg.log_scalar("d_loss", d_loss);
    dbg.log_scalar("g_loss", g_loss.item<double>());
    dbg.step();
    if (flags.log_every > 0 && step % flags.log_every == 0) {
      std::printf("step %5lld  d_loss %.4f  g_loss %.4f  D(x) %.3f  D(G(z)) %.3f\n",
                  static_cast<long long>(step), d_loss, g_loss.item<double>(),
                  d_real.mean().item<double>(), d_fake.mean().item<double>());
      std::fflush(stdout);
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  dbg.stop();
  std::printf("trained %lld steps in %.1f s\n", static_cast<long long>(flags.steps), secs);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_gan: %s\n", e.what());
  return 1;
}
