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

bool outside_modules(std::string_view module) noexcept {
  return module == kTopLevel || module == kAfterBackward || module == kOptimizer;
}

std::string common_module(std::string_view a, std::string_view b) {
  if (a == b) return std::string(a);
  if (a == kRootModule || b == kRootModule) return std::string(kRootModule);
  // The longest prefix of whole components: "b0.q" and "b0.qkv" share "b0", not "b0.q".
  size_t common = 0;
  for (size_t i = 0;; ++i) {
    const bool end_a = i == a.size(), end_b = i == b.size();
    if ((end_a || a[i] == '.') && (end_b || b[i] == '.')) common = i;
    if (end_a || end_b || a[i] != b[i]) break;
  }
  return common == 0 ? std::string(kRootModule) : std::string(a.substr(0, common));
}

std::string module_between(std::string_view p, std::string_view n) {
  std::string common = common_module(p, n);
  if (p == kRootModule || p == common) return common;
  // The child of `common` that holds p: the module p's subtree was in when its forward went on.
  const size_t from = common == kRootModule ? 0 : common.size() + 1;
  const size_t dot = p.find('.', from);
  if (dot == std::string_view::npos) return common;  // p is that child: common's own forward
  return std::string(p.substr(0, dot));
}

std::optional<std::string> consumed_module(const OpRecord& r) {
  for (const Arg& in : r.inputs) {
    if (!in.is_tensor() || in.tensor->param.empty()) continue;
    const std::string& p = in.tensor->param;
    const size_t dot = p.rfind('.');
    return dot == std::string::npos ? std::string(kRootModule) : p.substr(0, dot);
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

bool updates_parameter(const OpRecord& r) noexcept {
  if (r.op.empty() || r.op.back() != '_') return false;
  for (const Arg& in : r.inputs)
    if (in.is_tensor()) return !in.tensor->param.empty();
  return false;
}

ModuleOp module_op(const OpRecord& r) {
  ModuleOp p;
  p.consumed = consumed_module(r);
  p.dir = r.dir;
  p.sn = r.seqnr;
  p.dropout = is_dropout_op(r.op);
  p.depth = r.depth;
  p.thread = r.thread;
  p.grad = r.grad;
  p.updates_param = p.consumed && updates_parameter(r);
  p.background = r.background;
  return p;
}

int32_t ModuleAttributor::placed(const std::string& module) {
  // Consecutive ops of one module share a group: a step holds few groups.
  if (!groups_.empty() && groups_.back() && *groups_.back() == module)
    return static_cast<int32_t>(groups_.size() - 1);
  groups_.emplace_back(module);
  return static_cast<int32_t>(groups_.size() - 1);
}

int32_t ModuleAttributor::open() {
  if (open_ < 0) {
    open_ = static_cast<int32_t>(groups_.size());
    groups_.emplace_back();
  }
  return open_;
}

void ModuleAttributor::resolve(std::string_view module) {
  if (open_ < 0) return;
  groups_[static_cast<size_t>(open_)] = std::string(module);
  open_ = -1;
  open_no_grad_ = false;
}

std::string_view ModuleAttributor::outside() const noexcept {
  switch (phase_) {
    case Phase::kBackwardDone:
      return kAfterBackward;
    case Phase::kOptimizerRan:
      return kOptimizer;
    case Phase::kPass:
      break;
  }
  return kTopLevel;
}

void ModuleAttributor::add(const ModuleOp& p) {
  if (p.background) {  // a data loader's thread: no part of the step's passes
    queue_.push_back(placed(std::string(kTopLevel)));
    return;
  }
  // The op this one ran in (nesting.h): the nearest earlier op of its thread, still open,
  // that is less deep.
  std::vector<std::pair<int32_t, int32_t>>& calls = calls_[p.thread];
  while (!calls.empty() && calls.back().first >= p.depth) calls.pop_back();
  const std::optional<int32_t> enclosing =
      calls.empty() ? std::nullopt : std::optional<int32_t>(calls.back().second);
  int32_t group = -1;
  const bool no_grad = p.dir == Direction::kForward && p.grad == std::optional<bool>(false);
  // Waiting ops an optimizer may have run: its work on a parameter's state (grad mode off)
  // before it updates the parameter is that parameter's.
  const bool optimizer_may_wait = open_no_grad_ && phase_ != Phase::kPass;
  if (p.dir == Direction::kBackward) {
    // The forward's last ops (the loss) are outside the modules.
    resolve(optimizer_may_wait ? outside() : kTopLevel);
    phase_ = Phase::kBackwardDone;
    pass_anchor_.reset();
    auto node = p.sn >= 0 ? node_group_.find(p.sn) : node_group_.end();
    if (node != node_group_.end())
      group = node->second;
    else if (p.consumed)
      group = placed(*p.consumed);
    else if (enclosing)
      group = *enclosing;
    else  // the engine's own (AccumulateGrad, a sum of gradients): with the op before it
      group = last_backward_ >= 0 ? last_backward_ : placed(std::string(kTopLevel));
    last_backward_ = group;
  } else if (p.consumed && enclosing) {  // inside an op of its own module, or an optimizer's
    group = placed(*p.consumed);
  } else if (p.consumed && (p.updates_param || (no_grad && phase_ != Phase::kPass))) {
    // The state it worked on for this parameter is its; what came before (clipping) is not.
    resolve(open_no_grad_ ? std::string_view(*p.consumed) : outside());
    phase_ = Phase::kOptimizerRan;
    pass_anchor_.reset();
    group = placed(*p.consumed);
  } else if (enclosing) {
    group = *enclosing;
  } else {
    std::optional<std::string> module = p.consumed;
    if (!module && p.dropout && order_) {
      module = order_->dropout_after(anchor_, dropouts_);
      ++dropouts_;
    }
    if (module) {  // a parameter read, or a dropout placed by the module order
      resolve(optimizer_may_wait                       ? std::string(outside())
              : phase_ == Phase::kPass && pass_anchor_ ? module_between(*pass_anchor_, *module)
                                                       : std::string(kTopLevel));
      phase_ = Phase::kPass;
      pass_anchor_ = *module;
      if (p.consumed) {
        anchor_ = *p.consumed;
        dropouts_ = 0;
      }
      group = placed(*module);
    } else {
      // After a backward, ops with and without grad mode wait apart: what precedes an
      // optimizer's work (clipping with grad mode on) is outside the modules.
      if (open_ >= 0 && phase_ != Phase::kPass && open_no_grad_ != no_grad) resolve(outside());
      const bool fresh = open_ < 0;
      group = open();
      open_no_grad_ = (fresh || open_no_grad_) && no_grad;
    }
  }
  if (p.dir == Direction::kForward && p.sn >= 0) node_group_.try_emplace(p.sn, group);
  calls.emplace_back(p.depth, group);
  queue_.push_back(group);
}

void ModuleAttributor::end_step() {
  resolve(outside());
  reset_step();
}

void ModuleAttributor::reset_step() {
  // The groups of ops not yet taken stay; what places the next ops starts again.
  node_group_.clear();
  calls_.clear();
  phase_ = Phase::kPass;
  pass_anchor_.reset();
  anchor_.clear();
  dropouts_ = 0;
  last_backward_ = -1;
}

std::string ModuleAttributor::take() {
  const auto g = static_cast<size_t>(queue_.front());
  queue_.pop_front();
  std::string module = *groups_[g];
  // Between steps, once every op is taken, nothing refers to a group any more.
  if (queue_.empty() && open_ < 0 && node_group_.empty() && calls_.empty() && last_backward_ < 0)
    groups_.clear();
  return module;
}

std::vector<std::string> attribute_modules(const std::vector<ModuleOp>& ops,
                                           const ModuleOrder* order) {
  std::vector<std::string> out;
  out.reserve(ops.size());
  ModuleAttributor attribute(order);
  for (const ModuleOp& p : ops) attribute.add(p);
  attribute.end_step();
  while (attribute.ready()) out.push_back(attribute.take());
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
