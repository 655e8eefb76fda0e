// The records a dump holds, shared by the probe (which fills them), the writer (which
// encodes them as JSON Lines) and the reader (which decodes them). Torch-free.
//
// Field names on disk are specified in docs/dump-format.md; the comments here give the
// key each field is written under. Plain value types: safe to copy between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace precprobe {

/// Whether an op ran in the forward pass or inside autograd's backward.
enum class Direction : uint8_t {
  kForward,   ///< "forward": called from user code (or the optimizer)
  kBackward,  ///< "backward": run by the autograd engine
};

std::string_view to_string(Direction d) noexcept;

/// The largest value span (max - min + 1) and number of distinct values for which an integer
/// tensor's "hist" is recorded.
inline constexpr int64_t kHistogramSpan = 1024;
inline constexpr size_t kHistogramBins = 256;
/// Integer tensors with more elements get no "hist" (a batch of class labels is far smaller;
/// large index tensors, e.g. max_pool's, would cost a second pass for nothing).
inline constexpr int64_t kHistogramMaxNumel = int64_t(1) << 16;

/// The binary exponents a TensorStats::range bin may have: every finite non-zero double lies
/// in [2^kRangeMinExponent, 2^(kRangeMaxExponent + 1)) (subnormals included).
inline constexpr int32_t kRangeMinExponent = -1074;
inline constexpr int32_t kRangeMaxExponent = 1023;

/// Health and statistics of one tensor. Counts are exact; min/max/mean/norm are over the
/// finite values only (NaN when there are none) and accumulated in float64.
struct TensorStats {
  std::string dtype;             ///< "dtype": c10 name, e.g. "Float", "BFloat16", "Long"
  std::vector<int64_t> shape;    ///< "shape"
  std::string device = "cpu";    ///< "device": e.g. "cpu", "cuda:0"
  bool requires_grad = false;    ///< "rg" (written only when true)
  int64_t numel = 0;             ///< "numel"
  int64_t nan = 0;               ///< "nan": NaN elements
  int64_t pinf = 0;              ///< "pinf": +Inf elements
  int64_t ninf = 0;              ///< "ninf": -Inf elements
  int64_t zero = 0;              ///< "zero": elements == 0 (both signs)
  int64_t neg = 0;               ///< "neg": finite elements < 0
  int64_t pos = 0;               ///< "pos": finite elements > 0
  double min = 0;                ///< "min" over finite values
  double max = 0;                ///< "max" over finite values
  double mean = 0;               ///< "mean" over finite values
  double norm = 0;               ///< "norm": L2 norm over finite values
  std::optional<uint64_t> hash;  ///< "hash": XXH3-64 of dtype+shape+values (precprobe/hash.h)
  std::string param;             ///< "param": parameter name when the tensor is a parameter
  int64_t list_index = -1;       ///< "li": position inside a TensorList argument, else -1
  /// "hist": value histogram of an integer tensor (class labels, indices) as (value, count)
  /// pairs in ascending value order; only for CPU integer tensors of at most
  /// kHistogramMaxNumel elements whose values span fewer than kHistogramSpan consecutive
  /// integers and take at most kHistogramBins values, else empty (and not written).
  std::vector<std::pair<int64_t, int64_t>> hist;
  /// "range": where the finite non-zero magnitudes lie (config "statistics": {"range": true}):
  /// for each binary exponent e, the number of elements with 2^e <= |x| < 2^(e+1), as (e,
  /// count) pairs in ascending e, empty bins left out (float32 values span e = -149..127).
  /// Recorded for floating tensors (complex: their components) when has_range is true.
  std::vector<std::pair<int32_t, int64_t>> range;
  /// Whether "range" was recorded. False in dumps written without the switch or before it
  /// existed, and for non-floating tensors: a reader then has no range statistics (which is
  /// not the same as a recorded, empty `range`: no finite non-zero element).
  bool has_range = false;

