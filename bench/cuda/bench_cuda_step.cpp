// The PrecisionDebugger's cost on a GPU: step time of a training step with no
// debugger, with L1 statistics on every op forward and backward (the fused CUDA statistics
// kernel), with overflow_check, and with "record": "on_anomaly" on healthy steps, on
//   gpt  one GPT-style block (LayerNorm, causal self-attention through
//        scaled_dot_product_attention, LayerNorm, 4x MLP with GELU, residuals) in bf16
//        autocast, d=2048, 16 heads, seq 2048, batch 8, AdamW;
//   mlp  the reference MLP of bench/probe/bench_debugger.cpp (input 256 -> h -> 4 x
//        [Linear, LayerNorm, GELU, residual] -> 10), h=256, batch 128, fp32, AdamW:
//        launch-bound, where the host cost per recorded op shows.
// Prints, per model and variant, the median step time (each step ends with
// torch::cuda::synchronize(), in every variant alike), its ratio to no debugger, records per
// step, the GPU memory the variant added at its peak, and, when the LD_PRELOAD shim
// libprecprobe_sync_counter.so is loaded, the CUDA runtime's blocking calls per step in an
// untimed pass without the timing synchronisations. Variants are interleaved in rounds.
// Lines starting with "RESULT " are for scripts/gpu-check.sh.
//
//   bench_cuda_step [--model gpt,mlp] [--steps 10] [--rounds 3] [--warmup 3]
//                   [--d 2048] [--heads 16] [--seq 2048] [--batch 8] [--h 256]
//                   [--mlp-batch 128] [--sync-steps 5]
//   bench_cuda_step --probe     prints whether LibTorch sees a GPU; exit 0 yes, 3 no
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <dlfcn.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "precprobe/debugger.h"

namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------- models

struct GptBlockImpl : torch::nn::Module {
  GptBlockImpl(int64_t d, int64_t n_heads)
      : heads(n_heads),
        ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        qkv(register_module("qkv", torch::nn::Linear(d, 3 * d))),
        proj(register_module("proj", torch::nn::Linear(d, d))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        fc1(register_module("fc1", torch::nn::Linear(d, 4 * d))),
        fc2(register_module("fc2", torch::nn::Linear(4 * d, d))) {}
  torch::Tensor forward(torch::Tensor x) {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
    auto parts = qkv->forward(ln1->forward(x)).view({b, t, 3, heads, d / heads}).unbind(2);
    auto q = parts[0].transpose(1, 2), k = parts[1].transpose(1, 2), v = parts[2].transpose(1, 2);
    auto a = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
    x = x + proj->forward(a.transpose(1, 2).reshape({b, t, d}));
    return x + fc2->forward(torch::gelu(fc1->forward(ln2->forward(x))));
  }
  int64_t heads;
  torch::nn::LayerNorm ln1;
  torch::nn::Linear qkv, proj;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(GptBlock);

struct ResBlockImpl : torch::nn::Module {
  explicit ResBlockImpl(int64_t h)
      : fc(register_module("fc", torch::nn::Linear(h, h))),
        ln(register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({h})))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return x + torch::gelu(ln->forward(fc->forward(x)));
  }
  torch::nn::Linear fc;
  torch::nn::LayerNorm ln;
};
TORCH_MODULE(ResBlock);

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(int64_t h) : in(register_module("in", torch::nn::Linear(256, h))) {
    for (int i = 0; i < 4; ++i)
      blocks.push_back(register_module("block" + std::to_string(i), ResBlock(h)));
    out = register_module("out", torch::nn::Linear(h, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = in->forward(x);
    for (auto& b : blocks) x = b->forward(x);
    return out->forward(x);
  }
  torch::nn::Linear in{nullptr}, out{nullptr};
  std::vector<ResBlock> blocks;
};
TORCH_MODULE(Mlp);

// PyTorch's `with torch.autocast("cuda", dtype=...)`.
class Autocast {
 public:
  explicit Autocast(at::ScalarType dtype) {
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
    at::autocast::increment_nesting();
  }
  ~Autocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCUDA, false);
  }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;
};

