// Analysis of dumps, torch-free: summary, origin of the first NaN/Inf, comparison of two
// runs, gradient and loss-scale histories, flat export. The `precprobe` command line tool
// and the HTML report print these results; to_json() gives the same data as a JSON value (made into
// text once, where printed or embedded).
//
// Every analysis takes either a DumpReader (records are streamed; only compare_dumps holds
// the selected records of both dumps in memory) or a DumpData (records already in memory:
// tests, synthetic data). Functions are pure apart from reading: they may be called from
// any thread, each with its own DumpReader. They throw precprobe::Error for input that is
// not a dump (the reader's errors) and never for odd record contents.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "precprobe/error.h"
#include "precprobe/masking.h"
#include "precprobe/reader.h"
#include "precprobe/records.h"
#include "precprobe/run_state.h"
#include "precprobe/tensor_metrics.h"

namespace precprobe {

/// Records already in memory, in file order (the order a DumpReader yields them).
struct DumpData {
  std::vector<RankInfo> ranks;  ///< meta.json text per rank; may be empty
  std::vector<OpRecord> ops;
  std::vector<ScalerRecord> scaler;
  std::vector<GradRecord> grads;
  std::vector<ScalarRecord> scalars;    ///< every events line (anomaly events included)
  std::vector<AnomalyEvent> anomalies;  ///< the "anomaly" events with their keys
  std::vector<StreamStatus> statuses;
};

/// Called now and then while records are read, with the number read so far.
using ProgressFn = std::function<void(uint64_t records)>;

/// How a DumpReader is read by an analysis.
struct ReadOptions {
  RecordFilter filter;  ///< which records are analysed (default: all)
  ProgressFn progress;  ///< optional progress callback (e.g. a stderr spinner)
  /// Let summary and overflow pass over frames of op records by their digests (FrameDigest)
  /// when the digest says the frame holds nothing they look for. Off: every frame is
  /// decoded (the same results, slower; the tests compare the two), and the reader given
  /// to the analysis is set so (DumpReader::set_digests(false)).
  bool digests = true;
};

/// An op as the analyses report it.
struct OpBrief {
  int64_t step = 0;
  int rank = 0;
  int64_t seq = 0;
  std::string name;       ///< "aten::exp.0.forward"
  std::string op;         ///< "aten::exp"
  std::string direction;  ///< "forward" | "backward"
  std::string scope;
  std::string node;
  int32_t depth = 0;
  uint32_t thread = 0;
  std::vector<std::string> params;  ///< parameter names among its tensors
  std::vector<Arg> inputs;
  std::vector<Arg> outputs;

