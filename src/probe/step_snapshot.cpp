// StepSnapshot: see step_snapshot.h. The optimizer's per-parameter state is reached through
// a table of the built-in optimizers (their state members are plain TORCH_ARG fields); an
// optimizer missing from it is refused at bind() rather than replayed wrongly.
#include "step_snapshot.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>
#include <torch/optim.h>

#include <mutex>
#include <typeinfo>
#include <unordered_set>

#include "own_code.h"
#include "precprobe/error.h"

namespace precprobe {
namespace detail {

namespace optim = torch::optim;

/// How the snapshot reaches one optimizer type's state and options.
struct StateKind {
  const char* name;
  const std::type_info& options_type;
  const std::type_info& state_type;
  /// The tensor members of a state object (some may be undefined).
  void (*tensors)(optim::OptimizerParamState& s, std::vector<at::Tensor*>& out);
  /// Copies the non-tensor members (step counts).
  void (*scalars)(optim::OptimizerParamState& to, const optim::OptimizerParamState& from);
  /// Copies param_group options of this type.
  void (*options)(optim::OptimizerOptions& to, const optim::OptimizerOptions& from);
};

namespace {

template <class O>
void copy_options(optim::OptimizerOptions& to, const optim::OptimizerOptions& from) {
  static_cast<O&>(to) = static_cast<const O&>(from);
}

template <class S>
void copy_step(optim::OptimizerParamState& to, const optim::OptimizerParamState& from) {
  static_cast<S&>(to).step(static_cast<const S&>(from).step());
}

void no_scalars(optim::OptimizerParamState&, const optim::OptimizerParamState&) {}

template <class S>
void adam_tensors(optim::OptimizerParamState& s, std::vector<at::Tensor*>& out) {
  auto& a = static_cast<S&>(s);
  out = {&a.exp_avg(), &a.exp_avg_sq(), &a.max_exp_avg_sq()};
}

void sgd_tensors(optim::OptimizerParamState& s, std::vector<at::Tensor*>& out) {
  out = {&static_cast<optim::SGDParamState&>(s).momentum_buffer()};
}

void rmsprop_tensors(optim::OptimizerParamState& s, std::vector<at::Tensor*>& out) {
  auto& r = static_cast<optim::RMSpropParamState&>(s);
  out = {&r.square_avg(), &r.momentum_buffer(), &r.grad_avg()};
}

void adagrad_tensors(optim::OptimizerParamState& s, std::vector<at::Tensor*>& out) {
  out = {&static_cast<optim::AdagradParamState&>(s).sum()};
}

const StateKind kKinds[] = {
    {"Adam", typeid(optim::AdamOptions), typeid(optim::AdamParamState),
     adam_tensors<optim::AdamParamState>, copy_step<optim::AdamParamState>,
     copy_options<optim::AdamOptions>},
    {"AdamW", typeid(optim::AdamWOptions), typeid(optim::AdamWParamState),
     adam_tensors<optim::AdamWParamState>, copy_step<optim::AdamWParamState>,
     copy_options<optim::AdamWOptions>},
    {"SGD", typeid(optim::SGDOptions), typeid(optim::SGDParamState), sgd_tensors, no_scalars,
     copy_options<optim::SGDOptions>},
    {"RMSprop", typeid(optim::RMSpropOptions), typeid(optim::RMSpropParamState), rmsprop_tensors,
     copy_step<optim::RMSpropParamState>, copy_options<optim::RMSpropOptions>},
    {"Adagrad", typeid(optim::AdagradOptions), typeid(optim::AdagradParamState), adagrad_tensors,
     copy_step<optim::AdagradParamState>, copy_options<optim::AdagradOptions>},
};

using StateMap = std::decay_t<decltype(std::declval<optim::Optimizer&>().state())>;
using StateKey = StateMap::key_type;

bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && a.device() == b.device();
}

int64_t nbytes(const at::Tensor& t) {
  return t.defined() ? static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size()) : 0;
}

// Our copies are not the user's ops: no profiler or observer sees them, no autograd.
struct Quiet {
  at::RecordFunctionGuard no_callbacks{false};
  at::NoGradGuard no_grad;
};

}  // namespace

/// A copy of one per-parameter optimizer state.
struct StepSnapshot::Entry {
  StateKey key;
  const optim::OptimizerParamState* live = nullptr;  // the object last captured from
  std::unique_ptr<optim::OptimizerParamState> saved;
  std::vector<at::Tensor*> live_tensors, saved_tensors;
  bool present = false;  // in the live map at the last capture
};

StepSnapshot::StepSnapshot() = default;
StepSnapshot::~StepSnapshot() = default;

