// L1 statistics on three training loops shaped like the programs users bring, against the
// same loop without a debugger:
//   resnet  a CIFAR-style ResNet (3 stages of basic blocks, 16/32/64 channels, batch
//           norm) on an in-memory dataset of 32x32 RGB images, with the usual augmentation
//           done in the loop (4-pixel pad and random crop, random horizontal flip), batch 64,
//           SGD with momentum and weight decay;
//   vae     the VAE of pytorch/examples (784-400-20, reparameterised, BCE + KL), batch 128,
//           Adam;
//   lstm    a word-level LSTM language model in the shape of pytorch/examples' word_language_model
//           (vocabulary 10 000, embedding and hidden 200, 2 layers, 35 tokens by 20, tied
//           decoder off), gradient clipping at 0.25, SGD.
// The data are drawn once from a seeded generator (the cost is the model's, not a loader's).
//
// Both arms run in one process, interleaved in rounds, with the same malloc settings
// (--malloc: "tuned" gives both tune_malloc's settings, "default" glibc's; the debugger's own
// tune_malloc is set alike) and the same threading (--threads: "free-core" = one intra-op
// thread and OpenBLAS pinned to one, a core left to the statistics worker, BENCHMARKS.md's
// "free core"; "default" = LibTorch's and OpenBLAS's thread counts as a program finds
// them, its "default threading"). Each line gives the median step's wall time, the training
// thread's CPU time and the CPU time of all threads, and their ratios to no debugger.
// With --floors 1 (the default) two more arms run: bench_floor.h's floor of L1 statistics,
// the kernel over each tensor version once a step on the op's thread ("floor inline") and
// handed to a worker ("floor worker"), with no debugger.
//
//     bench_programs [--only resnet,vae,lstm] [--steps 20] [--rounds 5] [--warmup 3]
//                    [--threads free-core|default] [--malloc tuned|default] [--floors 0|1]
//                    [--arms all|none|l1]
// --arms none (l1) runs only the loop without (with) the debugger, for a profiler.
#include <time.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_floor.h"
#include "bench_support.h"
#include "precprobe/debugger.h"

