// OpBrief and the JSON conversions shared by the analyses.
#include <cmath>
#include <unordered_map>

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

std::optional<std::string> consumed_module(const OpRecord& r) {
  for (const Arg& in : r.inputs) {
    if (!in.is_tensor() || in.tensor->param.empty()) continue;
    const std::string& p = in.tensor->param;
    const size_t dot = p.rfind('.');
    return dot == std::string::npos ? std::string("(root)") : p.substr(0, dot);
  }
  return std::nullopt;
}

ModuleOrder ModuleOrder::of(const RunMeta& meta) {
  ModuleOrder order;
  auto it = meta.other.find("modules");
  if (it == meta.other.end() || !it->is_array()) return order;
  for (const nlohmann::json& e : *it) {
    if (!e.is_array() || e.size() < 2 || !e[0].is_string() || !e[1].is_string()) return {};
    order.entries.push_back({e[0].get<std::string>(), e[1].get<std::string>() == "dropout"});
  }
  return order;
}

std::optional<std::string> ModuleOrder::dropout_after(const std::string& anchor, int64_t k) const {
  size_t from = 0;
  if (!anchor.empty()) {
    size_t at = 0;
    while (at < entries.size() && (entries[at].dropout || entries[at].path != anchor)) ++at;
    if (at == entries.size()) return std::nullopt;
    from = at + 1;
  }
  for (size_t j = from; j < entries.size() && entries[j].dropout; ++j) {
    if (k-- == 0) return entries[j].path;
  }
  return std::nullopt;
}

std::map<int, ModuleOrder> module_orders(const std::vector<RankInfo>& ranks) {
  std::map<int, ModuleOrder> orders;
  for (const RankInfo& r : ranks) {
    if (r.meta) orders[r.rank] = ModuleOrder::of(*r.meta);
  }
  return orders;
}

const ModuleOrder* order_of(const std::map<int, ModuleOrder>& orders, int rank) {
  auto it = orders.find(rank);
  return it == orders.end() ? nullptr : &it->second;
}

bool is_dropout_op(std::string_view op) noexcept {
  static constexpr std::string_view kNames[] = {"aten::dropout",
                                                "aten::dropout_",
                                                "aten::feature_dropout",
                                                "aten::feature_dropout_",
                                                "aten::alpha_dropout",
                                                "aten::alpha_dropout_",
                                                "aten::feature_alpha_dropout",
                                                "aten::feature_alpha_dropout_",
                                                "aten::native_dropout"};
  for (std::string_view n : kNames) {
    if (op == n) return true;
  }
  return false;
}

ModuleOp module_op(const OpRecord& r) {
  return {consumed_module(r), r.dir, r.seqnr, is_dropout_op(r.op), r.depth};
}

std::string ModuleAttributor::next(const ModuleOp& p) {
  const bool by_node = rule_ == BackwardRule::kByNode;
  std::string* current = p.dir == Direction::kBackward && by_node ? &backward_ : &forward_;
  if (p.consumed) {
    *current = *p.consumed;
    if (p.dir == Direction::kForward) {
      anchor_ = *p.consumed;
      dropouts_ = 0;
    }
  } else if (order_ && p.dir == Direction::kForward && p.dropout) {
    const bool nested = has_last_forward_ && last_forward_dropout_ && last_forward_depth_ < p.depth;
    if (!nested) {
      if (auto m = order_->dropout_after(anchor_, dropouts_)) forward_ = std::move(*m);
      ++dropouts_;
    }
  }
  if (p.dir == Direction::kForward) {
    has_last_forward_ = true;
    last_forward_dropout_ = p.dropout;
    last_forward_depth_ = p.depth;
  }
  std::string module = *current;
  if (by_node && p.dir == Direction::kForward && p.sn >= 0) {
    node_module_.try_emplace(p.sn, module);
  } else if (by_node && p.dir == Direction::kBackward && p.sn >= 0) {
    auto it = node_module_.find(p.sn);
    if (it != node_module_.end()) module = it->second;
  }
  return module;
}

std::vector<std::string> attribute_modules(const std::vector<ModuleOp>& ops,
                                           const ModuleOrder* order, BackwardRule rule) {
  std::vector<std::string> out;
  out.reserve(ops.size());
  ModuleAttributor attribute(order, rule);
  for (const ModuleOp& p : ops) out.push_back(attribute.next(p));
  return out;
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
