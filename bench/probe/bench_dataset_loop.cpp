// The PrecisionDebugger on a program written the way LibTorch tutorials write a CIFAR
// ResNet: the whole training set in memory as one tensor (Float [N, 3, 32, 32]),
// every sample of a batch indexed from it (aten::select), augmented one by one (zero pad 4,
// random 32x32 crop, random horizontal flip, normalisation) and stacked; a small ResNet
// (three stages of two residual blocks, batch norm), cross-entropy, SGD with momentum; one
// intra-op thread. About 1 500 of the ~1 900 records of a step are the data pipeline's ops,
// and each select's input is the whole dataset.
//
// Prints, per variant, the median step time, the CPU time of the training thread, the
// minor page faults per step, the records per step and the bytes summarised per step,
// against the same loop without a debugger. Variants are interleaved in rounds.
//
//     bench_dataset_loop [--n 60000] [--steps 10] [--rounds 3] [--warmup 2] [--batch 128]
//                        [--only VARIANT] [--malloc tuned|default]
#include <time.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench_support.h"
#include "precprobe/debugger.h"

namespace {

using Clock = std::chrono::steady_clock;
using precprobe::bench::apply_tuned_malloc;
using precprobe::bench::cpu_ms;
using precprobe::bench::median;
using precprobe::bench::minor_faults;

struct ResBlockImpl : torch::nn::Module {
  ResBlockImpl(int64_t in, int64_t out, int64_t stride)
      : c1(register_module(
            "c1", torch::nn::Conv2d(
                      torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)))),
        b1(register_module("b1", torch::nn::BatchNorm2d(out))),
        c2(register_module(
            "c2", torch::nn::Conv2d(torch::nn::Conv2dOptions(out, out, 3).padding(1).bias(false)))),
        b2(register_module("b2", torch::nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      down = register_module(
          "down",
          torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)));
      down_bn = register_module("down_bn", torch::nn::BatchNorm2d(out));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(b1->forward(c1->forward(x)));
    y = b2->forward(c2->forward(y));
    auto skip = down ? down_bn->forward(down->forward(x)) : x;
    return torch::relu(y + skip);
  }
  torch::nn::Conv2d c1;
  torch::nn::BatchNorm2d b1;
  torch::nn::Conv2d c2;
  torch::nn::BatchNorm2d b2;
  torch::nn::Conv2d down{nullptr};
  torch::nn::BatchNorm2d down_bn{nullptr};
};
TORCH_MODULE(ResBlock);

struct ResNetImpl : torch::nn::Module {
  ResNetImpl()
      : stem(register_module(
            "stem", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 16, 3).padding(1).bias(false)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(16))),
        fc(register_module("fc", torch::nn::Linear(64, 10))) {
    const int64_t widths[] = {16, 32, 64};
    int64_t in = 16;
    for (int s = 0; s < 3; ++s) {
      for (int b = 0; b < 2; ++b) {
        blocks.push_back(register_module("layer" + std::to_string(s) + "_" + std::to_string(b),
                                         ResBlock(in, widths[s], s > 0 && b == 0 ? 2 : 1)));
        in = widths[s];
      }
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn->forward(stem->forward(x)));
    for (auto& b : blocks) x = b->forward(x);
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return fc->forward(x);
  }
  torch::nn::Conv2d stem;
  torch::nn::BatchNorm2d bn;
  torch::nn::Linear fc;
  std::vector<ResBlock> blocks;
};
TORCH_MODULE(ResNet);

struct Loop {
  Loop(int64_t n, int64_t batch_size)
      : images(torch::rand({n, 3, 32, 32})),
        labels(torch::randint(0, 10, {n})),
        mean(torch::tensor({0.49f, 0.48f, 0.45f}).view({3, 1, 1})),
        std_(torch::tensor({0.25f, 0.24f, 0.26f}).view({3, 1, 1})),
        opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)),
        batch(batch_size) {}

  // One sample as the tutorials' transforms make it: pad, random crop, random flip, normalise.
  torch::Tensor sample(int64_t i) {
    auto img = images[i];
    img = torch::constant_pad_nd(img, {4, 4, 4, 4});
    const auto at = torch::randint(0, 9, {2});
    const int64_t y = at[0].item<int64_t>(), x = at[1].item<int64_t>();
    img = img.slice(1, y, y + 32).slice(2, x, x + 32);
    if (torch::rand({1}).item<float>() < 0.5f) img = img.flip({2});
    return (img - mean) / std_;
  }

  void step() {
    std::vector<torch::Tensor> xs, ys;
    for (int64_t k = 0; k < batch; ++k) {
      const int64_t i = torch::randint(0, images.size(0), {1}).item<int64_t>();
      xs.push_back(sample(i));
      ys.push_back(labels[i]);
    }
    const auto x = torch::stack(xs), y = torch::stack(ys);
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
  }

  torch::Tensor images, labels, mean, std_;
  ResNet model;
  torch::optim::SGD opt;
  int64_t batch;
};

