// LibTorch port of the `vae` pair (tests/ports/README.md): a small variational auto-encoder
// on Fashion-MNIST's pixels in [0, 1] (no Normalize), the reparameterisation's noise drawn
// each step, BCE (sum) + KL divergence per image; Adam.
//
//   port_vae --data ROOT [--steps 20] [--seed 1234] [--threads 1] [--dump DIR]
//            [--config FILE] [--load-state FILE] [--save-state FILE] [--lr 1e-3]
//            planted bugs: [--beta2 X] [--adam-eps X]
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <tuple>

#include "port_flags.h"

struct VAEImpl : torch::nn::Module {
  VAEImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 200))),
        fc_mu(register_module("fc_mu", torch::nn::Linear(200, 16))),
        fc_logvar(register_module("fc_logvar", torch::nn::Linear(200, 16))),
        fc2(register_module("fc2", torch::nn::Linear(16, 200))),
        fc3(register_module("fc3", torch::nn::Linear(200, 784))) {}

  std::pair<torch::Tensor, torch::Tensor> encode(torch::Tensor x) {
    auto h = torch::relu(fc1(x));
    return {fc_mu(h), fc_logvar(h)};
  }

  torch::Tensor reparameterize(torch::Tensor mu, torch::Tensor logvar) {
    auto stddev = logvar.div(2).exp_();
    auto eps = torch::randn_like(stddev);
    return eps.mul(stddev).add_(mu);
  }

  torch::Tensor decode(torch::Tensor z) {
    auto h = torch::relu(fc2(z));
    return torch::sigmoid(fc3(h));
  }

  // The reconstruction, mu and logvar.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> forward(torch::Tensor x) {
    auto [mu, logvar] = encode(x.view({-1, 784}));
    auto z = reparameterize(mu, logvar);
    return {decode(z), mu, logvar};
  }

  torch::nn::Linear fc1, fc_mu, fc_logvar, fc2, fc3;
};
TORCH_MODULE(VAE);

int main(int argc, char** argv) try {
  const auto flags = ports::parse_flags(argc, argv, /*default_lr=*/1e-3,
                                        {{"--beta2", 0.999}, {"--adam-eps", 1e-8}});
  torch::set_num_threads(flags.threads);
  precprobe::seed_all(flags.seed, /*deterministic=*/true);

  VAE model;
  if (!flags.load_state.empty()) precprobe::load_state(*model, flags.load_state);
  if (!flags.save_state.empty()) precprobe::save_state(*model, flags.save_state);
  torch::manual_seed(flags.seed);

  // torch::data's MNIST already holds the pixels divided by 255.
  auto dataset =
      torch::data::datasets::MNIST(flags.mnist_root()).map(torch::data::transforms::Stack<>());
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(dataset), torch::data::DataLoaderOptions().batch_size(64));
  torch::optim::Adam optimizer(model->parameters(),
                               torch::optim::AdamOptions(flags.lr)
                                   .betas(std::make_tuple(0.9, flags.value("--beta2")))
                                   .eps(flags.value("--adam-eps")));

  std::unique_ptr<precprobe::PrecisionDebugger> dbg;
  if (flags.debugger()) {
    precprobe::DebuggerOptions opts;
    if (!flags.config.empty()) opts = precprobe::DebuggerOptions::from_json_file(flags.config);
    if (!flags.dump.empty()) {
      opts.dump_path = flags.dump;
      opts.overwrite = true;
    }
    dbg = std::make_unique<precprobe::PrecisionDebugger>(opts);
    dbg->start(model);
  }

  model->train();
  int64_t step = 0;
  for (auto& batch : *loader) {
    if (step >= flags.steps) break;
    auto x = batch.data.view({-1, 784});
    auto [recon, mu, logvar] = model->forward(x);
    auto bce = torch::binary_cross_entropy(recon, x, /*weight=*/{}, torch::Reduction::Sum);
    // KL(q(z|x) || N(0, 1)) = -0.5 * sum(1 + logvar - mu^2 - exp(logvar))
    auto kld = -0.5 * torch::sum(1 + logvar - mu.pow(2) - logvar.exp());
    auto loss = (bce + kld) / x.size(0);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    if (dbg) dbg->step();
    std::printf("step %lld loss %.7g\n", static_cast<long long>(step), loss.item<float>());
    std::fflush(stdout);
    // Stop here, before the loader prepares a batch this run would not use.
    if (++step >= flags.steps) break;
  }
  if (dbg) dbg->stop();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "port_vae: %s\n", e.what());
  return 1;
}
