// What the Transformer programs of tests/transformers share (README.md there): the flags, a
// fixed synthetic language (each sequence counts up from a start by a stride, modulo the
// vocabulary), padded batches, CPU autocast to bfloat16, and the training loop with AdamW,
// clip_grad_norm_ and the debugger as the examples run it.
//
//   PROGRAM [--steps 10] [--seed 1234] [--threads 1] [--dtype fp32|bf16] [--dump DIR]
//           [--config FILE] [--fully-masked-from STEP]
//
// --fully-masked-from S plants the classic padding bug: from step S on, sequence 0 of each
// batch is all padding, so its key padding mask hides every key of every one of its query
// rows, the softmax of those rows is over -inf alone, and it gives NaN.
#pragma once

#include <ATen/autocast_mode.h>
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tfm {

constexpr int64_t kVocab = 16;     // tokens 0..15
constexpr int64_t kPad = 16;       // the padding token: embeddings have kVocab + 1 rows
constexpr int64_t kSeq = 16;       // tokens per sequence
constexpr int64_t kBatch = 8;      // sequences per batch
constexpr int64_t kDim = 32;       // model width
constexpr int64_t kHeads = 2;      // attention heads
constexpr int64_t kIgnore = -100;  // cross_entropy's ignore_index: the padded targets

struct Flags {
  int64_t steps = 10;
  uint64_t seed = 1234;
  int threads = 1;
  bool bf16 = false;
  std::string dump;    // empty (and no --config): no debugger
  std::string config;  // msprobe's config.json
  int64_t fully_masked_from = -1;
  double lr = 3e-3;
  bool debugger() const { return !dump.empty() || !config.empty(); }
};

[[noreturn]] inline void usage(const char* argv0, int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "usage: %s [--steps N] [--seed N] [--threads N] [--dtype fp32|bf16] [--dump DIR]\n"
               "          [--config FILE] [--fully-masked-from STEP] [--lr X]\n",
               argv0);
  std::exit(code);
}

inline Flags parse_flags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: %s needs a value\n", argv[0], a.c_str());
        usage(argv[0], 2);
      }
      return argv[++i];
    };
    try {
      if (a == "--steps") {
        f.steps = std::stoll(next());
      } else if (a == "--seed") {
        f.seed = std::stoull(next());
      } else if (a == "--threads") {
        f.threads = std::stoi(next());
      } else if (a == "--dtype") {
        const std::string d = next();
        if (d != "fp32" && d != "bf16") {
          std::fprintf(stderr, "%s: --dtype %s: expected fp32 or bf16\n", argv[0], d.c_str());
          usage(argv[0], 2);
        }
        f.bf16 = d == "bf16";
      } else if (a == "--dump") {
        f.dump = next();
      } else if (a == "--config") {
        f.config = next();
      } else if (a == "--fully-masked-from") {
        f.fully_masked_from = std::stoll(next());
      } else if (a == "--lr") {
        f.lr = std::stod(next());
      } else if (a == "--help" || a == "-h") {
        usage(argv[0], 0);
      } else {
        std::fprintf(stderr, "%s: unknown flag %s\n", argv[0], a.c_str());
        usage(argv[0], 2);
      }
    } catch (const std::logic_error&) {  // stoll/stod on a value that is no number
      std::fprintf(stderr, "%s: %s %s: not a number\n", argv[0], a.c_str(), argv[i]);
      usage(argv[0], 2);
    }
  }
  return f;
}

// SplitMix64: the batches depend on (seed, step) alone, not on LibTorch's generator, so the
// C++ and Python programs (python/lm.py) train on the same tokens on every LibTorch.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

struct Batch {
  torch::Tensor x;    // [B, T] int64 tokens, kPad where padded
  torch::Tensor y;    // [B, T] int64 next tokens, kIgnore where padded
  torch::Tensor pad;  // [B, T] bool, true = padding (a key no query may attend to)
};

