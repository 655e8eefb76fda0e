// `precprobe precision` against reality: predictions from an fp32 run's range statistics,
// checked against runs where the format is really applied. fp16, fp8 E4M3FN and fp8 E5M2 (and
// bf16 too) by rounding every op's inputs and outputs through the format, forward and backward
// (tests/support/format_emulation.h); bf16 also by CPU autocast, which LibTorch 1.13 has.
//
// Two models, with explicit ops so that every op is one record:
//   Planted:  a = tanh(x W1) * s (s[3] = 400); big = a * a; logits = relu(big * 1e-3) W2.
//             |big| reaches ~1.6e5 (a planted large activation, made by an op from inputs
//             that every format holds): fits bf16, overflows fp16, E5M2 and E4M3; every
//             other value stays far from any limit.
//   Tiny:     h = relu(x W1); logits = (h W2) * 1e-5 + h W3. The gradients below the 1e-5 are
//             tiny (flushed in fp16 without loss scaling); W3's gradient is large (overflows
//             at GradScaler's default scale 65536).
// The loss and the loss scale stay in fp32, as in mixed precision: the logits are detached,
// the loss's gradient taken in fp32, and the model's backward run from it.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/temp_dir.h"
#include "precprobe/debugger.h"
#include "precprobe/grad_scaler.h"
#include "precprobe/precision.h"
#include "precprobe/reader.h"
#include "precprobe_catch.h"
#include "stats/stats_reduce.h"
#include "support/format_emulation.h"

PRECPROBE_REGISTER_FORMAT_EMULATION()

using namespace precprobe;
using namespace precprobe::test;

namespace {

// One parameter, so that records name it "<module>.weight".
struct HolderImpl : torch::nn::Module {
  explicit HolderImpl(at::Tensor w) : weight(register_parameter("weight", std::move(w))) {}
  at::Tensor weight;
};
TORCH_MODULE(Holder);

struct PlantedImpl : torch::nn::Module {
  PlantedImpl() {
    at::manual_seed(3);
    fc1 = register_module("fc1", Holder(at::randn({16, 32}) * 0.5));
    at::Tensor s = at::ones({32});
    s[3] = 400;  // fits every format, E4M3 included
    plant = register_module("plant", Holder(s));
    fc2 = register_module("fc2", Holder(at::randn({32, 10}) * 0.1));
  }
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor a = at::mul(at::tanh(at::mm(x, fc1->weight)), plant->weight);  // |a| < 400
    const at::Tensor big = at::mul(a, a);  // the planted activation: up to 1.6e5
    return at::mm(at::relu(at::mul(big, 1e-3)), fc2->weight);
  }
  Holder fc1{nullptr}, plant{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Planted);

struct TinyImpl : torch::nn::Module {
  TinyImpl() {
    at::manual_seed(5);
    fc1 = register_module("fc1", Holder(at::randn({16, 32}) * 0.5));
    fc2 = register_module("fc2", Holder(at::randn({32, 10}) * 0.1));
    aux = register_module("aux", Holder(at::randn({32, 10}) * 0.02));
  }
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor h = at::relu(at::mm(x, fc1->weight));
    return at::add(at::mul(at::mm(h, fc2->weight), 1e-5), at::mm(h, aux->weight));
  }
  Holder fc1{nullptr}, fc2{nullptr}, aux{nullptr};
};
TORCH_MODULE(Tiny);

struct Batch {
  at::Tensor x, y;
};

std::vector<Batch> batches(int n, double x_scale) {
  at::manual_seed(17);
  std::vector<Batch> b;
  for (int i = 0; i < n; ++i)
    b.push_back({at::randn({64, 16}) * x_scale, at::randint(0, 10, {64})});
  return b;
}

// CPU autocast to bfloat16 (LibTorch 2.4 made the API device-generic, as the example notes).
void set_cpu_autocast_bf16(bool on) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, on);
#else
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  at::autocast::set_cpu_enabled(on);
#endif
}

