// LibTorch port of the `cnn` pair (tests/ports/README.md): a small CNN on Fashion-MNIST,
// batches of 64 in the dataset's order, SGD with momentum, PrecisionDebugger on with --dump.
//
//   port_cnn --data ROOT [--steps 20] [--seed 1234] [--threads 1] [--dump DIR]
//            [--config FILE] [--load-state FILE] [--save-state FILE] [--lr 0.01]
//            planted bugs: [--norm-mean X] [--no-normalize] [--momentum X] [--bn-eps X]
//                          [--dropout P] [--no-bias] [--reflect-padding]
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <cstdio>
#include <memory>

#include "port_flags.h"

// The planted layer bugs: fc1 built without its bias, conv2 padding by reflection (the
// original pads with zeros). Neither changes a shape.
struct LayerBugs {
  double bn1_eps = 1e-5;
  double dropout_p = 0.25;
  bool no_bias = false;
  bool reflect_padding = false;
};

struct NetImpl : torch::nn::Module {
  explicit NetImpl(const LayerBugs& bugs)
      : conv1(register_module("conv1",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)))),
        bn1(register_module(
            "bn1", torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(16).eps(bugs.bn1_eps)))),
        conv2(register_module(
            "conv2",
            torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1).padding_mode(
                bugs.reflect_padding ? torch::nn::detail::conv_padding_mode_t(torch::kReflect)
                                     : torch::nn::detail::conv_padding_mode_t(torch::kZeros))))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(32))),
        dropout(register_module("dropout", torch::nn::Dropout(bugs.dropout_p))),
        fc1(register_module(
            "fc1",
            torch::nn::Linear(torch::nn::LinearOptions(32 * 7 * 7, 128).bias(!bugs.no_bias)))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(bn1(conv1(x))), 2);
    x = torch::max_pool2d(torch::relu(bn2(conv2(x))), 2);
    x = dropout(x);
    x = x.view({x.size(0), -1});
    x = torch::relu(fc1(x));
    return fc2(x);
  }

  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Dropout dropout;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

template <typename Dataset>
void train(Net& net, Dataset dataset, const ports::Flags& flags) {
  auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(dataset), torch::data::DataLoaderOptions().batch_size(64));
  torch::optim::SGD optimizer(
      net->parameters(), torch::optim::SGDOptions(flags.lr).momentum(flags.value("--momentum")));

  std::unique_ptr<precprobe::PrecisionDebugger> dbg;
  if (flags.debugger()) {
    precprobe::DebuggerOptions opts;
    if (!flags.config.empty()) opts = precprobe::DebuggerOptions::from_json_file(flags.config);
    if (!flags.dump.empty()) {
      opts.dump_path = flags.dump;
      opts.overwrite = true;
    }
    dbg = std::make_unique<precprobe::PrecisionDebugger>(opts);
    dbg->start(net);
  }

  net->train();
  int64_t step = 0;
  for (auto& batch : *loader) {
    if (step >= flags.steps) break;
    torch::Tensor output = net->forward(batch.data);
    torch::Tensor loss = torch::nll_loss(torch::log_softmax(output, /*dim=*/1), batch.target);
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
      argc, argv, /*default_lr=*/0.01,
      {{"--norm-mean", 0.2860}, {"--momentum", 0.5}, {"--bn-eps", 1e-5}, {"--dropout", 0.25}},
      {"--no-normalize", "--no-bias", "--reflect-padding"});
  torch::set_num_threads(flags.threads);
  precprobe::seed_all(flags.seed, /*deterministic=*/true);

  LayerBugs bugs;
  bugs.bn1_eps = flags.value("--bn-eps");
  bugs.dropout_p = flags.value("--dropout");
  bugs.no_bias = flags.has("--no-bias");
  bugs.reflect_padding = flags.has("--reflect-padding");
  Net net(bugs);
  if (!flags.load_state.empty()) {
    // Strict unless a planted bug leaves out a tensor the original has.
    const auto left = precprobe::load_state(net, flags.load_state, /*strict=*/!bugs.no_bias);
    for (const auto& name : left.unexpected_keys)
      std::fprintf(stderr, "port_cnn: %s is in the state file but not in the port\n", name.c_str());
  }
  if (!flags.save_state.empty()) precprobe::save_state(*net, flags.save_state);
  torch::manual_seed(flags.seed);

  auto mnist = torch::data::datasets::MNIST(flags.mnist_root());
  if (flags.has("--no-normalize")) {
    train(net, mnist.map(torch::data::transforms::Stack<>()), flags);
  } else {
    train(net,
          mnist.map(torch::data::transforms::Normalize<>(flags.value("--norm-mean"), 0.3530))
              .map(torch::data::transforms::Stack<>()),
          flags);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "port_cnn: %s\n", e.what());
  return 1;
}
