// LibTorch port of the `transformer` pair (tests/ports/README.md): the image's 28 rows as
// tokens, a linear embedding plus a learned position table, one post-norm encoder layer,
// the tokens averaged and classified; AdamW.
//
//   port_transformer --data ROOT [--steps 20] [--seed 1234] [--threads 1] [--dump DIR]
//                    [--config FILE] [--load-state FILE] [--save-state FILE] [--lr 1e-3]
//                    planted bugs: [--norm-mean X] [--weight-decay X]
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <cstdio>
#include <memory>

#include "port_flags.h"

struct TinyTransformerImpl : torch::nn::Module {
  TinyTransformerImpl()
      : embed(register_module("embed", torch::nn::Linear(28, 32))),
        encoder(register_module("encoder", torch::nn::TransformerEncoderLayer(
                                               torch::nn::TransformerEncoderLayerOptions(32, 4)
                                                   .dim_feedforward(64)
                                                   .dropout(0.1)
                                                   .activation(torch::kReLU)))),
        head(register_module("head", torch::nn::Linear(32, 10))) {
    pos = register_parameter("pos", torch::zeros({28, 32}));
  }

  torch::Tensor forward(torch::Tensor x) {
    x = x.view({-1, 28, 28});        // [B, 28 tokens, 28 features]
    x = embed(x) + pos;              // [B, 28, 32]
    x = encoder(x.transpose(0, 1));  // LibTorch's encoder layer is sequence-first: [28, B, 32]
    return head(x.mean(/*dim=*/0));  // the mean over the tokens: [B, 32]
  }

  torch::nn::Linear embed;
  torch::Tensor pos;
  torch::nn::TransformerEncoderLayer encoder;
  torch::nn::Linear head;
};
TORCH_MODULE(TinyTransformer);

int main(int argc, char** argv) try {
  const auto flags = ports::parse_flags(argc, argv, /*default_lr=*/1e-3,
                                        {{"--norm-mean", 0.2860}, {"--weight-decay", 0.01}});
  torch::set_num_threads(flags.threads);
  precprobe::seed_all(flags.seed, /*deterministic=*/true);

  TinyTransformer model;
  if (!flags.load_state.empty()) precprobe::load_state(*model, flags.load_state);
  if (!flags.save_state.empty()) precprobe::save_state(*model, flags.save_state);
  torch::manual_seed(flags.seed);

  auto dataset = torch::data::datasets::MNIST(flags.mnist_root())
                     .map(torch::data::transforms::Normalize<>(flags.value("--norm-mean"), 0.3530))
                     .map(torch::data::transforms::Stack<>());
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(dataset), torch::data::DataLoaderOptions().batch_size(64));
  torch::optim::AdamW optimizer(
      model->parameters(),
      torch::optim::AdamWOptions(flags.lr).weight_decay(flags.value("--weight-decay")));

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
    auto logits = model->forward(batch.data);
    auto loss = torch::nn::functional::cross_entropy(logits, batch.target);
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
  std::fprintf(stderr, "port_transformer: %s\n", e.what());
  return 1;
}
