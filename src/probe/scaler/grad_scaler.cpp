// GradScaler: PyTorch's state machine (torch/amp/grad_scaler.py) and the records.
//
// Per optimizer: READY -(unscale_)-> UNSCALED -(step)-> STEPPED, reset by update().
// A float32 scale on the CPU is updated on the host at once; on CUDA it is updated by
// at::_amp_update_scale_ and the step's records wait, with their numbers on the device, until
// the next point where the host synchronises anyway (the next step() reading found_inf, or
// get_scale(), history(), save(), the destructor).
#include "precprobe/grad_scaler.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <cmath>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <unordered_map>

#include "precprobe/debugger.h"
#include "precprobe/dump_format.h"
#include "precprobe/error.h"
#include "precprobe/writer.h"
#include "scaler/scaled_grads.h"
#include "scaler/scaler_internal.h"
#include "support/torch_compat.h"

namespace precprobe {
namespace {

enum class Stage { kReady, kUnscaled, kStepped };

struct OptState {
  const torch::optim::Optimizer* optimizer = nullptr;
  int index = 0;
  Stage stage = Stage::kReady;
  bool stepped = false;
  std::vector<detail::DeviceFlag> flags;  // PyTorch's found_inf_per_device
  std::vector<detail::GroupCheck> groups;
};

// One update() whose numbers are known on the host (CPU) or still on the device (CUDA).
struct StepInfo {
  int64_t step = 0;
  bool manual = false;  // update(new_scale)
  bool found_inf = false;
  double scale_before = 0;
  double scale_after = 0;
  int64_t tracker = 0;
  std::vector<OptState> states;
  at::Tensor dev_scalars;  // CUDA: float64 [found_inf, scale_before, scale_after, tracker]
};

void check_options(const GradScalerOptions& o) {
  if (!o.enabled) return;
  auto bad = [](const std::string& what) { throw Error("GradScalerOptions: " + what); };
  if (!(o.growth_factor > 1.0)) {
    bad("growth_factor = " + std::to_string(o.growth_factor) + ": the growth factor must be > 1.0");
  }
  if (!(o.backoff_factor < 1.0 && o.backoff_factor > 0.0)) {
    bad("backoff_factor = " + std::to_string(o.backoff_factor) +
        ": the backoff factor must be < 1.0 (and > 0)");
  }
  if (o.growth_interval < 1 || o.growth_interval > INT32_MAX) {
    bad("growth_interval = " + std::to_string(o.growth_interval) + ": must be in [1, 2^31)");
  }
  if (!(o.init_scale > 0.0) || !std::isfinite(static_cast<float>(o.init_scale))) {
    bad("init_scale = " + std::to_string(o.init_scale) + ": must be a finite float32 > 0");
  }
}

bool has_cpu_grads(torch::optim::Optimizer& optimizer) {
  for (auto& g : optimizer.param_groups()) {
    for (auto& p : g.params()) {
      if (p.grad().defined() && p.grad().device().is_cpu()) return true;
    }
  }
  return false;
}

}  // namespace

struct GradScaler::Impl {
  GradScalerOptions o;
  double init_scale = 0;
  int64_t init_tracker = 0;
  at::Tensor scale;    // float32 0-d, created by the first scale()
  at::Tensor tracker;  // int32 0-d, beside it
  std::vector<OptState> states;
  std::vector<const torch::optim::Optimizer*> known;  // index = order of first use
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  std::unique_ptr<DumpWriter> own_writer;
  std::vector<ScalerRecord> history;
  std::vector<StepInfo> pending;
  int64_t updates = 0;
  int64_t backoffs_in_row = 0;
  bool collapsed = false;

  void check_scale(const char* fn) const {
    if (!scale.defined()) {
      throw Error(std::string("Attempted ") + fn +
                  " but _scale is None.  This may indicate your script did not use "
                  "scaler.scale(loss or outputs) earlier in the iteration.");
    }
  }

  OptState& state_of(torch::optim::Optimizer& optimizer) {
    for (auto& s : states) {
      if (s.optimizer == &optimizer) return s;
    }
    OptState s;
    s.optimizer = &optimizer;
    auto it = std::find(known.begin(), known.end(), &optimizer);
    s.index = static_cast<int>(it - known.begin());
    if (it == known.end()) known.push_back(&optimizer);
    states.push_back(std::move(s));
    return states.back();
  }

  std::string name_of(const at::Tensor& p, int group_index, int index) const {
    if (PrecisionDebugger* dbg = PrecisionDebugger::current()) {
      std::string n = dbg->parameter_name(p);
      if (!n.empty()) return n;
    }
    auto it = names.find(p.unsafeGetTensorImpl());
    if (it != names.end()) return it->second;
    return "group" + std::to_string(group_index) + ".param" + std::to_string(index);
  }

