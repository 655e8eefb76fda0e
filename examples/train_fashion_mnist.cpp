// Trains a small CNN on real Fashion-MNIST with precprobe's debugger on: every ATen op of
// every step, forward and backward, is summarised into ./precprobe_dump (read it back with
// `precprobe summary precprobe_dump`).
//
//   train_fashion_mnist [--epochs 1] [--steps N] [--batch-size 64] [--lr 1e-3]
//                       [--dump DIR] [--config config.json] [--seed 1234] [--threads N]
//                       [--log-every 100] [--no-debugger] [--bf16] [--overwrite]
//                       [--no-normalise] [--sorted-labels] [--eval-in-train-mode]
//                       [--perturb-step S [--perturb R]]
//                       [--no-observe-batch] [--record-on-anomaly] [--no-mkldnn]
//                       [--load-state FILE] [--save-state FILE]
//                       [--act-scale X] [--bn-eps X] [--dropout P] [--no-fc-bias]
//                       [--device cpu|cuda]
//
// --load-state starts from the weights of a state file (precprobe::load_state; e.g. written by
// the Python twin, examples/python/train_fashion_mnist.py, with precprobe.save_state);
// --save-state writes the initial weights (after --load-state) before training. Both runs then
// start from the same point (docs/python.md).
//
// --no-normalise, --sorted-labels and --eval-in-train-mode plant the bugs `precprobe check`
// finds (docs/checklist.md): raw 0..255 pixels (pixels in [0, 1] are not a problem), batches
// in label order instead of shuffled, evaluation without model->eval(). --no-observe-batch
// leaves out the
// dbg.observe_batch() calls: a program with only the README's three lines, judged from the
// op records alone.
//
// --record-on-anomaly runs each step through dbg.run_step() with "record": "on_anomaly":
// nothing is recorded while the steps are healthy; a step whose loss or gradients turn
// non-finite is replayed from its snapshot with every op recorded (docs/debugger.md). Try
// it with a planted overflow: --record-on-anomaly --perturb-step 50 --perturb 1e39.
//
// --act-scale, --bn-eps, --dropout and --no-fc-bias change the model the way a port can go
// wrong: conv1's output multiplied by a constant at every step (1.01 where the original has
// 1.0), BatchNorm's eps (1e-3 where PyTorch's default is 1e-5), dropout's p (default 0.25; it
// runs only with "keep_dropout": true), fc without its bias. `precprobe compare` against the
// Python twin names each (docs/python.md, tests/python/test_example_twin.py).
//
// --device cuda trains on the GPU: each batch is drawn on the CPU as before and copied there
// (the Python twin takes the same flag; scripts/gpu-check.sh compares the two on CUDA).
// --no-mkldnn runs the convolutions through ATen's own im2col + GEMM instead of oneDNN: the
// same arithmetic summed in another order, a port in miniature (`precprobe compare` calls
// the difference rounding noise).
#include <ATen/autocast_mode.h>
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

#include "fashion_mnist.h"