  static OpBrief from(const OpRecord& r);
  nlohmann::json to_json() const;
};

// ---------------------------------------------------------------------------- summary

struct NameCount {
  std::string name;
  int64_t count = 0;
};

struct ScalerSummary {
  int64_t records = 0;
  int64_t found_inf = 0;              ///< records with found_inf
  int64_t skipped = 0;                ///< records whose optimizer step was skipped
  int64_t backoffs = 0;               ///< event "backoff" (or "collapse")
  int64_t growths = 0;                ///< event "growth"
  std::optional<double> final_scale;  ///< scale_after of the last record
  std::optional<int64_t> first_skip_step;
};

/// The debugger's periodic replica checks ("replica_check_every"), from the first rank's
/// events (every rank records the same gathered result).
struct ReplicaSummary {
  int64_t checks = 0;         ///< replica checks recorded
  int64_t failed_checks = 0;  ///< checks that found a difference across ranks
  std::optional<int64_t> first_failed_step;
  bool structure_differs = false;       ///< some check found different name lists
  std::vector<std::string> mismatched;  ///< tensors that differed in some check (first seen first)
};

/// A loss the user logged (is_loss_scalar: a name containing "loss"), first and last values.
struct LossSummary {
  std::string name;
  int64_t points = 0;
  int64_t first_step = 0, last_step = 0;
  double first_value = 0, last_value = 0;
  std::optional<int64_t> nonfinite_step;  ///< the first NaN/Inf value
};

/// A gradient watchpoint of one parameter, with how often it fired.
struct WatchHitCount {
  std::string param;
  std::string watch;
  int64_t count = 0;
  int64_t first_step = 0;
};

/// Ops of one module in a summary (`summary --by module`): an op that consumes a parameter
/// ("blocks.2.fc.weight") belongs to that parameter's module ("blocks.2.fc"), and the ops
/// after it in the same step inherit it; ops of a step before its first parameter have "".
struct ModuleSummary {
  std::string module;
  int64_t ops = 0;            ///< op records
  int64_t nonfinite_ops = 0;  ///< op records with a NaN/Inf output
  std::optional<int64_t> first_nonfinite_step;
  double max_abs_output = 0;  ///< largest finite |x| of any of its outputs
};

struct SummaryResult {
  std::string path;
  std::vector<RankInfo> ranks;
  RunMeta meta;  ///< meta.json of the first rank (empty when missing)
  std::optional<int64_t> step_min, step_max;
  std::vector<std::pair<int64_t, int64_t>> records_per_step;  ///< (step, op records)
  int64_t op_records = 0, scaler_records = 0, grad_records = 0, scalar_records = 0;
  /// Op records with a non-finite output, a mask's -inf aside (`masking`).
  int64_t nonfinite_op_records = 0;
  std::vector<NameCount> nonfinite_ops;  ///< per op name ("aten::exp"), most first
  ScalerSummary scaler;
  /// Per (parameter, watchpoint), earliest first hit first (step order, then record order).
  std::vector<WatchHitCount> watch_hits;
  /// The op watchpoint hits the run wrote live (events "watch"), in file order; JSON
  /// "op_watch_hits". `precprobe watch DIR` judges a dump without them.
  std::vector<OpWatchHit> op_watch_hits;
  /// The first step with a non-finite op output; JSON "first_nonfinite_step".
  std::optional<int64_t> first_nonfinite_step;
  /// -inf written as a mask and carried on: not in the counts above; JSON "masking" (null
  /// when none).
  MaskingSummary masking;
  /// The first rank's logged losses, in order of first use; in the JSON as "losses".
  std::vector<LossSummary> losses;
  ReplicaSummary replicas;
  int64_t nonfinite_grad_records = 0;
  std::vector<StreamStatus> streams;
  uint64_t dropped = 0;    ///< records the writers dropped (meta.json "writer" counters)
  bool truncated = false;  ///< some stream ended early (killed process, corrupt frame)
  uint64_t bad_lines = 0;
  /// Per module in order of first appearance; filled only when asked for (by_module), and
  /// then in the JSON as "modules".
  bool by_module = false;
  std::vector<ModuleSummary> modules;
  /// The debugger's replayed anomalies ("record": "on_anomaly"), every rank, in file order;
  /// in the JSON as "anomalies" (always present).
  std::vector<AnomalyEvent> anomalies;
  /// How the run ended; in the JSON as "run". Not stopped: the data is not complete.
  RunState run;