  detail::NameFn name_fn() const {
    return [this](const at::Tensor& p, int g, int i) { return name_of(p, g, i); };
  }

  DumpWriter* writer() const noexcept {
    if (own_writer) return own_writer.get();
    PrecisionDebugger* dbg = PrecisionDebugger::current();
    return dbg != nullptr ? dbg->writer() : nullptr;
  }

  void all_reduce_flags(OptState& s) {
    if (!group) return;
    for (auto& f : s.flags) {
      std::vector<at::Tensor> t{f.found_inf};
      c10d::AllreduceOptions opts;
      opts.reduceOp = c10d::ReduceOp::MAX;
      group->allreduce(t, opts)->wait();
    }
  }

  void finalize(StepInfo& info);
  void finalize_pending();
  void push_record(ScalerRecord&& r);
};

void GradScaler::Impl::push_record(ScalerRecord&& r) {
  if (DumpWriter* w = writer()) {
    ScalerRecord copy = r;
    w->submit(std::move(copy));
  }
  if (o.history_capacity == 0) return;
  if (history.size() >= o.history_capacity) {
    const size_t drop = std::max<size_t>(1, o.history_capacity / 4);
    history.erase(history.begin(), history.begin() + static_cast<std::ptrdiff_t>(drop));
  }
  history.push_back(std::move(r));
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wfloat-equal"
void GradScaler::Impl::finalize(StepInfo& info) {
  for (auto& s : info.states) detail::resolve_groups(s.groups, o.max_bad_names, name_fn());
  std::string event;
  if (info.manual) {
    event = "set";
    backoffs_in_row = 0;
  } else if (info.found_inf) {
    event = "backoff";
    ++backoffs_in_row;
  } else {
    if (info.scale_after > info.scale_before) event = "growth";
    backoffs_in_row = 0;
  }
  const bool low = o.collapse_scale > 0 && info.scale_after < o.collapse_scale;
  const bool many = o.collapse_backoffs > 0 && backoffs_in_row >= o.collapse_backoffs;
  if (!collapsed && (low || many)) {
    collapsed = true;
    event = "collapse";
    report_error("GradScaler: loss scale collapsed at step " + std::to_string(info.step) +
                 ": scale " + std::to_string(info.scale_after) + " after " +
                 std::to_string(backoffs_in_row) +
                 " backoffs in a row; gradients keep overflowing (see scaler.jsonl.zst)");
  }
  for (auto& s : info.states) {
    for (auto& g : s.groups) {
      ScalerRecord r;
      r.step = info.step;
      r.optimizer = s.index;
      r.group = g.group;
      r.found_inf = g.found_inf;
      r.nonfinite_params = g.n_bad;
      r.bad_params = std::move(g.bad);
      r.grad_norm_scaled = std::sqrt(g.sumsq_scaled);
      r.grad_norm = std::sqrt(g.sumsq_unscaled);
      r.scale_before = info.scale_before;
      r.scale_after = info.scale_after;
      r.growth_tracker = info.tracker;
      r.skipped = !s.stepped;
      r.event = event;
      push_record(std::move(r));
    }
  }
}
#pragma GCC diagnostic pop

void GradScaler::Impl::finalize_pending() {
  if (pending.empty()) return;
  std::vector<at::Tensor> parts;
  for (auto& p : pending) parts.push_back(p.dev_scalars);
  const at::Tensor host = at::cat(parts).to(at::kCPU).contiguous();
  const double* v = host.data_ptr<double>();
  for (auto& p : pending) {
    p.found_inf = v[0] > 0;
    p.scale_before = v[1];
    p.scale_after = v[2];
    p.tracker = static_cast<int64_t>(v[3]);
    v += 4;
    finalize(p);
  }
  pending.clear();
}

GradScaler::GradScaler(GradScalerOptions options) : impl_(std::make_unique<Impl>()) {
  check_options(options);
  impl_->o = std::move(options);
  impl_->init_scale = impl_->o.init_scale;
  if (impl_->o.enabled && !impl_->o.log_path.empty()) {
    WriterOptions w;
    w.dir = impl_->o.log_path;
    w.overwrite = impl_->o.log_overwrite;
    impl_->own_writer = std::make_unique<DumpWriter>(std::move(w));
    RunMeta meta;
    meta.format_version = dump_format_version(OpsEncoding::kJsonLines);  // no op records
    meta.producer = "precprobe::GradScaler";
    impl_->own_writer->write_meta(meta);
  }
}

GradScaler::~GradScaler() {
  try {
    impl_->finalize_pending();
  } catch (const std::exception& e) {
    report_error(std::string("GradScaler: records of the last steps lost: ") + e.what());
  }
  if (impl_->own_writer) impl_->own_writer->close();
}

at::Tensor GradScaler::scale(const at::Tensor& loss) {
  if (!impl_->o.enabled) return loss;
  if (!impl_->scale.defined()) {
    auto f = at::TensorOptions().device(loss.device());
    impl_->scale = at::full({}, impl_->init_scale, f.dtype(at::kFloat));
    impl_->tracker = at::full({}, impl_->init_tracker, f.dtype(at::kInt));
  }
  // The host value without an op or a device sync (CUDA: a placeholder; only "non-zero"
  // matters to the observer).
  detail::set_scaled_grads_window(impl_->scale.is_cpu() ? *impl_->scale.data_ptr<float>() : 1.0f);
  return loss * impl_->scale.to(loss.device(), /*non_blocking=*/true);
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!impl_->o.enabled) return;
  impl_->check_scale("unscale_");
  OptState& s = impl_->state_of(optimizer);
  if (s.stage == Stage::kUnscaled) {
    throw Error("unscale_() has already been called on this optimizer since the last update().");
  }
  if (s.stage == Stage::kStepped) throw Error("unscale_() is being called after step().");
  detail::set_scaled_grads_window(0.0f);
  // PyTorch: inv_scale = scale.double().reciprocal().float()
  const at::Tensor inv = impl_->scale.to(at::kDouble).reciprocal().to(at::kFloat);
  float inv_host = 0;
  if (impl_->scale.device().is_cpu()) {
    inv_host = static_cast<float>(1.0 / static_cast<double>(impl_->scale.item<float>()));
  } else if (has_cpu_grads(optimizer)) {
    inv_host = inv.item<float>();  // CPU gradients under a CUDA scale: a sync, unavoidable
  }
  s.groups.clear();
  s.flags.clear();
  detail::check_and_unscale(optimizer, inv, inv_host, impl_->o.max_bad_names, impl_->name_fn(),
                            s.groups, s.flags);
  impl_->all_reduce_flags(s);
  s.stage = Stage::kUnscaled;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!impl_->o.enabled) {
    optimizer.step();
    return true;
  }
  impl_->check_scale("step");
  {
    OptState& s = impl_->state_of(optimizer);
    if (s.stage == Stage::kStepped) {
      throw Error("step() has already been called since the last update().");
    }
    if (s.stage == Stage::kReady) unscale_(optimizer);
  }
  OptState& s = impl_->state_of(optimizer);  // unscale_ may have grown `states`
  if (s.flags.empty()) throw Error("No inf checks were recorded for this optimizer.");
  double found = 0;
  for (auto& f : s.flags) found += f.found_inf.item<double>();  // PyTorch syncs here too
  impl_->finalize_pending();  // the device is idle now: the earlier records are cheap
  s.stage = Stage::kStepped;
  if (found > 0) return false;
  optimizer.step();
  s.stepped = true;
  return true;
}