namespace {

const StateKind* kind_of(optim::Optimizer& optimizer) {
  if (optimizer.param_groups().empty() || !optimizer.param_groups()[0].has_options())
    return nullptr;
  const std::type_info& t = typeid(optimizer.param_groups()[0].options());
  for (const StateKind& k : kKinds)
    if (k.options_type == t) return &k;
  return nullptr;
}

}  // namespace

void StepSnapshot::bind(torch::nn::Module* model,
                        const std::vector<optim::Optimizer*>& optimizers) {
  unbind();
  if (optimizers.empty()) throw Error("precprobe: StepSnapshot::bind: no optimizer");
  std::vector<Optim> optims;
  for (size_t i = 0; i < optimizers.size(); ++i) {
    if (optimizers[i] == nullptr)
      throw Error("precprobe: StepSnapshot::bind: optimizer " + std::to_string(i) + " is null");
    const StateKind* kind = kind_of(*optimizers[i]);
    if (kind == nullptr) {
      throw Error(
          "precprobe: \"record\": \"on_anomaly\" cannot snapshot this optimizer's state "
          "(optimizer " +
          std::to_string(i) +
          " of start(): its type is not one of SGD, Adam, AdamW, RMSprop, Adagrad), so a replayed "
          "step would not start from the same state; use \"record\": \"always\" with "
          "\"step\" instead");
    }
    Optim o;
    o.optimizer = optimizers[i];
    o.kind = kind;
    for (const auto& g : o.optimizer->param_groups())
      o.groups.push_back(g.has_options() ? g.options().clone() : nullptr);
    optims.push_back(std::move(o));
  }
  std::unordered_set<const void*> seen;
  auto add = [&](const at::Tensor& t) {
    if (!t.defined() || !seen.insert(t.unsafeGetTensorImpl()).second) return;
    tensors_.emplace_back(t, at::empty_like(t, at::MemoryFormat::Preserve));
  };
  if (model != nullptr) {
    for (const at::Tensor& p : model->parameters(/*recurse=*/true)) add(p);
    for (const at::Tensor& b : model->buffers(/*recurse=*/true)) add(b);
  }
  for (const Optim& o : optims)
    for (const auto& g : o.optimizer->param_groups())
      for (const at::Tensor& p : g.params()) add(p);
  optims_ = std::move(optims);
}

void StepSnapshot::unbind() noexcept {
  optims_.clear();
  tensors_.clear();
  cpu_rng_ = at::Tensor();
  cuda_rng_.clear();
  captured_ = false;
}

void StepSnapshot::capture() {
  if (optims_.empty()) return;
  Quiet quiet;
  captured_ = false;
  for (auto& [live, saved] : tensors_) {
    if (!same_layout(live, saved)) saved = at::empty_like(live, at::MemoryFormat::Preserve);
    saved.copy_(live);
  }
  for (Optim& o : optims_) {
    capture_state(o);
    auto& groups = o.optimizer->param_groups();
    if (groups.size() != o.groups.size()) {
      o.groups.clear();
      for (const auto& g : groups)
        o.groups.push_back(g.has_options() ? g.options().clone() : nullptr);
    } else {
      for (size_t i = 0; i < groups.size(); ++i)
        if (o.groups[i] && groups[i].has_options())
          o.kind->options(*o.groups[i], groups[i].options());
    }
  }
  {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    cpu_rng_ = gen.get_state();
  }
  cuda_rng_.clear();
  if (torch::cuda::is_available()) {
    for (int64_t i = 0; i < static_cast<int64_t>(torch::cuda::device_count()); ++i) {
      at::Generator gen = at::globalContext().defaultGenerator(
          c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i)));
      std::lock_guard<std::mutex> lock(gen.mutex());
      cuda_rng_.push_back(gen.get_state());
    }
  }
  captured_ = true;
}