  nlohmann::json to_json() const;
};

/// One line for people: "anomaly at step 37 (loss = nan): replayed, reproduced; origin
/// aten::exp — range: float64 result reaches 1.2e+39, beyond float32's max".
std::string describe(const AnomalyEvent& a);

SummaryResult summarize_dump(DumpReader& reader, const ReadOptions& read = {},
                             bool by_module = false);
SummaryResult summarize_dump(const DumpData& data, bool by_module = false);

// --------------------------------------------------------------------------- overflow

/// The origin of the first non-finite value of one rank and how far it spread.
///
/// Origin rule: among the ops whose input tensors are all finite and whose outputs hold
/// NaN/Inf ("candidates"), the earliest by (step, seq) is taken, seq being the start order
/// of the op. When candidates are nested inside it (same thread, started later, every op of
/// the thread in between deeper: seq order is a pre-order walk of the call tree) the
/// earliest nested candidate replaces it, repeatedly, so that at L2 the innermost op that
/// produced the value is blamed rather than the op that wraps it. Nesting does not depend
/// on the order of records in the file. An op with a non-finite input only propagates and
/// is never the origin.
///
/// Masks (MaskingSummary): a mask's -inf is no NaN/Inf here. Its writer is no candidate, the
/// ops that carry it on neither receive nor produce a non-finite value, and an op whose
/// inputs hold a mask's -inf and no NaN/+Inf and whose outputs hold NaN or +Inf (a softmax of
/// a fully masked row) is a candidate: the NaN is born there, `reason` says why and
/// `masked_by` names the mask.
struct RankOverflow {
  int rank = 0;
  bool found = false;
  OpBrief origin;
  /// Why the origin made NaN/Inf, when a mask did: "every element of 2 of its 64 rows was
  /// -inf: fully masked rows"; nullopt for any other origin.
  std::optional<std::string> reason;
  /// The mask writer upstream of an origin born from a mask.
  std::optional<MaskedBy> masked_by;
  /// The module of the origin, attributed as `precprobe precision` does (modules.h): a
  /// forward op belongs to the module of the last parameter an op of its step consumed, a
  /// backward op to the module of the forward op that made its autograd node. nullopt when
  /// no parameter was named or none was consumed before it in its step.
  std::optional<std::string> origin_module;
  /// Other ops with non-finite outputs that started after the origin or ran around it (its
  /// step and later ones).
  int64_t later_nonfinite_ops = 0;
  /// Steps (from the origin's) holding ops with non-finite outputs: the first few, and all.
  std::vector<int64_t> first_steps_affected;
  int64_t steps_affected = 0;
  /// The earliest op that received a non-finite input. When it precedes the origin (or no
  /// origin exists) the value came from outside the observed ops: data, parameters, or
  /// code that ran before recording started.
  std::optional<OpBrief> first_nonfinite_input;
  bool nonfinite_before_origin = false;
  int64_t nonfinite_ops = 0;  ///< all ops of this rank with non-finite outputs
};

struct OverflowResult {
  bool found = false;                        ///< an origin was found on some rank
  OpBrief origin;                            ///< the earliest by (step, seq, rank)
  std::optional<std::string> origin_module;  ///< its module (RankOverflow::origin_module)
  std::optional<std::string> reason;         ///< its RankOverflow::reason (JSON "reason")
  std::optional<MaskedBy> masked_by;         ///< its RankOverflow::masked_by ("masked_by")
  /// Some op had non-finite inputs or outputs (a mask's -inf aside).
  bool any_nonfinite = false;
  /// The masks of every rank (JSON "masking", null when none).
  MaskingSummary masking;
  std::vector<RankOverflow> ranks;
  /// The steps of the op records read: what "no NaN/Inf" covers.
  std::optional<int64_t> step_min, step_max;
  /// How the run ended (run_state()); from a DumpData without meta.json: "unknown".
  RunState run;

