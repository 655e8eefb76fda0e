// The PrecisionDebugger's cost on the reference model: a residual MLP (input 256 ->
// Linear(256, h) -> 4 x [Linear(h, h) -> LayerNorm -> GELU -> Dropout(0.1), residual add]
// -> Linear(h, 10)), cross-entropy, AdamW, batch 128, one intra-op thread.
//
// Prints, per hidden size, the median step time of each variant and its ratio to the run
// without a debugger (and the minor page faults per step); variants are interleaved in rounds
// so that drift of a shared machine hits them alike. "on_anomaly (healthy steps)" runs every
// step through run_step() with "record": "on_anomaly" (snapshot, its parameter and AdamW copy
// on the snapshot's helper thread beside forward; trigger check; the step's loss scalar and
// grads records; no anomaly, no op recorded); its snapshot's size is printed beside the
// parameters' and AdamW's state. Also prints the floor (bytes the statistics read per step /
// memcpy bandwidth), the fixed cost per record, and the compressed bytes per tensor on disk.
//
//     bench_debugger [--h 256,1024] [--steps 30] [--rounds 5] [--warmup 5]
//                    [--only VARIANT] [--fixed-only 1] [--records N [--task T]]
//                    [--malloc tuned|default] [--threads free-core|default]
// --only runs some variants (and "no debugger"), e.g. "L1 statistics (async),L1 + range
// (async)" (comma-separated), for profiling; --fixed-only 1 runs only the fixed cost per record.
// --fixed-step K ends a step (step()) every K ops of the fixed cost and of --records (0: one
// step of all 20 000 ops, as in BENCHMARKS.md's figures before 2026-11-29). --records N runs
// N aten::add of 4 floats under a started debugger (async, L1; --task overflow_check or
// "none" for no debugger) and nothing else: the difference of two runs under
// `valgrind --tool=callgrind` gives instructions per record, independent of load.
// --threads: "free-core" (the default) or "default", BENCHMARKS.md's "free core" and
// "default threading" (bench_support.h, apply_threading). Every line also gives the CPU time
// of all threads and its ratio. Both arms of a ratio run in one process, with the same malloc
// settings (--malloc).
#include <time.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_floor.h"
#include "bench_support.h"
#include "precprobe/debugger.h"

namespace {

using Clock = std::chrono::steady_clock;
using precprobe::bench::apply_tuned_malloc;
using precprobe::bench::cpu_ms;
using precprobe::bench::median;
using precprobe::bench::minor_faults;

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t h)
      : fc(register_module("fc", torch::nn::Linear(h, h))),
        ln(register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({h})))),
        drop(register_module("drop", torch::nn::Dropout(0.1))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return x + drop->forward(torch::gelu(ln->forward(fc->forward(x))));
  }
  torch::nn::Linear fc;
  torch::nn::LayerNorm ln;
  torch::nn::Dropout drop;
};
TORCH_MODULE(Block);

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(int64_t h) : in(register_module("in", torch::nn::Linear(256, h))) {
    for (int i = 0; i < 4; ++i)
      blocks.push_back(register_module("block" + std::to_string(i), Block(h)));
    out = register_module("out", torch::nn::Linear(h, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = in->forward(x);
    for (auto& b : blocks) x = b->forward(x);
    return out->forward(x);
  }
  torch::nn::Linear in{nullptr}, out{nullptr};
  std::vector<Block> blocks;
};
TORCH_MODULE(Mlp);

struct Trainer {
  explicit Trainer(int64_t h)
      : model(h),
        opt(model->parameters(), torch::optim::AdamWOptions(1e-3)),
        x(torch::randn({128, 256})),
        y(torch::randint(0, 10, {128})) {}
  torch::Tensor step() {
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  }
  Mlp model;
  torch::optim::AdamW opt;
  torch::Tensor x, y;
};

// Whether `name` is one of the comma-separated variant names of --only: it stands there
// between the start or a comma and the end or a comma (so "L1, step not selected", which
// holds a comma, can be listed with others).
bool selected(const std::string& only, const std::string& name) {
  for (size_t at = only.find(name); at != std::string::npos; at = only.find(name, at + 1)) {
    const size_t end = at + name.size();
    if ((at == 0 || only[at - 1] == ',') && (end == only.size() || only[end] == ',')) return true;
  }
  return false;
}

// memcpy bandwidth in bytes read per second (a 256 MiB copy, best of 5).
double memcpy_read_bandwidth() {
  const size_t n = size_t{256} << 20;
  std::vector<char> a(n, 1), b(n, 2);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), n);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  if (b[n / 2] != 1) std::puts("");
  return static_cast<double>(n) / best;
}