  int64_t non_finite() const noexcept { return nan + pinf + ninf; }
  bool all_finite() const noexcept { return non_finite() == 0; }
  /// Largest |x| over the finite values (derived from min and max, not stored).
  double abs_max() const noexcept;
};

/// One input or output of an op call: a tensor, or a non-tensor value kept as JSON text
/// (e.g. `1`, `0.5`, `[1,2]`, `"mean"`, `null`, `true`).
struct Arg {
  std::optional<TensorStats> tensor;  ///< set for tensors
  std::string value;                  ///< JSON text for everything else
  bool is_tensor() const noexcept { return tensor.has_value(); }
};

/// One op call, as written to ops.jsonl.zst (one JSON line each).
struct OpRecord {
  int64_t step = 0;                     ///< "step": the value of PrecisionDebugger::step() count
  int64_t seq = 0;                      ///< "seq": execution order within the step (this rank)
  std::string op;                       ///< "op": e.g. "aten::addmm"
  std::string overload;                 ///< "ovl": overload name, e.g. "Tensor" (written if any)
  int64_t call = 0;                     ///< "call": per-(op, direction) call index, reset each step
  Direction dir = Direction::kForward;  ///< "dir": "forward" | "backward"
  uint32_t thread = 0;                  ///< "thr": small thread index (0 = first thread seen)
  int32_t depth = 0;                    ///< "depth": nesting depth of observed ops (0 = outermost)
  int64_t seqnr = -1;  ///< "sn": autograd sequence number linking fwd op and bwd node
  /// "grad": forward ops only: the grad mode the op ran under (the caller's
  /// GradMode::is_enabled()), which tells a training pass (on) from an evaluation or sampling
  /// pass (off, NoGradGuard). Written as `"grad":false` when off and left out when on or
  /// unknown; parse_record reads an absent key as unknown (nullopt), DumpReader as true on the
  /// forward ops of ranks whose meta.json says the ops carry the mode (RunMeta::ops_grad_mode),
  /// so a dump of an older writer stays unknown. Backward ops: unknown.
  std::optional<bool> grad;
  /// "bg": run on a thread outside the training step (a data-loader worker, a thread the
  /// program started; docs/debugger.md, "Threads"): `"bg":true`, absent otherwise. Its step is
  /// the one running when it ran (timing decides), its call index counts its own thread's
  /// calls; `compare` leaves such ops out of the step's sequence.
  bool background = false;
  /// "opt": ran inside an optimizer's step() as the program told it (the Python door hooks
  /// each optimizer's step): `"opt":true`, absent otherwise (not told, or not in a step).
  /// The analyses tell gradient clipping after backward from the optimizer's work by it
  /// (docs/cli.md, "Modules").
  bool optimizer = false;
  std::string scope;  ///< "scope": precprobe::Scope path, "a/b/c" (written if any)
  /// "mod": the module the probe placed the op in while the program ran, by the rule of the
  /// analyses (docs/cli.md, "Modules"), where the dump does not hold the ops that place it:
  /// the records of `"task": "overflow_check"`. Written if any; the analyses take it as is.
  std::string module;
  std::string node;          ///< "node": backward only: autograd node, e.g. "MulBackward0"
  std::vector<Arg> inputs;   ///< "in"
  std::vector<Arg> outputs;  ///< "out"
  int rank = 0;              ///< not stored per line: the reader fills it from rank<R>/

  /// msprobe-style name: "aten::addmm.3.forward".
  std::string name() const;
  /// The same name, assigned to `out` (whose storage it keeps: a reader of many records).
  void name_into(std::string& out) const;
  /// True when the op's outputs are uninitialized memory (aten::empty, empty_like,
  /// empty_strided, empty_permuted, empty_quantized, new_empty, new_empty_strided,
  /// _empty_affine_quantized, _empty_per_channel_affine_quantized): their values say nothing
  /// about the run.
  bool outputs_uninitialized() const noexcept;
  /// True when any output tensor holds NaN/Inf (never for outputs_uninitialized() ops).
  bool outputs_non_finite() const noexcept;
  /// True when any input tensor holds NaN/Inf.
  bool inputs_non_finite() const noexcept;
};