  nlohmann::json to_json() const;
};

OverflowResult find_overflow(DumpReader& reader, const ReadOptions& read = {});
OverflowResult find_overflow(const DumpData& data);

// ---------------------------------------------------------------------------- compare

/// One statistic of a tensor in both runs: diff = N - B, rel = |diff / B| * 100 (%).
struct StatDiff {
  double n = 0, b = 0, diff = 0;
  double rel_pct = 0;  ///< NaN when B == 0 (msprobe's "N/A")
};

/// One input or output tensor of a matched op.
struct ArgCompare {
  std::string io;  ///< "input" | "output"
  int index = 0;
  bool tensor = true;
  std::string dtype_n, dtype_b;
  std::vector<int64_t> shape_n, shape_b;
  StatDiff max, min, mean, norm;
  bool warning = false;  ///< msprobe's statistics rule
  double error = 0;      ///< relative error of the statistics (see docs/cli.md)
  /// Absolute error estimate: max(|dMax|, |dMin|, |dMean|, |dNorm| / sqrt(n)), a lower bound
  /// of max |N - B| over the elements; |N - B| for numbers; infinity when not comparable.
  double abs_error = 0;
  bool exact = true;  ///< bitwise equal (hash, or all statistics)
  std::string note;   ///< "shape differs", "non-finite counts differ", ...
};

struct OpCompare {
  int64_t step = 0;
  int rank = 0;
  int64_t seq_a = 0, seq_b = 0;
  std::string name, name_b, op, direction, scope;
  std::vector<ArgCompare> args;
  bool warning = false;
  double input_error = 0, output_error = 0;
  double score = 0;  ///< output_error - input_error: error this op added
  bool exact = true;
  // Noise model (docs/cli.md "Noise model"): errors relative to the scale of the computation.
  double error = 0;      ///< output error / scale S of the worst output
  double inherited = 0;  ///< sum over inputs of kappa * input error / input scale
  double bound = 0;      ///< rounding allowance of the worst output (OutputBound::bound)
  double ratio = 0;      ///< error / (bound + inherited_weight * inherited); inf when both are 0
  int64_t terms = 1;     ///< n: summands per element of the worst output
  /// "match" (bitwise or statistically identical), "noise" (within --noise-factor times the
  /// bound), "divergent".
  std::string classification = "match";
  /// Module of the op (--by module): the module of the last parameter an op of A consumed
  /// so far in its step ("fc1" for "fc1.weight"); "" before any.
  std::string module;
  /// Near-tie flips (docs/cli.md): the decision op of this step whose choice of elements
  /// differs between the runs and whose output this op consumes, directly or through other
  /// ops ("" when none; the op itself when its own indices differ), and its seq.
  std::string after_flip;
  int64_t after_flip_seq = -1;
  /// The rounding model alone would call this op divergent; it is downstream of a flip,
  /// whose moved elements the statistics cannot bound, so it is classified "noise".
  bool excused = false;
  /// A backward op of a step whose loss scales differ (a GradScaler in one run, or another
  /// scale): A's loss scale over B's, by which A's gradient arguments were divided before
  /// they were compared (their notes say which); 1 otherwise.
  double loss_scale = 1;
  /// Why a divergent op diverges, where the error model alone does not say it
  /// (docs/cli.md, "Differences made by ops of one run only"): "one_run_ops" (an input
  /// differs beyond rounding and was made by ops of one run only, `made_by_a/b`),
  /// "before_step" (an input made before the first compared step differs: not the same
  /// start), "draws" (a random op whose inputs are equal drew other numbers), "accumulated"
  /// (an input is a gradient accumulated onto a different value in each run: the runs zero
  /// gradients at different times, and this op reads the difference), "" otherwise. Not
  /// divergent: "reconciled" (docs/cli.md), "carried" (a gradient accumulation whose
  /// difference is only the gradient it adds onto: judged where that is read, and dead when
  /// nothing reads it; CompareResult::dead), "dead" (its output, which differs, both runs
  /// overwrite before any op reads it).
  std::string cause;
  /// The ops of one run only upstream of the input whose difference they made (cause
  /// "one_run_ops"), nearest first, at most kSequenceDiffNames each; for "accumulated", the
  /// accumulation and what it added onto in each run.
  std::vector<std::string> made_by_a, made_by_b;
  /// What differs among the arguments of those ops of one run only: the numbers one run's
  /// ops pass that the other's do not, e.g. "0.5 (A: aten::mul) vs 5 (B: aten::fill_)" (a
  /// clip norm computed otherwise and typed wrong); "" when none.
  std::string made_by_values;
  /// The parameter the op reads or updates ("conv1.weight"): its own parameter input, or for
  /// an op of an optimizer step (no grad mode) the parameter its run of ops updates next.
  std::string param;

  nlohmann::json to_json() const;
};

/// A difference no op reads (docs/cli.md, "Dead differences"): the output of a paired op that
/// differs between the runs, a gradient accumulated onto a different value in each run (the
/// runs zero gradients at different times), overwritten (zero_, fill_, copy_), set to None or
/// freed before any op of either run reads it. Background: not divergent.
struct DeadDifference {
  int64_t step = 0;
  int rank = 0;
  int64_t seq_a = 0, seq_b = 0;
  std::string name;    ///< the op whose output it is, "aten::add_.3.backward"
  std::string module;  ///< its module (OpCompare::module)
  /// The parameter whose gradient it is, where the records say it (a parameter of that module
  /// of that shape, one only); "" otherwise.
  std::string param;
  /// Why no op reads it: "overwritten by aten::zero_ at step 1 before any read".
  std::string reason;

