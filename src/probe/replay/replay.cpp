// AnomalyWatch: see replay.h. The healthy path is a snapshot (buffers and scalars on the
// spot, parameters and optimizer state on the snapshot's helper thread during the step), the
// user's step, one fused pass over each gradient (grad_loops.h; on a device, its statistics
// with one host sync for the loss and all gradients together), and the step's records handed
// to the writer; everything else runs only when a trigger fires.
#include "replay/replay.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <fmt/format.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>

#include "capture/observer.h"
#include "precprobe/analysis.h"
#include "precprobe/error.h"
#include "precprobe/reader.h"
#include "replay/replay_origin.h"
#include "support/grad_loops.h"

namespace precprobe {
namespace detail {
namespace {

std::string number_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.6g}", v);
}

std::string what_of(const std::exception& e) {
  if (auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

/// The loss as one float64 (a loss of several elements: their float64 sum), on the device.
at::Tensor loss_scalar(const at::Tensor& loss) { return loss.detach().sum(at::kDouble); }

/// The name of the scalar the watch writes for each checked step (the report's loss chart),
/// and of each of several losses: "loss/0", "loss/1", ...
constexpr const char* kLossScalar = "loss";

bool has_elements(const at::Tensor& t) { return t.defined() && t.numel() > 0; }

/// "loss = nan" for one loss, "loss/0 = 1.2, loss/1 = nan" for several.
std::string losses_text(const std::vector<std::string>& names, const std::vector<double>& values,
                        const std::vector<bool>& present) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!present[i]) continue;
    s += fmt::format("{}{} = {}", s.empty() ? "" : ", ", names[i], number_text(values[i]));
  }
  return s;
}

/// The elements that describe a gradient (a sparse one's values, a complex one's real and
/// imaginary parts), and how many zeros it leaves implicit.
std::pair<at::Tensor, int64_t> grad_values(const at::Tensor& grad) {
  at::Tensor v = grad;
  int64_t implicit_zeros = 0;
  if (v.is_sparse()) {
    v = v.coalesce()._values();
    implicit_zeros = grad.numel() - v.numel();
  }
  if (v.is_complex()) v = at::view_as_real(v.is_conj() ? v.resolve_conj() : v);
  return {v, implicit_zeros};
}

/// [sumsq, abs_sum, abs_max, nan, inf, finite] of a gradient off the CPU, as float64 on its
/// device (the CPU's fused loop, in ATen ops).
at::Tensor device_row(const at::Tensor& grad) {
  auto [values, implicit_zeros] = grad_values(grad);
  const at::Tensor g = values.to(at::kDouble);
  const at::Tensor zero = at::zeros({}, g.options());
  const at::Tensor fin = g.isfinite(), nan = g.isnan();
  const at::Tensor a = at::where(fin, g.abs(), zero);
  return at::stack({a.square().sum(), a.sum(), g.numel() > 0 ? a.max() : zero,
                    nan.sum().to(at::kDouble), (~fin & ~nan).sum().to(at::kDouble),
                    fin.sum().to(at::kDouble) + static_cast<double>(implicit_zeros)});
}
constexpr int kRowFields = 6;

/// The origin and its classification, from the replayed step's records.
struct Origin {
  std::string op, record, classification = "unknown", why;
};

// As overflow.cpp: in-place ops that overwrite input 0 without reading it.
bool is_overwriting(const std::string& op) {
  return op == "aten::fill_" || op == "aten::zero_" || op == "aten::copy_" ||
         op == "aten::normal_" || op == "aten::uniform_";
}

std::string bad_inputs_text(const OpRecord& r) {
  std::string out;
  int listed = 0;
  for (size_t i = 0; i < r.inputs.size() && listed < 3; ++i) {
    const auto& t = r.inputs[i].tensor;
    if (!t || t->all_finite()) continue;
    out += fmt::format("{}input {} ({}: {} NaN, {} Inf)", listed ? ", " : "", i,
                       t->param.empty() ? "no parameter: data or an activation" : t->param, t->nan,
                       t->pinf + t->ninf);
    ++listed;
  }
  return out;
}

}  // namespace

AnomalyWatch::AnomalyWatch(const DebuggerOptions& options, DumpWriter* writer, Observer* observer,
                           std::string rank_dir)
    : options_(options), writer_(writer), observer_(observer), rank_dir_(std::move(rank_dir)) {
  const auto& t = options_.on_anomaly;
  if (t.spike_k > 0) {
    history_.assign(static_cast<size_t>(t.spike_n), 0.0);
    scratch_.reserve(static_cast<size_t>(t.spike_n));
  }
}