// One training step. The loss and the loss scale in fp32 (paused rounding under emulation);
// returns false when the scaler skipped the step.
template <typename Model>
bool train_step(Model& model, torch::optim::SGD& opt, GradScaler& scaler, const Batch& b,
                FormatEmulation* emu) {
  opt.zero_grad();
  const at::Tensor logits = model->forward(b.x);
  at::Tensor grad;
  {
    std::optional<FormatEmulation::Fp32> fp32;
    if (emu) fp32.emplace();
    const at::Tensor detached = logits.detach().requires_grad_();
    const at::Tensor scaled = scaler.scale(torch::cross_entropy_loss(detached, b.y));
    grad = torch::autograd::grad({scaled}, {detached})[0];
  }
  logits.backward(grad);
  std::optional<FormatEmulation::Fp32> fp32;
  if (emu) fp32.emplace();
  const bool stepped = scaler.step(opt);
  scaler.update();
  return stepped;
}

GradScalerOptions scaler_at(double scale) {
  GradScalerOptions o;
  o.init_scale = scale;
  o.growth_interval = 1000000;
  return o;
}

// The fp32 run, recorded with range statistics, analysed for `format`.
template <typename Model>
std::vector<PrecisionResult> predict(const std::vector<Batch>& data,
                                     const std::vector<std::string>& formats) {
  TempDir dir("precision_reality");
  DebuggerOptions o;
  o.dump_path = dir.path().string();
  o.grad_monitor = false;
  o.keep_dropout = true;
  o.range_stats = RangeStats::kTraining;
  {
    Model model;
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(1e-3));
    GradScaler scaler(scaler_at(1.0));  // the same ops as the scaled runs, at scale 1
    PrecisionDebugger dbg(o);
    dbg.start(model);
    for (const Batch& b : data) {
      train_step(model, opt, scaler, b, nullptr);
      dbg.step();
    }
    dbg.stop();
  }
  // PRECPROBE_KEEP_DUMPS=DIR keeps the fp32 run's dump for a look with the CLI.
  if (const char* keep = std::getenv("PRECPROBE_KEEP_DUMPS")) {
    const std::filesystem::path to = std::filesystem::path(keep) / dir.path().filename();
    std::filesystem::create_directories(to);
    std::filesystem::copy(dir.path(), to, std::filesystem::copy_options::recursive);
  }
  std::vector<PrecisionResult> out;
  for (const std::string& f : formats) {
    DumpReader reader(dir.path().string());
    PrecisionOptions p;
    p.format = FloatFormat::find(f);
    out.push_back(analyse_precision(reader, p));
  }
  return out;
}

struct EmulatedRun {
  std::map<std::string, OpFacts> facts;
  int64_t skipped = 0;
};

template <typename Model>
EmulatedRun emulate(const std::vector<Batch>& data, precprobe::test::Emulated format,
                    double loss_scale) {
  Model model;
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(1e-3));
  GradScaler scaler(scaler_at(loss_scale));
  FormatEmulation emu(format);
  EmulatedRun out;
  for (const Batch& b : data) {
    out.skipped += train_step(model, opt, scaler, b, &emu) ? 0 : 1;
    emu.next_step();
  }
  out.facts = emu.facts();
  return out;
}

// The exact comparisons are intended.
#pragma GCC diagnostic ignored "-Wfloat-equal"

// The ops of `r` in `dir` for which `predicted` holds, and those whose facts show `real`.
template <typename P, typename R>
std::pair<std::set<std::string>, std::set<std::string>> sets(const PrecisionResult& r,
                                                             const EmulatedRun& e,
                                                             const std::string& dir, P predicted,
                                                             R real) {
  std::set<std::string> p, q;
  for (const OpPrecision& op : r.ops) {
    if (!dir.empty() && op.direction != dir) continue;
    if (predicted(op)) p.insert(op.op);
    auto it = e.facts.find(op.op);
    if (it != e.facts.end() && real(it->second)) q.insert(op.op);
  }
  return {p, q};
}

