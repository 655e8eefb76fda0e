// Watchpoints on what the ops compute (docs/watchpoints.md): the outputs of the model's forward
// ops judged against their own history, per module, from the statistics every L1 record
// already holds (NaN/Inf/zero counts, min, max, norm). After MindInsight's debugger: tensor
// overflow, tensor all zero, activation dead fraction, tensor too large / too small, tensor
// range, activation saturated.
//
// One evaluator for both uses, so that they agree hit for hit:
// - live: the DumpWriter of a PrecisionDebugger feeds it each op record as it writes it (on
//   the writer thread, in file order) and writes each hit to events.jsonl.zst ("watch");
// - after the fact: watch_dump() feeds it the records of a dump read back, rank by rank.
//
// **Example** (after the fact):
//
//     precprobe::DumpReader reader("precprobe_dump");
//     for (const auto& h : precprobe::watch_dump(reader, {}))
//       std::cout << h.step << " " << h.module << " " << h.watch << "\n";
//
// What is watched: forward ops of a training pass (grad mode on, not on a background thread)
// whose first output is a floating tensor that requires grad: the model's activations. The
// data pipeline's, the metrics' and the optimizer's ops are not. A hit is reported when its
// condition starts in a module (the first op of the module that meets it, in step order) and
// again only after a step of that module without it: few hits, each the start of something.
//
// Threads: an OpWatcher is used by one thread at a time (the writer thread, or the reader).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "precprobe/records.h"

namespace precprobe {

class DumpReader;
struct RunMeta;

/// The conditions and their thresholds; nullopt / false turns one off. The defaults come from
/// the healthy runs measured in docs/watchpoints.md. JSON: config.json's "watch" object, the
/// same names.
struct OpWatchOptions {
  /// "enable": false turns every op watchpoint off.
  bool enable = true;
  /// "tensor_overflow": a NaN or Inf in an output (at once); a mask's -inf (written by
  /// masked_fill(mask, -inf) and the like, and carried on) is not one (precprobe/analysis.h,
  /// MaskingSummary).
  bool tensor_overflow = true;
  /// "tensor_all_zero": every element of the output is 0 where this op's earlier outputs were
  /// not (a dead layer: at once).
  bool tensor_all_zero = true;
  /// "activation_dead_fraction": the fraction of zeros in a ReLU's output at or above this on
  /// `activation_dead_steps` steps in a row, while the median of its last `median_window`
  /// fractions is below it and the share of non-zeros has fallen under a quarter of its
  /// median share (out of line with its own history).
  std::optional<double> activation_dead_fraction = 0.95;
  int64_t activation_dead_steps = 5;
  /// "tensor_too_large": max |x| above this many times the median of the op's last
  /// `median_window` values, once it has `warmup` of them.
  std::optional<double> tensor_too_large_factor = 10.0;
  /// "tensor_too_large_abs": max |x| above this absolute bound (off: a scale depends on the
  /// model).
  std::optional<double> tensor_too_large_abs;
  /// "tensor_too_small": the norm above 0 and below the median of the op's last norms divided
  /// by this (a collapse), once it has `warmup` of them.
  std::optional<double> tensor_too_small_factor = 1000.0;
  /// "tensor_too_small_abs": the norm above 0 and below this absolute bound (off).
  std::optional<double> tensor_too_small_abs;
  /// "tensor_range": values leaving [range_min, range_max] (each optional, off by default),
  /// or max |x| beyond the largest finite value of `range_dtype`, a dtype one plans to train
  /// in, judged from a run in a wider one: "float16" (65504), "bfloat16" (3.39e38),
  /// "float8_e4m3fn" (448), "float8_e5m2" (57344); "" off.
  std::optional<double> range_min, range_max;
  std::string range_dtype;
  /// "activation_saturated": the fraction of a sigmoid's or tanh's output at its bounds at
  /// or above this on `activation_saturated_steps` steps in a row, while the median of its
  /// last fractions is below it. Exactly 0 of a sigmoid counts from the zero count; exactly
  /// ±1 (sigmoid, tanh) needs the range statistics ("statistics": {"range": true}). Out of
  /// line as activation_dead_fraction is: the share off the bounds under a quarter of its
  /// median share.
  std::optional<double> activation_saturated = 0.9;
  int64_t activation_saturated_steps = 5;
  /// Length of each op's history; >= 1.
  int64_t median_window = 50;
  /// Values a history needs before a median-relative condition judges it; [1, median_window].
  int64_t warmup = 5;