void AnomalyWatch::bind(torch::nn::Module* model,
                        const std::vector<torch::optim::Optimizer*>& optimizers) {
  snapshot_.bind(model, optimizers);
  params_.clear();
  std::unordered_map<const void*, std::string> names;
  if (model != nullptr)
    for (const auto& p : model->named_parameters(/*recurse=*/true))
      names.emplace(p.value().unsafeGetTensorImpl(), p.key());
  std::unordered_map<const void*, bool> seen;
  for (torch::optim::Optimizer* optimizer : optimizers) {
    for (const auto& g : optimizer->param_groups()) {
      for (const at::Tensor& p : g.params()) {
        if (!seen.emplace(p.unsafeGetTensorImpl(), true).second) continue;
        auto it = names.find(p.unsafeGetTensorImpl());
        params_.emplace_back(
            it != names.end() ? it->second : "param" + std::to_string(params_.size()), p);
      }
    }
  }
  stats_.reserve(params_.size());
  // A replayed step is recorded as "record": "always" records one, gradient monitor included
  // (the debugger's monitor needs a model): its grads records are the replay's then.
  replay_grads_recorded_ = options_.grad_monitor && model != nullptr;
}

void AnomalyWatch::unbind() noexcept {
  try {
    last_bytes_ = snapshot_.bytes();
  } catch (...) {
  }
  snapshot_.unbind();
  params_.clear();
}

int64_t AnomalyWatch::snapshot_bytes() const {
  return snapshot_.bound() ? snapshot_.bytes() : last_bytes_;
}

void AnomalyWatch::remember(double loss) {
  if (history_.empty() || !std::isfinite(loss)) return;
  history_[history_next_] = loss;
  history_next_ = (history_next_ + 1) % history_.size();
  history_size_ = std::min(history_size_ + 1, history_.size());
}

void AnomalyWatch::read_grads(const std::vector<at::Tensor>& losses, Check& c) {
  at::RecordFunctionGuard no_callbacks(false);
  at::NoGradGuard no_grad;
  stats_.assign(params_.size(), GradStat{});
  rows_.clear();
  c.values.assign(losses.size(), std::numeric_limits<double>::quiet_NaN());
  std::vector<size_t> loss_rows;  // losses off the CPU, in rows_ order
  for (size_t i = 0; i < losses.size(); ++i) {
    if (!c.present[i]) continue;
    at::Tensor l = loss_scalar(losses[i]);
    if (l.device().is_cpu()) {
      c.values[i] = l.item<double>();
    } else {
      rows_.push_back(l.reshape({1}));
      loss_rows.push_back(i);
    }
  }
  std::vector<size_t> on_device;
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& g = params_[i].second.grad();
    if (!g.defined()) continue;
    GradStat& s = stats_[i];
    s.has_grad = true;
    if (!g.device().is_cpu()) {
      rows_.push_back(device_row(g));
      on_device.push_back(i);
      continue;
    }
    auto [values, implicit_zeros] = grad_values(g);
    if (!fused_dtype_supported(values.scalar_type())) values = values.to(at::kFloat);
    NormAcc n;
    dispatch_fused(values.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      for_each_span<T>(values,
                       [&](T* p, int64_t k, int64_t stride) { norm_span(p, k, stride, n); });
    });
    if (std::isfinite(n.sumsq)) {  // every element finite: the one pass is all
      s.sumsq = n.sumsq;
      s.abs_sum = n.abs_sum;
      s.abs_max = n.abs_max;
      s.finite = values.numel() + implicit_zeros;
      continue;
    }
    GradAcc acc;  // NaN/Inf somewhere (or a float64 square beyond its range): count them
    dispatch_fused(values.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      for_each_span<T>(values, [&](T* p, int64_t k, int64_t stride) {
        careful_grad_stats<T>(p, k, stride, acc);
      });
    });
    s.sumsq = acc.sumsq;
    s.abs_sum = acc.abs_sum;
    s.abs_max = acc.abs_max;
    s.nan = acc.nan;
    s.inf = acc.inf;
    s.finite = acc.finite + implicit_zeros;
  }
  if (rows_.empty()) return;
  for (at::Tensor& r : rows_) r = r.to(rows_.front().device(), /*non_blocking=*/true);
  const at::Tensor host = at::cat(rows_).to(at::kCPU).contiguous();  // one host sync
  const double* v = host.data_ptr<double>();
  for (size_t i : loss_rows) c.values[i] = *v++;
  for (size_t i : on_device) {
    GradStat& s = stats_[i];
    s.sumsq = v[0];
    s.abs_sum = v[1];
    s.abs_max = v[2];
    s.nan = static_cast<int64_t>(v[3]);
    s.inf = static_cast<int64_t>(v[4]);
    s.finite = static_cast<int64_t>(v[5]);
    v += kRowFields;
  }
}

