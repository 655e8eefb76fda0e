// Gradient and loss-scale histories.
#include <algorithm>
#include <map>
#include <tuple>

#include "json_util.h"
#include "source.h"

namespace precprobe {
namespace {

using analysis_detail::number;
using analysis_detail::RecordSource;

GradHistory grads_of(RecordSource& src, const std::string& filter) {
  std::map<std::string, ParamGradHistory> by_name;
  GradHistory h;
  src.grads([&](const GradRecord& r) {
    if (!filter.empty() && r.param.find(filter) == std::string::npos) return true;
    ParamGradHistory& p = by_name[r.param];
    p.param = r.param;
    p.records.push_back(r);
    p.nonfinite_steps += (r.grad_nan + r.grad_inf) > 0 ? 1 : 0;
    p.watch_hits += static_cast<int64_t>(r.watch.size());
    p.max_grad_norm = std::max(p.max_grad_norm, r.grad_norm);
    for (const std::string& w : r.watch) h.hits.emplace_back(r.step, r.param + ": " + w);
    return true;
  });
  for (auto& [name, p] : by_name) {
    std::stable_sort(p.records.begin(), p.records.end(),
                     [](const GradRecord& x, const GradRecord& y) {
                       return std::tie(x.step, x.rank) < std::tie(y.step, y.rank);
                     });
    h.params.push_back(std::move(p));
  }
  std::stable_sort(h.hits.begin(), h.hits.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  return h;
}

// Merges the parameter groups of one optimizer step: any group that found an Inf or was
// skipped marks the step.
ScaleHistory scale_of(RecordSource& src) {
  std::map<std::tuple<int, int64_t, int>, ScaleEntry> merged;  // (rank, step, optimizer)
  src.scaler([&](const ScalerRecord& r) {
    auto [it, fresh] = merged.try_emplace({r.rank, r.step, r.optimizer});
    ScaleEntry& e = it->second;
    if (fresh) {
      e.step = r.step;
      e.rank = r.rank;
      e.optimizer = r.optimizer;
      e.scale = r.scale_before;
      e.scale_next = r.scale_after;
      e.event = r.event;
    }
    e.found_inf = e.found_inf || r.found_inf;
    e.skipped = e.skipped || r.skipped;
    e.nonfinite_params += r.nonfinite_params;
    if (e.event.empty()) e.event = r.event;
    e.scale_next = r.scale_after;
    return true;
  });
  ScaleHistory h;
  for (auto& [key, e] : merged) h.entries.push_back(std::move(e));
  std::stable_sort(
      h.entries.begin(), h.entries.end(), [](const ScaleEntry& x, const ScaleEntry& y) {
        return std::tie(x.step, x.rank, x.optimizer) < std::tie(y.step, y.rank, y.optimizer);
      });
  return h;
}

}  // namespace

nlohmann::json GradHistory::to_json() const {
  nlohmann::json ps = nlohmann::json::array();
  for (const ParamGradHistory& p : params) {
    nlohmann::json steps = nlohmann::json::array();
    for (const GradRecord& r : p.records) {
      steps.push_back({{"step", r.step},
                       {"rank", r.rank},
                       {"grad_norm", number(r.grad_norm)},
                       {"grad_abs_max", number(r.grad_abs_max)},
                       {"grad_abs_mean", number(r.grad_abs_mean)},
                       {"grad_nan", r.grad_nan},
                       {"grad_inf", r.grad_inf},
                       {"has_grad", r.has_grad},
                       {"weight_norm", number(r.weight_norm)},
                       {"update_ratio", number(r.update_ratio)},
                       {"watch", r.watch}});
    }
    ps.push_back({{"param", p.param},
                  {"nonfinite_steps", p.nonfinite_steps},
                  {"watch_hits", p.watch_hits},
                  {"max_grad_norm", number(p.max_grad_norm)},
                  {"steps", std::move(steps)}});
  }
  nlohmann::json hs = nlohmann::json::array();
  for (const auto& [step, what] : hits) hs.push_back({{"step", step}, {"hit", what}});
  return nlohmann::json{{"params", std::move(ps)}, {"hits", std::move(hs)}};
}

nlohmann::json ScaleHistory::to_json() const {
  nlohmann::json a = nlohmann::json::array();
  for (const ScaleEntry& e : entries) {
    a.push_back({{"step", e.step},
                 {"rank", e.rank},
                 {"optimizer", e.optimizer},
                 {"scale", number(e.scale)},
                 {"scale_next", number(e.scale_next)},
                 {"found_inf", e.found_inf},
                 {"skipped", e.skipped},
                 {"event", e.event},
                 {"nonfinite_params", e.nonfinite_params}});
  }
  return a;
}

GradHistory grad_history(DumpReader& reader, const std::string& param, const ReadOptions& read) {
  analysis_detail::ReaderSource src(reader, read);
  return grads_of(src, param);
}

GradHistory grad_history(const DumpData& data, const std::string& param) {
  analysis_detail::DataSource src(data);
  return grads_of(src, param);
}

ScaleHistory scale_history(DumpReader& reader, const ReadOptions& read) {
  analysis_detail::ReaderSource src(reader, read);
  return scale_of(src);
}

ScaleHistory scale_history(const DumpData& data) {
  analysis_detail::DataSource src(data);
  return scale_of(src);
}

}  // namespace precprobe