  /// Throws precprobe::Error naming the field ("watch.warmup") and what is allowed.
  void validate() const;
  /// The options as config.json's "watch" object.
  nlohmann::ordered_json to_json_value() const;
  /// Parses config.json's "watch": true, false, or an object of the fields above. Throws
  /// precprobe::Error naming the key.
  static OpWatchOptions from_json_value(const nlohmann::json& v, const std::string& key = "watch");
};

/// The largest finite value of a dtype named as OpWatchOptions::range_dtype takes, or nullopt
/// for a name it does not know.
std::optional<double> dtype_max(const std::string& dtype);

/// The streaming evaluator. Feed it one rank's op records in file order.
class OpWatcher {
 public:
  /// Throws precprobe::Error for options that validate() refuses.
  explicit OpWatcher(OpWatchOptions options = {});
  ~OpWatcher();
  OpWatcher(const OpWatcher&) = delete;
  OpWatcher& operator=(const OpWatcher&) = delete;

  /// The model's module order from meta.json ("modules"), for dropout modules (as summary and
  /// compare place them). Call before the first observe().
  void set_modules(const RunMeta& meta);
  /// Judges one record; appends to `hits` the hits of the records whose module is now known,
  /// in record order. A record that reads no parameter is placed in its module by a later
  /// one (the next parameter read, a backward op: docs/cli.md, "Modules"), so its hits come
  /// with that record's, or with the next step's first record, or from end_step(). Never
  /// throws (a bad_alloc loses the record's hits).
  void observe(const OpRecord& r, std::vector<OpWatchHit>& hits) noexcept;
  /// The step's records are all given (its end, or the stream's): appends the hits of the
  /// records still waiting for their module. The next record starts a step.
  void end_step(std::vector<OpWatchHit>& hits) noexcept;
  const OpWatchOptions& options() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Every op watchpoint hit of a dump, from its op records read back (one OpWatcher per rank,
/// with that rank's meta.json): what the live debugger would have written with `options`.
std::vector<OpWatchHit> watch_dump(DumpReader& reader, const OpWatchOptions& options = {});

/// A hit as the CLI's --json writes it: step, rank, module, watch, record, op, seq, value,
/// threshold, detail.
nlohmann::json watch_hit_json(const OpWatchHit& h);

/// `precprobe watch DIR` and summary's section: the hits recomputed, those the run wrote, and
/// the early warning (the first hit other than tensor_overflow before the first NaN/Inf).
struct WatchReport {
  std::vector<OpWatchHit> hits;      ///< recomputed from the op records
  std::vector<OpWatchHit> recorded;  ///< the dump's "watch" events (the live hits)
  bool live = false;                 ///< the run judged them live (meta.json's config.watch)
  OpWatchOptions options;            ///< what `hits` were judged with
  std::optional<int64_t> first_nonfinite_step;  ///< of any op output (step, then seq order)
  std::optional<std::string> first_nonfinite_op;
  std::optional<OpWatchHit> early;  ///< the first warning hit at or before that step
  /// Steps from `early` to the first NaN/Inf (0: the same step).
  int64_t steps_earlier() const noexcept;
  /// recorded == hits (only meaningful with `live`).
  bool same_as_live() const;
  nlohmann::json to_json() const;
};

/// The options the dump's run used (meta.json's config.watch of its first rank), if any.
std::optional<OpWatchOptions> recorded_watch_options(DumpReader& reader);
/// Recomputes with `options`, or those the run used, or the defaults.
WatchReport watch_report(DumpReader& reader,
                         const std::optional<OpWatchOptions>& options = std::nullopt);

}  // namespace precprobe