struct Variant {
  std::string name;
  bool debugger = false;
  bool reuse_across_steps = true;
  bool outputs_only = false;
  bool async = true;
};

struct Result {
  std::vector<double> wall, train, faults;
  uint64_t records = 0, bytes = 0, carried = 0, steps = 0;
};

void run(Loop& loop, const Variant& v, int steps, int warmup, const std::string& dump,
         bool tuned_malloc, Result& r) {
  std::unique_ptr<precprobe::PrecisionDebugger> dbg;
  if (v.debugger) {
    precprobe::DebuggerOptions o;
    o.dump_path = dump;
    o.overwrite = true;
    o.keep_dropout = true;
    o.reuse_across_steps = v.reuse_across_steps;
    o.async_stats = v.async;
    o.tune_malloc = tuned_malloc;
    if (v.outputs_only) o.dump_inputs = false;
    dbg = std::make_unique<precprobe::PrecisionDebugger>(o);
    dbg->start(loop.model.ptr());
  }
  for (int i = 0; i < warmup + steps; ++i) {
    const double c0 = cpu_ms(CLOCK_THREAD_CPUTIME_ID);
    const long f0 = minor_faults();
    const auto t0 = Clock::now();
    loop.step();
    if (dbg) dbg->step();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (i >= warmup) {
      r.wall.push_back(ms);
      r.train.push_back(cpu_ms(CLOCK_THREAD_CPUTIME_ID) - c0);
      r.faults.push_back(static_cast<double>(minor_faults() - f0));
    }
  }
  if (dbg) {
    dbg->stop();
    const auto c = dbg->counters();
    r.records += c.ops_recorded;
    r.bytes += c.bytes_summarised;
    r.carried += c.tensors_carried;
    r.steps += static_cast<uint64_t>(warmup + steps);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 60000, batch = 128;
  int steps = 10, rounds = 3, warmup = 2;
  std::string only;
  bool tuned = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--n") n = std::atoll(argv[i + 1]);
    if (k == "--batch") batch = std::atoll(argv[i + 1]);
    if (k == "--steps") steps = std::atoi(argv[i + 1]);
    if (k == "--rounds") rounds = std::atoi(argv[i + 1]);
    if (k == "--warmup") warmup = std::atoi(argv[i + 1]);
    if (k == "--only") only = argv[i + 1];
    if (k == "--malloc") tuned = std::string(argv[i + 1]) != "default";
  }
  // As bench_debugger --malloc: "tuned" gives every variant tune_malloc's settings.
  if (tuned) apply_tuned_malloc();
  std::printf("malloc: %s\n", tuned ? "tuned for every variant" : "glibc's defaults");
  at::set_num_threads(1);
  torch::manual_seed(0);
  const std::string dump = (std::filesystem::temp_directory_path() /
                            ("precprobe_bench_loop_" + std::to_string(::getpid())))
                               .string();
  const std::vector<Variant> variants{
      {"no debugger", false},
      {"L1 (default)", true, true},
      {"L1, reuse_across_steps false", true, false},
      {"L1, data_mode output", true, true, true},
      {"L1 sync", true, true, false, false},
  };
  Loop loop(n, batch);
  std::printf("dataset Float [%lld, 3, 32, 32] = %.0f MB in memory, batch %lld\n",
              static_cast<long long>(n), static_cast<double>(loop.images.nbytes()) / 1e6,
              static_cast<long long>(batch));
  std::vector<Result> results(variants.size());
  for (int round = 0; round < rounds; ++round)
    for (size_t v = 0; v < variants.size(); ++v)
      if (only.empty() || v == 0 || variants[v].name == only)
        run(loop, variants[v], steps, warmup, dump, tuned, results[v]);
  std::filesystem::remove_all(dump);
  const double base = median(results[0].wall), base_train = median(results[0].train);
  std::printf("(%d rounds x %d timed steps; medians)\n", rounds, steps);
  for (size_t v = 0; v < variants.size(); ++v) {
    const Result& r = results[v];
    if (r.wall.empty()) continue;
    std::printf("  %-30s wall %8.1f ms %6.3fx | train %8.1f ms %6.3fx | minor faults %7.0f/step",
                variants[v].name.c_str(), median(r.wall), median(r.wall) / base, median(r.train),
                median(r.train) / base_train, median(r.faults));
    if (r.steps > 0) {
      const double s = static_cast<double>(r.steps);
      std::printf(" | %5.0f records/step, %8.1f MB summarised/step, %4.1f carried/step",
                  static_cast<double>(r.records) / s, static_cast<double>(r.bytes) / s / 1e6,
                  static_cast<double>(r.carried) / s);
    }
    std::printf("\n");
  }
  return 0;
}