/// One GradScaler event per optimizer parameter group per step (scaler.jsonl.zst).
struct ScalerRecord {
  int64_t step = 0;                     ///< "step": the scaler's own update count
  int optimizer = 0;                    ///< "opt": index of the optimizer in order of first use
  int group = 0;                        ///< "group": parameter-group index within that optimizer
  bool found_inf = false;               ///< "found_inf"
  int64_t nonfinite_params = 0;         ///< "n_bad": parameters with non-finite grads
  std::vector<std::string> bad_params;  ///< "bad": names of the first few of them
  double grad_norm_scaled = 0;          ///< "gn_scaled": L2 norm before unscale
  double grad_norm = 0;                 ///< "gn": L2 norm after unscale (finite part)
  double scale_before = 0;              ///< "scale"
  double scale_after = 0;               ///< "scale_next"
  int64_t growth_tracker = 0;           ///< "tracker": after update
  bool skipped = false;                 ///< "skipped": optimizer.step() was not run
  std::string event;                    ///< "event": "" | "backoff" | "growth" | "set" | "collapse"
  int rank = 0;                         ///< filled by the reader
};

/// One parameter per step from the gradient monitor, or from the "record": "on_anomaly" watch
/// for each step it checks (grads.jsonl.zst).
struct GradRecord {
  int64_t step = 0;          ///< "step"
  std::string param;         ///< "param"
  double grad_norm = 0;      ///< "gn": L2 norm of the gradient (finite part)
  double grad_abs_max = 0;   ///< "gmax"
  double grad_abs_mean = 0;  ///< "gmean": mean |g|
  int64_t grad_nan = 0;      ///< "gnan"
  int64_t grad_inf = 0;      ///< "ginf"
  bool has_grad = true;      ///< "has_grad": false when the parameter had no gradient
  /// false when the weights were not read (the on_anomaly watch's records): "wn" and "ur" are
  /// absent from the line, and weight_norm and update_ratio are NaN (read back: NaN too).
  bool has_weight = true;
  double weight_norm = 0;          ///< "wn"
  double update_ratio = 0;         ///< "ur": ||w_t - w_{t-1}|| / ||w_{t-1}|| (0 on the first step)
  std::vector<std::string> watch;  ///< "watch": names of watchpoints hit this step
  int rank = 0;                    ///< filled by the reader
};

/// A scalar the user logs with PrecisionDebugger::log_scalar (events.jsonl.zst).
struct ScalarRecord {
  int64_t step = 0;  ///< "step"
  std::string name;  ///< "name"
  double value = 0;  ///< "value"
  /// More members of the line, as JSON text without braces (`"trigger":"loss_nonfinite",...`),
  /// written after "value"; the "anomaly" event uses it (docs/dump-format.md). Not read back
  /// by parse_record (readers skip unknown keys).
  std::string extra;
  int rank = 0;  ///< filled by the reader
};

/// The name of the event the debugger writes when it replays an anomalous step
/// ("record": "on_anomaly"); reserved: not a user scalar. Its line also parses as a
/// ScalarRecord (value = the step), so consumers of scalars skip it (is_anomaly_event).
inline constexpr std::string_view kAnomalyEventName = "anomaly";

