// The differential oracle's program: one seeded run through the paths where a statistics
// engine could record a value the op did not see, or change what the program does: a
// small ResNet (one residual block) under bf16 autocast (CPU), GradScaler with two
// optimizers, gradient accumulation over two micro-batches, gradients set to None
// (AccumulateGrad takes them over) and zeroed, in-place activations, BatchNorm, dropout
// (forced to p = 0), clip_grad_norm_ on unscaled gradients, AdamW and SGD with momentum, a
// retain_graph double backward, and an evaluation pass under NoGradGuard inside the step.
//
// tests/oracle/run_oracle.cmake runs it under several configurations (async or sync
// statistics, L1 or L2, 1 or 2 intra-op threads, "record": "on_anomaly" with a planted
// overflow) and requires the dumps to be identical under `precprobe compare --exact`:
// statistics are a function of the values, so how they were computed must not show.
//
//   oracle_train --dump DIR [--async 0|1] [--level L1|L2] [--threads N] [--steps N]
//                [--record always|on_anomaly] [--bad-step K] [--single-optimizer]
//                [--no-scaler] [--fp32] [--keep-dropout] [--tensors] [--mkldnn 0|1]
//
// --mkldnn 0 turns oneDNN off (at::globalContext().setUserEnabledMkldnn(false)): LibTorch then
// takes its own slow convolution, as it does for bfloat16 on CPUs without AVX-512, whose
// output is an at::empty buffer resized and filled inside the kernel (issue 35).
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "precprobe/precprobe.h"

namespace {

struct Flags {
  std::string dump;
  bool async = true;
  std::string level = "L1";
  int threads = 1;
  int steps = 6;
  std::string record = "always";
  int bad_step = -1;  // conv2's output is scaled by 1e38 at this step: bfloat16 overflows
  bool single_optimizer = false;
  bool scaler = true;
  bool bf16 = true;
  bool keep_dropout = false;
  bool tensors = false;  // "task": "tensor": every recorded tensor saved as .npy.zst
  bool mkldnn = true;    // oneDNN's convolution (when the CPU and dtype allow it)
};

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "oracle_train: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--dump") {
      f.dump = value();
    } else if (a == "--async") {
      f.async = value() == "1";
    } else if (a == "--level") {
      f.level = value();
    } else if (a == "--threads") {
      f.threads = std::stoi(value());
    } else if (a == "--steps") {
      f.steps = std::stoi(value());
    } else if (a == "--record") {
      f.record = value();
    } else if (a == "--bad-step") {
      f.bad_step = std::stoi(value());
    } else if (a == "--single-optimizer") {
      f.single_optimizer = true;
    } else if (a == "--no-scaler") {
      f.scaler = false;
    } else if (a == "--tensors") {
      f.tensors = true;
    } else if (a == "--mkldnn") {
      f.mkldnn = value() != "0";
    } else if (a == "--keep-dropout") {
      f.keep_dropout = true;
    } else if (a == "--fp32") {
      f.bf16 = false;
    } else {
      std::fprintf(stderr, "oracle_train: unknown argument %s (see the file's header)\n",
                   a.c_str());
      std::exit(2);
    }
  }
  if (f.dump.empty()) {
    std::fprintf(stderr, "oracle_train: --dump DIR is required\n");
    std::exit(2);
  }
  return f;
}

struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1(register_module("conv1",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(8))),
        conv2(register_module(
            "conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 16, 3).stride(2).padding(1)))),
        res(register_module("res",
                            torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 16, 3).padding(1)))),
        drop(register_module("drop", torch::nn::Dropout(0.3))),
        head(register_module("head", torch::nn::Linear(16 * 7 * 7, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = bn(conv1(x));
    h = torch::relu_(h);  // in place on BatchNorm's output
    h = conv2(h);
    if (plant > 0) h = h * plant;  // the planted overflow (--bad-step)
    h = torch::nn::functional::gelu(h);
    h = h + torch::relu(res(h));  // a residual block: two gradients meet in h
    return head(drop(h.flatten(1)));
  }
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn;
  torch::nn::Conv2d conv2;
  torch::nn::Conv2d res;
  torch::nn::Dropout drop;
  torch::nn::Linear head;
  double plant = 0;
};
TORCH_MODULE(Net);

// CPU autocast on LibTorch 1.13 and 2.x (set_autocast_enabled(device, on) from 2.4).
struct CpuAutocast {
  explicit CpuAutocast(bool on) : on_(on) {
    if (!on_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
#else
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
#endif
    at::autocast::increment_nesting();
  }
  ~CpuAutocast() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCPU, false);
#else
    at::autocast::set_cpu_enabled(false);
#endif
  }
  CpuAutocast(const CpuAutocast&) = delete;
  CpuAutocast& operator=(const CpuAutocast&) = delete;

 private:
  bool on_;
};

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse(argc, argv);
  precprobe::seed_all(1234, /*deterministic=*/true);
  torch::set_num_threads(f.threads);
  if (!f.mkldnn) at::globalContext().setUserEnabledMkldnn(false);

  Net net;
  std::vector<torch::Tensor> features, head;
  for (const auto& p : net->named_parameters())
    (p.key().rfind("head.", 0) == 0 ? head : features).push_back(p.value());
  torch::optim::AdamW adamw(f.single_optimizer ? net->parameters() : features,
                            torch::optim::AdamWOptions(1e-3).weight_decay(1e-2));
  torch::optim::SGD sgd(head, torch::optim::SGDOptions(0.05).momentum(0.9));
  precprobe::GradScalerOptions scaling;
  scaling.enabled = f.scaler;
  precprobe::GradScaler scaler(scaling);

  precprobe::DebuggerOptions o;
  o.dump_path = f.dump;
  o.async_stats = f.async;
  o.level = f.level == "L2" ? precprobe::Level::kL2 : precprobe::Level::kL1;
  o.record =
      f.record == "on_anomaly" ? precprobe::RecordMode::kOnAnomaly : precprobe::RecordMode::kAlways;
  o.overwrite = true;
  o.keep_dropout = f.keep_dropout;  // "on_anomaly" keeps the program's dropout anyway
  if (f.tensors) {
    o.task = precprobe::Task::kTensor;
    o.list = {"name-regex(.)"};  // every op
  }
  precprobe::PrecisionDebugger dbg(o);
  if (f.record == "on_anomaly") {
    dbg.start(net, adamw);  // the snapshot covers one optimizer: run with --single-optimizer
  } else {
    dbg.start(net);
  }

  torch::Generator gen = at::detail::createCPUGenerator(99);
  auto batch = [&gen](int64_t n) {
    auto x = torch::randn({n, 1, 14, 14}, gen);
    auto y = torch::randint(0, 10, {n}, gen, torch::kLong);
    return std::make_pair(x, y);
  };
  // Every batch is drawn before the loop and the losses are printed after it: the ops of a
  // step are then exactly those of run_step's lambda, which a replay records too.
  struct Batch {
    torch::Tensor x0, y0, x1, y1, xe, ye;
  };
  std::vector<Batch> batches;
  for (int step = 0; step < f.steps; ++step) {
    Batch b;
    std::tie(b.x0, b.y0) = batch(16);
    std::tie(b.x1, b.y1) = batch(16);
    std::tie(b.xe, b.ye) = batch(8);
    batches.push_back(b);
  }
  const std::vector<torch::Tensor> params = net->parameters();
  std::vector<torch::Tensor> losses;
  for (int step = 0; step < f.steps; ++step) {
    const Batch& b = batches[static_cast<size_t>(step)];
    net->plant = step == f.bad_step ? 1e38 : 0.0;
    auto body = [&]() -> torch::Tensor {
      // Gradients set to None (AccumulateGrad takes the first one over); the head's zeroed
      // in place by its own optimizer when it has one. (A replay does not restore
      // gradients: the step overwrites them, and zero_grad's reads of them would differ.)
      for (auto& p : f.single_optimizer ? params : features) p.mutable_grad() = torch::Tensor();
      if (!f.single_optimizer) sgd.zero_grad();
      torch::Tensor total = torch::zeros({});
      for (int micro = 0; micro < 2; ++micro) {
        const auto& x = micro == 0 ? b.x0 : b.x1;
        const auto& y = micro == 0 ? b.y0 : b.y1;
        torch::Tensor out, loss;
        {
          CpuAutocast autocast(f.bf16);
          out = net->forward(x);
          loss = torch::nn::functional::cross_entropy(out.to(torch::kFloat), y) / 2;
        }
        if (micro == 0) {
          // Twice through one graph: the logits' penalty after the loss, retain_graph.
          scaler.scale(loss).backward({}, /*retain_graph=*/true);
          auto penalty = out.to(torch::kFloat).square().mean() * 1e-4;
          scaler.scale(penalty).backward();
        } else {
          scaler.scale(loss).backward();
        }
        total = total + loss.detach();
      }
      if (!f.single_optimizer) scaler.unscale_(sgd);
      scaler.unscale_(adamw);
      torch::nn::utils::clip_grad_norm_(params, 1.0);
      scaler.step(adamw);
      if (!f.single_optimizer) scaler.step(sgd);
      scaler.update();
      {  // an evaluation pass inside the step, as training loops do
        torch::NoGradGuard no_grad;
        net->eval();
        auto acc = net->forward(b.xe).argmax(1).eq(b.ye).to(torch::kFloat).mean();
        net->train();
        (void)acc;
      }
      return total;
    };
    losses.push_back(dbg.run_step(body));
  }
  dbg.stop();
  for (size_t i = 0; i < losses.size(); ++i)
    std::printf("step %zu loss %.6f\n", i, losses[i].item<double>());
  const auto c = dbg.counters();
  std::printf("oracle_train: %llu op records, %llu errors -> %s\n",
              static_cast<unsigned long long>(c.ops_recorded),
              static_cast<unsigned long long>(c.errors), f.dump.c_str());
  return c.errors == 0 ? 0 : 1;
}