AnomalyWatch::Check AnomalyWatch::check(const std::vector<at::Tensor>& losses, bool several) {
  const auto& t = options_.on_anomaly;
  Check c;
  for (size_t i = 0; i < losses.size(); ++i) {
    c.names.push_back(several ? fmt::format("{}/{}", kLossScalar, i) : std::string(kLossScalar));
    c.present.push_back(has_elements(losses[i]));
    c.with_loss = c.with_loss || c.present.back();
  }
  read_grads(losses, c);
  std::optional<size_t> bad_loss;
  for (size_t i = 0; i < losses.size(); ++i) {
    if (!c.present[i]) continue;
    if (std::isfinite(c.values[i])) {
      c.loss += c.values[i];
    } else if (!bad_loss) {
      bad_loss = i;
    }
  }
  bool bad_grads = false;
  for (const GradStat& s : stats_) bad_grads = bad_grads || s.nan + s.inf > 0;
  if (t.loss_nonfinite && bad_loss) {
    c.trigger = "loss_nonfinite";
    c.detail = c.names[*bad_loss] + " = " + number_text(c.values[*bad_loss]);
  } else if (t.grad_nonfinite && bad_grads) {
    c.trigger = "grad_nonfinite";
    c.detail = bad_grads_text();
    const std::string l = losses_text(c.names, c.values, c.present);
    if (!l.empty()) c.detail += "; " + l;
  } else if (t.spike_k > 0 && c.with_loss && history_size_ == history_.size()) {
    scratch_.assign(history_.begin(), history_.end());
    auto mid = scratch_.begin() + static_cast<std::ptrdiff_t>(scratch_.size() / 2);
    std::nth_element(scratch_.begin(), mid, scratch_.end());
    double median = *mid;
    if (scratch_.size() % 2 == 0) {
      median = 0.5 * (median + *std::max_element(scratch_.begin(), mid));
    }
    if (median > 0 && c.loss > t.spike_k * median) {
      c.trigger = "loss_spike";
      c.detail = fmt::format("loss {} > {} x median {} of the last {} losses", number_text(c.loss),
                             number_text(t.spike_k), number_text(median), history_.size());
    }
  }
  return c;
}

std::string AnomalyWatch::bad_grads_text() const {
  std::string first;
  int64_t bad = 0, nan = 0, inf = 0;
  for (size_t i = 0; i < params_.size() && i < stats_.size(); ++i) {
    const GradStat& s = stats_[i];
    if (s.nan + s.inf == 0) continue;
    if (bad++ == 0) {
      first = params_[i].first;
      nan = s.nan;
      inf = s.inf;
    }
  }
  return fmt::format(
      "gradient of {} holds {} NaN, {} Inf ({} parameter{} with non-finite "
      "gradients)",
      first, nan, inf, bad, bad == 1 ? "" : "s");
}

void AnomalyWatch::write_records(int64_t step, const Check& c, bool grads) noexcept {
  if (writer_ == nullptr) return;
  try {
    for (size_t i = 0; i < c.names.size(); ++i) {
      if (!c.present[i]) continue;
      ScalarRecord r;
      r.step = step;
      r.name = c.names[i];
      r.value = c.values[i];
      writer_->submit(std::move(r));
    }
    if (!grads) return;
    for (size_t i = 0; i < params_.size() && i < stats_.size(); ++i) {
      const GradStat& s = stats_[i];
      GradRecord r;
      r.step = step;
      r.param = params_[i].first;
      r.has_grad = s.has_grad;
      if (s.has_grad) {
        r.grad_norm = std::sqrt(s.sumsq);
        r.grad_abs_max = s.abs_max;
        r.grad_abs_mean = s.finite > 0 ? s.abs_sum / static_cast<double>(s.finite) : 0.0;
        r.grad_nan = s.nan;
        r.grad_inf = s.inf;
      }
      // The weights are not read here: no "wn" and no "ur" (absent, not 0).
      r.has_weight = false;
      r.weight_norm = r.update_ratio = std::numeric_limits<double>::quiet_NaN();
      writer_->submit(std::move(r));
    }
  } catch (const std::exception& e) {
    report_error(std::string("precprobe: step ") + std::to_string(step) +
                 ": writing the step's loss and gradient records failed: " + e.what());
  }
}