// Per op of the prediction: its predicted flush-to-zero share and what the emulated run saw
// (for the message of a failed check).
std::string flush_text(const PrecisionResult& r, const EmulatedRun& e) {
  std::string s;
  for (const OpPrecision& op : r.ops) {
    auto it = e.facts.find(op.op);
    s += op.op + ": predicted " + std::to_string(op.unscaled.flush_to_zero) + ", real " +
         (it == e.facts.end()
              ? std::string("(no such op)")
              : std::to_string(it->second.flushed) + " of " + std::to_string(it->second.elements)) +
         "\n";
  }
  for (const auto& [name, f] : e.facts)
    s += "  emulated: " + name + " " + std::to_string(f.flushed) + " of " +
         std::to_string(f.elements) + "\n";
  return s;
}

}  // namespace

TEST_CASE("round_fp8 picks the nearest E4M3FN / E5M2 value, ties to even", "[precision]") {
  // The format's definition: every code decoded (stats_reduce.h's decoders); the nearest
  // value by brute force, a tie to the even code; beyond the largest value (and its tie),
  // E4M3FN gives NaN and E5M2 Inf, as c10's casts do.
  for (const bool e4m3 : {true, false}) {
    INFO((e4m3 ? "e4m3" : "e5m2"));
    std::vector<std::pair<double, int>> values;  // (value, code) of the finite non-negatives
    for (int c = 0; c < 128; ++c) {
      const double v = e4m3 ? precprobe::detail::decode_f8e4m3fn(static_cast<uint8_t>(c))
                            : precprobe::detail::decode_f8e5m2(static_cast<uint8_t>(c));
      if (std::isfinite(v)) values.emplace_back(v, c);
    }
    REQUIRE(values.back().first == (e4m3 ? 448.0 : 57344.0));
    const double next = e4m3 ? 480.0 : 65536.0;  // where the next code would be
    std::vector<double> probes;
    for (size_t i = 0; i + 1 < values.size(); ++i) {
      const double lo = values[i].first, hi = values[i + 1].first;
      for (double f : {0.0, 0.1, 0.4999, 0.5, 0.5001, 0.9}) probes.push_back(lo + f * (hi - lo));
    }
    for (double f : {0.3, 0.5, 0.7, 1.2})
      probes.push_back(values.back().first + f * (next - values.back().first));
    probes.push_back(1e30);
    for (double x : probes) {
      for (double sign : {1.0, -1.0}) {
        const double got = round_fp8(sign * x, e4m3);
        double want;
        const double a = x;
        if (a >= values.back().first + (next - values.back().first) / 2 &&
            !(e4m3 && a == values.back().first + (next - values.back().first) / 2)) {
          want = e4m3 ? NAN : HUGE_VAL;
        } else if (a >= values.back().first) {
          want = values.back().first;
        } else {
          auto hi = std::lower_bound(values.begin(), values.end(), std::make_pair(a, -1));
          auto lo = hi == values.begin() ? hi : hi - 1;
          const double dl = a - lo->first, dh = hi->first - a;
          want = dl < dh ? lo->first : dh < dl ? hi->first : (lo->second % 2 == 0 ? lo : hi)->first;
        }
        CAPTURE(x, sign);
        if (std::isnan(want)) {
          CHECK(std::isnan(got));
        } else {
          CHECK(got == sign * want);
        }
      }
    }
  }
}

TEST_CASE("a planted large activation: the ops predicted to overflow are the ones that do",
          "[precision][reality]") {
  const std::vector<Batch> data = batches(3, 1.0);
  const std::vector<std::string> names = {"fp16", "bf16", "e4m3", "e5m2"};
  const auto predictions = predict<Planted>(data, names);
  const precprobe::test::Emulated formats[] = {
      precprobe::test::Emulated::kFp16, precprobe::test::Emulated::kBf16,
      precprobe::test::Emulated::kE4m3, precprobe::test::Emulated::kE5m2};
  for (size_t i = 0; i < names.size(); ++i) {
    INFO(names[i]);
    const EmulatedRun real = emulate<Planted>(data, formats[i], 1.0);
    // Forward: an overflow makes the loss NaN, so the backward has nothing of its own to show.
    const auto [predicted, happened] = sets(
        predictions[i], real, "forward", [](const OpPrecision& op) { return op.overflows; },
        [](const OpFacts& f) { return f.nonfinite_origin > 0; });
    CHECK(predicted == happened);
    if (names[i] == "bf16") {
      CHECK(predicted.empty());
      for (const auto& [name, f] : real.facts) CHECK(f.nonfinite_origin == 0);
    } else {
      CHECK(predicted == std::set<std::string>{"aten::mul.1.forward"});
    }
  }
}

