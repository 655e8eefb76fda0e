// No host synchronisation added by precprobe inside a CUDA training step:
//  - PyTorch's detector: c10::cuda::warning_state().set_sync_debug_mode(L_ERROR) makes every
//    synchronising call PyTorch makes (a blocking copy, .item(), nonzero, ...) throw; an L1
//    statistics step and an overflow_check step of a CUDA MLP must run under it;
//  - the CUDA runtime's own count, when the LD_PRELOAD shim libprecprobe_sync_counter.so is
//    loaded (scripts/gpu-check.sh runs this test so): the synchronising calls of a training
//    step are the same with and without a started debugger. Those of the debugger's step()
//    (end of step: it waits for the statistics once, cudaEventSynchronize) are printed.
// Built only with PRECPROBE_WITH_CUDA; needs a GPU (cuda_or_skip()). Written without a GPU.
#include <c10/cuda/CUDAFunctions.h>
#include <dlfcn.h>
#include <torch/torch.h>

// probe/debugger_fixture.h compares floats exactly (its float64 reference).
#pragma GCC diagnostic ignored "-Wfloat-equal"

#include <array>
#include <cstdio>
#include <functional>
#include <string>

#include "cuda_test_util.h"
#include "precprobe/debugger.h"
#include "probe/debugger_fixture.h"

using namespace precprobe;
using precprobe::test::cuda_or_skip;
using precprobe::test::options_in;
using precprobe::test::TempDir;

namespace {

class SyncDebugGuard {
 public:
  explicit SyncDebugGuard(c10::cuda::SyncDebugMode mode)
      : old_(c10::cuda::warning_state().get_sync_debug_mode()) {
    c10::cuda::warning_state().set_sync_debug_mode(mode);
  }
  ~SyncDebugGuard() { c10::cuda::warning_state().set_sync_debug_mode(old_); }
  SyncDebugGuard(const SyncDebugGuard&) = delete;
  SyncDebugGuard& operator=(const SyncDebugGuard&) = delete;

 private:
  c10::cuda::SyncDebugMode old_;
};

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(256, 512))),
        ln(register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({512})))),
        fc2(register_module("fc2", torch::nn::Linear(512, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::gelu(ln(fc1(x)))); }
  torch::nn::Linear fc1;
  torch::nn::LayerNorm ln;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Net);

struct Trainer {
  Trainer() : opt(net->parameters(), torch::optim::SGDOptions(1e-2)) {
    net->to(at::kCUDA);
    x = torch::randn({128, 256}).to(at::kCUDA);
    y = torch::randint(0, 10, {128}).to(at::kCUDA);
  }
  void step() {
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    opt.step();
  }
  Net net;
  torch::optim::SGD opt;
  torch::Tensor x, y;
};

// The shim's counters (all zero and `loaded` false when it is not preloaded).
struct SyncCounts {
  static constexpr int kMax = 16;
  std::array<unsigned long long, kMax> v{};
  int n = 0;
  bool loaded = false;
  static SyncCounts now() {
    SyncCounts c;
    using Read = int (*)(unsigned long long*, int);
    if (auto read = reinterpret_cast<Read>(::dlsym(RTLD_DEFAULT, "precprobe_sync_counter_read"))) {
      c.loaded = true;
      c.n = read(c.v.data(), kMax);
    }
    return c;
  }
  SyncCounts operator-(const SyncCounts& o) const {
    SyncCounts d = *this;
    for (int i = 0; i < n; ++i) d.v[i] -= o.v[i];
    return d;
  }
  // Calls that block the host (the counters before the polls).
  unsigned long long blocking() const {
    unsigned long long s = 0;
    for (int i = 0; i < n && i < 5; ++i) s += v[i];
    return s;
  }
  std::string str() const {
    using Name = const char* (*)(int);
    auto name = reinterpret_cast<Name>(::dlsym(RTLD_DEFAULT, "precprobe_sync_counter_name"));
    std::string s;
    for (int i = 0; i < n; ++i) {
      if (!s.empty()) s += ", ";
      s += std::string(name ? name(i) : "?") + " " + std::to_string(v[i]);
    }
    return s;
  }
};