struct Variant {
  std::string name;
  bool construct = false, start = false;
  precprobe::Level level = precprobe::Level::kL1;
  bool async = true;
  bool monitor = false;
  precprobe::Task task = precprobe::Task::kStatistics;
  bool unselected = false;  // "step" selects none of the steps run ("1000000-2000000/100")
  bool on_anomaly = false;  // "record": "on_anomaly", start(model, opt) + run_step
  bool range = false;       // "statistics": {"range": true}
  // No debugger: a global RecordFunction callback registered as the debugger's (inputs and
  // outputs, function and backward scopes) whose start and end do nothing. What any op
  // observer pays in LibTorch before it does anything: a floor for every recording mode.
  bool empty_callbacks = false;
  // No debugger: bench_floor.h's FloorProbe, the least L1 statistics must do (the kernel
  // over every tensor version once a step), on the op's thread (1) or handed to a worker (2);
  // or the least overflow_check must do (3: each new output tested for NaN/Inf).
  int floor = 0;
  bool no_watch = false;  // "watch": false (the op watchpoints off; docs/watchpoints.md)
};

Variant floor_variant(const std::string& name, int floor) {
  Variant v;
  v.name = name;
  v.floor = floor;
  return v;
}

// L1 (async) with the op watchpoints off: their cost is the difference with "L1 statistics
// (async)".
Variant no_watch_variant() {
  Variant v;
  v.name = "L1 without op watch (async)";
  v.construct = v.start = true;
  v.no_watch = true;
  return v;
}

// --malloc: "tuned" applies "tune_malloc"'s settings before anything runs, so that every
// variant (the one without a debugger too) runs with them; "default" leaves glibc's
// defaults everywhere (tune_malloc false). One process cannot hold both: once set, the
// settings stay.
bool g_tuned_malloc = true;

void apply_malloc_mode(const std::string& mode) {
  g_tuned_malloc = mode != "default";
  if (g_tuned_malloc) apply_tuned_malloc();
  std::printf("malloc: %s\n", g_tuned_malloc ? "tuned for every variant (M_TRIM_THRESHOLD 1 GiB, "
                                               "M_MMAP_THRESHOLD 32 MiB: \"tune_malloc\")"
                                             : "glibc's defaults (\"tune_malloc\": false)");
}

