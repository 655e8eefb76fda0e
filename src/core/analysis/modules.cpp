// The placement of ops in modules (modules.h): the module order of meta.json, and the
// attributor that applies the rule of docs/cli.md, "Modules".
#include "modules.h"

#include <algorithm>

namespace precprobe {
namespace analysis_detail {

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

namespace {

bool is_pair_of_strings(const nlohmann::json& e) {
  return e.is_array() && e.size() >= 2 && e[0].is_string() && e[1].is_string();
}

// "torch::nn::LeakyReLUImpl" (LibTorch's name()), "LeakyReLU" (the Python door's): "LeakyReLU".
std::string type_name(std::string t) {
  const size_t colon = t.rfind("::");
  if (colon != std::string::npos) t.erase(0, colon + 2);
  constexpr std::string_view kImpl = "Impl";
  if (t.size() > kImpl.size() && std::string_view(t).substr(t.size() - kImpl.size()) == kImpl)
    t.resize(t.size() - kImpl.size());
  return t;
}

std::string parent_of(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? std::string(kRootModule) : path.substr(0, dot);
}

// Whether `path` lies in the module `m` (is it, or below it).
bool inside(const std::string& path, const std::string& m) {
  if (m == kRootModule || path == m) return true;
  return path.size() > m.size() && path.compare(0, m.size(), m) == 0 && path[m.size()] == '.';
}

// The child of `m` that holds `path` (inside(path, m), path != m).
std::string child_holding(const std::string& path, const std::string& m) {
  const size_t from = m == kRootModule ? 0 : m.size() + 1;
  const size_t dot = path.find('.', from);
  return dot == std::string::npos ? path : path.substr(0, dot);
}

}  // namespace

ModuleOrder ModuleOrder::of(const RunMeta& meta) {
  ModuleOrder order;
  auto it = meta.other.find("modules");
  if (it != meta.other.end() && it->is_array()) {
    for (const nlohmann::json& e : *it) {
      if (!is_pair_of_strings(e)) {
        order.entries.clear();
        break;
      }
      order.entries.push_back({e[0].get<std::string>(), e[1].get<std::string>() == "dropout"});
    }
  }
  it = meta.other.find("module_types");
  if (it != meta.other.end() && it->is_array()) {
    for (const nlohmann::json& e : *it) {
      if (!is_pair_of_strings(e)) {
        order.types.clear();
        order.children.clear();
        break;
      }
      std::string path = e[0].get<std::string>();
      if (path.empty()) continue;
      if (path != kRootModule) order.children[parent_of(path)].push_back(path);
      order.types[std::move(path)] = type_name(e[1].get<std::string>());
    }
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

ModuleOrder::Gap ModuleOrder::gap(const std::optional<std::string>& p,
                                  const std::optional<std::string>& n) const {
  Gap g;
  if (types.empty()) return g;
  auto sequential = [&](const std::string& m) {
    auto t = types.find(m);
    return t != types.end() && t->second == "Sequential";
  };
  // The position of `child` among its parent's children, or -1.
  auto position = [&](const std::string& parent, const std::string& child) -> std::ptrdiff_t {
    auto c = children.find(parent);
    if (c == children.end()) return -1;
    auto at = std::find(c->second.begin(), c->second.end(), child);
    return at == c->second.end() ? -1 : at - c->second.begin();
  };
  // After p: up through the Sequentials p's forward ends in.
  if (p) {
    for (std::string cur = *p; cur != kRootModule;) {
      const std::string parent = parent_of(cur);
      const std::ptrdiff_t at = sequential(parent) ? position(parent, cur) : -1;
      if (at < 0) break;
      const std::vector<std::string>& kids = children.at(parent);
      if (n && inside(*n, parent) && *n != parent) {  // n is in it: the children between
        const std::ptrdiff_t to = position(parent, child_holding(*n, parent));
        if (to <= at) break;
        g.front.assign(kids.begin() + at + 1, kids.begin() + to);
        g.between = true;
        break;
      }
      g.front.insert(g.front.end(), kids.begin() + at + 1, kids.end());
      cur = parent;
    }
  }
  // Before n: up through the Sequentials n's forward starts in (not holding p), outermost
  // first.
  if (n) {
    std::vector<std::vector<std::string>> levels;
    for (std::string cur = *n; cur != kRootModule;) {
      const std::string parent = parent_of(cur);
      if (p && inside(*p, parent)) break;
      const std::ptrdiff_t at = sequential(parent) ? position(parent, cur) : -1;
      if (at < 0) break;
      const std::vector<std::string>& kids = children.at(parent);
      levels.emplace_back(kids.begin(), kids.begin() + at);
      cur = parent;
    }
    for (auto l = levels.rbegin(); l != levels.rend(); ++l)
      g.back.insert(g.back.end(), l->begin(), l->end());
  }
  return g;
}

bool ModuleOrder::dropout(const std::string& path) const {
  auto t = types.find(path);
  return t != types.end() && t->second.find("Dropout") != std::string::npos;
}

bool ModuleOrder::one_op(const std::string& path) const {
  // Module types whose forward is one ATen call in LibTorch and in PyTorch alike.
  static constexpr std::string_view kOneOp[] = {"ReLU",
                                                "ReLU6",
                                                "LeakyReLU",
                                                "ELU",
                                                "SELU",
                                                "CELU",
                                                "GELU",
                                                "SiLU",
                                                "Mish",
                                                "Sigmoid",
                                                "Tanh",
                                                "Softplus",
                                                "Hardtanh",
                                                "Hardswish",
                                                "Hardsigmoid",
                                                "Hardshrink",
                                                "Softshrink",
                                                "Threshold",
                                                "LogSigmoid",
                                                "GLU",
                                                "Softmax",
                                                "LogSoftmax",
                                                "Flatten",
                                                "MaxPool1d",
                                                "MaxPool2d",
                                                "MaxPool3d",
                                                "AvgPool1d",
                                                "AvgPool2d",
                                                "AvgPool3d",
                                                "AdaptiveAvgPool1d",
                                                "AdaptiveAvgPool2d",
                                                "AdaptiveAvgPool3d",
                                                "AdaptiveMaxPool1d",
                                                "AdaptiveMaxPool2d",
                                                "AdaptiveMaxPool3d"};
  auto t = types.find(path);
  if (t == types.end()) return false;
  for (std::string_view k : kOneOp)
    if (t->second == k) return true;
  return false;
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
  p.optimizer = r.optimizer;
  if (!r.module.empty()) p.placed = r.module;
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
  open_.push_back(static_cast<int32_t>(groups_.size()));
  groups_.emplace_back();
  return open_.back();
}

void ModuleAttributor::resolve(std::string_view module) {
  for (int32_t g : open_) groups_[static_cast<size_t>(g)] = std::string(module);
  open_.clear();
  open_no_grad_ = false;
  open_optimizer_ = false;
}

void ModuleAttributor::resolve_gap(const std::optional<std::string>& p,
                                   const std::optional<std::string>& n, std::string_view module) {
  if (open_.empty() || order_ == nullptr || order_->types.empty()) return resolve(module);
  const ModuleOrder::Gap gap = order_->gap(p, n);
  auto set = [&](size_t i, const std::string& m) { groups_[static_cast<size_t>(open_[i])] = m; };
  size_t first = 0, last = open_.size();  // [first, last): in `module`
  // A child whose forward is one call runs one op (with those nested in it); the first child
  // of another kind ends what is known from that side.
  const std::vector<std::string>& front = gap.front;
  size_t f = 0, f_end = front.size();
  for (; f < f_end && first < last && order_->one_op(front[f]); ++f) set(first++, front[f]);
  if (gap.between) {
    for (; f_end > f && first < last && order_->one_op(front[f_end - 1]); --f_end)
      set(--last, front[f_end - 1]);
    // The one child left ran the other ops between (a Sequential runs nothing of its own);
    // a dropout is placed by its own op.
    if (f_end - f == 1 && !order_->dropout(front[f]))
      for (; first < last; ++first) set(first, front[f]);
  }
  for (size_t b = gap.back.size(); b > 0 && first < last && order_->one_op(gap.back[b - 1]); --b)
    set(--last, gap.back[b - 1]);
  for (size_t i = first; i < last; ++i) set(i, std::string(module));
  open_.clear();
  open_no_grad_ = false;
  open_optimizer_ = false;
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
  if (p.placed) {  // placed by the probe (OpRecord::module): nothing else of the step is here
    queue_.push_back(placed(*p.placed));
    return;
  }
  // The op this one ran in (nesting.h): the nearest earlier op of its thread, still open,
  // that is less deep.
  std::vector<std::pair<int32_t, int32_t>>& calls = calls_[p.thread];
  while (!calls.empty() && calls.back().first >= p.depth) calls.pop_back();
  const int32_t enclosing = calls.empty() ? -1 : calls.back().second;  // its group, or -1
  int32_t group = -1;
  const bool no_grad = p.dir == Direction::kForward && p.grad == std::optional<bool>(false);
  // Waiting ops an optimizer may have run: its work on a parameter's state (grad mode off)
  // before it updates the parameter is that parameter's.
  const bool optimizer_may_wait = open_no_grad_ && phase_ != Phase::kPass;
  // An optimizer's first op, as the program told (OpRecord::optimizer): what waits before it
  // (gradient clipping) is not its work.
  if (p.optimizer && p.dir == Direction::kForward && enclosing < 0 && !open_optimizer_ &&
      !open_.empty())
    resolve(outside());
  if (p.dir == Direction::kBackward) {
    // The forward's last ops (the loss) are outside the modules.
    if (optimizer_may_wait)
      resolve(outside());
    else if (phase_ == Phase::kPass)
      resolve_gap(pass_anchor_, std::nullopt, kTopLevel);
    else
      resolve(kTopLevel);
    phase_ = Phase::kBackwardDone;
    pass_anchor_.reset();
    auto node = p.sn >= 0 ? node_group_.find(p.sn) : node_group_.end();
    if (node != node_group_.end())
      group = node->second;
    else if (p.consumed)
      group = placed(*p.consumed);
    else if (enclosing >= 0)
      group = enclosing;
    else  // the engine's own (AccumulateGrad, a sum of gradients): with the op before it
      group = last_backward_ >= 0 ? last_backward_ : placed(std::string(kTopLevel));
    last_backward_ = group;
  } else if (p.consumed && enclosing >= 0) {  // inside an op of its own module, or an optimizer's
    group = placed(*p.consumed);
  } else if (p.consumed &&
             (p.updates_param || (no_grad && (phase_ != Phase::kPass || p.optimizer)))) {
    // The state it worked on for this parameter is its; what came before (clipping) is not.
    resolve(open_no_grad_ ? std::string_view(*p.consumed) : outside());
    phase_ = Phase::kOptimizerRan;
    pass_anchor_.reset();
    group = placed(*p.consumed);
  } else if (enclosing >= 0) {
    group = enclosing;
  } else {
    std::optional<std::string> module = p.consumed;
    if (!module && p.dropout && order_) {
      module = order_->dropout_after(anchor_, dropouts_);
      ++dropouts_;
    }
    if (module) {  // a parameter read, or a dropout placed by the module order
      if (optimizer_may_wait)
        resolve(outside());
      else if (phase_ == Phase::kPass && pass_anchor_)
        resolve_gap(pass_anchor_, module, module_between(*pass_anchor_, *module));
      else
        resolve_gap(std::nullopt, module, kTopLevel);
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
      if (!open_.empty() && phase_ != Phase::kPass && open_no_grad_ != no_grad) resolve(outside());
      const bool fresh = open_.empty();
      group = open();
      open_no_grad_ = (fresh || open_no_grad_) && no_grad;
      open_optimizer_ = (fresh || open_optimizer_) && p.optimizer;
    }
  }
  if (p.dir == Direction::kForward && p.sn >= 0) node_group_.try_emplace(p.sn, group);
  calls.emplace_back(p.depth, group);
  queue_.push_back(group);
}

void ModuleAttributor::end_step() {
  if (phase_ == Phase::kPass)
    resolve_gap(pass_anchor_, std::nullopt, outside());
  else
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
  std::string module = *groups_[static_cast<size_t>(queue_.front())];
  skip();
  return module;
}

void ModuleAttributor::skip() {
  queue_.pop_front();
  // Between steps, once every op is taken, nothing refers to a group any more.
  if (queue_.empty() && open_.empty() && node_group_.empty() && calls_.empty() &&
      last_backward_ < 0)
    groups_.clear();
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

std::optional<std::string> module_at(const std::vector<ModuleOp>& ops, size_t at,
                                     const ModuleOrder* order) {
  const bool named = std::any_of(ops.begin(), ops.end(), [](const ModuleOp& p) {
    return p.consumed.has_value() || p.placed.has_value();
  });
  if (!named || at >= ops.size()) return std::nullopt;
  return std::move(attribute_modules(ops, order)[at]);
}

}  // namespace analysis_detail

bool ModuleOp::is_dropout(std::string_view op) noexcept {
  return analysis_detail::is_dropout_op(op);
}

struct ModulePlacer::Impl {
  analysis_detail::ModuleOrder order;
  analysis_detail::ModuleAttributor attribute;
};

ModulePlacer::ModulePlacer() : impl_(std::make_unique<Impl>()) {}
ModulePlacer::~ModulePlacer() = default;

void ModulePlacer::set_modules(const RunMeta& meta) {
  impl_->order = analysis_detail::ModuleOrder::of(meta);
  impl_->attribute =
      analysis_detail::ModuleAttributor(impl_->order.empty() ? nullptr : &impl_->order);
}

void ModulePlacer::add(const ModuleOp& op) { impl_->attribute.add(op); }
void ModulePlacer::end_step() { impl_->attribute.end_step(); }
bool ModulePlacer::ready() const noexcept { return impl_->attribute.ready(); }
std::string ModulePlacer::take() { return impl_->attribute.take(); }
void ModulePlacer::skip() { impl_->attribute.skip(); }

}  // namespace precprobe
