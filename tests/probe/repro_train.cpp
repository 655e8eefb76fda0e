// Helper for test_seed and test_dropout: a small training run with dropout, in its own
// process, printing what a reproducibility test compares.
//
//   precprobe_repro_train [--seed N | --no-seed] [--deterministic] [--guard] [--steps N]
//   precprobe_repro_train --conflict   (registers a fallback on the guard's key first)
//
// Prints "initial_seed <n>" (LibTorch's CPU generator before anything is seeded), then
// "loss <step> <float bits as 8 hex digits>" per step, then "param <name> <hex of every
// float's bits>" per parameter after training, and "module_hash <hex>" of the model.
#include <torch/library.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "precprobe/dropout.h"
#include "precprobe/error.h"
#include "precprobe/hash.h"
#include "precprobe/seed.h"

namespace {

namespace F = torch::nn::functional;

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(16, 32))),
        drop(register_module("drop", torch::nn::Dropout(0.5))),
        fc2(register_module("fc2", torch::nn::Linear(32, 4))) {}
  torch::Tensor forward(torch::Tensor x) {
    auto h = drop(torch::relu(fc1(x)));
    // A functional dropout, as in code that never heard of precprobe.
    h = F::dropout(h, F::DropoutFuncOptions().p(0.25).training(is_training()));
    return fc2(h);
  }
  torch::nn::Linear fc1;
  torch::nn::Dropout drop;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Net);

uint32_t bits(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

void print_params(Net& net) {
  for (const auto& p : net->named_parameters()) {
    auto t = p.value().detach().contiguous();
    std::string hex;
    const float* d = t.data_ptr<float>();
    char buf[9];
    for (int64_t i = 0; i < t.numel(); ++i) {
      std::snprintf(buf, sizeof buf, "%08x", bits(d[i]));
      hex += buf;
    }
    std::printf("param %s %s\n", p.key().c_str(), hex.c_str());
  }
}

void train(int steps) {
  Net net;
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-2));
  // 64 samples; each step a batch of 16 chosen with precprobe::rng(), as user code would.
  auto data = precprobe::randn_on_host({64, 16}, torch::kFloat);
  auto target = torch::randint(0, 4, {64}, torch::kLong);
  std::vector<int64_t> order(64);
  std::iota(order.begin(), order.end(), 0);
  for (int step = 0; step < steps; ++step) {
    std::shuffle(order.begin(), order.end(), precprobe::rng());
    auto idx = torch::tensor(std::vector<int64_t>(order.begin(), order.begin() + 16));
    auto loss =
        F::cross_entropy(net->forward(data.index_select(0, idx)), target.index_select(0, idx));
    opt.zero_grad();
    loss.backward();
    opt.step();
    std::printf("loss %d %08x\n", step, bits(loss.item<float>()));
  }
  print_params(net);
  std::printf("module_hash %016llx\n",
              static_cast<unsigned long long>(precprobe::module_hash(*net)));
}

void noop_fallback(const c10::OperatorHandle&, torch::jit::Stack*) {}

int conflict() {
  torch::Library other(torch::Library::IMPL, "_", c10::DispatchKey::TESTING_ONLY_GenericMode,
                       __FILE__, __LINE__);
  other.fallback(torch::CppFunction::makeFromBoxedFunction<&noop_fallback>());
  for (int attempt = 0; attempt < 2; ++attempt) {  // the failure must be sticky
    try {
      precprobe::DropoutGuard guard;
      std::printf("no error\n");
      return 1;
    } catch (const precprobe::Error& e) {
      std::printf("error %s\n", e.what());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool seed_given = true, deterministic = false, guard = false;
  uint64_t seed = 1234;
  int steps = 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--no-seed") {
      seed_given = false;
    } else if (a == "--deterministic") {
      deterministic = true;
    } else if (a == "--guard") {
      guard = true;
    } else if (a == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (a == "--conflict") {
      return conflict();
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  std::printf("initial_seed %llu\n",
              static_cast<unsigned long long>(at::detail::getDefaultCPUGenerator().current_seed()));
  if (seed_given) {
    auto report = precprobe::seed_all(seed, deterministic);
    std::fprintf(stderr, "%s\n", report.summary().c_str());
  }
  std::unique_ptr<precprobe::DropoutGuard> no_dropout;
  if (guard) {
    no_dropout = std::make_unique<precprobe::DropoutGuard>();
  }
  train(steps);
  return 0;
}