bool AnomalyWatch::Pattern::operator==(const Pattern& o) const {
  if (loss_bits.size() != o.loss_bits.size() || bad_grads != o.bad_grads) return false;
  for (size_t i = 0; i < loss_bits.size(); ++i)
    if (loss_bits[i] != o.loss_bits[i] && !(loss_nan[i] && o.loss_nan[i])) return false;
  return true;
}

AnomalyWatch::Pattern AnomalyWatch::pattern(const std::vector<at::Tensor>& losses) const {
  at::RecordFunctionGuard no_callbacks(false);
  at::NoGradGuard no_grad;
  Pattern p;
  for (const at::Tensor& loss : losses) {
    const double l = has_elements(loss) ? loss_scalar(loss).item<double>()
                                        : std::numeric_limits<double>::quiet_NaN();
    uint64_t bits = 0;
    std::memcpy(&bits, &l, sizeof l);
    p.loss_bits.push_back(bits);
    p.loss_nan.push_back(std::isnan(l));
  }
  for (const auto& [name, t] : params_) {
    const at::Tensor& g = t.grad();
    p.bad_grads.push_back(g.defined() && !all_finite(g));
  }
  return p;
}

void AnomalyWatch::run(int64_t step, c10::function_ref<std::vector<at::Tensor>()> f,
                       const bool& several, const std::function<void(bool)>& record) {
  bool watch = bound() && static_cast<int64_t>(replays_) < options_.on_anomaly.max_replays &&
               options_.step.contains(step);
  if (watch) {
    try {
      snapshot_.begin_capture();
    } catch (const std::exception& e) {
      ++errors_;
      report_error("precprobe: step " + std::to_string(step) +
                   ": taking the snapshot failed, the step is not watched: " + what_of(e));
      watch = false;
    }
  }
  // The helper thread copies during f(): however f or the check leaves, the copy ends here.
  struct EndCapture {
    StepSnapshot& snapshot;
    ~EndCapture() { snapshot.abandon_capture(); }
  } end_capture{snapshot_};
  const std::vector<at::Tensor> losses = f();  // the user's exceptions propagate unchanged
  if (!watch) return;
  Check c;
  try {
    c = check(losses, several);
  } catch (const std::exception& e) {
    ++errors_;
    report_error("precprobe: step " + std::to_string(step) +
                 ": checking the triggers failed: " + what_of(e));
    return;
  }
  const std::string written = snapshot_.finish_capture();
  if (!written.empty()) {
    report_error("precprobe: step " + std::to_string(step) + ": " + written +
                 " was written during the step before the snapshot's copy of it was known to "
                 "be complete (before backward reached a parameter: a weight changed in "
                 "forward, or an optimizer.step() with no backward before it): this step's "
                 "snapshot is not used, and from now on the snapshot is copied before each "
                 "step, on the training thread");
  }
  const bool healthy = c.trigger.empty();
  write_records(step, c, healthy || !written.empty() || !replay_grads_recorded_);
  if (healthy) {
    if (c.with_loss) remember(c.loss);
    return;
  }
  if (!written.empty()) {
    ++errors_;
    report_error("precprobe: step " + std::to_string(step) + " (" + c.detail +
                 ") is not replayed: its snapshot is not valid (" + written +
                 " was written before it was known to be copied)");
    return;
  }
  replay(step, f, losses, c, record);
}

