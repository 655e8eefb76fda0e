// build_report_data(): what the HTML report shows, as one JSON document. Histories come
// from the dump's streams, downsampled (report/downsample.h); the analyses (summary,
// overflow origin, compare) are the CLI's own functions, their to_json() embedded as is
// (report/report_analysis.cpp).
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> before fmt 11)

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "analysis/checklist_records.h"
#include "analysis/masking.h"
#include "analysis/op_watch_pass.h"
#include "precprobe/analysis.h"
#include "precprobe/reader.h"
#include "precprobe/report.h"
#include "precprobe/version.h"
#include "report/downsample.h"
#include "report/report_internal.h"

namespace precprobe {
namespace report {
namespace {

using nlohmann::json;

json opt_array(const std::vector<std::optional<double>>& v) {
  json a = json::array();
  for (const auto& x : v) a.push_back(x && std::isfinite(*x) ? json(*x) : json(nullptr));
  return a;
}

json streams_json(const std::vector<StreamStatus>& statuses) {
  json a = json::array();
  for (const StreamStatus& s : statuses) {
    if (!s.present) continue;
    a.push_back({{"path", s.path},
                 {"frames", s.frames},
                 {"records", s.records},
                 {"bad_lines", s.bad_lines},
                 {"truncated", s.truncated},
                 {"truncated_bytes", s.truncated_bytes},
                 {"message", s.message}});
  }
  return a;
}

// The loss-scale history as `precprobe scale` computes it (parameter groups merged), of
// the first rank's first optimizer, downsampled; events listed up to max_rows.
json scale_section(DumpReader& reader, const ReportOptions& o) {
  const int rank = reader.ranks().empty() ? 0 : reader.ranks().front().rank;
  ReadOptions read;
  read.filter.ranks = {rank};
  const ScaleHistory h = scale_history(reader, read);
  std::vector<const ScaleEntry*> pts;
  for (const ScaleEntry& e : h.entries) {
    if (e.optimizer == 0) pts.push_back(&e);
  }
  if (pts.empty()) return nullptr;
  std::vector<int64_t> steps;
  std::vector<double> scale;
  json events = json::array();
  int64_t skipped_total = 0, events_total = 0, backoffs = 0, growths = 0;
  for (const ScaleEntry* e : pts) {
    steps.push_back(e->step);
    scale.push_back(e->scale > 0 ? e->scale : NAN);  // log axis: a zero scale is not drawn
    skipped_total += e->skipped;
    if (e->event.empty()) continue;
    ++events_total;
    backoffs += e->event == "backoff" || e->event == "collapse";
    growths += e->event == "growth";
    if (events.size() < o.max_rows) {
      events.push_back({{"step", e->step},
                        {"event", e->event},
                        {"scale", e->scale},
                        {"scale_next", e->scale_next},
                        {"found_inf", e->found_inf},
                        {"n_bad", e->nonfinite_params}});
    }
  }
  Buckets b = downsample(steps, scale, o.max_points);
  json skipped = json::array();
  for (size_t i = 0; i < pts.size(); i += b.size) {
    int64_t n = 0;
    for (size_t j = i; j < std::min(pts.size(), i + b.size); ++j) n += pts[j]->skipped;
    skipped.push_back(n);
  }
  return {{"n", pts.size()},
          {"rank", rank},
          {"last_step", pts.back()->step},
          {"optimizer", 0},
          {"bucket", b.size},
          {"step", b.step},
          {"min", opt_array(b.min)},
          {"max", opt_array(b.max)},
          {"skipped", skipped},
          {"skipped_total", skipped_total},
          {"events", events},
          {"events_total", events_total},
          {"backoffs", backoffs},
          {"growths", growths}};
}

// Heat map of gradient norms: rows are parameters (order of first appearance), columns
// are buckets of consecutive steps holding the largest finite norm and the count of
// records with a NaN/Inf gradient.
json grads_heatmap(DumpReader& reader, const ReportOptions& o) {
  struct Cell {
    int64_t step;
    uint32_t param;
    double norm;  // NaN: no gradient
    bool bad;
  };
  std::vector<Cell> cells;
  std::vector<std::string> params;
  std::unordered_map<std::string, uint32_t> param_index;
  json watch = json::array();
  int64_t watch_total = 0;
  RecordFilter f;
  if (!reader.ranks().empty()) f.ranks = {reader.ranks().front().rank};
  reader.for_each_grad(f, [&](const GradRecord& r) {
    auto [it, added] = param_index.emplace(r.param, static_cast<uint32_t>(params.size()));
    if (added) params.push_back(r.param);
    cells.push_back({r.step, it->second, r.has_grad ? r.grad_norm : NAN,
                     r.grad_nan + r.grad_inf > 0 || !std::isfinite(r.grad_norm)});
    if (!r.watch.empty()) {
      ++watch_total;
      if (watch.size() < o.max_rows) {
        watch.push_back({{"step", r.step}, {"param", r.param}, {"names", r.watch}});
      }
    }
    return true;
  });
  if (cells.empty()) return nullptr;
  std::vector<int64_t> steps;
  for (const Cell& c : cells) steps.push_back(c.step);
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  const size_t bucket = bucket_size(steps.size(), std::max<size_t>(16, o.heatmap_columns));
  const size_t cols = (steps.size() + bucket - 1) / bucket;
  const size_t rows = std::min<size_t>(params.size(), kMaxHeatmapRows);
  std::vector<std::vector<std::optional<double>>> norm(rows,
                                                       std::vector<std::optional<double>>(cols));
  std::vector<std::vector<int64_t>> bad(rows, std::vector<int64_t>(cols, 0));
  for (const Cell& c : cells) {
    if (c.param >= rows) continue;
    const size_t col = static_cast<size_t>(
        (std::lower_bound(steps.begin(), steps.end(), c.step) - steps.begin()) / bucket);
    bad[c.param][col] += c.bad;
    if (std::isfinite(c.norm)) {
      auto& v = norm[c.param][col];
      v = v ? std::max(*v, c.norm) : c.norm;
    }
  }
  json col_steps = json::array(), jnorm = json::array(), jbad = json::array();
  for (size_t c = 0; c < cols; ++c) col_steps.push_back(steps[c * bucket]);
  for (size_t r = 0; r < rows; ++r) {
    jnorm.push_back(opt_array(norm[r]));
    jbad.push_back(bad[r]);
  }
  params.resize(rows);
  return {{"n", cells.size()},
          {"params", params},
          {"params_total", param_index.size()},
          {"bucket", bucket},
          {"steps", col_steps},
          {"last_step", steps.back()},
          {"norm", jnorm},
          {"bad", jbad},
          {"watch", watch},
          {"watch_total", watch_total}};
}

// The scalar named "loss", else the first by name of the losses (is_loss_scalar: "loss" in its
// name, any case; not the checklist's check/lr_range/loss).
json loss_curve(DumpReader& reader, const ReportOptions& o) {
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<double>>> series;
  RecordFilter f;
  if (!reader.ranks().empty()) f.ranks = {reader.ranks().front().rank};
  reader.for_each_scalar(f, [&](const ScalarRecord& r) {
    if (!is_loss_scalar(r.name)) return true;
    auto& s = series[r.name];
    s.first.push_back(r.step);
    s.second.push_back(r.value);
    return true;
  });
  if (series.empty()) return nullptr;
  auto it = series.count("loss") ? series.find("loss") : series.begin();
  Buckets b = downsample(it->second.first, it->second.second, o.max_points);
  return {{"name", it->first}, {"n", it->second.first.size()}, {"bucket", b.size},
          {"step", b.step},    {"min", opt_array(b.min)},      {"max", opt_array(b.max)}};
}

// Every scalar logged with log_scalar on the first rank (the debugger's own events excepted:
// is_debugger_event(), "check/...", "replicas/...", "anomaly", "step_end"), each downsampled,
// in order of first appearance, at most kMaxScalarCharts of them.
json scalar_curves(DumpReader& reader, const ReportOptions& o) {
  std::vector<std::string> order;
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<double>>> series;
  RecordFilter f;
  if (!reader.ranks().empty()) f.ranks = {reader.ranks().front().rank};
  reader.for_each_scalar(f, [&](const ScalarRecord& r) {
    if (is_debugger_event(r.name)) return true;
    auto it = series.find(r.name);
    if (it == series.end()) {
      if (series.size() >= kMaxScalarCharts) return true;
      order.push_back(r.name);
      it = series.emplace(r.name, std::make_pair(std::vector<int64_t>{}, std::vector<double>{}))
               .first;
    }
    it->second.first.push_back(r.step);
    it->second.second.push_back(r.value);
    return true;
  });
  json out = json::array();
  for (const std::string& name : order) {
    const auto& [steps, values] = series[name];
    Buckets b = downsample(steps, values, o.max_points);
    out.push_back({{"name", name},
                   {"n", steps.size()},
                   {"bucket", b.size},
                   {"step", b.step},
                   {"min", opt_array(b.min)},
                   {"max", opt_array(b.max)}});
  }
  return out;
}

// Ops whose outputs are uninitialized memory: their values are garbage, not a run's.
bool uninitialized_output(const std::string& op) {
  return op == "aten::empty" || op == "aten::empty_like" || op == "aten::empty_strided" ||
         op == "aten::new_empty" || op == "aten::new_empty_strided";
}

double output_abs_max(const OpRecord& r) {
  if (uninitialized_output(r.op)) return -1;
  double m = -1;
  for (const Arg& a : r.outputs) {
    // Floating-point tensors only: the range of an index tensor says nothing of precision.
    const bool floating = a.tensor && (a.tensor->dtype.find("Float") != std::string::npos ||
                                       a.tensor->dtype.find("Double") != std::string::npos ||
                                       a.tensor->dtype.find("Half") != std::string::npos);
    if (floating && a.tensor->numel > a.tensor->non_finite()) {
      m = std::max(m, a.tensor->abs_max());
    }
  }
  return m;
}

json op_row(const OpRecord& r, double abs_max) {
  int64_t nonfinite = 0;
  std::string dtype, shape;
  for (const Arg& a : r.outputs) {
    if (!a.tensor) continue;
    nonfinite += a.tensor->non_finite();
    if (dtype.empty()) {
      dtype = a.tensor->dtype;
      shape = fmt::format("[{}]", fmt::join(a.tensor->shape, ","));
    }
  }
  return {{"name", r.name()}, {"step", r.step},     {"rank", r.rank},
          {"seq", r.seq},     {"abs_max", abs_max}, {"out_nonfinite", nonfinite},
          {"dtype", dtype},   {"shape", shape},     {"scope", r.scope}};
}

// One pass over the ops: per step, how many ops had a non-finite output (a mask's -inf aside,
// analysis/masking.h); the op calls with
// the largest finite |output| (a min-heap of max_rows entries); and, when no loss scalar was
// logged, the loss op's output per step (the first rank's first loss op of each step).
void ops_pass(DumpReader& reader, const ReportOptions& o, json& data) {
  std::map<int64_t, int64_t> per_step;
  const bool want_loss = data["loss"].is_null();
  const int loss_rank = reader.ranks().empty() ? 0 : reader.ranks().front().rank;
  std::string loss_op;
  std::map<int64_t, double> loss;
  // Activations: per op that reads a parameter (forward, outermost, not in place, its output
  // not a parameter view such as aten::t's) and step, the largest finite |output| and
  // whether an output held NaN/Inf.
  struct ActCell {
    int64_t step;
    uint32_t row;
    double abs_max;
    bool bad;
  };
  std::vector<ActCell> act;
  std::vector<std::string> act_rows;
  std::unordered_map<std::string, uint32_t> act_index;
  using Top = std::pair<double, json>;
  auto cmp = [](const Top& a, const Top& b) { return a.first > b.first; };
  std::priority_queue<Top, std::vector<Top>, decltype(cmp)> top(cmp);
  const size_t keep = std::min<size_t>(o.max_rows, kMaxTopOps);
  int64_t total = 0;
  auto watch = analysis_detail::WatchReportBuilder::for_dump(reader, std::nullopt);
  analysis_detail::MaskTracker masks;
  reader.for_each_op({}, [&](const OpRecord& r) {
    ++total;
    watch.add(r);
    const bool bad = !analysis_detail::is_masking(masks.observe(r)) && r.outputs_non_finite();
    if (want_loss && r.rank == loss_rank && r.dir == Direction::kForward && !r.outputs.empty() &&
        r.outputs[0].tensor && r.outputs[0].tensor->numel == 1 && !loss.count(r.step) &&
        analysis_detail::is_loss_op(r.op) && (loss_op.empty() || loss_op == r.op)) {
      const TensorStats& t = *r.outputs[0].tensor;
      loss_op = r.op;
      loss[r.step] = t.all_finite() ? t.mean : NAN;
    }
    if (r.rank == loss_rank && r.dir == Direction::kForward && r.depth == 0 && !r.op.empty() &&
        r.op.back() != '_' && !r.outputs.empty() && r.outputs[0].tensor &&
        r.outputs[0].tensor->param.empty()) {
      // A row per op computing with data and a parameter (not zeros_like(param) and the
      // like), named after the parameter it reads, a weight before a bias.
      const std::string* param = nullptr;
      bool data_input = false;
      for (const Arg& a : r.inputs) {
        if (!a.tensor) continue;
        if (a.tensor->param.empty()) {
          data_input = data_input || a.tensor->dtype.find("Float") != std::string::npos ||
                       a.tensor->dtype.find("Double") != std::string::npos ||
                       a.tensor->dtype.find("Half") != std::string::npos;
        } else if (param == nullptr || (param->find("weight") == std::string::npos &&
                                        a.tensor->param.find("weight") != std::string::npos)) {
          param = &a.tensor->param;
        }
      }
      if (!data_input) param = nullptr;
      if (param != nullptr) {
        const std::string key = *param + " · " + r.op;
        auto [it, added] = act_index.emplace(key, static_cast<uint32_t>(act_rows.size()));
        if (added) act_rows.push_back(key);
        act.push_back({r.step, it->second, output_abs_max(r), bad});
      }
    }
    int64_t& n = per_step[r.step];
    n += bad;
    const double m = output_abs_max(r);
    if (m >= 0 && (top.size() < keep || m > top.top().first)) {
      top.emplace(m, op_row(r, m));
      if (top.size() > keep) top.pop();
    }
    return true;
  });
  if (total == 0) return;
  // The op watchpoints as `precprobe watch DIR --json` gives them, the hits capped at max_rows.
  json w = watch.finish(reader.watch_hits()).to_json();
  w["hits_total"] = w["hits"].size();
  if (w["hits"].size() > o.max_rows)
    w["hits"].erase(w["hits"].begin() + o.max_rows, w["hits"].end());
  data["op_watch"] = std::move(w);
  if (!act.empty()) {
    std::vector<int64_t> st;
    for (const ActCell& c : act) st.push_back(c.step);
    std::sort(st.begin(), st.end());
    st.erase(std::unique(st.begin(), st.end()), st.end());
    const size_t bucket = bucket_size(st.size(), std::max<size_t>(16, o.heatmap_columns));
    const size_t cols = (st.size() + bucket - 1) / bucket;
    const size_t rows = std::min<size_t>(act_rows.size(), kMaxHeatmapRows);
    std::vector<std::vector<std::optional<double>>> mx(rows,
                                                       std::vector<std::optional<double>>(cols));
    std::vector<std::vector<int64_t>> bad(rows, std::vector<int64_t>(cols, 0));
    for (const ActCell& c : act) {
      if (c.row >= rows) continue;
      const size_t col =
          static_cast<size_t>((std::lower_bound(st.begin(), st.end(), c.step) - st.begin()) /
                              static_cast<std::ptrdiff_t>(bucket));
      bad[c.row][col] += c.bad;
      if (c.abs_max >= 0) {
        auto& v = mx[c.row][col];
        v = v ? std::max(*v, c.abs_max) : c.abs_max;
      }
    }
    json col_steps = json::array(), jmax = json::array(), jbad = json::array();
    for (size_t c = 0; c < cols; ++c) col_steps.push_back(st[c * bucket]);
    for (size_t r = 0; r < rows; ++r) {
      jmax.push_back(opt_array(mx[r]));
      jbad.push_back(bad[r]);
    }
    act_rows.resize(rows);
    data["activations"] = {
        {"n", act.size()},  {"rows", act_rows},   {"rows_total", act_index.size()},
        {"bucket", bucket}, {"steps", col_steps}, {"last_step", st.back()},
        {"abs_max", jmax},  {"bad", jbad}};
  }
  if (!loss.empty()) {
    std::vector<int64_t> ls;
    std::vector<double> lv;
    for (const auto& [st, v] : loss) ls.push_back(st), lv.push_back(v);
    Buckets lb = downsample(ls, lv, o.max_points);
    data["loss"] = {{"name", loss_op + " output"}, {"n", ls.size()},
                    {"bucket", lb.size},           {"step", lb.step},
                    {"min", opt_array(lb.min)},    {"max", opt_array(lb.max)},
                    {"from_op", loss_op}};
  }
  std::vector<int64_t> steps;
  std::vector<double> counts;
  int64_t steps_with = 0;
  for (const auto& [s, n] : per_step) {
    steps.push_back(s);
    counts.push_back(static_cast<double>(n));
    steps_with += n > 0;
  }
  Buckets b = downsample(steps, counts, o.max_points);
  data["nonfinite"] = {{"steps", steps.size()},
                       {"steps_with", steps_with},
                       {"bucket", b.size},
                       {"step", b.step},
                       {"ops", opt_array(b.max)}};
  json rows = json::array();
  for (; !top.empty(); top.pop()) rows.push_back(top.top().second);
  std::reverse(rows.begin(), rows.end());
  data["top_ops"] = {{"ops_total", total}, {"by_abs_max", rows}};
  data["runs"][0]["steps"] = {
      {"first", steps.front()}, {"last", steps.back()}, {"count", steps.size()}};
}

}  // namespace

json run_header(DumpReader& reader) {
  json run;
  run["path"] = reader.path();
  run["ranks"] = json::array();
  for (const RankInfo& r : reader.ranks()) {
    run["ranks"].push_back({{"rank", r.rank},
                            {"world_size", r.world_size},
                            {"dir", r.dir},
                            {"meta", r.run_meta().to_json()}});
  }
  return run;
}

}  // namespace report

std::string build_report_data(const ReportOptions& options) {
  using nlohmann::json;
  ReportOptions o = options;
  o.max_points = std::max<size_t>(16, o.max_points);
  o.max_rows = std::max<size_t>(1, o.max_rows);
  DumpReader reader(o.dump);
  json data;
  data["format"] = "precprobe-report";
  data["format_version"] = 1;
  data["precprobe_version"] = PRECPROBE_VERSION_STRING;
  data["runs"] = json::array({report::run_header(reader)});
  data["loss"] = report::loss_curve(reader, o);
  data["scalars"] = report::scalar_curves(reader, o);
  data["scale"] = report::scale_section(reader, o);
  data["grads"] = report::grads_heatmap(reader, o);
  report::ops_pass(reader, o, data);
  data["runs"][0]["streams"] = report::streams_json(reader.statuses());
  if (!data["runs"][0].contains("steps") && data["scale"].is_object()) {
    // No op records: the steps the scaler saw.
    const json& s = data["scale"];
    data["runs"][0]["steps"] = {
        {"first", s["step"].front()}, {"last", s["last_step"]}, {"count", s["n"]}};
  }
  report::add_analyses(o, reader, data);
  return data.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace precprobe