void GradScaler::update(std::optional<float> new_scale) {
  if (!impl_->o.enabled) return;
  detail::set_scaled_grads_window(0.0f);
  Impl& m = *impl_;
  m.check_scale("update");
  StepInfo info;
  info.step = m.updates;
  info.manual = new_scale.has_value();
  at::Tensor combined;
  if (!info.manual) {
    for (auto& s : m.states) {
      for (auto& f : s.flags) {
        at::Tensor v = f.found_inf.to(m.scale.device(), /*non_blocking=*/true);
        combined = combined.defined() ? combined + v : v.clone();
      }
    }
    if (!combined.defined()) throw Error("No inf checks were recorded prior to update.");
  }
  if (m.scale.device().is_cpu()) {
    float scale = m.scale.item<float>();
    int32_t tracker = m.tracker.item<int32_t>();
    info.scale_before = scale;
    if (info.manual) {
      scale = *new_scale;
    } else {
      info.found_inf = combined.item<float>() > 0;  // flags are 0 or positive sums
#if PRECPROBE_HAS_CPU_AMP_KERNELS
      at::_amp_update_scale_(m.scale, m.tracker, combined, m.o.growth_factor, m.o.backoff_factor,
                             m.o.growth_interval);
      scale = m.scale.item<float>();
      tracker = m.tracker.item<int32_t>();
#else
      detail::update_scale_host(scale, tracker, info.found_inf, m.o.growth_factor,
                                m.o.backoff_factor, m.o.growth_interval);
#endif
    }
    m.scale.fill_(scale);
    m.tracker.fill_(tracker);
    info.scale_after = scale;
    info.tracker = tracker;
    info.states = std::move(m.states);
    m.finalize(info);
  } else {
    at::Tensor before = m.scale.to(at::kDouble).reshape({1});
    if (info.manual) {
      m.scale.fill_(*new_scale);
      combined = at::zeros({}, m.scale.options());
    } else {
      at::_amp_update_scale_(m.scale, m.tracker, combined, m.o.growth_factor, m.o.backoff_factor,
                             m.o.growth_interval);
    }
    info.dev_scalars =
        at::cat({combined.to(at::kDouble).reshape({1}), before,
                 m.scale.to(at::kDouble).reshape({1}), m.tracker.to(at::kDouble).reshape({1})});
    info.states = std::move(m.states);
    m.pending.push_back(std::move(info));
  }
  m.states.clear();
  ++m.updates;
}

