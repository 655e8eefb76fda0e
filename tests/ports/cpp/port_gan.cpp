// LibTorch port of the `gan` pair (tests/ports/README.md): a generator and a discriminator of
// two Linear layers each (torch::nn::Sequential), two Adam optimizers with betas (0.5, 0.999),
// noise drawn each step, BCE; Fashion-MNIST normalized to [-1, 1]. As LibTorch users write a
// GAN loop, each update zeroes the gradients of the optimizer it is about to step, and no more:
// the generator's backward also adds into the discriminator's gradients (and the
// discriminator's, whose fake images are not detached, into the generator's), zeroed before
// the owning optimizer reads them.
//
//   port_gan --data ROOT [--steps 20] [--seed 1234] [--threads 1] [--dump DIR]
//            [--config FILE] [--load-state FILE] [--save-state FILE] [--lr 2e-4]
//            planted bugs: [--leaky-slope X] [--beta1 X] [--no-zero-d]
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <string>
#include <tuple>

#include "port_flags.h"

namespace {

constexpr int64_t kLatentSize = 64;
constexpr int64_t kHiddenSize = 256;
constexpr int64_t kImageSize = 784;
constexpr int64_t kBatchSize = 64;

// Both networks' parameters as one state, named as the debugger names them: "G.0.weight".
precprobe::NamedTensors gan_state(const torch::nn::Sequential& G, const torch::nn::Sequential& D) {
  precprobe::NamedTensors out;
  for (auto& [name, t] : precprobe::state_tensors(*G)) out.emplace_back("G." + name, t);
  for (auto& [name, t] : precprobe::state_tensors(*D)) out.emplace_back("D." + name, t);
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  const auto flags = ports::parse_flags(
      argc, argv, /*default_lr=*/2e-4, {{"--leaky-slope", 0.2}, {"--beta1", 0.5}}, {"--no-zero-d"});
  torch::set_num_threads(flags.threads);
  precprobe::seed_all(flags.seed, /*deterministic=*/true);

  const double slope = flags.value("--leaky-slope");
  // Discriminator: image -> probability of being real.
  torch::nn::Sequential D(torch::nn::Linear(kImageSize, kHiddenSize),
                          torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(slope)),
                          torch::nn::Linear(kHiddenSize, 1), torch::nn::Sigmoid());
  // Generator: noise -> image in [-1, 1].
  torch::nn::Sequential G(torch::nn::Linear(kLatentSize, kHiddenSize),
                          torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(slope)),
                          torch::nn::Linear(kHiddenSize, kImageSize), torch::nn::Tanh());
  if (!flags.load_state.empty()) precprobe::load_state(gan_state(G, D), flags.load_state);
  if (!flags.save_state.empty()) precprobe::save_state(gan_state(G, D), flags.save_state);
  torch::manual_seed(flags.seed);

  // torch::data's MNIST holds the pixels divided by 255; (x - 0.5) / 0.5 maps them to [-1, 1].
  auto dataset = torch::data::datasets::MNIST(flags.mnist_root())
                     .map(torch::data::transforms::Normalize<>(0.5, 0.5))
                     .map(torch::data::transforms::Stack<>());
  auto data_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(dataset), torch::data::DataLoaderOptions().batch_size(kBatchSize));

  torch::nn::BCELoss criterion;
  const auto betas = std::make_tuple(flags.value("--beta1"), 0.999);
  torch::optim::Adam d_optimizer(D->parameters(), torch::optim::AdamOptions(flags.lr).betas(betas));
  torch::optim::Adam g_optimizer(G->parameters(), torch::optim::AdamOptions(flags.lr).betas(betas));

  std::unique_ptr<precprobe::PrecisionDebugger> dbg;
  if (flags.debugger()) {
    precprobe::DebuggerOptions opts;
    if (!flags.config.empty()) opts = precprobe::DebuggerOptions::from_json_file(flags.config);
    if (!flags.dump.empty()) {
      opts.dump_path = flags.dump;
      opts.overwrite = true;
    }
    dbg = std::make_unique<precprobe::PrecisionDebugger>(opts);
    dbg->start({{"G", G}, {"D", D}});
  }

  int64_t step = 0;
  for (auto& batch : *data_loader) {
    if (step >= flags.steps) break;
    auto images = batch.data.reshape({kBatchSize, -1});
    auto real_labels = torch::ones({kBatchSize, 1});
    auto fake_labels = torch::zeros({kBatchSize, 1});

    // Train the discriminator: real images towards 1, generated ones towards 0.
    auto d_loss_real = criterion(D->forward(images), real_labels);
    auto z = torch::randn({kBatchSize, kLatentSize});
    auto fake_images = G->forward(z);
    auto d_loss_fake = criterion(D->forward(fake_images), fake_labels);
    auto d_loss = d_loss_real + d_loss_fake;
    if (!flags.has("--no-zero-d")) d_optimizer.zero_grad();
    d_loss.backward();
    d_optimizer.step();

    // Train the generator: make the discriminator call its images real.
    z = torch::randn({kBatchSize, kLatentSize});
    fake_images = G->forward(z);
    auto g_loss = criterion(D->forward(fake_images), real_labels);
    g_optimizer.zero_grad();
    g_loss.backward();
    g_optimizer.step();

    if (dbg) dbg->step();
    std::printf("step %lld d_loss %.7g g_loss %.7g\n", static_cast<long long>(step),
                d_loss.item<float>(), g_loss.item<float>());
    std::fflush(stdout);
    // Stop here, before the loader prepares a batch this run would not use.
    if (++step >= flags.steps) break;
  }
  if (dbg) dbg->stop();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "port_gan: %s\n", e.what());
  return 1;
}
