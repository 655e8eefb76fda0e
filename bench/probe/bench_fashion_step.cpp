// The training step of examples/train_fashion_mnist.cpp (its CNN, Adam, clip_grad_norm_ at 5,
// observe_batch, log_scalar, step) with and without the debugger at its defaults (statistics,
// L1): the C++ side of bench/python/bench_python_l1.py, which runs the Python twin's step the
// same way (docs/python.md, "What it costs"). Batches of 64 from 4096 standard-normal images
// drawn with LibTorch's generator after manual_seed(0) (the Python side draws the same ones).
//
// Prints per variant the median step time and the median CPU time of the process per step
// (every thread: the statistics worker included), variants interleaved in rounds, every
// variant with tune_malloc's settings.
//
//     bench_fashion_step [--steps 50] [--rounds 5] [--warmup 5] [--dump DIR]
#include <time.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_support.h"
#include "precprobe/debugger.h"

namespace {

using Clock = std::chrono::steady_clock;
using precprobe::bench::cpu_ms;
using precprobe::bench::median;

// examples/train_fashion_mnist.cpp's NetImpl, without its perturbation.
struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1(register_module("conv1",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(16))),
        conv2(register_module("conv2",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(32))),
        drop(register_module("drop", torch::nn::Dropout(0.25))),
        fc(register_module("fc", torch::nn::Linear(32 * 7 * 7, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(bn1(conv1(x))), 2);
    x = torch::max_pool2d(torch::relu(bn2(conv2(x))), 2);
    return fc(drop(x.flatten(1)));
  }

  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Dropout drop;
  torch::nn::Linear fc;
};
TORCH_MODULE(Net);

struct Sample {
  double wall_ms, cpu_ms;
};

int64_t arg(int argc, char** argv, const char* name, int64_t def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::stoll(argv[i + 1]);
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t steps = arg(argc, argv, "--steps", 50);
  const int64_t rounds = arg(argc, argv, "--rounds", 5);
  const int64_t warmup = arg(argc, argv, "--warmup", 5);
  std::string dump = "/tmp/bench_fashion_step_dump";
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--dump") == 0) dump = argv[i + 1];
  at::set_num_threads(1);
  precprobe::bench::apply_tuned_malloc();
  torch::manual_seed(0);
  const int64_t n = 4096;
  auto images = torch::randn({n, 1, 28, 28});
  auto labels = torch::randint(0, 10, {n}, torch::kInt64);
  Net net;
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  int64_t cursor = 0;

  auto run = [&](precprobe::PrecisionDebugger* dbg, int64_t count, std::vector<Sample>* out) {
    for (int64_t s = 0; s < count; ++s) {
      const double c0 = cpu_ms(CLOCK_PROCESS_CPUTIME_ID);
      const auto t0 = Clock::now();
      auto idx = torch::arange(cursor, cursor + 64, torch::kInt64);
      cursor = (cursor + 64) % n;
      auto x = images.index_select(0, idx);
      auto y = labels.index_select(0, idx);
      if (dbg) dbg->observe_batch(x, y, 0);
      auto loss = torch::cross_entropy_loss(net->forward(x).to(torch::kFloat32), y);
      opt.zero_grad();
      loss.backward();
      torch::nn::utils::clip_grad_norm_(net->parameters(), 5.0);
      opt.step();
      const double l = loss.item<double>();
      if (dbg) {
        dbg->log_scalar("loss", l);
        dbg->step();
      }
      if (out) {
        out->push_back({std::chrono::duration<double, std::milli>(Clock::now() - t0).count(),
                        cpu_ms(CLOCK_PROCESS_CPUTIME_ID) - c0});
      }
    }
  };

  const char* names[] = {"none", "L1"};
  std::vector<Sample> samples[2];
  for (int64_t r = 0; r < rounds; ++r) {
    for (int v = 0; v < 2; ++v) {
      std::unique_ptr<precprobe::PrecisionDebugger> dbg;
      if (v == 1) {
        precprobe::DebuggerOptions o;
        o.dump_path = dump;
        o.overwrite = true;
        dbg = std::make_unique<precprobe::PrecisionDebugger>(o);
        dbg->start(net);
      }
      run(dbg.get(), warmup, nullptr);
      run(dbg.get(), steps, &samples[v]);
      if (dbg) dbg->stop();
    }
  }
  double wall[2], cpu[2];
  for (int v = 0; v < 2; ++v) {
    std::vector<double> w, c;
    for (const Sample& s : samples[v]) {
      w.push_back(s.wall_ms);
      c.push_back(s.cpu_ms);
    }
    wall[v] = median(w);
    cpu[v] = median(c);
    std::printf("cpp %-5s %7.2f ms/step wall  %7.2f ms/step cpu  (%zu steps)\n", names[v], wall[v],
                cpu[v], samples[v].size());
  }
  std::printf("cpp L1/none: wall %.3f  cpu %.3f\n", wall[1] / wall[0], cpu[1] / cpu[0]);
  return 0;
}