struct Workload {
  std::string name, describe;
  std::shared_ptr<torch::nn::Module> model;
  std::unique_ptr<torch::optim::AdamW> opt;
  std::function<torch::Tensor()> step;  // zero_grad, forward, backward, optimizer step
};

Workload make_gpt(int64_t d, int64_t heads, int64_t seq, int64_t batch) {
  Workload w;
  w.name = "gpt";
  std::ostringstream os;
  os << "GPT block, bf16 autocast, d=" << d << " heads=" << heads << " seq=" << seq
     << " batch=" << batch;
  w.describe = os.str();
  GptBlock m(d, heads);
  m->to(at::kCUDA);
  w.model = m.ptr();
  w.opt = std::make_unique<torch::optim::AdamW>(m->parameters(), torch::optim::AdamWOptions(1e-4));
  auto x = torch::randn({batch, seq, d}, at::TensorOptions(at::kCUDA));
  auto* opt = w.opt.get();
  w.step = [m, x, opt]() mutable {
    opt->zero_grad();
    torch::Tensor loss;
    {
      Autocast ac(at::kBFloat16);
      loss = m->forward(x).to(at::kFloat).pow(2).mean();
    }
    loss.backward();
    opt->step();
    return loss;
  };
  return w;
}

Workload make_mlp(int64_t h, int64_t batch) {
  Workload w;
  w.name = "mlp";
  w.describe = "reference MLP, fp32, h=" + std::to_string(h) + " batch=" + std::to_string(batch);
  Mlp m(h);
  m->to(at::kCUDA);
  w.model = m.ptr();
  w.opt = std::make_unique<torch::optim::AdamW>(m->parameters(), torch::optim::AdamWOptions(1e-3));
  auto x = torch::randn({batch, 256}, at::TensorOptions(at::kCUDA));
  auto y = torch::randint(0, 10, {batch}, at::TensorOptions(at::kCUDA).dtype(at::kLong));
  auto* opt = w.opt.get();
  w.step = [m, x, y, opt]() mutable {
    opt->zero_grad();
    auto loss = torch::nn::functional::cross_entropy(m->forward(x), y);
    loss.backward();
    opt->step();
    return loss;
  };
  return w;
}

// ---------------------------------------------------------------------------- measuring

struct Variant {
  std::string name;
  bool debugger = false;
  precprobe::Task task = precprobe::Task::kStatistics;
  bool on_anomaly = false;
};

const std::vector<Variant> kVariants = {
    {"no debugger", false},
    {"L1 statistics", true, precprobe::Task::kStatistics, false},
    {"overflow_check", true, precprobe::Task::kOverflowCheck, false},
    {"on_anomaly healthy", true, precprobe::Task::kStatistics, true},
};

// The LD_PRELOAD shim's counters, if it is loaded.
struct Syncs {
  std::array<unsigned long long, 16> v{};
  int n = 0;
  static bool loaded() { return ::dlsym(RTLD_DEFAULT, "precprobe_sync_counter_read") != nullptr; }
  static Syncs now() {
    Syncs s;
    using Read = int (*)(unsigned long long*, int);
    if (auto read = reinterpret_cast<Read>(::dlsym(RTLD_DEFAULT, "precprobe_sync_counter_read")))
      s.n = read(s.v.data(), 16);
    return s;
  }
  static std::string name(int i) {
    using Name = const char* (*)(int);
    auto f = reinterpret_cast<Name>(::dlsym(RTLD_DEFAULT, "precprobe_sync_counter_name"));
    const char* s = f ? f(i) : nullptr;
    return s ? s : "?";
  }
};

struct Result {
  std::vector<double> ms;
  double records_per_step = 0;
  int64_t snapshot_bytes = 0;
  uint64_t errors = 0;
  int64_t peak_bytes = 0;
  std::vector<double> syncs_per_step;  // per shim counter
};