  nlohmann::json to_json() const;
};

/// Ops of one module (--by module), over all compared steps.
struct ModuleCompare {
  std::string module;  ///< "" for ops before the first parameter of their step
  int64_t ops = 0, match = 0, noise = 0, divergent = 0;
  double max_ratio = 0;
  std::optional<OpCompare> first_divergent;  ///< earliest by (step, seq, rank)
};

/// An op found in one dump only ("a" or "b").
struct UnmatchedOp {
  int64_t step = 0;
  int rank = 0;
  std::string side;
  int64_t seq = 0;
  std::string name;
};

/// Ops in the op sequence of one run only, at one place of one (step, rank): between two
/// paired ops, or at the start or end of the step (docs/cli.md, "Pairing").
struct SequenceDiff {
  int64_t step = 0;
  int rank = 0;
  /// Where: the seq of the place's first op in each run; for a run with none there, the seq
  /// of its next paired op (one past its last op at the end of the step).
  int64_t seq_a = 0, seq_b = 0;
  int64_t count_a = 0, count_b = 0;  ///< ops there in A only, in B only
  /// Names ("aten::copy_.3.backward") of the first kSequenceDiffNames of them, in order.
  std::vector<std::string> names_a, names_b;

  nlohmann::json to_json() const;
};

/// How many op names a SequenceDiff keeps per run.
inline constexpr size_t kSequenceDiffNames = 5;

/// Which comparisons CompareResult::ops keeps (CompareOptions::keep_ops).
enum class KeepOps : uint8_t {
  kAll,        ///< every matched op (statistics --json, the report)
  kWarned,     ///< those with a warning or classified divergent (the statistics table)
  kDivergent,  ///< those classified divergent (--first and --exact list only those)
};

struct CompareOptions {
  std::optional<int64_t> step;  ///< only this step
  std::optional<int> rank;      ///< only this rank
  /// Cross-rank: rank `first` of A against rank `second` of B (B may be the same dump);
  /// B's records are relabelled as rank `first` so ops pair up. Overrides `rank`.
  std::optional<std::pair<int, int>> ranks;
  /// --first: an op diverges when the error it adds (output error minus input error, both
  /// relative to the tensor's magnitude) exceeds this.
  /// Extra floor: a divergent op must also add more than this relative error (0: none).
  double rtol = 0;
  /// An op is divergent when the error it adds exceeds noise_factor times its bound.
  double noise_factor = 10;
  /// The inputs' differences seen through statistics are lower bounds: the error inherited
  /// from them counts this many times (ratio = error / (bound + weight * inherited)).
  double inherited_weight = 10;
  bool first = false;      ///< find the first divergent op
  bool exact = false;      ///< bitwise identity
  bool by_module = false;  ///< fill CompareResult::modules
  /// Which matched ops' comparisons CompareResult::ops keeps (about 1 KB an op kept):
  /// `matched` and the other counts cover every op either way.
  KeepOps keep_ops = KeepOps::kAll;
  /// Work bound of the alignment of one (step, rank) whose op sequences differ (diagonals
  /// and comparisons of Myers' search, about 0.1 s): past it the alignment settles for a
  /// common subsequence that may leave some equal ops unpaired (aligned_approximately).
  size_t max_align_cost = size_t{1} << 26;
  /// Threads that judge the runs' (step, rank) groups while they are read, the reading one
  /// included (0: one a core, at most 4; 1: the reading thread alone). The result is the
  /// same whatever the number.
  unsigned threads = 0;
};

struct CompareResult {
  std::string path_a, path_b;
  /// Matched ops in (step, rank, seq) order (those CompareOptions::keep_ops selects).
  std::vector<OpCompare> ops;
  int64_t matched = 0;  ///< ops paired and compared (ops.size() with KeepOps::kAll)
  std::vector<UnmatchedOp> unmatched;
  std::vector<std::pair<int64_t, int>> only_a, only_b;  ///< (step, rank) groups in one dump only
  int64_t warnings = 0;
  /// Places where the op sequences of the runs differ, in (step, rank, seq) order: the ops
  /// of `unmatched` that belong to (step, rank) groups present in both dumps.
  std::vector<SequenceDiff> sequence_diffs;
  std::optional<SequenceDiff> first_sequence_diff;  ///< earliest by (step, seq_a, rank)
  int64_t groups_compared = 0;                      ///< (step, rank) groups present in both dumps
  int64_t aligned_by_lcs = 0;     ///< groups whose op sequences differ, aligned by content
  int64_t aligned_by_thread = 0;  ///< groups paired per thread (threads interleaved differently)
  int64_t aligned_approximately = 0;  ///< groups whose alignment hit max_align_cost
  bool first_mode = false, exact_mode = false;
  bool found = false;              ///< --first: a divergent op
  bool identical = true;           ///< --exact: everything bitwise equal
  std::optional<OpCompare> first;  ///< the op found (--first or --exact)
  /// The first divergent op in every mode: --first's op (also with --exact, whose `first` is
  /// the first op that differs at all), so that the modes agree on what is divergent.
  std::optional<OpCompare> first_divergent;
  std::optional<UnmatchedOp> first_unmatched;  ///< earliest op present in one dump only
  int64_t match_ops = 0, noise_ops = 0, divergent_ops = 0;
  std::optional<OpCompare> max_noise;  ///< the noise op with the largest ratio (not excused)
  /// Paired ops whose output differs but no op reads the difference (DeadDifference): counted
  /// as noise, never divergent; `dead` lists them in (step, seq, rank) order.
  int64_t dead_ops = 0;
  std::vector<DeadDifference> dead;
  int64_t flip_ops = 0;     ///< decision ops whose indices differ (near-tie flips)
  int64_t excused_ops = 0;  ///< ops beyond their rounding bound, downstream of a flip
  std::optional<OpCompare> first_excused;  ///< earliest of those
  /// --first: places where the runs ran different ops whose results differ beyond rounding
  /// (each compared by the last op of each side; counted in divergent_ops).
  std::vector<OpCompare> divergent_places;
  /// Per module in order of first appearance (filled with CompareOptions::by_module).
  std::vector<ModuleCompare> modules;
  int64_t ops_a = 0, ops_b = 0;  ///< ops read from each dump (selected steps/ranks)
  /// Ops of threads outside the training step in each dump (OpRecord::background: data-loader
  /// workers...), not compared: when they run, and on which thread, is the scheduler's choice.
  int64_t background_a = 0, background_b = 0;
  /// 2 * matched / (ops_a + ops_b): the share of ops that aligned (1 when both are empty).
  double aligned_fraction = 1;