// Sequence b counts from `start` by `stride` (1..3) modulo kVocab. In the batches of even steps
// its last b % 4 positions are padding; odd steps' batches hold no padding (a Hugging-Face-style
// SDPA attention then drops its mask and passes is_causal=True: python/lm.py). From
// fully_masked_from on, sequence 0 is padding throughout.
inline Batch make_batch(int64_t step, const Flags& f) {
  std::vector<int64_t> x(kBatch * kSeq), y(kBatch * kSeq);
  std::vector<uint8_t> pad(kBatch * kSeq);
  for (int64_t b = 0; b < kBatch; ++b) {
    const uint64_t r = splitmix64(f.seed * 1000003ULL + static_cast<uint64_t>(step) * 64 +
                                  static_cast<uint64_t>(b));
    const int64_t start = static_cast<int64_t>(r % kVocab);
    const int64_t stride = 1 + static_cast<int64_t>((r >> 8) % 3);
    int64_t len = kSeq - (step % 2 == 0 ? b % 4 : 0);
    if (b == 0 && f.fully_masked_from >= 0 && step >= f.fully_masked_from) len = 0;
    for (int64_t t = 0; t < kSeq; ++t) {
      const bool real = t < len;
      x[b * kSeq + t] = real ? (start + stride * t) % kVocab : kPad;
      y[b * kSeq + t] = real ? (start + stride * (t + 1)) % kVocab : kIgnore;
      pad[b * kSeq + t] = real ? 0 : 1;
    }
  }
  Batch out;
  out.x = torch::tensor(x, torch::kInt64).view({kBatch, kSeq});
  out.y = torch::tensor(y, torch::kInt64).view({kBatch, kSeq});
  out.pad = torch::tensor(std::vector<int64_t>(pad.begin(), pad.end()), torch::kInt64)
                .view({kBatch, kSeq})
                .to(torch::kBool);
  return out;
}

// CPU autocast to bfloat16, as examples/train_fashion_mnist.cpp switches it: LibTorch 2.4 made
// the autocast API device-generic (PyTorch PR 124359); set_cpu_enabled() is the only API
// before.
inline void set_cpu_autocast_bf16(bool on) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, on);
#else
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  at::autocast::set_cpu_enabled(on);
#endif
}

// Trains `model` (forward(x, pad) -> logits [B, T, kVocab]) for f.steps steps with AdamW and
// clip_grad_norm_, under the debugger when asked: "record": "on_anomaly" runs each step through
// run_step (the optimizer's state joins the snapshot), else step() after each. Prints
// "step N loss L grad_norm G" per step and, with the debugger, the live op watchpoint hits.
// `before_step(step)`, when given, runs before each step's batch is made.
template <typename Model>
int train(const char* prog, Model& model, const Flags& f,
          const std::function<void(int64_t)>& before_step = {}) {
  std::unique_ptr<precprobe::PrecisionDebugger> dbg;
  precprobe::DebuggerOptions opts;
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(f.lr).weight_decay(0.01));
  if (f.debugger()) {
    if (!f.config.empty()) opts = precprobe::DebuggerOptions::from_json_file(f.config);
    if (!f.dump.empty()) {
      opts.dump_path = f.dump;
      opts.overwrite = true;
    }
    dbg = std::make_unique<precprobe::PrecisionDebugger>(opts);
    if (opts.record == precprobe::RecordMode::kOnAnomaly) {
      dbg->start(model, opt);
    } else {
      dbg->start(model);
    }
  }
  const bool on_anomaly = dbg && opts.record == precprobe::RecordMode::kOnAnomaly;

  model->train();
  if (f.bf16) set_cpu_autocast_bf16(true);
  for (int64_t step = 0; step < f.steps; ++step) {
    if (before_step) before_step(step);
    const Batch batch = make_batch(step, f);  // outside the step: a replay sees the same batch
    double grad_norm = 0;
    auto train_step = [&] {
      opt.zero_grad();
      auto logits = model->forward(batch.x, batch.pad);
      auto loss = torch::nn::functional::cross_entropy(
          logits.reshape({-1, kVocab}).to(torch::kFloat32), batch.y.reshape({-1}),
          torch::nn::functional::CrossEntropyFuncOptions().ignore_index(kIgnore));
      loss.backward();
      grad_norm = torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
      opt.step();
      return loss;
    };
    double l = 0;
    if (on_anomaly) {
      l = dbg->run_step(train_step).template item<double>();
    } else {
      l = train_step().template item<double>();
      if (dbg) {
        dbg->log_scalar("loss", l);
        dbg->step();
      }
    }
    std::printf("step %lld loss %.6g grad_norm %.6g\n", static_cast<long long>(step), l, grad_norm);
    std::fflush(stdout);
  }
  if (f.bf16) set_cpu_autocast_bf16(false);
  if (dbg) {
    dbg->stop();
    const auto hits = dbg->watch_hits();
    std::printf("live watch hits %zu\n", hits.size());
    for (const auto& h : hits)
      std::printf("  step %lld %s %s %s\n", static_cast<long long>(h.step), h.watch.c_str(),
                  h.record.c_str(), h.detail.c_str());
    const auto c = dbg->counters();
    std::printf("%s: %llu op records, %llu errors -> %s\n", prog,
                static_cast<unsigned long long>(c.ops_recorded),
                static_cast<unsigned long long>(c.errors), opts.dump_path.c_str());
  }
  return 0;
}

}  // namespace tfm
