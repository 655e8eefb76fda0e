// DebuggerOptions: what the PrecisionDebugger records, from C++ or an msprobe-style
// config.json. Torch-free (the config parser is fuzzed without LibTorch).
//
// Keys shared with msprobe mean the same thing there; our own keys are documented in
// docs/config.md beside them. Parsing and validate() throw precprobe::Error naming the key,
// the bad value and what is allowed; an unknown key gets a "did you mean" suggestion.
// A DebuggerOptions is a plain value: copy it freely; the matchers are const and
// thread-safe once built.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "precprobe/op_watch.h"
#include "precprobe/writer.h"

namespace precprobe {

/// "task": what is dumped.
enum class Task : uint8_t {
  kStatistics,     ///< "statistics": per-tensor health counts and statistics (default)
  kTensor,         ///< "tensor": statistics, plus full tensors of the ops `list`/`scope` select
  kOverflowCheck,  ///< "overflow_check": only calls whose outputs turn non-finite
};

/// "level": which ops are observed.
enum class Level : uint8_t {
  kL1,  ///< "L1": the outermost ATen op of each call from user code (depth 0 only)
  kL2,  ///< "L2": every ATen op, nested ones included
};

/// The names config.json and meta.json use: "statistics" | "tensor" | "overflow_check".
std::string_view to_string(Task t) noexcept;
/// "L1" | "L2".
std::string_view to_string(Level l) noexcept;

/// "summary_mode": what is computed per tensor.
enum class SummaryMode : uint8_t {
  kStatistics,  ///< "statistics": counts, min, max, mean, norm
  kHash,        ///< "hash" (alias "md5"): statistics plus an XXH3-64 hash of the values
};

/// "<task>.range": which ops' floating tensors get range statistics (TensorStats::range).
enum class RangeStats : uint8_t {
  kOff,       ///< false: none
  kTraining,  ///< true: ops run with grad mode on (the model's forward in training) and every
              ///< op of the backward; not the optimizer step, clip_grad_norm_ or evaluation
              ///< under no_grad, which AMP keeps in fp32 anyway
  kAll,       ///< "all": every recorded op
};

/// "record": which steps write op records.
enum class RecordMode : uint8_t {
  kAlways,     ///< "always": every step "step" selects (default)
  kOnAnomaly,  ///< "on_anomaly": only a step PrecisionDebugger::run_step() found anomalous,
               ///< replayed from the snapshot taken before it (docs/debugger.md)
};

/// "on_anomaly": what makes a step anomalous under "record": "on_anomaly".
struct AnomalyTriggers {
  bool loss_nonfinite = true;  ///< "loss_nonfinite": the loss is NaN or ±Inf
  bool grad_nonfinite = true;  ///< "grad_nonfinite": a parameter's gradient holds NaN/Inf
  /// "loss_spike": {"k": K, "n": N}: the loss exceeds K × the median of the last N healthy
  /// losses (median > 0). spike_k = 0: off (the default; "loss_spike": false).
  double spike_k = 0;
  int64_t spike_n = 20;
  /// "max_replays": replays per run; later anomalies are not watched (0: never replay).
  int64_t max_replays = 1;
};

/// A set of integers from msprobe's syntax: [1, 3, "5-7"]; empty = all.
class IntSet {
 public:
  IntSet() = default;
  /// Adds [lo, hi] inclusive; overlapping and adjacent ranges are merged. Throws
  /// precprobe::Error when lo > hi.
  void add(int64_t lo, int64_t hi);
  /// Adds every `every`-th value of [lo, hi]: lo, lo + every, ... ("lo-hi/every"). `every`
  /// 1 is add(lo, hi). Throws precprobe::Error when lo > hi or every < 1.
  void add_every(int64_t lo, int64_t hi, int64_t every);
  bool empty() const noexcept { return ranges_.empty() && strided_.empty(); }
  /// True when empty (meaning "all") or when v is inside a range (on its stride).
  /// O(log ranges + strided ranges).
  bool contains(int64_t v) const noexcept;
  /// Largest value, or nullopt when empty.
  std::optional<int64_t> max() const noexcept;
  /// msprobe-style text, e.g. `[1, "5-7"]`.
  std::string to_json() const;
  /// The contiguous ranges, sorted, disjoint and not touching.
  const std::vector<std::pair<int64_t, int64_t>>& ranges() const noexcept { return ranges_; }
  /// A range with a stride: lo, lo + every, ... up to hi (every >= 2; hi is on the stride).
  struct Strided {
    int64_t lo, hi, every;
    bool operator==(const Strided& o) const noexcept {
      return lo == o.lo && hi == o.hi && every == o.every;
    }
  };
  /// The strided ranges, in the order added (they may overlap each other and ranges()).
  const std::vector<Strided>& strided() const noexcept { return strided_; }

