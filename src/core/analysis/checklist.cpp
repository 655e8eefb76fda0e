// The accuracy checklist (precprobe/checklist.h): the mixed-precision items, the result and
// run_checklist(). The data items are in checklist_data.cpp, the hyper-parameter and API
// items in checklist_training.cpp. Rules and thresholds: docs/checklist.md.
#include "precprobe/checklist.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> before fmt 11)

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "checklist_items.h"
#include "json_util.h"
#include "op_watch_pass.h"
#include "precprobe/op_watch.h"
#include "run_state.h"

namespace precprobe {
namespace {

using analysis_detail::collect;
using analysis_detail::RecordsCollector;
using namespace checklist_detail;  // NOLINT(google-build-using-namespace): the item helpers

// -------------------------------------------------------------------- mixed precision

CheckItem check_overflow(const OverflowResult& r, int64_t op_records, const RunState& run) {
  CheckItem c = item("mp.overflow", "mixed precision", "no overflow (NaN/Inf) in the ops");
  if (op_records == 0) return set(c, Verdict::kNotApplicable, "no op records in the dump"), c;
  c.figures = {{"op_records", double(op_records)}};
  if (r.found) {
    std::string why;
    if (r.reason) why = ": " + *r.reason;
    if (r.masked_by) {
      why += fmt::format(" (masked by {}, seq {}{})", r.masked_by->name, r.masked_by->seq,
                         r.masked_by->module ? ", module " + *r.masked_by->module : "");
    }
    set(c, Verdict::kProblem,
        fmt::format("first NaN/Inf produced by {}{} (rank {}, step {}, seq {}){}", r.origin.name,
                    r.origin_module ? " in module " + *r.origin_module : std::string(),
                    r.origin.rank, r.origin.step, r.origin.seq, why));
  } else if (r.any_nonfinite) {
    set(c, Verdict::kProblem, "NaN/Inf in op inputs, not produced by a recorded op");
  } else {
    std::string steps;
    if (r.step_min) steps = fmt::format(" of steps {}..{}", *r.step_min, *r.step_max);
    std::string partial;
    if (!run.stopped()) partial = "; " + run.describe() + ": later steps are not in the dump";
    // A mask's -inf is the program's intent (masking.h): said, not counted.
    const std::string all =
        r.masking.any() ? "all finite apart from masking: " + r.masking.describe() : "all finite";
    set(c, Verdict::kOk, fmt::format("{} op records{}, {}{}", op_records, steps, all, partial));
  }
  return c;
}

// A run that did not stop is a problem whatever else the dump says: a crash, or a process
// killed (SIGKILL, the OOM killer, power lost) or still running, whose later steps are missing.
CheckItem check_run(const RunState& run) {
  CheckItem c = item("run.stopped", "run", "the run stopped (no crash, not killed)");
  if (run.ranks.empty() || std::all_of(run.ranks.begin(), run.ranks.end(),
                                       [](const auto& r) { return r.state == "unknown"; })) {
    return set(c, Verdict::kNotApplicable, "meta.json records no run state"), c;
  }
  if (const auto through = run.complete_through())
    c.figures = {{"complete_through", double(*through)}};
  if (!run.stopped()) return set(c, Verdict::kProblem, run.describe()), c;
  std::vector<std::string> signalled;
  for (const RankRunState& r : run.ranks) {
    if (r.state == "signalled")
      signalled.push_back(fmt::format("rank {} by signal {}", r.rank, r.signal.value_or(0)));
  }
  set(c, Verdict::kOk,
      signalled.empty()
          ? std::string("stop() ended the run; the dump is complete")
          : fmt::format("stopped: {} (the dump was flushed first)", fmt::join(signalled, ", ")));
  return c;
}

CheckItem check_scaler(const std::vector<ScalerRecord>& scaler, int64_t half_ops) {
  CheckItem c = item("mp.grad_scaler", "mixed precision", "fp16 with a healthy GradScaler");
  c.figures = {{"fp16_ops", double(half_ops)}, {"scaler_records", double(scaler.size())}};
  if (scaler.empty()) {
    if (half_ops > 0) {
      return set(c, Verdict::kProblem,
                 fmt::format("{} ops ran in float16 but no GradScaler records exist", half_ops)),
             c;
    }
    return set(c, Verdict::kNotApplicable, "no float16 ops and no GradScaler records"), c;
  }
  for (const ScalerRecord& r : scaler) {
    if (r.event == "collapse") {
      return set(c, Verdict::kProblem,
                 fmt::format("loss scale collapsed at step {} (scale {:.3g} -> {:.3g})", r.step,
                             r.scale_before, r.scale_after)),
             c;
    }
  }
  set(c, Verdict::kOk,
      fmt::format("{} scaler records, final scale {:.6g}", scaler.size(),
                  scaler.back().scale_after));
  return c;
}

CheckItem check_clip_order(const Observed& o, const std::vector<ScalerRecord>& scaler) {
  CheckItem c = item("mp.clip_before_unscale", "mixed precision",
                     "gradient clipping / penalties on unscaled gradients");
  if (scaler.empty()) return set(c, Verdict::kNotApplicable, "no GradScaler records"), c;
  if (!o.params_named || *o.params_named <= 0) {
    return set(c, Verdict::kNotApplicable,
               "parameters not known to the debugger (call dbg.start(model)), so reads of "
               "their gradients cannot be seen"),
           c;
  }
  c.figures = {{"scaled_reads", double(o.scaled_reads.size())},
               {"scaler_records", double(scaler.size())}};
  if (o.scaled_reads.empty()) {
    set(c, Verdict::kOk,
        fmt::format("no op read a parameter gradient between GradScaler::scale() and unscale_() "
                    "({} scaler records)",
                    scaler.size()));
    return c;
  }
  std::vector<std::string> ops;
  std::set<int64_t> steps;
  for (const auto& r : o.scaled_reads) {
    steps.insert(r.step);
    if (std::find(ops.begin(), ops.end(), r.op) == ops.end()) ops.push_back(r.op);
  }
  const auto& first = o.scaled_reads.front();
  set(c, Verdict::kProblem,
      fmt::format("{} read parameter gradients still multiplied by the loss scale ({:.6g}) in {} "
                  "step(s), first at step {}: clip_grad_norm_ or a gradient penalty before "
                  "scaler.unscale_(optimizer) works on scaled values; call unscale_ first",
                  join_first(ops), first.scale, steps.size(), first.step));
  return c;
}

CheckItem check_replicas(const Observed& o) {
  CheckItem c = item("api.replicas", "api", "replicas identical across ranks");
  const ReplicaSummary& r = o.replicas;
  if (r.checks == 0) {
    return set(c, Verdict::kNotApplicable,
               "no replica checks recorded (\"replica_check_every\" with a process group)"),
           c;
  }
  c.figures = {{"checks", double(r.checks)}, {"failed_checks", double(r.failed_checks)}};
  if (r.failed_checks == 0) {
    set(c, Verdict::kOk,
        fmt::format("{} replica checks, parameters and buffers identical", r.checks));
  } else {
    set(c, Verdict::kProblem,
        fmt::format("{} of {} replica checks found ranks out of sync, first at step {}: {}",
                    r.failed_checks, r.checks, *r.first_failed_step,
                    r.structure_differs ? std::string("ranks hold different parameter lists")
                                        : join_first(r.mismatched)));
  }
  return c;
}

// The op watchpoints (docs/watchpoints.md), as `precprobe watch DIR` judges them: a hit is the
// start of a condition out of line with the op's own history, so any warning is worth reading.
// tensor_overflow hits alone are the overflow itself, mp.overflow's problem: not a second one.
CheckItem check_op_watch(const WatchReport& w, int64_t op_records) {
  CheckItem c = item("num.op_watch", "numerics",
                     "op outputs in line with their own history (op watchpoints)");
  if (op_records == 0) return set(c, Verdict::kNotApplicable, "no op records in the dump"), c;
  c.figures = {{"hits", double(w.hits.size())}};
  auto where = [](const OpWatchHit& h) {
    return h.module.empty() ? std::string("data (before any parameter)") : h.module;
  };
  std::set<std::string> kinds;
  const OpWatchHit* warning = w.early ? &*w.early : nullptr;
  for (const OpWatchHit& h : w.hits) {
    kinds.insert(h.watch);
    if (!warning && h.watch != "tensor_overflow") warning = &h;  // a warning after the NaN
  }
  if (!warning) {
    set(c, Verdict::kOk,
        w.hits.empty()
            ? fmt::format("no op watchpoint hit in {} op records (tensor_overflow, "
                          "tensor_all_zero, activation_dead_fraction, tensor_too_large, "
                          "tensor_too_small, activation_saturated{})",
                          op_records, w.options.range_dtype.empty() ? "" : ", tensor_range")
            : fmt::format("no warning in {} op records; {} tensor_overflow hit(s), the overflow "
                          "itself (mp.overflow), first in {} at step {}",
                          op_records, w.hits.size(), where(w.hits.front()), w.hits.front().step));
    return c;
  }
  c.figures.emplace_back("first_step", double(warning->step));
  std::string when;
  if (w.early && w.first_nonfinite_step) {
    c.figures.emplace_back("steps_before_nonfinite", double(w.steps_earlier()));
    when = fmt::format(", {} step(s) before the first NaN/Inf at step {}", w.steps_earlier(),
                       *w.first_nonfinite_step);
  }
  set(c, Verdict::kProblem,
      fmt::format("{} hit(s) ({}), first {} in {} at step {}: {} ({}){}; precprobe watch DIR "
                  "lists them",
                  w.hits.size(), fmt::join(kinds, ", "), warning->watch, where(*warning),
                  warning->step, warning->record, warning->detail, when));
  return c;
}

ChecklistResult build(const std::string& path, const std::vector<ScalarRecord>& scalars,
                      const std::vector<GradRecord>& grads, const std::vector<ScalerRecord>& scaler,
                      const OverflowResult& overflow, int64_t op_records, int64_t half_ops,
                      const RecordsView& rv, const WatchReport& watch,
                      const ChecklistOptions& options, const RunState& run) {
  const Observed o = collect(scalars);
  ChecklistResult r;
  r.path = path;
  r.items = {check_run(run),
             check_missing(o, rv),
             check_imbalance(o, rv),
             check_normalised(o, rv),
             check_shuffling(o, rv),
             check_ignore_index(o, rv),
             check_lr(o),
             check_loss(o, rv, scaler),
             check_mode(o, rv, op_records),
             check_frozen(grads),
             check_init(o, rv),
             check_module_hash(o, options),
             check_replicas(o),
             check_op_watch(watch, op_records),
             check_overflow(overflow, op_records, run),
             check_scaler(scaler, half_ops),
             check_clip_order(o, scaler)};
  return r;
}

bool is_half(const std::vector<Arg>& args) {
  for (const Arg& a : args)
    if (a.tensor && a.tensor->dtype == "Half") return true;
  return false;
}

}  // namespace

std::string_view to_string(Verdict v) noexcept {
  switch (v) {
    case Verdict::kProblem:
      return "problem";
    case Verdict::kOk:
      return "ok";
    case Verdict::kNotApplicable:
      return "n/a";
  }
  return "n/a";
}

std::optional<double> CheckItem::figure(std::string_view name) const noexcept {
  for (const auto& [k, v] : figures)
    if (k == name) return v;
  return std::nullopt;
}

bool ChecklistResult::problem() const noexcept {
  return std::any_of(items.begin(), items.end(),
                     [](const CheckItem& c) { return c.verdict == Verdict::kProblem; });
}

const CheckItem* ChecklistResult::find(std::string_view id) const noexcept {
  for (const CheckItem& c : items)
    if (c.id == id) return &c;
  return nullptr;
}

std::vector<const CheckItem*> ChecklistResult::problems_by_cause() const {
  // Causes before symptoms: what is wrong with the data, the model or the API use explains a
  // diverging loss or an overflow, not the other way round.
  static constexpr std::string_view kOrder[] = {"data.missing_values", "data.inputs_not_normalised",
                                                "api.init_weights",    "api.train_eval_mode",
                                                "data.no_shuffling",   "data.class_imbalance",
                                                "data.ignore_index",   "api.module_hash",
                                                "api.replicas",        "api.frozen_weights",
                                                "hp.learning_rate",    "mp.clip_before_unscale",
                                                "mp.grad_scaler",      "num.op_watch",
                                                "mp.overflow",         "hp.loss_trend",
                                                "run.stopped"};
  auto rank = [](const CheckItem* c) {
    const auto* it = std::find(std::begin(kOrder), std::end(kOrder), c->id);
    return it - std::begin(kOrder);
  };
  std::vector<const CheckItem*> out;
  for (const CheckItem& c : items)
    if (c.verdict == Verdict::kProblem) out.push_back(&c);
  std::stable_sort(out.begin(), out.end(),
                   [&](const CheckItem* a, const CheckItem* b) { return rank(a) < rank(b); });
  return out;
}

nlohmann::json ChecklistResult::to_json() const {
  using analysis_detail::number;
  nlohmann::json items_json = nlohmann::json::array();
  for (const CheckItem& c : items) {
    nlohmann::json figures = nlohmann::json::object();
    for (const auto& [k, v] : c.figures) figures[k] = number(v);
    items_json.push_back({{"id", c.id},
                          {"group", c.group},
                          {"title", c.title},
                          {"verdict", std::string(to_string(c.verdict))},
                          {"evidence", c.evidence},
                          {"figures", figures}});
  }
  nlohmann::json causes = nlohmann::json::array();
  for (const CheckItem* c : problems_by_cause()) causes.push_back(c->id);
  nlohmann::json j = {
      {"path", path}, {"problem", problem()}, {"likely_causes", causes}, {"items", items_json}};
  return j;
}

ChecklistResult run_checklist(const DumpData& data, const ChecklistOptions& options) {
  int64_t half = 0;
  RecordsCollector records;
  // The op watchpoints with their defaults (a DumpData holds no live hits to set beside them).
  analysis_detail::WatchReportBuilder watch(data.ranks, OpWatchOptions{});
  for (const OpRecord& op : data.ops) {
    if (is_half(op.inputs) || is_half(op.outputs)) ++half;
    records.add(op);
    watch.add(op);
  }
  const OverflowResult overflow = find_overflow(data);
  return build("", data.scalars, data.grads, data.scaler, overflow,
               static_cast<int64_t>(data.ops.size()), half, records.finish(), watch.finish(),
               options, overflow.run);
}

ChecklistResult run_checklist(DumpReader& reader, const ChecklistOptions& options,
                              const ReadOptions& read) {
  const std::vector<ScalarRecord> scalars = reader.scalars(read.filter);
  const std::vector<GradRecord> grads = reader.grads(read.filter);
  const std::vector<ScalerRecord> scaler = reader.scaler(read.filter);
  int64_t ops = 0, half = 0;
  RecordsCollector records;
  auto watch = analysis_detail::WatchReportBuilder::for_dump(reader, std::nullopt);
  reader.for_each_op(read.filter, [&](const OpRecord& op) {
    ++ops;
    if (is_half(op.inputs) || is_half(op.outputs)) ++half;
    records.add(op);
    watch.add(op);
    if (read.progress && ops % 4096 == 0) read.progress(static_cast<uint64_t>(ops));
    return true;
  });
  const OverflowResult overflow = ops > 0 ? find_overflow(reader, read) : OverflowResult{};
  analysis_detail::RunStateBuilder run;
  for (const ScalarRecord& s : scalars) run.add(s);
  ChecklistResult r = build(reader.path(), scalars, grads, scaler, overflow, ops, half,
                            records.finish(), watch.finish(), options, run.finish(reader.ranks()));
  return r;
}

}  // namespace precprobe