int64_t peak_allocated() {
  // allocated_bytes[0]: StatType::AGGREGATE (all pools), whichever namespace the enum is in
  // (c10::CachingDeviceAllocator from 2.6 on).
  return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].peak;
}

std::unique_ptr<precprobe::PrecisionDebugger> make_debugger(const Variant& v, Workload& w,
                                                            const std::string& dump) {
  if (!v.debugger) return nullptr;
  precprobe::DebuggerOptions o;
  o.dump_path = dump;
  o.overwrite = true;
  o.level = precprobe::Level::kL1;
  o.async_stats = true;
  o.keep_dropout = true;
  o.grad_monitor = false;
  o.task = v.task;
  o.overflow_nums = -1;
  if (v.on_anomaly) o.record = precprobe::RecordMode::kOnAnomaly;
  auto dbg = std::make_unique<precprobe::PrecisionDebugger>(o);
  if (v.on_anomaly) {
    dbg->start(w.model, *w.opt);
  } else {
    dbg->start(w.model);
  }
  return dbg;
}

void one_step(const Variant& v, Workload& w, precprobe::PrecisionDebugger* dbg) {
  if (dbg && v.on_anomaly) {
    dbg->run_step([&] { return w.step(); });
  } else {
    w.step();
    if (dbg) dbg->step();
  }
}

void run_timed(const Variant& v, Workload& w, int steps, int warmup, const std::string& dump,
               Result& r) {
  torch::cuda::synchronize();
  c10::cuda::CUDACachingAllocator::resetPeakStats(0);
  auto dbg = make_debugger(v, w, dump);
  for (int i = 0; i < warmup + steps; ++i) {
    const auto t0 = Clock::now();
    one_step(v, w, dbg.get());
    torch::cuda::synchronize();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (i >= warmup) r.ms.push_back(ms);
  }
  if (dbg) {
    dbg->stop();
    const auto c = dbg->counters();
    r.records_per_step = static_cast<double>(c.ops_recorded) / (warmup + steps);
    r.snapshot_bytes = c.snapshot_bytes;
    r.errors += c.errors;
  }
  r.peak_bytes = std::max(r.peak_bytes, peak_allocated());
}