 private:
  std::vector<std::pair<int64_t, int64_t>> ranges_;
  std::vector<Strided> strided_;
};

struct DebuggerOptions {
  // ---- msprobe keys ----
  /// "task"
  Task task = Task::kStatistics;
  /// "dump_path": the dump directory; rank<R>/ subdirectories are created inside.
  std::string dump_path = "./precprobe_dump";
  /// "rank": ranks that record; empty = all.
  IntSet rank;
  /// "step": steps that record; empty = all.
  IntSet step;
  /// "level"
  Level level = Level::kL1;
  /// "seed": when set, start() calls seed_all(seed, is_deterministic).
  std::optional<uint64_t> seed;
  /// "is_deterministic": deterministic algorithms (with "seed").
  bool is_deterministic = false;
  /// "<task>.scope": two op names bounding a range of records (inclusive), or one scope
  /// path prefix ("encoder/block1"); empty = no restriction.
  std::vector<std::string> scope;
  /// "<task>.list": names to record: exact ("aten::addmm.0.forward"), substrings
  /// ("addmm"), or regexes written "name-regex(...)"; empty = all.
  std::vector<std::string> list;
  /// "<task>.data_mode": any of "all", "forward", "backward", "input", "output".
  bool dump_forward = true;
  bool dump_backward = true;
  bool dump_inputs = true;
  bool dump_outputs = true;
  /// "<task>.summary_mode"
  SummaryMode summary_mode = SummaryMode::kStatistics;
  /// "<task>.range": also count, per floating tensor, the binary exponents of its finite
  /// non-zero values (TensorStats::range), from which `precprobe precision` tells what
  /// would overflow or flush to zero in fp16, bf16 or fp8. Cost: docs/config.md.
  RangeStats range_stats = RangeStats::kOff;
  /// "overflow_check.overflow_nums": stop after this many overflow records; -1 = unlimited.
  int64_t overflow_nums = 1;