/// One replayed anomaly (events.jsonl.zst, name "anomaly"; docs/dump-format.md).
struct AnomalyEvent {
  int64_t step = 0;            ///< "step": the anomalous (replayed) step
  std::string name;            ///< "name": kAnomalyEventName for an anomaly
  std::string trigger;         ///< "trigger": "loss_nonfinite" | "grad_nonfinite" | "loss_spike"
  bool reproduced = false;     ///< "reproduced": the replay showed the same anomaly
  std::string origin;          ///< "origin": op name, "" when no op output was non-finite
  std::string origin_record;   ///< "origin_record": OpRecord::name() of it (tensor file prefix)
  std::string classification;  ///< "classification": "range" | "invalid" | "inherited" | "unknown"
  std::string why;             ///< "why": human text
  std::string trigger_detail;  ///< "trigger_detail": human text, e.g. "loss = nan"
  int64_t replay = 0;          ///< "replay": 1-based index of this replay in the run
  int rank = 0;                ///< filled by the reader

  bool is_anomaly() const noexcept { return name == kAnomalyEventName; }
};

/// The name of the event of an op watchpoint hit (precprobe/op_watch.h); reserved: not a
/// user scalar. Its line parses as a ScalarRecord too (value = the statistic).
inline constexpr std::string_view kWatchEventName = "watch";

/// One op watchpoint hit (events.jsonl.zst, name "watch"; docs/dump-format.md): a condition
/// that started at this op of this module.
struct OpWatchHit {
  int64_t step = 0;      ///< "step"
  std::string name;      ///< "name": kWatchEventName
  double value = 0;      ///< "value": the statistic judged (max |x|, a fraction, a count)
  std::string watch;     ///< "watch": e.g. "tensor_too_large"
  std::string module;    ///< "module": "" before the model's first parameter
  std::string record;    ///< "record": OpRecord::name() of the op, "aten::relu.3.forward"
  std::string op;        ///< "op": "aten::relu"
  int64_t seq = 0;       ///< "seq": the op's seq in its step
  double threshold = 0;  ///< "threshold": the bound crossed (for a median rule, at this step)
  std::string detail;    ///< "detail": human text, "max |x| 1.2e+03 > 10 x median 98.1"
  int rank = 0;          ///< filled by the reader

  bool is_watch() const noexcept { return name == kWatchEventName; }
  bool operator==(const OpWatchHit& o) const noexcept;
};

/// True for the debugger's anomaly event read as a scalar: not a user scalar.
inline bool is_anomaly_event(const ScalarRecord& r) noexcept { return r.name == kAnomalyEventName; }

// JSON Lines encoding. append_* write one line including the trailing '\n'.
// parse_* return false and set *error (when given) on malformed input; never throw.
void append_json(const OpRecord& r, std::string& out);
void append_json(const ScalerRecord& r, std::string& out);
void append_json(const GradRecord& r, std::string& out);
void append_json(const ScalarRecord& r, std::string& out);
/// Keys in the documented order: step, name, value (= step), trigger, reproduced, origin,
/// origin_record, classification, why, trigger_detail, replay.
void append_json(const AnomalyEvent& r, std::string& out);
/// The event as the ScalarRecord the DumpWriter queues (its members after "value" in
/// ScalarRecord::extra): the writer then writes exactly append_json(r)'s line.
ScalarRecord to_scalar_record(const AnomalyEvent& r);
bool parse_record(std::string_view line, OpRecord& out, std::string* error = nullptr);
bool parse_record(std::string_view line, ScalerRecord& out, std::string* error = nullptr);
bool parse_record(std::string_view line, GradRecord& out, std::string* error = nullptr);
bool parse_record(std::string_view line, ScalarRecord& out, std::string* error = nullptr);
/// Parses any events line (name required); out.is_anomaly() tells whether it is one.
bool parse_record(std::string_view line, AnomalyEvent& out, std::string* error = nullptr);
/// Keys in the documented order: step, name, value, watch, module, record, op, seq,
/// threshold, detail.
void append_json(const OpWatchHit& r, std::string& out);
/// The hit as the ScalarRecord the DumpWriter writes (its members after "value" in extra).
ScalarRecord to_scalar_record(const OpWatchHit& r);
/// Parses any events line (name required); out.is_watch() tells whether it is a hit.
bool parse_record(std::string_view line, OpWatchHit& out, std::string* error = nullptr);

}  // namespace precprobe