// A global RecordFunction callback registered as the debugger's (inputs and outputs,
// function and backward scopes) that does nothing: what LibTorch makes any op observer pay.
at::CallbackHandle add_empty_callback() {
  auto start = [](const at::RecordFunction&) -> std::unique_ptr<at::ObserverContext> {
    return nullptr;
  };
  auto end = [](const at::RecordFunction&, at::ObserverContext*) {};
  return at::addGlobalCallback(
      at::RecordFunctionCallback(start, end)
          .needsInputs(true)
          .needsOutputs(true)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}

struct RunResult {
  std::vector<double> step_ms;     // wall clock
  std::vector<double> thread_ms;   // CPU time of the training thread
  std::vector<double> process_ms;  // CPU time of all threads (worker, writer included)
  std::vector<double> faults;      // minor page faults of the process
  precprobe::DebuggerCounters counters;
  int64_t steps = 0;
  std::string meta_counters;  // of the last run
  int64_t snapshot_bytes = 0;
  uint64_t floor_bytes = 0;  // FloorProbe::bytes()
  int64_t steps_floor = 0;
};

void run_variant(Trainer& tr, const Variant& v, int steps, int warmup, const std::string& dump,
                 RunResult& res) {
  std::unique_ptr<precprobe::PrecisionDebugger> dbg;
  if (v.construct) {
    precprobe::DebuggerOptions o;
    o.dump_path = dump;
    o.overwrite = true;
    o.level = v.level;
    o.async_stats = v.async;
    o.keep_dropout = true;  // the same arithmetic in every variant
    o.tune_malloc = g_tuned_malloc;
    o.grad_monitor = v.monitor;
    if (v.on_anomaly) o.record = precprobe::RecordMode::kOnAnomaly;
    o.task = v.task;
    o.overflow_nums = -1;
    o.range_stats = v.range ? precprobe::RangeStats::kTraining : precprobe::RangeStats::kOff;
    o.watch.enable = !v.no_watch;
    // PRECPROBE_BENCH_OPS_ENCODING=json: the op records as JSON Lines (before the binary
    // default), for a before/after in one sitting.
    if (const char* e = getenv("PRECPROBE_BENCH_OPS_ENCODING"))
      o.ops_encoding = std::string(e) == "json" ? precprobe::OpsEncoding::kJsonLines
                                                : precprobe::OpsEncoding::kBinary;
    if (v.unselected) o.step.add_every(1000000, 2000000, 100);
    dbg = std::make_unique<precprobe::PrecisionDebugger>(o);
    if (v.start && v.on_anomaly) {
      dbg->start(tr.model.ptr(), tr.opt);
    } else if (v.start) {
      dbg->start(tr.model.ptr());
    }
  }
  std::optional<at::CallbackHandle> empty;
  if (v.empty_callbacks) empty = add_empty_callback();
  std::unique_ptr<precprobe::bench::FloorProbe> floor;
  if (v.floor != 0)
    floor = std::make_unique<precprobe::bench::FloorProbe>(
        v.floor == 1   ? precprobe::bench::FloorProbe::Mode::kInline
        : v.floor == 2 ? precprobe::bench::FloorProbe::Mode::kWorker
                       : precprobe::bench::FloorProbe::Mode::kNonFinite);
  for (int i = 0; i < warmup + steps; ++i) {
    const double c0 = cpu_ms(CLOCK_THREAD_CPUTIME_ID), p0 = cpu_ms(CLOCK_PROCESS_CPUTIME_ID);
    const long f0 = minor_faults();
    auto t0 = Clock::now();
    if (dbg && v.on_anomaly) {
      dbg->run_step([&] { return tr.step(); });
    } else {
      tr.step();
      if (dbg) dbg->step();
      if (floor) floor->end_step();
    }
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (i >= warmup) {
      res.step_ms.push_back(ms);
      res.thread_ms.push_back(cpu_ms(CLOCK_THREAD_CPUTIME_ID) - c0);
      res.process_ms.push_back(cpu_ms(CLOCK_PROCESS_CPUTIME_ID) - p0);
      res.faults.push_back(static_cast<double>(minor_faults() - f0));
    }
  }
  if (empty) at::removeCallback(*empty);
  if (floor) {
    res.floor_bytes += floor->bytes();
    res.steps_floor += warmup + steps;
    floor.reset();
  }
  if (dbg) {
    dbg->stop();
    if (v.start) {  // the engine's counters, from meta.json
      std::ifstream meta(dump + "/rank0/meta.json");
      std::string text((std::istreambuf_iterator<char>(meta)), std::istreambuf_iterator<char>());
      auto a = text.find("\"counters\""), b = text.find('}', a);
      if (a != std::string::npos) res.meta_counters = text.substr(a, b - a + 1);
    }
    auto c = dbg->counters();
    res.snapshot_bytes = c.snapshot_bytes;
    res.counters.ops_seen += c.ops_seen;
    res.counters.ops_recorded += c.ops_recorded;
    res.counters.tensors_summarised += c.tensors_summarised;
    res.counters.tensors_cached += c.tensors_cached;
    res.counters.bytes_summarised += c.bytes_summarised;
    res.counters.errors += c.errors;
    res.counters.writer.bytes_compressed += c.writer.bytes_compressed;
    res.counters.writer.bytes_uncompressed += c.writer.bytes_uncompressed;
    res.counters.writer.records_written += c.writer.records_written;
    res.steps += warmup + steps;
  }
}

// µs per recorded op: many tiny ops with and without a started debugger, in CPU time of
// the training thread and of the whole process (worker and writer threads included).
void fixed_cost(const std::string& dump, int ops_per_step) {
  auto a = torch::randn({4}), b = torch::randn({4});
  const int n = 20000;
  precprobe::PrecisionDebugger* stepped = nullptr;  // the debugger whose step() ends a step
  auto time = [&](double* process) {
    const double c0 = cpu_ms(CLOCK_THREAD_CPUTIME_ID), p0 = cpu_ms(CLOCK_PROCESS_CPUTIME_ID);
    for (int i = 0; i < n; ++i) {
      auto c = at::add(a, b);
      if (ops_per_step > 0 && (i + 1) % ops_per_step == 0 && stepped) stepped->step();
    }
    *process = (cpu_ms(CLOCK_PROCESS_CPUTIME_ID) - p0) * 1e3 / n;
    return (cpu_ms(CLOCK_THREAD_CPUTIME_ID) - c0) * 1e3 / n;
  };
  for (bool async : {true, false}) {
    std::vector<double> base, with, base_all, with_all;
    for (int r = 0; r < 5; ++r) {
      double p = 0;
      base.push_back(time(&p));
      base_all.push_back(p);
      precprobe::DebuggerOptions o;
      o.dump_path = dump;
      o.overwrite = true;
      o.async_stats = async;
      precprobe::PrecisionDebugger dbg(o);
      dbg.start();
      stepped = &dbg;
      with.push_back(time(&p));
      stepped = nullptr;
      dbg.stop();
      with_all.push_back(p);
    }
    const std::string steps =
        ops_per_step > 0 ? "steps of " + std::to_string(ops_per_step) + " ops" : "one step";
    std::printf(
        "fixed cost per record (aten::add of 4 floats, %s, %s): training thread %.2f us, "
        "all threads %.2f us (the op alone %.2f us)\n",
        async ? "async" : "sync", steps.c_str(), median(with) - median(base),
        median(with_all) - median(base_all), median(base));
  }
  // The part of it LibTorch's RecordFunction takes before the debugger's code runs.
  std::vector<double> base, with;
  for (int r = 0; r < 5; ++r) {
    double p = 0;
    base.push_back(time(&p));
    const at::CallbackHandle h = add_empty_callback();
    with.push_back(time(&p));
    at::removeCallback(h);
  }
  std::printf("  of which RecordFunction alone (a callback doing nothing): %.2f us\n",
              median(with) - median(base));
}

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  for (const char* p = s; *p;) {
    v.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes{256, 1024};
  int steps = 30, rounds = 5, warmup = 5;
  std::string only;  // run this variant only (for profiling), e.g. "L1 statistics (async)"
  bool fixed_only = false;
  int fixed_step = 0;
  int records = -1;
  std::string task = "statistics";
  std::string malloc_mode = "tuned";
  std::string threading = "free-core";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--h") sizes = parse_list(argv[i + 1]);
    if (k == "--steps") steps = std::atoi(argv[i + 1]);
    if (k == "--rounds") rounds = std::atoi(argv[i + 1]);
    if (k == "--warmup") warmup = std::atoi(argv[i + 1]);
    if (k == "--only") only = argv[i + 1];
    if (k == "--fixed-only") fixed_only = std::atoi(argv[i + 1]) != 0;
    if (k == "--fixed-step") fixed_step = std::atoi(argv[i + 1]);
    if (k == "--records") records = std::atoi(argv[i + 1]);
    if (k == "--task") task = argv[i + 1];
    if (k == "--malloc") malloc_mode = argv[i + 1];
    if (k == "--threads") threading = argv[i + 1];
  }
  apply_malloc_mode(malloc_mode);
  if (!precprobe::bench::apply_threading(threading)) return 2;
  torch::manual_seed(0);
  const std::string dump =
      (std::filesystem::temp_directory_path() / ("precprobe_bench_" + std::to_string(::getpid())))
          .string();
  if (records >= 0) {
    auto a = torch::randn({4}), b = torch::randn({4});
    std::unique_ptr<precprobe::PrecisionDebugger> dbg;
    if (task != "none") {
      precprobe::DebuggerOptions o;
      o.dump_path = dump;
      o.overwrite = true;
      if (task == "overflow_check") o.task = precprobe::Task::kOverflowCheck;
      dbg = std::make_unique<precprobe::PrecisionDebugger>(o);
      dbg->start();
    }
    for (int i = 0; i < records; ++i) {
      auto c = at::add(a, b);
      if (dbg && fixed_step > 0 && (i + 1) % fixed_step == 0) dbg->step();
    }
    if (dbg) dbg->stop();
    std::filesystem::remove_all(dump);
    return 0;
  }
  if (fixed_only) {
    fixed_cost(dump, fixed_step);
    std::filesystem::remove_all(dump);
    return 0;
  }
  const double bw = memcpy_read_bandwidth();
  std::printf("memcpy bandwidth: %.1f GB/s read\n", bw / 1e9);

  const std::vector<Variant> variants{
      {"no debugger", false, false},
      {"constructed, not started", true, false},
      {"L1 statistics (async)", true, true, precprobe::Level::kL1, true},
      {"L1 statistics (sync)", true, true, precprobe::Level::kL1, false},
      no_watch_variant(),
      {"L1 + range (async)", true, true, precprobe::Level::kL1, true, false,
       precprobe::Task::kStatistics, false, false, true},
      {"L1 + range (sync)", true, true, precprobe::Level::kL1, false, false,
       precprobe::Task::kStatistics, false, false, true},
      {"L2 statistics (async)", true, true, precprobe::Level::kL2, true},
      {"L1 + gradient monitor", true, true, precprobe::Level::kL1, true, true},
      {"on_anomaly (healthy steps)", true, true, precprobe::Level::kL2, true, false,
       precprobe::Task::kStatistics, false, true},
      {"L1 overflow_check", true, true, precprobe::Level::kL1, true, false,
       precprobe::Task::kOverflowCheck},
      {"L1, step not selected", true, true, precprobe::Level::kL1, true, false,
       precprobe::Task::kStatistics, true},
      {"RecordFunction alone", false, false, precprobe::Level::kL1, true, false,
       precprobe::Task::kStatistics, false, false, false, true},
      floor_variant("floor: kernel inline", 1),
      floor_variant("floor: kernel on worker", 2),
      floor_variant("floor: NaN/Inf test inline", 3),
  };
  for (int64_t h : sizes) {
    Trainer tr(h);
    for (int i = 0; i < 3; ++i) tr.step();
    std::map<std::string, RunResult> res;
    for (int r = 0; r < rounds; ++r)
      for (const auto& v : variants)
        if (only.empty() || selected(only, v.name) || v.name == "no debugger")
          run_variant(tr, v, steps, warmup, dump, res[v.name]);
    const double base = median(res["no debugger"].step_ms);
    const double base_cpu = median(res["no debugger"].thread_ms);
    const double base_all = median(res["no debugger"].process_ms);
    std::printf(
        "\nh=%ld  (%d rounds x %d timed steps; medians; wall = step time, train = CPU "
        "time of the training thread, all = CPU time of every thread)\n",
        static_cast<long>(h), rounds, steps);
    for (const auto& v : variants) {
      const RunResult& x = res[v.name];
      if (x.step_ms.empty()) continue;
      const double m = median(x.step_ms), c = median(x.thread_ms), p = median(x.process_ms);
      std::printf(
          "  %-26s wall %8.2f ms %6.3fx | train %8.2f ms %6.3fx | all %8.2f ms %6.3fx | %6.0f "
          "faults\n",
          v.name.c_str(), m, m / base, c, c / base_cpu, p, p / base_all, median(x.faults));
      std::printf("  %-26s", "");
      if (x.steps > 0) {
        const double per_step = static_cast<double>(x.counters.ops_recorded) / x.steps;
        const uint64_t tensors = x.counters.tensors_summarised + x.counters.tensors_cached;
        const double disk = static_cast<double>(x.counters.writer.bytes_compressed);
        if (tensors > 0) {
          std::printf("%5.0f records/step, cache hits %4.1f%%, %5.1f B/tensor on disk", per_step,
                      100.0 * x.counters.tensors_cached / tensors, disk / tensors);
        } else {  // no op recorded: on_anomaly's loss and grads records, for instance
          std::printf("%5.0f records/step, %.0f B/step on disk", per_step, disk / x.steps);
        }
        if (x.counters.errors) std::printf("  ERRORS %lu", (unsigned long)x.counters.errors);
        const double bytes = static_cast<double>(x.counters.bytes_summarised) / x.steps;
        std::printf("\n  %-26s stats read %.1f MB/step; at memcpy speed %.2f ms (%.3fx if inline)",
                    "", bytes / 1e6, 1e3 * bytes / bw, 1.0 + 1e3 * bytes / bw / base);
      }
      if (x.steps_floor > 0)
        std::printf("stats read %.1f MB/step (each tensor version once)",
                    static_cast<double>(x.floor_bytes) / x.steps_floor / 1e6);
      std::printf("\n");
      if (getenv("BENCH_VERBOSE") && !x.meta_counters.empty())
        std::printf("%s\n", x.meta_counters.c_str());
    }
    const RunResult& oa = res["on_anomaly (healthy steps)"];
    if (oa.snapshot_bytes > 0) {
      int64_t params = 0, state = 0;
      for (const auto& p : tr.model->parameters()) params += p.numel() * p.element_size();
      for (const auto& p : tr.model->buffers()) params += p.numel() * p.element_size();
      for (const auto& kv : tr.opt.state()) {
        auto& a = static_cast<torch::optim::AdamWParamState&>(*kv.second);
        for (const auto* t : {&a.exp_avg(), &a.exp_avg_sq(), &a.max_exp_avg_sq()})
          if (t->defined()) state += t->numel() * t->element_size();
      }
      std::printf(
          "  on_anomaly snapshot: %.2f MB (parameters + buffers %.2f MB, AdamW state %.2f MB, "
          "RNG %.3f MB)\n",
          oa.snapshot_bytes / 1e6, params / 1e6, state / 1e6,
          (oa.snapshot_bytes - params - state) / 1e6);
    }
  }
  if (only.empty()) fixed_cost(dump, fixed_step);
  std::filesystem::remove_all(dump);
  return 0;
}
