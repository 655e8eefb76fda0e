// OpBrief and the JSON conversions shared by the analyses.
#include <cmath>
#include <unordered_map>
#include <utility>

#include "json_util.h"
#include "modules.h"

namespace precprobe {
namespace analysis_detail {

nlohmann::json number(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

nlohmann::json to_json(const TensorStats& t) {
  nlohmann::json j{{"dtype", t.dtype},       {"shape", t.shape},      {"numel", t.numel},
                   {"nan", t.nan},           {"pinf", t.pinf},        {"ninf", t.ninf},
                   {"zero", t.zero},         {"min", number(t.min)},  {"max", number(t.max)},
                   {"mean", number(t.mean)}, {"norm", number(t.norm)}};
  if (t.hash) j["hash"] = *t.hash;
  if (!t.param.empty()) j["param"] = t.param;
  if (t.list_index >= 0) j["li"] = t.list_index;
  return j;
}

nlohmann::json to_json(const Arg& a) {
  if (a.tensor) return to_json(*a.tensor);
  return nlohmann::json{{"value", a.value}};
}

nlohmann::json to_json(const OpBrief& op) {
  nlohmann::json in = nlohmann::json::array(), out = nlohmann::json::array();
  for (const Arg& a : op.inputs) in.push_back(to_json(a));
  for (const Arg& a : op.outputs) out.push_back(to_json(a));
  return nlohmann::json{{"step", op.step},
                        {"rank", op.rank},
                        {"seq", op.seq},
                        {"name", op.name},
                        {"op", op.op},
                        {"direction", op.direction},
                        {"scope", op.scope},
                        {"node", op.node},
                        {"depth", op.depth},
                        {"params", op.params},
                        {"inputs", std::move(in)},
                        {"outputs", std::move(out)}};
}

nlohmann::json to_json(const StreamStatus& s) {
  return nlohmann::json{{"path", s.path},           {"present", s.present},
                        {"frames", s.frames},       {"records", s.records},
                        {"bad_lines", s.bad_lines}, {"frames_passed", s.frames_passed},
                        {"truncated", s.truncated}, {"truncated_bytes", s.truncated_bytes},
                        {"message", s.message}};
}

}  // namespace analysis_detail

OpBrief OpBrief::from(const OpRecord& r) {
  OpBrief b;
  b.step = r.step;
  b.rank = r.rank;
  b.seq = r.seq;
  b.name = r.name();
  b.op = r.op;
  b.direction = std::string(to_string(r.dir));
  b.scope = r.scope;
  b.node = r.node;
  b.depth = r.depth;
  b.thread = r.thread;
  for (const auto* args : {&r.inputs, &r.outputs}) {
    for (const Arg& a : *args) {
      if (a.tensor && !a.tensor->param.empty()) b.params.push_back(a.tensor->param);
    }
  }
  b.inputs = r.inputs;
  b.outputs = r.outputs;
  return b;
}

nlohmann::json OpBrief::to_json() const { return analysis_detail::to_json(*this); }

}  // namespace precprobe