void StepSnapshot::capture_state(Optim& o) {
  const StateKind& kind = *o.kind;
  auto& entries = o.entries;
  for (auto& e : entries) e->present = false;
  size_t hint = 0;
  for (auto& kv : o.optimizer->state()) {
    optim::OptimizerParamState* live = kv.second.get();
    if (live == nullptr || typeid(*live) != kind.state_type) {
      throw Error(std::string("precprobe: the optimizer holds a state that is not ") + kind.name +
                  "'s; the step cannot be snapshot");
    }
    Entry* e = nullptr;
    if (hint < entries.size() && entries[hint]->key == kv.first) {
      e = entries[hint].get();
    } else {
      for (auto& x : entries)
        if (x->key == kv.first) e = x.get();
    }
    ++hint;
    if (e == nullptr) {
      entries.push_back(std::make_unique<Entry>());
      e = entries.back().get();
      e->key = kv.first;
    }
    kind.tensors(*live, e->live_tensors);
    bool rebuild = e->live != live || !e->saved;
    for (size_t i = 0; !rebuild && i < e->live_tensors.size(); ++i)
      rebuild = !same_layout(*e->live_tensors[i], *e->saved_tensors[i]);
    if (rebuild) {
      e->saved = live->clone();  // shares the tensors: they are replaced below
      kind.tensors(*e->saved, e->saved_tensors);
      for (size_t i = 0; i < e->live_tensors.size(); ++i) {
        const at::Tensor& t = *e->live_tensors[i];
        *e->saved_tensors[i] =
            t.defined() ? at::empty_like(t, at::MemoryFormat::Preserve) : at::Tensor();
      }
      e->live = live;
    }
    for (size_t i = 0; i < e->live_tensors.size(); ++i)
      if (e->live_tensors[i]->defined()) e->saved_tensors[i]->copy_(*e->live_tensors[i]);
    kind.scalars(*e->saved, *live);
    e->present = true;
  }
  // Entries the optimizer no longer has: forget them (no allocation on the steady path).
  size_t kept = 0;
  for (auto& e : entries)
    if (e->present) entries[kept++] = std::move(e);
  entries.resize(kept);
}

void StepSnapshot::restore() {
  if (optims_.empty() || !captured_) throw Error("precprobe: no snapshot to restore");
  Quiet quiet;
  for (auto& [live, saved] : tensors_) {
    before_own_write(live);  // copy_ runs unobserved here (Quiet)
    live.copy_(saved);
    if (live.grad().defined()) before_own_write(live.grad());
    // Gradients are not kept: the step's zero_grad() overwrites them. Zeroed here so that
    // the bad run's NaN/Inf gradients are not what the replay's zero_grad() reads.
    if (live.grad().defined()) live.mutable_grad().zero_();
  }
  for (Optim& o : optims_) {
    restore_state(o);
    auto& groups = o.optimizer->param_groups();
    for (size_t i = 0; i < groups.size() && i < o.groups.size(); ++i)
      if (o.groups[i] && groups[i].has_options())
        o.kind->options(groups[i].options(), *o.groups[i]);
  }
  {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(cpu_rng_);
  }
  for (size_t i = 0; i < cuda_rng_.size(); ++i) {
    at::Generator gen = at::globalContext().defaultGenerator(
        c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i)));
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(cuda_rng_[i]);
  }
}

void StepSnapshot::restore_state(Optim& o) {
  const StateKind& kind = *o.kind;
  auto& state = o.optimizer->state();
  // State made during the step (the first step of Adam): not there before it.
  std::vector<StateKey> made;
  for (auto& kv : state) {
    bool known = false;
    for (auto& e : o.entries) known = known || e->key == kv.first;
    if (!known) made.push_back(kv.first);
  }
  for (const StateKey& k : made) state.erase(k);
  std::vector<at::Tensor*> live_tensors;
  for (auto& e : o.entries) {
    auto it = state.find(e->key);
    if (it == state.end() || it->second.get() == nullptr ||
        typeid(*it->second) != kind.state_type) {
      // Removed during the step: put back a deep copy.
      auto copy = e->saved->clone();
      kind.tensors(*copy, live_tensors);
      for (at::Tensor* t : live_tensors)
        if (t->defined()) *t = t->clone();
      state[e->key] = std::move(copy);
      continue;
    }
    optim::OptimizerParamState& live = *it->second;
    kind.tensors(live, live_tensors);
    for (size_t i = 0; i < live_tensors.size(); ++i) {
      at::Tensor& l = *live_tensors[i];
      const at::Tensor& s = *e->saved_tensors[i];
      if (!s.defined()) {
        l = at::Tensor();
      } else if (same_layout(l, s)) {
        before_own_write(l);
        l.copy_(s);
      } else {
        l = s.clone();
      }
    }
    kind.scalars(live, *e->saved);
  }
}

int64_t StepSnapshot::model_bytes() const {
  int64_t n = 0;
  for (const auto& [live, saved] : tensors_) n += nbytes(saved);
  return n;
}

int64_t StepSnapshot::optimizer_bytes() const {
  int64_t n = 0;
  for (const Optim& o : optims_)
    for (const auto& e : o.entries)
      for (const at::Tensor* t : e->saved_tensors) n += nbytes(*t);
  return n;
}

int64_t StepSnapshot::bytes() const {
  int64_t n = model_bytes() + optimizer_bytes() + nbytes(cpu_rng_);
  for (const at::Tensor& t : cuda_rng_) n += nbytes(t);
  return n;
}

const char* StepSnapshot::optimizer_name(size_t i) const noexcept {
  return i < optims_.size() ? optims_[i].kind->name : "";
}

}  // namespace detail
}  // namespace precprobe