  // ---- precprobe keys (documented in docs/config.md) ----
  /// "enable": false makes the debugger a no-op that costs nothing and needs no `if` in the
  /// program: start() creates nothing, run_step() only calls its lambda, every other member
  /// returns at once (docs/debugger.md, "Switching it off"). The environment variable
  /// PRECPROBE_DISABLE=1 does the same without reading any configuration.
  bool enable = true;
  /// "keep_dropout": do not force dropout to p=0 while started.
  bool keep_dropout = false;
  /// "overwrite": allow a non-empty dump directory (its files are replaced).
  bool overwrite = false;
  /// "async_stats": compute statistics on a worker thread from held references.
  bool async_stats = true;
  /// "grad_monitor": record per-parameter gradient statistics each step (needs a model).
  bool grad_monitor = true;
  /// "queue_capacity", "overflow_policy" ("block" | "drop"), "flush_every_records",
  /// "flush_interval_ms", "zstd_level", "fsync": passed to the DumpWriter. While the disk
  /// lags the training, up to 2 x queue_capacity records (~0.8 KiB each) wait in memory.
  size_t queue_capacity = 65536;
  OverflowPolicy overflow_policy = OverflowPolicy::kBlock;
  size_t flush_every_records = 4096;
  int flush_interval_ms = 1000;
  int zstd_level = 3;
  bool fsync = false;
  /// "ops_encoding": "binary" (ops.bin.zst, the default: cheaper to write, several times
  /// faster to read; docs/dump-format.md) or "json" (ops.jsonl.zst, JSON Lines for zstdcat |
  /// jq). Every command reads either; `precprobe export` turns either into CSV or JSON Lines.
  OpsEncoding ops_encoding = OpsEncoding::kBinary;
  /// "max_tensor_bytes": the tensor task saves no tensor larger than this.
  int64_t max_tensor_bytes = int64_t{256} << 20;
  /// "signal_flush": on the first start(), install SIGTERM/SIGINT handlers that flush the
  /// dump and then chain to the program's own handlers (precprobe/signal_flush.h).
  bool signal_flush = true;
  /// "crash_flush": on the first start(), install handlers of SIGSEGV, SIGBUS, SIGFPE, SIGILL
  /// and SIGABRT that write a crash record and what is complete, then hand the signal on to
  /// the handler installed before (or the default action) (precprobe/crash_flush.h).
  bool crash_flush = true;
  /// "crash_flush_timeout_ms": how long the handler of a fatal signal waits for the flush.
  int crash_flush_timeout_ms = 2000;
  /// "replica_check_every": every N steps, step() runs check_replicas() over the process
  /// group given to the debugger and records the result (events stream); 0 = never. A
  /// collective: every rank must call step() equally often. Needs start(model).
  int64_t replica_check_every = 0;
  /// "record": "always" or "on_anomaly" (needs start(model, optimizer) and run_step()).
  RecordMode record = RecordMode::kAlways;
  /// "on_anomaly": the triggers of "record": "on_anomaly".
  AnomalyTriggers on_anomaly;
  /// "watch": the op watchpoints (precprobe/op_watch.h, docs/watchpoints.md): the model's
  /// activations judged against their own history as they are written; hits in the events
  /// stream ("watch") and through PrecisionDebugger::watch_hits(). false: off.
  OpWatchOptions watch;
  /// "max_calls_per_op": record at most this many calls of each op name (per direction)
  /// per step, the first ones; -1 = all. Later calls cost a callback and a counter.
  int64_t max_calls_per_op = -1;
  /// "reuse_across_steps": a tensor summarised in an earlier step and unchanged since (same
  /// storage, version counter, sizes and strides, and the same bytes in a fingerprint of its
  /// memory) is not read again; its statistics are reused. Only tensors of 16 KiB and more
  /// of the CPU allocator's memory (not from_blob). false: every tensor is read every step.
  bool reuse_across_steps = true;
  /// "tune_malloc": at the first start(), set glibc's M_TRIM_THRESHOLD (1 GiB) and
  /// M_MMAP_THRESHOLD (32 MiB) for the process, unless the program set its own malloc
  /// tunables: the probe's allocations otherwise make glibc return freed memory to the kernel
  /// every step, and the program faults it in again (src/probe/support/malloc_tuning.h).
  bool tune_malloc = true;

  /// Parses config.json text. Throws precprobe::Error (key, value, what is allowed).
  static DebuggerOptions from_json(const std::string& json_text);
  /// Reads and parses a file; errors name the file.
  static DebuggerOptions from_json_file(const std::string& path);
  /// from_json_file($PRECPROBE_CONFIG) when that variable is set and not empty, else
  /// `fallback`. Errors say that the path came from PRECPROBE_CONFIG.
  static DebuggerOptions from_env_or(const DebuggerOptions& fallback);

  /// Throws precprobe::Error when fields contradict each other or are out of range.
  void validate() const;
  /// The effective configuration as JSON (msprobe layout, keys in config.json's order),
  /// written to meta.json's "config".
  nlohmann::ordered_json to_json_value() const;
  /// to_json_value() as indented text: a config.json that from_json() reads back. Strings
  /// set from C++ that are not UTF-8 are written with U+FFFD in place of the bad bytes.
  std::string to_json() const;
};

/// Decides from an op's name whether `list` selects it. Build once, then call from any
/// thread. Empty list: everything matches. Plain entries match as case-sensitive
/// substrings (an exact full name is one); "name-regex(P)" entries are ECMAScript regexes
/// searched anywhere in the name (anchor P with ^...$ for a full match).
class NameMatcher {
 public:
  /// Matches everything. Defined out of line: Impl is incomplete here.
  NameMatcher();
  /// Throws precprobe::Error on a bad "name-regex(...)".
  explicit NameMatcher(const std::vector<std::string>& list);
  ~NameMatcher();
  NameMatcher(NameMatcher&&) noexcept;
  NameMatcher& operator=(NameMatcher&&) noexcept;
  /// `full_name` like "aten::addmm.0.forward", `op` like "aten::addmm".
  bool matches(const std::string& full_name) const;
  bool empty() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace precprobe