namespace {

struct Flags {
  int epochs = 1;
  int64_t steps = 0;  // 0: run the whole epochs
  int64_t batch_size = 64;
  double lr = 1e-3;
  std::string dump = "precprobe_dump";
  std::string config;
  uint64_t seed = 1234;
  int threads = 0;  // 0: leave LibTorch's default
  int64_t log_every = 100;
  bool debugger = true;
  bool bf16 = false;
  bool overwrite = false;
  bool normalise = true;
  bool sorted_labels = false;
  bool eval_in_train_mode = false;
  int64_t perturb_step = -1;  // >= 0: conv1's output is multiplied by a constant every step
  double perturb = 0;         // ... which is 1 + perturb at perturb_step, 1 elsewhere
  bool observe_batch = true;
  bool record_on_anomaly = false;
  bool mkldnn = true;
  std::string load_state;
  std::string save_state;
  std::optional<double> act_scale;  // conv1's output times this at every step
  double bn_eps = 1e-5;
  double dropout = 0.25;
  bool fc_bias = true;
  std::string device = "cpu";  // "cuda", "cuda:1": the model and each batch there
};

[[noreturn]] void usage(const char* argv0, int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "usage: %s [--epochs N] [--steps N] [--batch-size N] [--lr X] [--dump DIR]\n"
               "          [--config FILE] [--seed N] [--threads N] [--log-every N]\n"
               "          [--no-debugger] [--bf16] [--overwrite]\n"
               "          [--no-normalise] [--sorted-labels] [--eval-in-train-mode]\n"
               "          [--perturb-step S [--perturb R]]\n"
               "          [--no-observe-batch] [--record-on-anomaly] [--no-mkldnn]\n"
               "          [--load-state FILE] [--save-state FILE]\n"
               "          [--act-scale X] [--bn-eps X] [--dropout P] [--no-fc-bias]\n"
               "          [--device cpu|cuda]\n"
               "  --perturb-step S: multiply conv1's output by a constant every step (1, and\n"
               "  1 + R at step S): two runs with different R differ in that one op\n"
               "  --record-on-anomaly: record nothing while steps are healthy; replay a step\n"
               "  whose loss or gradients turn NaN/Inf with every op recorded\n"
               "  --no-mkldnn: convolutions through ATen's im2col + GEMM, not oneDNN\n"
               "  --load-state FILE: start from these weights (precprobe::load_state)\n"
               "  --save-state FILE: write the initial weights before training\n"
               "Trains a small CNN on Fashion-MNIST with precprobe's PrecisionDebugger on.\n",
               argv0);
  std::exit(code);
}

Flags parse_flags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        usage(argv[0], 2);
      }
      return argv[++i];
    };
    if (a == "--epochs")
      f.epochs = std::stoi(value());
    else if (a == "--steps")
      f.steps = std::stoll(value());
    else if (a == "--batch-size")
      f.batch_size = std::stoll(value());
    else if (a == "--lr")
      f.lr = std::stod(value());
    else if (a == "--dump")
      f.dump = value();
    else if (a == "--config")
      f.config = value();
    else if (a == "--seed")
      f.seed = std::stoull(value());
    else if (a == "--threads")
      f.threads = std::stoi(value());
    else if (a == "--log-every")
      f.log_every = std::stoll(value());
    else if (a == "--no-debugger")
      f.debugger = false;
    else if (a == "--bf16")
      f.bf16 = true;
    else if (a == "--overwrite")
      f.overwrite = true;
    else if (a == "--no-normalise")
      f.normalise = false;
    else if (a == "--sorted-labels")
      f.sorted_labels = true;
    else if (a == "--eval-in-train-mode")
      f.eval_in_train_mode = true;
    else if (a == "--perturb-step")
      f.perturb_step = std::stoll(value());
    else if (a == "--perturb")
      f.perturb = std::stod(value());
    else if (a == "--no-observe-batch")
      f.observe_batch = false;
    else if (a == "--record-on-anomaly")
      f.record_on_anomaly = true;
    else if (a == "--no-mkldnn")
      f.mkldnn = false;
    else if (a == "--load-state")
      f.load_state = value();
    else if (a == "--save-state")
      f.save_state = value();
    else if (a == "--act-scale")
      f.act_scale = std::stod(value());
    else if (a == "--bn-eps")
      f.bn_eps = std::stod(value());
    else if (a == "--dropout")
      f.dropout = std::stod(value());
    else if (a == "--no-fc-bias")
      f.fc_bias = false;
    else if (a == "--device")
      f.device = value();
    else if (a == "--help" || a == "-h")
      usage(argv[0], 0);
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      usage(argv[0], 2);
    }
  }
  return f;
}