float GradScaler::get_scale() {
  if (!impl_->o.enabled) return 1.0f;
  impl_->finalize_pending();
  return impl_->scale.defined() ? impl_->scale.item<float>()
                                : static_cast<float>(impl_->init_scale);
}

int64_t GradScaler::get_growth_tracker() {
  if (!impl_->o.enabled) return 0;
  impl_->finalize_pending();
  return impl_->tracker.defined() ? impl_->tracker.item<int32_t>() : impl_->init_tracker;
}

bool GradScaler::is_enabled() const noexcept { return impl_->o.enabled; }
double GradScaler::get_growth_factor() const noexcept { return impl_->o.growth_factor; }
double GradScaler::get_backoff_factor() const noexcept { return impl_->o.backoff_factor; }
int64_t GradScaler::get_growth_interval() const noexcept { return impl_->o.growth_interval; }
int64_t GradScaler::update_count() const noexcept { return impl_->updates; }
bool GradScaler::collapsed() const noexcept { return impl_->collapsed; }

void GradScaler::save(torch::serialize::OutputArchive& archive) {
  if (!impl_->o.enabled) return;  // PyTorch: an empty state_dict
  archive.write("scale", c10::IValue(static_cast<double>(get_scale())));
  archive.write("growth_factor", c10::IValue(impl_->o.growth_factor));
  archive.write("backoff_factor", c10::IValue(impl_->o.backoff_factor));
  archive.write("growth_interval", c10::IValue(impl_->o.growth_interval));
  archive.write("_growth_tracker", c10::IValue(get_growth_tracker()));
}

void GradScaler::load(torch::serialize::InputArchive& archive) {
  if (!impl_->o.enabled) return;
  c10::IValue scale, growth, backoff, interval, tracker;
  if (!archive.try_read("scale", scale)) {
    throw Error(
        "GradScaler::load: the archive has no \"scale\": the source state dict is empty, "
        "possibly because it was saved from a disabled instance of GradScaler.");
  }
  auto need = [&](const char* key, c10::IValue& v) {
    if (!archive.try_read(key, v)) {
      throw Error(std::string("GradScaler::load: the archive has no \"") + key + "\"");
    }
  };
  need("growth_factor", growth);
  need("backoff_factor", backoff);
  need("growth_interval", interval);
  need("_growth_tracker", tracker);
  GradScalerOptions o = impl_->o;
  o.init_scale = scale.toDouble();
  o.growth_factor = growth.toDouble();
  o.backoff_factor = backoff.toDouble();
  o.growth_interval = interval.toInt();
  check_options(o);
  impl_->finalize_pending();
  impl_->o = o;
  impl_->init_scale = o.init_scale;
  impl_->init_tracker = tracker.toInt();
  if (impl_->scale.defined()) impl_->scale.fill_(o.init_scale);
  if (impl_->tracker.defined()) impl_->tracker.fill_(impl_->init_tracker);
}

void GradScaler::set_parameter_names(const torch::nn::Module& module) {
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    impl_->names[item.value().unsafeGetTensorImpl()] = item.key();
  }
}

void GradScaler::set_parameter_names(const std::vector<std::pair<std::string, at::Tensor>>& named) {
  for (const auto& [name, t] : named) impl_->names[t.unsafeGetTensorImpl()] = name;
}

void GradScaler::set_process_group(c10::intrusive_ptr<c10d::ProcessGroup> group) {
  impl_->group = std::move(group);
}

const std::vector<ScalerRecord>& GradScaler::history() {
  impl_->finalize_pending();
  return impl_->history;
}

}  // namespace precprobe
