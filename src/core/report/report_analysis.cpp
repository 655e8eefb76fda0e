// The analyses the report embeds: the CLI's own functions (precprobe/analysis.h) and their
// to_json() output, so a figure in the report is the figure `precprobe <command> --json`
// prints. Only their size is trimmed (per-step lists cut, rows capped).
#include <algorithm>
#include <cmath>
#include <limits>

#include "precprobe/analysis.h"
#include "precprobe/checklist.h"
#include "precprobe/precision.h"
#include "report/downsample.h"
#include "report/report_internal.h"

namespace precprobe::report {
namespace {

using nlohmann::json;

// `precprobe summary --json`, its per-step op counts (one entry per step: 100 000 on a
// long run) replaced by their number.
json summary_json(DumpReader& reader) {
  json s = summarize_dump(reader).to_json();
  if (s.contains("steps") && s["steps"].is_array()) {
    const size_t n = s["steps"].size();
    s["steps"] = {{"count", n}, {"note", "per-step op counts left out of the report"}};
  }
  return s;
}

// A compare row for the table: the scalar fields of OpCompare::to_json() (its per-argument
// details are in the first divergent op's card).
json flat_row(const OpCompare& oc) {
  json j = oc.to_json();
  j.erase("args");
  return j;
}

// Output error of each matched op of one (step, rank) in execution order, downsampled (max
// per bucket). Zero is drawn at a floor below the smallest non-zero error; an infinite
// error (structural difference) at the top.
json per_op_series(const CompareResult& r, int64_t step, int rank, const ReportOptions& o) {
  std::vector<const OpCompare*> ops;
  for (const OpCompare& oc : r.ops) {
    if (oc.step == step && oc.rank == rank) ops.push_back(&oc);
  }
  std::sort(ops.begin(), ops.end(),
            [](const OpCompare* x, const OpCompare* y) { return x->seq_a < y->seq_a; });
  if (ops.empty()) return nullptr;
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (const OpCompare* oc : ops) {
    const double e = oc->output_error;
    if (std::isfinite(e) && e > 0) {
      lo = std::min(lo, e);
      hi = std::max(hi, e);
    }
  }
  const double floor = std::isfinite(lo) ? lo / 10 : 1e-12;
  const double top = hi > 0 ? hi * 10 : 1.0;
  std::vector<int64_t> index;
  std::vector<double> value;
  std::optional<size_t> first;
  for (size_t i = 0; i < ops.size(); ++i) {
    const double e = ops[i]->output_error;
    index.push_back(static_cast<int64_t>(i));
    value.push_back(std::isnan(e) ? NAN : std::isinf(e) ? top : std::max(e, floor));
    if (r.first && r.first->step == step && r.first->rank == rank &&
        r.first->seq_a == ops[i]->seq_a) {
      first = i;
    }
  }
  Buckets b = downsample(index, value, o.max_points);
  json vals = json::array();
  for (const auto& v : b.max) vals.push_back(v ? json(*v) : json(nullptr));
  json names = json::array();
  for (size_t i = 0; i < ops.size(); i += b.size) names.push_back(ops[i]->name);
  return {{"metric", "output error (relative)"},
          {"bucket", b.size},
          {"index", b.step},
          {"value", vals},
          {"name", names},
          {"floor", floor},
          {"top", top},
          {"first_pos", first ? json(*first / b.size) : json(nullptr)}};
}

json compare_json(const ReportOptions& o, DumpReader& a, json& data) {
  DumpReader b(o.compare);
  CompareOptions co;
  co.first = true;
  const CompareResult r = compare_dumps(a, b, co);
  json result = r.to_json();
  // The unmatched list can hold every op of a step one run lacks: keep the first rows.
  if (result["unmatched"].size() > o.max_rows) {
    result["unmatched"].erase(result["unmatched"].begin() + static_cast<long>(o.max_rows),
                              result["unmatched"].end());
  }
  json c;
  c["a"] = r.path_a;
  c["b"] = r.path_b;
  c["result"] = result;
  c["first"] = r.first ? r.first->to_json() : json(nullptr);
  int64_t step = 0;
  int rank = 0;
  if (o.step) {
    step = *o.step;
  } else if (r.first) {
    step = r.first->step;
    rank = r.first->rank;
  } else if (!r.ops.empty()) {
    step = r.ops.front().step;
    rank = r.ops.front().rank;
  }
  c["step"] = step;
  c["rank"] = rank;
  c["per_op"] = per_op_series(r, step, rank, o);
  json rows = json::array();
  for (size_t i = 0; i < std::min(r.ops.size(), o.max_rows); ++i)
    rows.push_back(flat_row(r.ops[i]));
  c["rows"] = rows;
  c["rows_total"] = r.ops.size();
  // Top ops by the error they added (score), as --first ranks them.
  std::vector<const OpCompare*> by_score;
  for (const OpCompare& oc : r.ops) by_score.push_back(&oc);
  const size_t keep = std::min(by_score.size(), std::min<size_t>(o.max_rows, kMaxTopOps));
  std::partial_sort(by_score.begin(), by_score.begin() + static_cast<long>(keep), by_score.end(),
                    [](const OpCompare* x, const OpCompare* y) {
                      const double sx = std::isnan(x->score) ? -1 : x->score;
                      const double sy = std::isnan(y->score) ? -1 : y->score;
                      return sx > sy;
                    });
  json top = json::array();
  for (size_t i = 0; i < keep; ++i) top.push_back(flat_row(*by_score[i]));
  if (!data["top_ops"].is_object()) data["top_ops"] = json::object();
  data["top_ops"]["by_error"] = top;
  data["top_ops"]["error_key"] = "score";
  json run_b = run_header(b);
  run_b["summary"] = summary_json(b);
  data["runs"].push_back(run_b);
  return c;
}

// The module x format view of `precprobe precision` (scaling none): per module and format the
// worst verdict of its ops and whether the plan keeps it in fp32; per format the loss scale.
// null for a dump without range statistics.
json precision_json(DumpReader& reader) {
  json formats = json::object(), modules = json::array();
  std::vector<std::string> order;
  for (const char* name : {"fp16", "bf16", "e4m3", "e5m2"}) {
    PrecisionOptions o;
    o.format = FloatFormat::find(name);
    PrecisionResult r;
    try {
      r = analyse_precision(reader, o);
    } catch (const Error&) {
      return nullptr;  // no range statistics: the first format tells
    }
    json cells = json::object();
    for (const ModulePrecision& m : r.modules) {
      if (std::find(order.begin(), order.end(), m.module) == order.end()) order.push_back(m.module);
      cells[m.module.empty() ? "(before any parameter)" : m.module] = {
          {"verdict", to_string(m.verdict)},
          {"keep_fp32", m.keep_fp32},
          {"overflow", m.unscaled.overflow},
          {"flush_to_zero", m.unscaled.flush_to_zero}};
    }
    const json full = r.to_json();
    formats[name] = {{"modules", cells},
                     {"loss_scale", full["loss_scale"]},
                     {"keep_fp32", r.keep_fp32_modules()}};
  }
  for (const std::string& m : order) modules.push_back(m.empty() ? "(before any parameter)" : m);
  return {{"formats", formats}, {"modules", modules}};
}

}  // namespace

void add_analyses(const ReportOptions& options, DumpReader& reader, nlohmann::json& data) {
  data["runs"][0]["summary"] = summary_json(reader);
  data["overflow"] = find_overflow(reader).to_json();
  data["checklist"] = run_checklist(reader).to_json();
  data["precision"] = precision_json(reader);
  data["compare"] = options.compare.empty() ? json(nullptr) : compare_json(options, reader, data);
}

}  // namespace precprobe::report
