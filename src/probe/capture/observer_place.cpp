// overflow_check's records in their modules (OpRecord::module). Every command places an op in
// the module whose forward ran it from the parameters the ops around it read (docs/cli.md,
// "Modules"); an overflow_check dump holds only its rare records, none of those reads. So
// while the task runs, the probe places every op it observes by the analyses' own rule
// (precprobe/module_placement.h) and writes the module into the records it makes.
//
// Cost per observed op: its parameter lookups (the inputs' storages) and the rule's
// bookkeeping. The modules are read only for a record: the placement's queue is advanced up
// to the record's op, and the queue of a step is otherwise dropped at its end. A record whose
// module the ops after it decide (a softmax between two parameter reads) is held, not ended,
// until they come (once the task is done, the ops are still placed while one is held), or
// until the step ends (or the debugger drains: a detach, a crash's flush), which places it
// with what is known.
#include <algorithm>

#include "capture/observer.h"
#include "capture/observer_internal.h"
#include "precprobe/debugger.h"
#include "precprobe/dump_format.h"
#include "precprobe/error.h"

namespace precprobe {
namespace detail {
namespace {

// The modules taken last, kept for the record of an op that ends after later ops were taken
// (an op that ran others nested in it).
constexpr size_t kTakenKept = 256;

}  // namespace

void Observer::set_modules(const nlohmann::json& module_meta) {
  RunMeta meta;
  if (module_meta.is_object())
    for (const auto& [key, value] : module_meta.items()) meta.other[key] = value;
  placer_.set_modules(meta);
}

int64_t Observer::place_locked(const at::RecordFunction& fn,
                               c10::ArrayRef<const c10::IValue> inputs, const OpInfo& info,
                               int32_t depth, Direction dir, bool background, bool grad_on,
                               const ThreadState& ts,
                               std::vector<std::shared_ptr<PendingOp>>& release) {
  if (!placing_) return -1;
  ModuleOp p;
  p.dir = dir;
  p.depth = depth;
  p.thread = thread_index();
  p.background = background;
  p.dropout = info.dropout;
  bool first_tensor = true, first_is_param = false, requires_grad = false;
  for (const c10::IValue& v : inputs) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!t.defined()) return;
      requires_grad = requires_grad || t.requires_grad();
      const bool first = first_tensor;
      first_tensor = false;
      if (p.consumed) return;
      const ParamName* param = param_of(t);
      if (param == nullptr) return;
      p.consumed = param->module;
      first_is_param = first;
    });
  }
  p.updates_param = p.consumed && first_is_param && !info.name.empty() && info.name.back() == '_';
  if (dir == Direction::kForward) {
    p.grad = grad_on;
    p.optimizer = !background && optimizer_step_.load(std::memory_order_relaxed);
    if (grad_on && requires_grad) p.sn = fn.seqNr();
  } else if (!ts.nodes.empty()) {
    p.sn = ts.nodes.back().seqnr;
  }
  placer_.add(p);
  const int64_t index = placed_++;
  if (!held_.empty()) release_known_locked(release);
  return index;
}

std::optional<std::string> Observer::module_at_locked(int64_t index) {
  auto keep = [&](std::string module) {
    if (taken_modules_.size() >= kTakenKept) taken_modules_.pop_front();
    taken_modules_.emplace_back(taken_, std::move(module));
    ++taken_;
  };
  while (taken_ <= index && placer_.ready()) keep(placer_.take());
  if (taken_ <= index) return std::nullopt;
  for (auto it = taken_modules_.rbegin(); it != taken_modules_.rend(); ++it)
    if (it->first == index) return it->second;
  return std::string();  // taken too long ago: the analyses place it as they can
}

bool Observer::place_record_locked(const std::shared_ptr<PendingOp>& op, int64_t index,
                                   uint64_t epoch) {
  // An op that started before its step's placement ended (a thread outside the step): the
  // analyses place it as they can.
  if (index < 0 || epoch != placement_epoch_) return false;
  if (std::optional<std::string> module = module_at_locked(index)) {
    op->header.module = std::move(*module);
    return false;
  }
  auto at = std::lower_bound(held_.begin(), held_.end(), index,
                             [](const auto& h, int64_t i) { return h.first < i; });
  held_.emplace(at, index, op);
  holding_.store(true, std::memory_order_release);
  return true;
}

void Observer::release_known_locked(std::vector<std::shared_ptr<PendingOp>>& release) {
  size_t done = 0;
  for (; done < held_.size(); ++done) {
    std::optional<std::string> module = module_at_locked(held_[done].first);
    if (!module) break;  // and those after it, placed later in the queue
    held_[done].second->header.module = std::move(*module);
    release.push_back(std::move(held_[done].second));
  }
  held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(done));
  holding_.store(!held_.empty(), std::memory_order_release);
}

void Observer::end_placement() {
  std::vector<std::shared_ptr<PendingOp>> release;
  {
    std::lock_guard<std::mutex> lk(engine_->order_mutex());
    if (!placing_ || placed_ == 0) return;
    placer_.end_step();
    release_known_locked(release);
    while (placer_.ready()) placer_.skip();
    placed_ = taken_ = 0;
    taken_modules_.clear();
    ++placement_epoch_;
  }
  for (const auto& op : release) engine_->end_op(*op);
}

void Observer::overflow_place(const at::RecordFunction& fn, const OpInfo& info, int32_t depth,
                              bool grad_on) {
  std::vector<std::shared_ptr<PendingOp>> release;
  try {
    const ThreadState& ts = thread_state();
    const Direction dir = ts.nodes.empty() ? Direction::kForward : Direction::kBackward;
    const bool background = outside_step(ts);
    auto inputs = fn.inputs();
    std::lock_guard<std::mutex> lk(engine_->order_mutex());
    place_locked(fn, c10::ArrayRef<const c10::IValue>(inputs.data(), inputs.size()), info, depth,
                 dir, background, grad_on, ts, release);
  } catch (const std::exception& e) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    report_error(std::string("precprobe: placing ") + info.name +
                 " in its module failed: " + e.what());
  }
  for (const auto& op : release) engine_->end_op(*op);
}

}  // namespace detail
}  // namespace precprobe