void run_under_sync_error(Task task) {
  TempDir dir("cuda_sync");
  Trainer tr;
  auto o = options_in(dir);
  o.level = Level::kL1;
  o.task = task;
  PrecisionDebugger dbg(o);
  dbg.start(tr.net);
  for (int i = 0; i < 3; ++i) {  // warm up: allocator, cuBLAS handles, first launches
    tr.step();
    dbg.step();
  }
  for (int i = 0; i < 3; ++i) {
    {
      SyncDebugGuard guard(c10::cuda::SyncDebugMode::L_ERROR);
      CHECK_NOTHROW(tr.step());
    }
    dbg.step();
  }
  dbg.stop();
  CHECK(dbg.counters().errors == 0);
  if (task == Task::kStatistics) CHECK(dbg.counters().ops_recorded > 0);
}

}  // namespace

TEST_CASE("CUDA: the sync detector is armed (a control: .item() throws under L_ERROR)",
          "[cuda][sync]") {
  if (!cuda_or_skip()) return;
  auto x = torch::ones({4}, at::TensorOptions(at::kCUDA));
  SyncDebugGuard guard(c10::cuda::SyncDebugMode::L_ERROR);
  CHECK_THROWS(x.sum().item<float>());
}

TEST_CASE("CUDA: an L1 statistics step makes no synchronising call PyTorch can see",
          "[cuda][sync]") {
  if (!cuda_or_skip()) return;
  run_under_sync_error(Task::kStatistics);
}

TEST_CASE("CUDA: an overflow_check step makes no synchronising call PyTorch can see",
          "[cuda][sync]") {
  if (!cuda_or_skip()) return;
  run_under_sync_error(Task::kOverflowCheck);
}

TEST_CASE("CUDA runtime: a step's synchronising calls are the same with the debugger",
          "[cuda][sync]") {
  if (!cuda_or_skip()) return;
  if (!SyncCounts::now().loaded) {
    WARN("libprecprobe_sync_counter.so is not preloaded: runtime calls not counted");
    return;
  }
  const int steps = 10;
  Trainer tr;
  for (int i = 0; i < 3; ++i) tr.step();
  torch::cuda::synchronize();
  const SyncCounts a0 = SyncCounts::now();
  for (int i = 0; i < steps; ++i) tr.step();
  const SyncCounts plain = SyncCounts::now() - a0;
  torch::cuda::synchronize();

  TempDir dir("cuda_sync_count");
  auto o = options_in(dir);
  o.level = Level::kL1;
  PrecisionDebugger dbg(o);
  dbg.start(tr.net);
  for (int i = 0; i < 3; ++i) {
    tr.step();
    dbg.step();
  }
  SyncCounts in_steps, in_dbg_step;
  for (int i = 0; i < steps; ++i) {
    const SyncCounts s0 = SyncCounts::now();
    tr.step();
    const SyncCounts s1 = SyncCounts::now();
    dbg.step();
    const SyncCounts s2 = SyncCounts::now();
    const SyncCounts d1 = s1 - s0, d2 = s2 - s1;
    in_steps.n = in_dbg_step.n = d1.n;
    for (int k = 0; k < d1.n; ++k) {
      in_steps.v[k] += d1.v[k];
      in_dbg_step.v[k] += d2.v[k];
    }
  }
  dbg.stop();
  std::printf("sync counts over %d steps without the debugger: %s\n", steps, plain.str().c_str());
  std::printf("sync counts over %d steps with L1, inside the steps: %s\n", steps,
              in_steps.str().c_str());
  std::printf("sync counts over %d steps with L1, in dbg.step(): %s\n", steps,
              in_dbg_step.str().c_str());
  CHECK(in_steps.blocking() == plain.blocking());
  // docs/cuda.md: the end of step waits for the statistics "once per drain"; wait_all() calls
  // cudaEventSynchronize per batch still in flight, so more is reported, not failed.
  if (in_dbg_step.blocking() > static_cast<unsigned long long>(steps))
    WARN("dbg.step() made " << in_dbg_step.blocking() << " blocking calls in " << steps
                            << " steps (more than one per step)");
}
