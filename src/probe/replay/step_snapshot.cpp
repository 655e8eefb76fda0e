// StepSnapshot: see step_snapshot.h. The optimizer's per-parameter state is reached through
// a table of the built-in optimizers (their state members are plain TORCH_ARG fields); an
// optimizer missing from it is refused at bind() rather than replayed wrongly.
#include "replay/step_snapshot.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>
#include <torch/optim.h>

#include <mutex>
#include <sstream>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>

#include "precprobe/error.h"
#include "support/own_code.h"

namespace precprobe {
namespace detail {

namespace optim = torch::optim;

/// How the snapshot reaches one optimizer type's state and options.
struct StateKind {
  const char* name;
  const std::type_info& options_type;
  const std::type_info& state_type;
  /// The tensor members of a state object (some may be undefined), and their names.
  void (*tensors)(optim::OptimizerParamState& s, std::vector<at::Tensor*>& out);
  const char* members[3];
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
    {"Adam",
     typeid(optim::AdamOptions),
     typeid(optim::AdamParamState),
     adam_tensors<optim::AdamParamState>,
     {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
     copy_step<optim::AdamParamState>,
     copy_options<optim::AdamOptions>},
    {"AdamW",
     typeid(optim::AdamWOptions),
     typeid(optim::AdamWParamState),
     adam_tensors<optim::AdamWParamState>,
     {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
     copy_step<optim::AdamWParamState>,
     copy_options<optim::AdamWOptions>},
    {"SGD",
     typeid(optim::SGDOptions),
     typeid(optim::SGDParamState),
     sgd_tensors,
     {"momentum_buffer"},
     no_scalars,
     copy_options<optim::SGDOptions>},
    {"RMSprop",
     typeid(optim::RMSpropOptions),
     typeid(optim::RMSpropParamState),
     rmsprop_tensors,
     {"square_avg", "momentum_buffer", "grad_avg"},
     copy_step<optim::RMSpropParamState>,
     copy_options<optim::RMSpropOptions>},
    {"Adagrad",
     typeid(optim::AdagradOptions),
     typeid(optim::AdagradParamState),
     adagrad_tensors,
     {"sum"},
     copy_step<optim::AdagradParamState>,
     copy_options<optim::AdagradOptions>},
};

using StateMap = std::decay_t<decltype(std::declval<optim::Optimizer&>().state())>;
using StateKey = StateMap::key_type;

// The optimizer's state key of parameter `p`: up to LibTorch 2.0 the text of its TensorImpl*
// (c10::guts::to_string, an ostream), the TensorImpl* itself later.
template <typename Key = StateKey>
Key key_of(const at::Tensor& p) {
  if constexpr (std::is_same<Key, std::string>::value) {
    std::ostringstream os;
    os << p.unsafeGetTensorImpl();
    return os.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

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
  bool present = false;                // in the live map at the last capture
  int64_t job = -1;                    // the parameter's job, -1: not a bound parameter's
  const std::string* param = nullptr;  // its name
};

struct StepSnapshot::KeyIndex {
  std::unordered_map<StateKey, size_t> slot;
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
  auto add = [&](const at::Tensor& t, bool param, std::string name) {
    if (!t.defined() || !seen.insert(t.unsafeGetTensorImpl()).second) return;
    Slot s;
    s.live = t;
    s.saved = at::empty_like(t, at::MemoryFormat::Preserve);
    s.job = param ? static_cast<int64_t>(params_++) : -1;
    s.name = std::move(name);
    tensors_.push_back(std::move(s));
  };
  if (model != nullptr) {
    for (const auto& p : model->named_parameters(/*recurse=*/true)) add(p.value(), true, p.key());
    for (const auto& b : model->named_buffers(/*recurse=*/true)) add(b.value(), false, b.key());
  }
  size_t unnamed = 0;  // parameters of an optimizer that the model does not hold
  for (const Optim& o : optims)
    for (const auto& g : o.optimizer->param_groups())
      for (const at::Tensor& p : g.params())
        if (p.defined() && seen.count(p.unsafeGetTensorImpl()) == 0)
          add(p, true, "param" + std::to_string(unnamed++));
  optims_ = std::move(optims);
  jobs_.resize(params_);
  key_index_ = std::make_unique<KeyIndex>();
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].job >= 0) key_index_->slot.emplace(key_of(tensors_[i].live), i);
}

void StepSnapshot::unbind() noexcept {
  copier_.unbind();  // stops the helper first: it copies into the buffers dropped below
  pending_ = false;
  optims_.clear();
  tensors_.clear();
  params_ = 0;
  key_index_.reset();
  jobs_.clear();
  cpu_rng_ = at::Tensor();
  cuda_rng_.clear();
  captured_ = false;
}

void StepSnapshot::capture() {
  if (optims_.empty()) return;
  abandon_capture();  // the helper must not write the buffers copied into below
  Quiet quiet;
  captured_ = false;
  for (Slot& s : tensors_) {
    if (!same_layout(s.live, s.saved)) s.saved = at::empty_like(s.live, at::MemoryFormat::Preserve);
    s.saved.copy_(s.live);
  }
  for (Optim& o : optims_) capture_state(o, nullptr);
  capture_groups_and_rng();
  captured_ = true;
}

void StepSnapshot::set_overlap(bool on) noexcept {
  abandon_capture();
  overlap_ = on;
  if (!on) copier_.unbind();
}

// Overlap needs every parameter on the CPU (a device's copy is ordered on its stream, not on
// this thread) and a hook on each one that requires a gradient.
bool StepSnapshot::overlap_ready() noexcept {
  if (!overlap_) return false;
  if (copier_.bound()) return true;
  std::vector<at::Tensor> params(params_);
  for (const Slot& s : tensors_) {
    if (s.job < 0) continue;
    if (!s.live.device().is_cpu()) {
      overlap_ = false;
      return false;
    }
    params[static_cast<size_t>(s.job)] = s.live;
  }
  try {
    copier_.bind(params);
  } catch (...) {
    overlap_ = false;
    return false;
  }
  return true;
}

void StepSnapshot::begin_capture() {
  if (optims_.empty()) return;
  abandon_capture();
  if (!overlap_ready()) {
    capture();
    return;
  }
  Quiet quiet;
  captured_ = false;
  for (auto& j : jobs_) j.clear();
  // The parameters first in their jobs: the helper's order within a job does not matter,
  // but a name is read from there when a write is found.
  for (Slot& s : tensors_) {
    if (!same_layout(s.live, s.saved)) s.saved = at::empty_like(s.live, at::MemoryFormat::Preserve);
    if (s.job >= 0 && SnapshotCopier::plain(s.live, s.saved)) {
      jobs_[static_cast<size_t>(s.job)].push_back({s.live, s.saved, &s.name, nullptr});
    } else {
      s.saved.copy_(s.live);  // buffers: forward may change them (running statistics)
    }
  }
  for (Optim& o : optims_) capture_state(o, &jobs_);
  capture_groups_and_rng();
  try {
    copier_.start(jobs_);
  } catch (...) {
    // A tensor without a version counter (made under InferenceMode): no overlap, ever.
    for (auto& j : jobs_)
      for (auto& p : j) p.saved.copy_(p.live);
    overlap_ = false;
    copier_.unbind();
    captured_ = true;
    return;
  }
  pending_ = true;
}

std::string StepSnapshot::finish_capture() noexcept {
  if (!pending_) return "";
  pending_ = false;
  std::string written = copier_.finish();
  if (!written.empty()) {
    overlap_ = false;
    copier_.unbind();
    captured_ = false;
    return written;
  }
  captured_ = true;
  return "";
}

void StepSnapshot::abandon_capture() noexcept {
  if (!pending_) return;
  pending_ = false;
  copier_.abandon();
  captured_ = false;
}

void StepSnapshot::capture_groups_and_rng() {
  for (Optim& o : optims_) {
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
}

void StepSnapshot::capture_state(Optim& o, std::vector<std::vector<SnapshotCopier::Pair>>* jobs) {
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
      auto it = key_index_->slot.find(kv.first);
      if (it != key_index_->slot.end()) {
        const Slot& s = tensors_[it->second];  // tensors_ is not resized while bound
        e->job = s.job;
        e->param = &s.name;
      }
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
    for (size_t i = 0; i < e->live_tensors.size(); ++i) {
      const at::Tensor& from = *e->live_tensors[i];
      at::Tensor& to = *e->saved_tensors[i];
      if (!from.defined()) continue;
      if (jobs != nullptr && e->job >= 0 && SnapshotCopier::plain(from, to)) {
        (*jobs)[static_cast<size_t>(e->job)].push_back({from, to, e->param, kind.members[i]});
      } else {
        to.copy_(from);
      }
    }
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
  for (Slot& s : tensors_) {
    at::Tensor& live = s.live;
    const at::Tensor& saved = s.saved;
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
  for (const Slot& s : tensors_) n += nbytes(s.saved);
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
