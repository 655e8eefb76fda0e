// LibTorch port of the `lstm` pair (tests/ports/README.md): the image's 28 rows as a
// sequence through one LSTM layer, the last time step classified; Adam.
//
//   port_lstm --data ROOT [--steps 20] [--seed 1234] [--threads 1] [--dump DIR]
//             [--config FILE] [--load-state FILE] [--save-state FILE] [--lr 1e-3]
//             planted bugs: [--norm-mean X] [--no-normalize] [--beta2 X] [--adam-eps X]
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <tuple>

#include "port_flags.h"

struct RNNClassifierImpl : torch::nn::Module {
  RNNClassifierImpl()
      : lstm(register_module(
            "lstm",
            torch::nn::LSTM(torch::nn::LSTMOptions(28, 64).num_layers(1).batch_first(true)))),
        fc(register_module("fc", torch::nn::Linear(64, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = x.view({-1, 28, 28});                         // [B, 1, 28, 28] -> [B, 28 rows, 28 columns]
    auto out = std::get<0>(lstm->forward(x));         // [B, 28, 64]
    auto last = out.select(/*dim=*/1, /*index=*/-1);  // the last time step
    return fc(last);
  }

  torch::nn::LSTM lstm;
  torch::nn::Linear fc;
};
TORCH_MODULE(RNNClassifier);

template <typename Dataset>
void train(RNNClassifier& model, Dataset dataset, const ports::Flags& flags) {
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
    torch::Tensor logits = model->forward(batch.data);
    torch::Tensor loss = torch::nn::functional::cross_entropy(logits, batch.target);
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
}

int main(int argc, char** argv) try {
  const auto flags = ports::parse_flags(
      argc, argv, /*default_lr=*/1e-3,
      {{"--norm-mean", 0.2860}, {"--beta2", 0.999}, {"--adam-eps", 1e-8}}, {"--no-normalize"});
  torch::set_num_threads(flags.threads);
  precprobe::seed_all(flags.seed, /*deterministic=*/true);

  RNNClassifier model;
  if (!flags.load_state.empty()) precprobe::load_state(*model, flags.load_state);
  if (!flags.save_state.empty()) precprobe::save_state(*model, flags.save_state);
  torch::manual_seed(flags.seed);

  auto mnist = torch::data::datasets::MNIST(flags.mnist_root());
  if (flags.has("--no-normalize")) {
    train(model, mnist.map(torch::data::transforms::Stack<>()), flags);
  } else {
    train(model,
          mnist.map(torch::data::transforms::Normalize<>(flags.value("--norm-mean"), 0.3530))
              .map(torch::data::transforms::Stack<>()),
          flags);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "port_lstm: %s\n", e.what());
  return 1;
}