  nlohmann::json to_json() const;
  /// True when the result differs in the sense of the selected mode (exit status 1).
  bool differs() const noexcept;
};

CompareResult compare_dumps(DumpReader& a, DumpReader& b, const CompareOptions& options = {},
                            const ProgressFn& progress = {});
CompareResult compare_dumps(const DumpData& a, const DumpData& b,
                            const CompareOptions& options = {});

/// Aligns two sequences of names: a longest common subsequence (Myers' diff, O((n + m) D)
/// time, O(n + m) memory), approximate past `max_cost` (CompareOptions::max_align_cost).
/// Returns pairs (i, j) in order; -1 on one side marks an element present only in the other
/// sequence; every pair holds equal names. Exposed for tests.
std::vector<std::pair<int64_t, int64_t>> align_sequences(const std::vector<std::string>& a,
                                                         const std::vector<std::string>& b,
                                                         size_t max_cost = size_t{1} << 26);

/// Unit roundoff u of a c10 dtype name: Float 2^-24, BFloat16 2^-8, Half 2^-11, Double
/// 2^-53; 0 for integral and bool dtypes.
double unit_roundoff(std::string_view dtype) noexcept;
/// Higham's gamma_n = n u / (1 - n u); infinity when n u >= 1.
double gamma_n(double n, double u) noexcept;
/// The probability with which gamma_tilde may fail for one sum (Higham & Mary 2019).
inline constexpr double kRoundingFailure = 1e-9;
/// The probabilistic bound of a sum of n terms (Higham & Mary, SIAM J. Sci. Comput. 41(5),
/// 2019, Theorems 2.4 and 3.1): exp(lambda sqrt(n) u + n u^2 / (1 - u)) - 1 with lambda =
/// sqrt(2 ln(2 n / kRoundingFailure)) / (1 - u), never above gamma_n. It grows as sqrt(n) u
/// where gamma_n grows as n u: rounding errors of independent sign cancel.
double gamma_tilde(double n, double u) noexcept;
/// A number written as JSON text ("0.5", "-3", "1e-7"); nullopt otherwise.
std::optional<double> numeric_value(const std::string& json);
/// The shortest decimal text that reads back as exactly `v` (0.2, not 0.20000000000000001;
/// 1e-07; "inf", "-inf", "nan").
std::string shortest_number(double v);
/// An argument's JSON text as a person reads it: each floating-point number in it (the
/// text, or the elements of a list) in its shortest form that reads back exactly; integers,
/// strings and everything else as they are ("0.20000000000000001" -> "0.2",
/// "[0.90000000000000002,0.999]" -> "[0.9,0.999]").
std::string display_value(const std::string& json);

/// The rounding allowance of one output of an op.
struct OutputBound {
  double scale = 0;  ///< S: the magnitude its error is measured against
  double terms = 1;  ///< n: summands per output element (1: one rounding)
  double u = 0;      ///< unit roundoff of the output
  /// gamma_tilde(n, u) (a 16-bit output of a sum: u + gamma_tilde(n, float32's u)) plus the
  /// statistics' float32 storage, relative to S
  double bound = 0;
};

/// The noise model of one op pair (A's and B's records; magnitudes over both).
struct OpNoise {
  std::vector<OutputBound> outputs;
  std::vector<double> input_scale;  ///< what each input's error is measured against
  std::vector<double> input_kappa;  ///< how many times that relative error may pass on
};
OpNoise op_noise(const OpRecord& a, const OpRecord& b);
/// The same into `out`, whose storage is reused (every field is written).
void op_noise(const OpRecord& a, const OpRecord& b, OpNoise& out);

/// msprobe's statistics comparison of one tensor (sets diffs, rel_pct and warning).
void compare_stats(const TensorStats& n, const TensorStats& b, ArgCompare& out);
/// The --first error of one tensor pair (0 = equal; infinity = structurally different).
double stats_error(const TensorStats& n, const TensorStats& b);

// ------------------------------------------------------------------- grads and scale

struct ParamGradHistory {
  std::string param;
  std::vector<GradRecord> records;  ///< by step
  int64_t nonfinite_steps = 0;
  int64_t watch_hits = 0;
  double max_grad_norm = 0;
};

struct GradHistory {
  std::vector<ParamGradHistory> params;               ///< by name
  std::vector<std::pair<int64_t, std::string>> hits;  ///< (step, "param: watch")
  nlohmann::json to_json() const;
};

/// Gradient history; `param` selects parameters whose name contains it (empty: all).
GradHistory grad_history(DumpReader& reader, const std::string& param = "",
                         const ReadOptions& read = {});
GradHistory grad_history(const DumpData& data, const std::string& param = "");

/// One optimizer step of the loss scaler (its parameter groups merged).
struct ScaleEntry {
  int64_t step = 0;
  int rank = 0;
  int optimizer = 0;
  double scale = 0;       ///< scale used this step
  double scale_next = 0;  ///< after update
  bool found_inf = false;
  bool skipped = false;
  std::string event;
  int64_t nonfinite_params = 0;
};

struct ScaleHistory {
  std::vector<ScaleEntry> entries;
  /// A JSON array of {step, rank, optimizer, scale, scale_next, found_inf, skipped, event}.
  nlohmann::json to_json() const;
};

ScaleHistory scale_history(DumpReader& reader, const ReadOptions& read = {});
ScaleHistory scale_history(const DumpData& data);

// ---------------------------------------------------------------------------- export

enum class ExportFormat : uint8_t {
  kCsv,    ///< header line, then one comma-separated row per line (RFC 4180 quoting)
  kJsonl,  ///< one flat JSON object per line
};

/// Writes one stream as a flat table: ops one row per tensor (or value) argument;
/// scaler, grads and events one row per record. Returns the rows written.
uint64_t export_table(DumpReader& reader, StreamKind stream, ExportFormat format, std::ostream& out,
                      const ReadOptions& read = {});
uint64_t export_table(const DumpData& data, StreamKind stream, ExportFormat format,
                      std::ostream& out);

}  // namespace precprobe