// Blocking runtime calls per step, without the timing synchronisations: `steps` steps, then
// one synchronize (subtracted).
void run_sync_count(const Variant& v, Workload& w, int steps, const std::string& dump, Result& r) {
  auto dbg = make_debugger(v, w, dump);
  for (int i = 0; i < 2; ++i) one_step(v, w, dbg.get());
  torch::cuda::synchronize();
  const Syncs a = Syncs::now();
  for (int i = 0; i < steps; ++i) one_step(v, w, dbg.get());
  torch::cuda::synchronize();
  const Syncs b = Syncs::now();
  if (dbg) dbg->stop();
  r.syncs_per_step.assign(b.n, 0.0);
  for (int k = 0; k < b.n; ++k)
    r.syncs_per_step[k] = static_cast<double>(b.v[k] - a.v[k] - (k == 0 ? 1 : 0)) / steps;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int probe() {
  const bool ok = torch::cuda::is_available();
  std::printf("torch::cuda::is_available() = %s, devices %d\n", ok ? "true" : "false",
              ok ? static_cast<int>(torch::cuda::device_count()) : 0);
  if (ok) {
    const auto* p = at::cuda::getDeviceProperties(0);
    std::printf("device 0: %s, compute capability %d.%d, %.1f GiB, %d SMs\n", p->name, p->major,
                p->minor, p->totalGlobalMem / 1073741824.0, p->multiProcessorCount);
  }
  return ok ? 0 : 3;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(item);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string models = "gpt,mlp";
  int steps = 10, rounds = 3, warmup = 3, sync_steps = 5;
  int64_t d = 2048, heads = 16, seq = 2048, batch = 8, h = 256, mlp_batch = 128;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--probe") return probe();
    if (i + 1 >= argc) break;
    const char* val = argv[++i];
    if (k == "--model")
      models = val;
    else if (k == "--steps")
      steps = std::atoi(val);
    else if (k == "--rounds")
      rounds = std::atoi(val);
    else if (k == "--warmup")
      warmup = std::atoi(val);
    else if (k == "--sync-steps")
      sync_steps = std::atoi(val);
    else if (k == "--d")
      d = std::atoll(val);
    else if (k == "--heads")
      heads = std::atoll(val);
    else if (k == "--seq")
      seq = std::atoll(val);
    else if (k == "--batch")
      batch = std::atoll(val);
    else if (k == "--h")
      h = std::atoll(val);
    else if (k == "--mlp-batch")
      mlp_batch = std::atoll(val);
    else {
      std::fprintf(stderr, "bench_cuda_step: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (probe() != 0) return 3;
  torch::manual_seed(0);
  const std::string dump = (std::filesystem::temp_directory_path() /
                            ("precprobe_bench_cuda_" + std::to_string(::getpid())))
                               .string();
  const bool shim = Syncs::loaded();
  std::printf("sync counter shim: %s\n", shim ? "loaded" : "not loaded (no sync counts)");
  for (const auto& model : split(models)) {
    Workload w = model == "gpt" ? make_gpt(d, heads, seq, batch) : make_mlp(h, mlp_batch);
    for (int i = 0; i < 3; ++i) w.step();
    torch::cuda::synchronize();
    c10::cuda::CUDACachingAllocator::resetPeakStats(0);
    std::map<std::string, Result> res;
    for (int r = 0; r < rounds; ++r)
      for (const auto& v : kVariants)
        run_timed(v, w, steps, r == 0 ? warmup : 1, dump, res[v.name]);
    if (shim)
      for (const auto& v : kVariants) run_sync_count(v, w, sync_steps, dump, res[v.name]);
    const double base = median(res["no debugger"].ms);
    const int64_t base_peak = res["no debugger"].peak_bytes;
    std::printf("\n%s: %s (%d rounds x %d timed steps, medians)\n", w.name.c_str(),
                w.describe.c_str(), rounds, steps);
    for (const auto& v : kVariants) {
      const Result& x = res[v.name];
      const double m = median(x.ms);
      std::printf("  %-20s %9.3f ms  %6.3fx  %6.0f records/step  +%.1f MB peak", v.name.c_str(), m,
                  m / base, x.records_per_step, (x.peak_bytes - base_peak) / 1e6);
      if (x.snapshot_bytes > 0) std::printf("  snapshot %.1f MB", x.snapshot_bytes / 1e6);
      if (x.errors) std::printf("  ERRORS %llu", static_cast<unsigned long long>(x.errors));
      std::printf("\n");
      double blocking = 0;
      if (!x.syncs_per_step.empty()) {
        std::printf("  %-20s per step:", "");
        for (size_t k = 0; k < x.syncs_per_step.size(); ++k) {
          if (x.syncs_per_step[k] > 0 || x.syncs_per_step[k] < 0)
            std::printf(" %s %.2f;", Syncs::name(static_cast<int>(k)).c_str(), x.syncs_per_step[k]);
          if (k < 5) blocking += x.syncs_per_step[k];
        }
        std::printf("\n");
      }
      std::printf(
          "RESULT model=%s variant=\"%s\" ms=%.4f ratio=%.4f records_per_step=%.1f "
          "peak_added_mb=%.1f blocking_syncs_per_step=%s errors=%llu\n",
          w.name.c_str(), v.name.c_str(), m, m / base, x.records_per_step,
          (x.peak_bytes - base_peak) / 1e6,
          x.syncs_per_step.empty() ? "NA" : std::to_string(blocking).c_str(),
          static_cast<unsigned long long>(x.errors));
    }
  }
  std::filesystem::remove_all(dump);
  return 0;
}