TEST_CASE(
    "tiny gradients: the ops predicted to flush to zero in fp16 are the ones that do; "
    "the recommended loss scale skips no step where 65536 does",
    "[precision][reality]") {
  const std::vector<Batch> data = batches(6, 8.0);
  const PrecisionResult p = predict<Tiny>(data, {"fp16"}).front();
  // Unscaled: every op (forward and backward) that loses non-zero values to zero.
  const EmulatedRun unscaled = emulate<Tiny>(data, precprobe::test::Emulated::kFp16, 1.0);
  // "Loses values to zero" as the verdicts count it: more than 0.1 % of non-zero values.
  const auto [predicted, happened] = sets(
      p, unscaled, "", [](const OpPrecision& op) { return op.unscaled.flush_to_zero > 0.001; },
      [](const OpFacts& f) { return f.flushed > 0.001 * static_cast<double>(f.elements); });
  INFO(flush_text(p, unscaled));
  CHECK(predicted == happened);
  CHECK(predicted.count("aten::mul.1.backward") == 1);  // the gradient through the 1e-5
  for (const std::string& name : predicted) CHECK(name.find(".backward") != std::string::npos);
  // The loss scale.
  const LossScaleAdvice& ls = p.loss_scale;
  REQUIRE(ls.available);
  CHECK(ls.feasible);
  CHECK(ls.low > 1);       // unscaled gradients flush
  CHECK(ls.high < 65536);  // 65536 overflows
  CHECK(ls.default_65536.skipped_steps > 0);
  CHECK(ls.at_recommended.skipped_steps == 0);
  const EmulatedRun at_default = emulate<Tiny>(data, precprobe::test::Emulated::kFp16, 65536.0);
  const EmulatedRun at_recommended =
      emulate<Tiny>(data, precprobe::test::Emulated::kFp16, ls.recommended);
  CHECK(at_default.skipped > 0);
  CHECK(at_default.skipped == ls.default_65536.skipped_steps);
  CHECK(at_recommended.skipped == 0);
  // And at the recommended scale the backward ops predicted to fit there lose at most 0.1 %
  // of their non-zero values to zero in the real run.
  int64_t fitting = 0;
  for (const OpPrecision& op : p.ops) {
    if (op.direction != "backward" || !op.fits_at_loss_scale) continue;
    auto it = at_recommended.facts.find(op.op);
    if (it == at_recommended.facts.end()) continue;
    ++fitting;
    CAPTURE(op.op, it->second.flushed, it->second.elements);
    CHECK(it->second.flushed <= 0.001 * static_cast<double>(it->second.elements));
  }
  CHECK(fitting >= 5);
}

TEST_CASE("bf16 for real (CPU autocast): the planted model that fits bf16 gives no Inf",
          "[precision][reality]") {
  const std::vector<Batch> data = batches(3, 1.0);
  TempDir dir("precision_bf16");
  DebuggerOptions o;
  o.dump_path = dir.path().string();
  o.grad_monitor = false;
  o.keep_dropout = true;  // DropoutGuard needs the dispatch key the emulation registered
  o.range_stats = RangeStats::kTraining;
  {
    Planted model;
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(1e-3));
    GradScaler scaler(scaler_at(1.0));
    PrecisionDebugger dbg(o);
    dbg.start(model);
    set_cpu_autocast_bf16(true);
    for (const Batch& b : data) {
      train_step(model, opt, scaler, b, nullptr);
      dbg.step();
    }
    set_cpu_autocast_bf16(false);
    dbg.stop();
  }
  DumpReader reader(dir.path().string());
  int64_t bf16_outputs = 0, nonfinite = 0;
  reader.for_each_op({}, [&](const OpRecord& r) {
    for (const Arg& a : r.outputs) bf16_outputs += a.is_tensor() && a.tensor->dtype == "BFloat16";
    nonfinite += r.outputs_non_finite();
    return true;
  });
  CHECK(bf16_outputs > 0);  // autocast did run ops in bf16
  CHECK(nonfinite == 0);
}