void AnomalyWatch::replay(int64_t step, c10::function_ref<std::vector<at::Tensor>()> f,
                          const std::vector<at::Tensor>& losses, const Check& why,
                          const std::function<void(bool)>& record) {
  ++replays_;
  Pattern first;
  try {
    first = pattern(losses);
    snapshot_.restore();
  } catch (const std::exception& e) {
    ++errors_;
    report_error("precprobe: step " + std::to_string(step) + " (" + why.detail +
                 "): restoring the snapshot failed, the step is not replayed: " + what_of(e));
    return;
  }
  // The debugger's own failures are reported, never thrown; f's exceptions propagate.
  auto recording = [&](bool on) {
    try {
      record(on);
      return true;
    } catch (const std::exception& e) {
      ++errors_;
      report_error("precprobe: step " + std::to_string(step) + ": " +
                   (on ? "starting" : "finishing") + " the replay's records failed: " + what_of(e));
    } catch (...) {
      ++errors_;
      report_error("precprobe: step " + std::to_string(step) + ": replay recording failed");
    }
    return false;
  };
  OriginTracker tracker;
  std::vector<at::Tensor> again;
  if (!recording(true)) {
    recording(false);
    f();  // the state was put back: the step runs once more, unrecorded
    return;
  }
  observer_->set_origin_tracker(&tracker);
  try {
    again = f();
  } catch (...) {
    observer_->set_origin_tracker(nullptr);
    recording(false);
    throw;
  }
  observer_->set_origin_tracker(nullptr);
  recording(false);  // records drained and on disk

  Origin o;
  bool reproduced = false;
  try {
    reproduced = pattern(again) == first;
    DumpReader reader(rank_dir_);
    RecordFilter filter;
    filter.step_min = filter.step_max = step;
    DumpData data;
    data.ops = reader.ops(filter);
    // A buffer read inside a kernel may be recorded without the NaN it held: the tracker
    // read the values themselves, so its word wins (precprobe overflow cannot know).
    for (OpRecord& rec : data.ops) {
      if (rec.inputs_non_finite() || !tracker.had_nonfinite_input(rec.seq)) continue;
      const size_t from = is_overwriting(rec.op) ? 1 : 0;
      for (size_t i = from; i < rec.inputs.size(); ++i) {
        if (!rec.inputs[i].tensor) continue;
        rec.inputs[i].tensor->nan = std::max<int64_t>(rec.inputs[i].tensor->nan, 1);
        break;
      }
    }
    const OverflowResult r = find_overflow(data);
    if (r.found && r.reason) {
      // A mask's -inf turned into NaN (a fully masked softmax row): the rule is the core's
      // (src/core/analysis/masking.h), the same answer as `precprobe overflow`.
      o.op = r.origin.op;
      o.record = r.origin.name;
      o.classification = "invalid";
      o.why = *r.reason;
      if (r.masked_by) {
        const std::optional<std::string>& m = r.masked_by->module;
        o.why += "; the -inf was written by " + r.masked_by->name +
                 (m && !m->empty() ? " in " + *m : std::string()) + ", a mask";
      } else {
        o.why += "; the -inf was its attention mask's";
      }
      if (const OriginTracker::Candidate* c = tracker.find(r.origin.seq))
        save_inputs(c->inputs, rank_dir_ + "/tensors/step" + std::to_string(step), o.record,
                    options_.zstd_level, options_.max_tensor_bytes);
    } else if (r.found) {
      o.op = r.origin.op;
      o.record = r.origin.name;
      if (const OriginTracker::Candidate* c = tracker.find(r.origin.seq)) {
        const OriginVerdict v = classify_origin(*c);
        o.classification = v.classification;
        o.why = v.why;
        save_inputs(c->inputs, rank_dir_ + "/tensors/step" + std::to_string(step), o.record,
                    options_.zstd_level, options_.max_tensor_bytes);
      } else {
        o.why = "the inputs of " + o.record + " were not kept during the replay";
      }
    } else {
      // No op turned finite inputs into NaN/Inf: the first op that output NaN/Inf got them.
      std::optional<OpRecord> first_bad;
      for (const OpRecord& rec : data.ops)
        if (rec.outputs_non_finite() && (!first_bad || rec.seq < first_bad->seq)) first_bad = rec;
      if (first_bad) {
        o.op = first_bad->op;
        o.record = first_bad->name();
        o.classification = "inherited";
        const std::string inputs = bad_inputs_text(*first_bad);
        o.why = "its inputs were already non-finite" +
                (inputs.empty() ? std::string() : ": " + inputs) +
                "; they came from outside this step's ops (the batch, a parameter or a buffer "
                "from an earlier step)";
      } else {
        o.why =
            "no op output of the replayed step holds NaN/Inf; the values are finite, look "
            "for the ops whose max grows in this step's records (precprobe export)";
      }
    }
  } catch (const std::exception& e) {
    ++errors_;
    report_error("precprobe: step " + std::to_string(step) +
                 ": finding the origin of the anomaly failed: " + what_of(e));
    if (o.why.empty()) o.why = "finding the origin failed: " + what_of(e);
  }
  AnomalyEvent ev;
  ev.step = step;
  ev.trigger = why.trigger;
  ev.reproduced = reproduced;
  ev.origin = o.op;
  ev.origin_record = o.record;
  ev.classification = o.classification;
  ev.why = o.why;
  ev.trigger_detail = why.detail;
  ev.replay = static_cast<int64_t>(replays_);
  writer_->submit(to_scalar_record(ev));
  writer_->flush(/*wait=*/true);
  std::fprintf(stderr, "precprobe: step %lld: %s; replayed (%s): origin %s, %s: %s\n",
               static_cast<long long>(step), why.detail.c_str(),
               reproduced ? "reproduced" : "NOT reproduced",
               o.record.empty() ? "none" : o.record.c_str(), o.classification.c_str(),
               o.why.c_str());
}

}  // namespace detail
}  // namespace precprobe