namespace {

namespace nn = torch::nn;
namespace F = torch::nn::functional;
using Clock = std::chrono::steady_clock;
using precprobe::bench::cpu_ms;
using precprobe::bench::median;

// ---- resnet ----------------------------------------------------------------------------

struct BasicBlockImpl : nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(register_module(
            "conv1",
            nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)))),
        bn1(register_module("bn1", nn::BatchNorm2d(out))),
        conv2(register_module("conv2",
                              nn::Conv2d(nn::Conv2dOptions(out, out, 3).padding(1).bias(false)))),
        bn2(register_module("bn2", nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      shortcut = register_module(
          "shortcut",
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                         nn::BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(bn1->forward(conv1->forward(x)));
    y = bn2->forward(conv2->forward(y));
    return torch::relu(y + (shortcut ? shortcut->forward(x) : x));
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Sequential shortcut{nullptr};
};
TORCH_MODULE(BasicBlock);

struct ResNetImpl : nn::Module {
  ResNetImpl()
      : stem(register_module("stem",
                             nn::Conv2d(nn::Conv2dOptions(3, 16, 3).padding(1).bias(false)))),
        bn(register_module("bn", nn::BatchNorm2d(16))),
        layer1(register_module("layer1",
                               nn::Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 16, 1)))),
        layer2(register_module("layer2",
                               nn::Sequential(BasicBlock(16, 32, 2), BasicBlock(32, 32, 1)))),
        layer3(register_module("layer3",
                               nn::Sequential(BasicBlock(32, 64, 2), BasicBlock(64, 64, 1)))),
        fc(register_module("fc", nn::Linear(64, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(bn->forward(stem->forward(x)));
    y = layer3->forward(layer2->forward(layer1->forward(y)));
    return fc->forward(torch::adaptive_avg_pool2d(y, {1, 1}).flatten(1));
  }
  nn::Conv2d stem;
  nn::BatchNorm2d bn;
  nn::Sequential layer1, layer2, layer3;
  nn::Linear fc;
};
TORCH_MODULE(ResNet);

struct ResNetLoop {
  ResNet model;
  torch::optim::SGD opt{model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(5e-4)};
  torch::Tensor images = torch::rand({512, 3, 32, 32});
  torch::Tensor labels = torch::randint(0, 10, {512});
  int64_t at = 0;
  static constexpr int64_t kBatch = 64;

  torch::Tensor step() {
    auto x = images.narrow(0, at, kBatch);
    auto y = labels.narrow(0, at, kBatch);
    at = (at + kBatch) % images.size(0);
    {  // augmentation: 4-pixel zero pad, a random 32x32 crop, a random horizontal flip
      auto padded = F::pad(x, F::PadFuncOptions({4, 4, 4, 4}));
      const int64_t dy = torch::randint(0, 9, {1}).item<int64_t>();
      const int64_t dx = torch::randint(0, 9, {1}).item<int64_t>();
      x = padded.narrow(2, dy, 32).narrow(3, dx, 32);
      auto flip = torch::rand({kBatch, 1, 1, 1}) < 0.5;
      x = torch::where(flip, x.flip({3}), x).contiguous();
    }
    opt.zero_grad();
    auto loss = F::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  }
};

// ---- vae -------------------------------------------------------------------------------

struct VaeImpl : nn::Module {
  VaeImpl()
      : fc1(register_module("fc1", nn::Linear(784, 400))),
        fc21(register_module("fc21", nn::Linear(400, 20))),
        fc22(register_module("fc22", nn::Linear(400, 20))),
        fc3(register_module("fc3", nn::Linear(20, 400))),
        fc4(register_module("fc4", nn::Linear(400, 784))) {}
  std::vector<torch::Tensor> forward(const torch::Tensor& x) {
    auto h = torch::relu(fc1->forward(x));
    auto mu = fc21->forward(h), logvar = fc22->forward(h);
    auto z = mu + torch::randn_like(mu) * torch::exp(0.5 * logvar);
    auto recon = torch::sigmoid(fc4->forward(torch::relu(fc3->forward(z))));
    return {recon, mu, logvar};
  }
  nn::Linear fc1, fc21, fc22, fc3, fc4;
};
TORCH_MODULE(Vae);

struct VaeLoop {
  Vae model;
  torch::optim::Adam opt{model->parameters(), torch::optim::AdamOptions(1e-3)};
  torch::Tensor images = torch::rand({1024, 784});
  int64_t at = 0;
  static constexpr int64_t kBatch = 128;

  torch::Tensor step() {
    auto x = images.narrow(0, at, kBatch);
    at = (at + kBatch) % images.size(0);
    opt.zero_grad();
    auto out = model->forward(x);
    auto bce = F::binary_cross_entropy(out[0], x,
                                       F::BinaryCrossEntropyFuncOptions().reduction(torch::kSum));
    auto kld = -0.5 * torch::sum(1 + out[2] - out[1].pow(2) - out[2].exp());
    auto loss = bce + kld;
    loss.backward();
    opt.step();
    return loss;
  }
};

// ---- lstm ------------------------------------------------------------------------------

struct LstmLmImpl : nn::Module {
  static constexpr int64_t kVocab = 10000, kDim = 200;
  LstmLmImpl()
      : embed(register_module("embed", nn::Embedding(kVocab, kDim))),
        lstm(register_module("lstm", nn::LSTM(nn::LSTMOptions(kDim, kDim).num_layers(2)))),
        decoder(register_module("decoder", nn::Linear(kDim, kVocab))) {}
  torch::Tensor forward(const torch::Tensor& tokens) {
    auto out = std::get<0>(lstm->forward(embed->forward(tokens)));
    return decoder->forward(out);
  }
  nn::Embedding embed;
  nn::LSTM lstm;
  nn::Linear decoder;
};
TORCH_MODULE(LstmLm);

struct LstmLoop {
  LstmLm model;
  torch::optim::SGD opt{model->parameters(), torch::optim::SGDOptions(20.0)};
  torch::Tensor corpus = torch::randint(0, LstmLmImpl::kVocab, {35 * 40 + 1, 20});
  int64_t at = 0;
  static constexpr int64_t kBptt = 35;

  torch::Tensor step() {
    auto x = corpus.narrow(0, at, kBptt), y = corpus.narrow(0, at + 1, kBptt);
    at = (at + kBptt) % (corpus.size(0) - kBptt - 1);
    opt.zero_grad();
    auto logits = model->forward(x);
    auto loss = F::cross_entropy(logits.view({-1, LstmLmImpl::kVocab}), y.reshape({-1}));
    loss.backward();
    nn::utils::clip_grad_norm_(model->parameters(), 0.25);
    opt.step();
    return loss;
  }
};

// ---- harness ---------------------------------------------------------------------------

struct Program {
  std::string name;
  std::shared_ptr<nn::Module> model;
  std::function<torch::Tensor()> step;
};

struct Samples {
  std::vector<double> wall, train, all;
};

// What runs beside the loop: nothing, the debugger, or bench_floor.h's floor of L1.
enum class Arm { kNone, kDebugger, kFloorInline, kFloorWorker };

void run(const Program& p, Arm arm, bool tuned_malloc, int steps, int warmup,
         const std::string& dump, Samples& s) {
  std::unique_ptr<precprobe::PrecisionDebugger> dbg;
  std::unique_ptr<precprobe::bench::FloorProbe> floor;
  if (arm == Arm::kFloorInline || arm == Arm::kFloorWorker)
    floor = std::make_unique<precprobe::bench::FloorProbe>(
        arm == Arm::kFloorInline ? precprobe::bench::FloorProbe::Mode::kInline
                                 : precprobe::bench::FloorProbe::Mode::kWorker);
  if (arm == Arm::kDebugger) {
    precprobe::DebuggerOptions o;  // the README's defaults: L1 statistics, async
    o.dump_path = dump;
    o.overwrite = true;
    o.keep_dropout = true;
    o.tune_malloc = tuned_malloc;
    dbg = std::make_unique<precprobe::PrecisionDebugger>(o);
    dbg->start(p.model);
  }
  for (int i = 0; i < warmup + steps; ++i) {
    const double c0 = cpu_ms(CLOCK_THREAD_CPUTIME_ID), p0 = cpu_ms(CLOCK_PROCESS_CPUTIME_ID);
    const auto t0 = Clock::now();
    p.step();
    if (dbg) dbg->step();
    if (floor) floor->end_step();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (i >= warmup) {
      s.wall.push_back(ms);
      s.train.push_back(cpu_ms(CLOCK_THREAD_CPUTIME_ID) - c0);
      s.all.push_back(cpu_ms(CLOCK_PROCESS_CPUTIME_ID) - p0);
    }
  }
  if (dbg) {
    dbg->stop();
    // The op watchpoints on a healthy loop (docs/watchpoints.md: 0 hits with the defaults).
    const auto hits = dbg->watch_hits();
    std::printf("  %s: %zu op watchpoint hits\n", p.name.c_str(), hits.size());
    for (const auto& h : hits)
      std::printf("    step %lld %s %s %s: %s\n", static_cast<long long>(h.step), h.module.c_str(),
                  h.watch.c_str(), h.record.c_str(), h.detail.c_str());
    const auto c = dbg->counters();
    if (c.errors != 0 || c.writer.records_dropped != 0)
      std::printf("  %s: %lu errors, %lu records dropped\n", p.name.c_str(),
                  static_cast<unsigned long>(c.errors),
                  static_cast<unsigned long>(c.writer.records_dropped));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string only = "resnet,vae,lstm", threading = "free-core", malloc_mode = "tuned";
  int steps = 20, rounds = 5, warmup = 3;
  bool floors = true;
  std::string arms = "all";  // "none" or "l1": that arm alone (for a profiler)
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--only") only = argv[i + 1];
    if (k == "--steps") steps = std::atoi(argv[i + 1]);
    if (k == "--rounds") rounds = std::atoi(argv[i + 1]);
    if (k == "--warmup") warmup = std::atoi(argv[i + 1]);
    if (k == "--threads") threading = argv[i + 1];
    if (k == "--malloc") malloc_mode = argv[i + 1];
    if (k == "--floors") floors = std::atoi(argv[i + 1]) != 0;
    if (k == "--arms") arms = argv[i + 1];
  }
  if (malloc_mode != "tuned" && malloc_mode != "default") {
    std::fprintf(stderr, "bench_programs: --malloc tuned|default\n");
    return 2;
  }
  const bool tuned = malloc_mode == "tuned";
  if (tuned) precprobe::bench::apply_tuned_malloc();
  if (!precprobe::bench::apply_threading(threading)) return 2;
  std::printf("malloc: %s in both arms\n", tuned ? "tune_malloc's settings" : "glibc's defaults");
  const std::string dump = (std::filesystem::temp_directory_path() /
                            ("precprobe_bench_programs_" + std::to_string(::getpid())))
                               .string();
  torch::manual_seed(0);
  std::vector<Program> programs;
  auto resnet = std::make_shared<ResNetLoop>();
  auto vae = std::make_shared<VaeLoop>();
  auto lstm = std::make_shared<LstmLoop>();
  programs.push_back({"resnet", resnet->model.ptr(), [resnet] { return resnet->step(); }});
  programs.push_back({"vae", vae->model.ptr(), [vae] { return vae->step(); }});
  programs.push_back({"lstm", lstm->model.ptr(), [lstm] { return lstm->step(); }});
  std::printf("(%d rounds x %d timed steps, both arms interleaved; medians)\n", rounds, steps);
  for (const Program& p : programs) {
    if (only.find(p.name) == std::string::npos) continue;
    Samples base, l1, inl, wrk;
    for (int r = 0; r < rounds; ++r) {
      if (arms != "l1") run(p, Arm::kNone, tuned, steps, warmup, dump, base);
      if (arms != "none") run(p, Arm::kDebugger, tuned, steps, warmup, dump, l1);
      if (floors && arms == "all") {
        run(p, Arm::kFloorInline, tuned, steps, warmup, dump, inl);
        run(p, Arm::kFloorWorker, tuned, steps, warmup, dump, wrk);
      }
    }
    const double bw = median(base.wall), bt = median(base.train), ba = median(base.all);
    std::printf("%-7s no debugger   wall %8.2f ms | train %8.2f ms | all %8.2f ms\n",
                p.name.c_str(), bw, bt, ba);
    auto line = [&](const char* arm, const Samples& x) {
      if (x.wall.empty()) return;
      std::printf("%-7s %-13s wall %8.2f ms %6.3fx | train %8.2f ms %6.3fx | all %8.2f ms %6.3fx\n",
                  p.name.c_str(), arm, median(x.wall), median(x.wall) / bw, median(x.train),
                  median(x.train) / bt, median(x.all), median(x.all) / ba);
    };
    line("L1 (async)", l1);
    line("floor inline", inl);
    line("floor worker", wrk);
    std::fflush(stdout);
  }
  std::filesystem::remove_all(dump);
  return 0;
}