// conv(1→16) → BN → ReLU → pool, conv(16→32) → BN → ReLU → pool, dropout, linear(1568→10).
struct NetImpl : torch::nn::Module {
  explicit NetImpl(double bn_eps = 1e-5, double dropout = 0.25, bool fc_bias = true)
      : conv1(register_module("conv1",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)))),
        bn1(register_module("bn1",
                            torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(16).eps(bn_eps)))),
        conv2(register_module("conv2",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)))),
        bn2(register_module("bn2",
                            torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(32).eps(bn_eps)))),
        drop(register_module("drop", torch::nn::Dropout(dropout))),
        fc(register_module(
            "fc", torch::nn::Linear(torch::nn::LinearOptions(32 * 7 * 7, 10).bias(fc_bias)))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = conv1(x);
    if (act_scale) x = x * *act_scale;
    x = torch::max_pool2d(torch::relu(bn1(x)), 2);
    x = torch::max_pool2d(torch::relu(bn2(conv2(x))), 2);
    return fc(drop(x.flatten(1)));
  }

  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Dropout drop;
  torch::nn::Linear fc;
  std::optional<double> act_scale;  // --perturb-step
};
TORCH_MODULE(Net);

// CPU autocast to bfloat16. LibTorch 2.4 made the autocast API device-generic (PyTorch PR
// 124359: set_autocast_enabled(device, on)); the per-device set_cpu_enabled() it deprecated is
// the only API before 2.4.
void set_cpu_autocast_bf16(bool on) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, on);
#else
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  at::autocast::set_cpu_enabled(on);
#endif
}

double evaluate(Net& net, const fashion_mnist::Split& test, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  net->eval();
  int64_t correct = 0;
  const int64_t n = test.images.size(0);
  for (int64_t i = 0; i < n; i += 1000) {
    auto x = test.images.slice(0, i, std::min(n, i + 1000)).to(device);
    auto y = test.labels.slice(0, i, std::min(n, i + 1000)).to(device);
    correct += net->forward(x).argmax(1).eq(y).sum().item<int64_t>();
  }
  net->train();
  return static_cast<double>(correct) / static_cast<double>(n);
}

// A short evaluation while the debugger records, its batches registered for the checklist.
void checked_evaluation(Net& net, const fashion_mnist::Split& test,
                        precprobe::PrecisionDebugger& dbg, bool eval_mode, bool observe,
                        const torch::Device& device) {
  torch::NoGradGuard no_grad;
  if (eval_mode) net->eval();
  for (int64_t i = 0; i < 1000; i += 500) {
    auto x = test.images.slice(0, i, i + 500);
    auto y = test.labels.slice(0, i, i + 500);
    if (!device.is_cpu()) {  // on the CPU no copy, and no aten::to in the records
      x = x.to(device);
      y = y.to(device);
    }
    if (observe) dbg.observe_batch(x, y);
    net->forward(x);
  }
  net->train();
}

}  // namespace

