// The JSON of compare's results (`precprobe compare --json`, docs/cli.md): OpCompare,
// SequenceDiff and CompareResult::to_json.
#include <cmath>

#include "compare_order.h"
#include "json_util.h"
#include "precprobe/analysis.h"

namespace precprobe {
namespace {

nlohmann::json stat_json(const StatDiff& d) {
  using analysis_detail::number;
  return nlohmann::json{{"n", number(d.n)},
                        {"b", number(d.b)},
                        {"diff", number(d.diff)},
                        {"rel_pct", number(d.rel_pct)}};
}

nlohmann::json arg_json(const ArgCompare& a) {
  using analysis_detail::number;
  nlohmann::json j{{"io", a.io},           {"index", a.index},         {"tensor", a.tensor},
                   {"warning", a.warning}, {"error", number(a.error)}, {"exact", a.exact},
                   {"note", a.note}};
  j["abs_error"] =
      a.abs_error > 0 && std::isinf(a.abs_error) ? nlohmann::json("inf") : number(a.abs_error);
  if (a.tensor) {
    j["dtype_n"] = a.dtype_n;
    j["dtype_b"] = a.dtype_b;
    j["shape_n"] = a.shape_n;
    j["shape_b"] = a.shape_b;
    j["max"] = stat_json(a.max);
    j["min"] = stat_json(a.min);
    j["mean"] = stat_json(a.mean);
    j["norm"] = stat_json(a.norm);
  }
  return j;
}

// Where an op is and how far off it is: the short form the summary's `max_noise` and a
// module's `first_divergent` give.
nlohmann::json op_ref_json(const OpCompare& o) {
  return nlohmann::json{{"step", o.step},
                        {"rank", o.rank},
                        {"seq", o.seq_a},
                        {"name", o.name},
                        {"error", analysis_detail::number(o.error)},
                        {"bound", analysis_detail::number(o.bound)},
                        {"ratio", analysis_detail::number(o.ratio)}};
}

nlohmann::json op_json(const OpCompare& o) {
  using analysis_detail::number;
  nlohmann::json args = nlohmann::json::array();
  for (const ArgCompare& a : o.args) args.push_back(arg_json(a));
  return nlohmann::json{
      {"step", o.step},
      {"rank", o.rank},
      {"seq", o.seq_a},
      {"seq_b", o.seq_b},
      {"name", o.name},
      {"name_b", o.name_b},
      {"op", o.op},
      {"direction", o.direction},
      {"scope", o.scope},
      {"warning", o.warning},
      {"exact", o.exact},
      {"input_error", number(o.input_error)},
      {"output_error", number(o.output_error)},
      {"score", o.score > 0 && std::isinf(o.score) ? nlohmann::json("inf") : number(o.score)},
      {"classification", o.classification},
      {"module", o.module},
      {"error", o.error > 0 && std::isinf(o.error) ? nlohmann::json("inf") : number(o.error)},
      {"inherited",
       o.inherited > 0 && std::isinf(o.inherited) ? nlohmann::json("inf") : number(o.inherited)},
      {"bound", number(o.bound)},
      {"terms", o.terms},
      {"ratio", o.ratio > 0 && std::isinf(o.ratio) ? nlohmann::json("inf") : number(o.ratio)},
      {"after_flip", o.after_flip.empty()
                         ? nlohmann::json()
                         : nlohmann::json{{"seq", o.after_flip_seq}, {"name", o.after_flip}}},
      {"excused", o.excused},
      {"loss_scale", number(o.loss_scale)},
      {"cause", o.cause},
      {"made_by_a", o.made_by_a},
      {"made_by_b", o.made_by_b},
      {"made_by_values", o.made_by_values},
      {"param", o.param},
      {"args", std::move(args)}};
}

nlohmann::json unmatched_json(const UnmatchedOp& u) {
  return nlohmann::json{
      {"step", u.step}, {"rank", u.rank}, {"side", u.side}, {"seq", u.seq}, {"name", u.name}};
}

}  // namespace

nlohmann::json OpCompare::to_json() const { return op_json(*this); }

nlohmann::json DeadDifference::to_json() const {
  return nlohmann::json{{"step", step}, {"rank", rank},     {"seq", seq_a},   {"seq_b", seq_b},
                        {"name", name}, {"module", module}, {"param", param}, {"reason", reason}};
}

nlohmann::json SequenceDiff::to_json() const {
  return nlohmann::json{{"step", step},       {"rank", rank},       {"seq_a", seq_a},
                        {"seq_b", seq_b},     {"count_a", count_a}, {"count_b", count_b},
                        {"names_a", names_a}, {"names_b", names_b}};
}

nlohmann::json CompareResult::to_json() const {
  nlohmann::json j{{"a", path_a},
                   {"b", path_b},
                   {"mode", exact_mode   ? "exact"
                            : first_mode ? "first"
                                         : "statistics"},
                   {"found", found},
                   {"identical", identical},
                   {"matched", matched},
                   {"warnings", warnings},
                   {"unmatched_count", unmatched.size()},
                   {"groups_compared", groups_compared},
                   {"sequence_differs", !sequence_diffs.empty()},
                   {"aligned_by_lcs", aligned_by_lcs},
                   {"aligned_by_thread", aligned_by_thread},
                   {"aligned_approximately", aligned_approximately},
                   {"aligned_fraction", aligned_fraction},
                   {"ops_a", ops_a},
                   {"ops_b", ops_b},
                   {"background_a", background_a},
                   {"background_b", background_b},
                   {"match_ops", match_ops},
                   {"noise_ops", noise_ops},
                   {"divergent_ops", divergent_ops}};
  if (first) {
    j.update(op_json(*first));
  } else {
    for (const char* k : {"step", "rank", "seq", "name", "op", "direction", "classification",
                          "error", "bound", "ratio"})
      j[k] = nullptr;
  }
  // --first's op in every mode (with --exact, `name` is the first op that differs at all).
  if (first_divergent) {
    j["first_divergent"] = op_ref_json(*first_divergent);
    j["first_divergent"]["module"] = first_divergent->module;
  } else {
    j["first_divergent"] = nullptr;
  }
  if (max_noise) {
    const OpCompare& m = *max_noise;
    j["max_noise"] = op_ref_json(m);
    j["max_noise"]["inherited"] = analysis_detail::number(m.inherited);
  } else {
    j["max_noise"] = nullptr;
  }
  j["dead_ops"] = dead_ops;
  nlohmann::json dead_rows = nlohmann::json::array();
  for (const DeadDifference& d : dead) dead_rows.push_back(d.to_json());
  j["dead"] = std::move(dead_rows);
  j["flip_ops"] = flip_ops;
  j["excused_ops"] = excused_ops;
  if (first_excused) {
    const OpCompare& e = *first_excused;
    j["first_excused"] = nlohmann::json{
        {"step", e.step},
        {"rank", e.rank},
        {"seq", e.seq_a},
        {"name", e.name},
        {"ratio", analysis_detail::number(e.ratio)},
        {"after_flip", nlohmann::json{{"seq", e.after_flip_seq}, {"name", e.after_flip}}}};
  } else {
    j["first_excused"] = nullptr;
  }
  j["first_unmatched"] = first_unmatched ? unmatched_json(*first_unmatched) : nlohmann::json();
  nlohmann::json un = nlohmann::json::array();
  for (const UnmatchedOp& u : unmatched) un.push_back(unmatched_json(u));
  j["unmatched"] = std::move(un);
  j["only_a"] = only_a;
  j["only_b"] = only_b;
  nlohmann::json places = nlohmann::json::array();
  for (const SequenceDiff& d : sequence_diffs) places.push_back(d.to_json());
  j["sequence_diffs"] = std::move(places);
  j["first_sequence_diff"] =
      first_sequence_diff ? first_sequence_diff->to_json() : nlohmann::json();
  if (!modules.empty()) {
    nlohmann::json ms = nlohmann::json::array();
    const ModuleCompare* first_module = nullptr;
    for (const ModuleCompare& m : modules) {
      nlohmann::json mj{
          {"module", m.module},       {"ops", m.ops},
          {"match", m.match},         {"noise", m.noise},
          {"divergent", m.divergent}, {"max_ratio", analysis_detail::number(m.max_ratio)}};
      if (m.first_divergent) {
        const OpCompare& f = *m.first_divergent;
        mj["first_divergent"] = op_ref_json(f);
        if (!first_module || analysis_detail::earlier(f, *first_module->first_divergent))
          first_module = &m;
      } else {
        mj["first_divergent"] = nullptr;
      }
      ms.push_back(std::move(mj));
    }
    j["modules"] = std::move(ms);
    j["first_module"] = first_module ? nlohmann::json(first_module->module) : nlohmann::json();
  }
  if (!first_mode && !exact_mode) {
    nlohmann::json rows = nlohmann::json::array();
    for (const OpCompare& o : ops) rows.push_back(op_json(o));
    j["ops"] = std::move(rows);
  } else if (first_mode) {
    // Every divergent op, not only the first: what a port's author works through.
    nlohmann::json rows = nlohmann::json::array();
    for (const OpCompare& o : ops)
      if (o.classification == "divergent") rows.push_back(op_json(o));
    for (const OpCompare& o : divergent_places) rows.push_back(op_json(o));
    j["divergent"] = std::move(rows);
  }
  return j;
}

}  // namespace precprobe