int main(int argc, char** argv) try {
  const Flags flags = parse_flags(argc, argv);
  if (flags.threads > 0) at::set_num_threads(flags.threads);
  if (!flags.mkldnn) at::globalContext().setUserEnabledMkldnn(false);

  auto seed_report = precprobe::seed_all(flags.seed, /*deterministic=*/true);
  std::printf("%s\n", seed_report.summary().c_str());

  auto train = fashion_mnist::load("train", flags.normalise);
  auto test = fashion_mnist::load("t10k", flags.normalise);
  if (!flags.normalise) {  // the planted bug: the file's bytes as they are, 0..255
    train.images.mul_(255.0);
    test.images.mul_(255.0);
  }
  std::printf("fashion-mnist: %lld train, %lld test images\n",
              static_cast<long long>(train.images.size(0)),
              static_cast<long long>(test.images.size(0)));

  Net net(flags.bn_eps, flags.dropout, flags.fc_bias);
  net->act_scale = flags.act_scale;
  if (!flags.load_state.empty()) precprobe::load_state(*net, flags.load_state);
  if (!flags.save_state.empty()) precprobe::save_state(*net, flags.save_state);
  torch::Device device(torch::kCPU);
  try {
    device = torch::Device(flags.device);
  } catch (const c10::Error& e) {
    throw std::runtime_error("--device " + flags.device + ": " + e.what_without_backtrace());
  }
  if (device.is_cuda() && !torch::cuda::is_available())
    throw std::runtime_error("--device " + flags.device + ": LibTorch sees no CUDA device");
  if (flags.bf16 && !device.is_cpu())
    throw std::runtime_error("--bf16 is CPU autocast: give it with --device cpu");
  net->to(device);
  // The batches' order and dropout's masks draw from the generator seeded again here, after the
  // model's initialisation: a port whose model draws otherwise (a layer without its bias)
  // still sees the same batches as the original it is compared with.
  torch::manual_seed(flags.seed);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(flags.lr));

  precprobe::DebuggerOptions opts;
  if (!flags.config.empty()) opts = precprobe::DebuggerOptions::from_json_file(flags.config);
  opts.dump_path = flags.dump;
  opts.overwrite = opts.overwrite || flags.overwrite;
  if (flags.record_on_anomaly) opts.record = precprobe::RecordMode::kOnAnomaly;
  std::unique_ptr<precprobe::PrecisionDebugger> dbg;
  if (flags.debugger) {
    dbg = std::make_unique<precprobe::PrecisionDebugger>(opts);
    if (opts.record == precprobe::RecordMode::kOnAnomaly) {
      dbg->start(net, opt);  // the optimizer's state joins the step snapshot
    } else {
      dbg->start(net);
    }
  }

  precprobe::GradScalerOptions scaler_opts;
  scaler_opts.enabled = flags.bf16;
  precprobe::GradScaler scaler(scaler_opts);
  if (flags.bf16) set_cpu_autocast_bf16(true);

  const int64_t n = train.images.size(0);
  int64_t step = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < flags.epochs; ++epoch) {
    auto order = flags.sorted_labels ? std::get<1>(train.labels.sort(c10::optional<bool>(true), 0))
                                     : torch::randperm(n, torch::kInt64);
    for (int64_t i = 0; i + flags.batch_size <= n; i += flags.batch_size) {
      if (flags.steps > 0 && step >= flags.steps) break;
      auto idx = order.slice(0, i, i + flags.batch_size);
      auto x = train.images.index_select(0, idx);
      auto y = train.labels.index_select(0, idx);
      if (!device.is_cpu()) {  // the same batch, drawn on the CPU, then on the device
        x = x.to(device);
        y = y.to(device);
      }
      if (dbg && flags.observe_batch) dbg->observe_batch(x, y, epoch);

      if (flags.perturb_step >= 0)
        net->act_scale = step == flags.perturb_step ? 1 + flags.perturb : 1.0;
      auto train_step = [&] {
        auto logits = net->forward(x);
        auto loss = torch::cross_entropy_loss(logits.to(torch::kFloat32), y);
        opt.zero_grad();
        scaler.scale(loss).backward();
        scaler.unscale_(opt);
        torch::nn::utils::clip_grad_norm_(net->parameters(), 5.0);
        scaler.step(opt);
        scaler.update();
        return loss;
      };
      double l = 0;
      if (dbg && opts.record == precprobe::RecordMode::kOnAnomaly) {
        // Snapshot, the step unobserved, and a recorded replay if it goes bad; ends the step.
        l = dbg->run_step(train_step).item<double>();
      } else {
        l = train_step().item<double>();
        if (dbg) {
          dbg->log_scalar("loss", l);
          dbg->step();
        }
      }
      if (flags.log_every > 0 && step % flags.log_every == 0) {
        std::printf("epoch %d step %5lld  loss %.4f\n", epoch, static_cast<long long>(step), l);
        std::fflush(stdout);
      }
      ++step;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (flags.bf16) set_cpu_autocast_bf16(false);
  net->act_scale = flags.act_scale;  // the perturbation ends; a constant of the model stays
  if (dbg) {
    checked_evaluation(net, test, *dbg, !flags.eval_in_train_mode, flags.observe_batch, device);
    dbg->stop();
  }

  const double acc = evaluate(net, test, device);
  std::printf("trained %lld steps in %.1f s; test accuracy %.2f%%\n", static_cast<long long>(step),
              secs, 100.0 * acc);
  if (dbg) {
    auto c = dbg->counters();
    std::printf("precprobe: %llu op records, %llu dropped, %llu errors -> %s\n",
                static_cast<unsigned long long>(c.ops_recorded),
                static_cast<unsigned long long>(c.writer.records_dropped),
                static_cast<unsigned long long>(c.errors), opts.dump_path.c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_fashion_mnist: %s\n", e.what());
  return 1;
}
