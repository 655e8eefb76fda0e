// AnomalyWatch: see replay.h. The healthy path is a snapshot (copy_ into kept buffers),
// the user's step, and one reduction per gradient with a single host sync for the loss and
// all gradients together; everything else runs only when a trigger fires.
#include "replay.h"

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

#include "observer.h"
#include "precprobe/analysis.h"
#include "precprobe/error.h"
#include "precprobe/reader.h"
#include "replay_origin.h"

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
  sums_.reserve(params_.size() + 1);
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

AnomalyWatch::Check AnomalyWatch::check(const at::Tensor& loss) {
  const auto& t = options_.on_anomaly;
  Check c;
  at::RecordFunctionGuard no_callbacks(false);
  at::NoGradGuard no_grad;
  sums_.clear();
  const bool with_loss = loss.defined() && loss.numel() > 0;
  if (with_loss) sums_.push_back(loss_scalar(loss));
  if (t.grad_nonfinite) {
    for (const auto& [name, p] : params_) {
      const at::Tensor& g = p.grad();
      if (!g.defined() || g.numel() == 0) continue;
      const auto s = g.scalar_type();
      if (s == at::kFloat || s == at::kHalf || s == at::kBFloat16) {
        // One pass; a float64 sum of these cannot overflow: non-finite iff an element is.
        sums_.push_back(g.sum(at::kDouble));
      } else {
        sums_.push_back(at::log(g.isfinite().all().to(at::kDouble)));  // 0, or -inf
      }
    }
  }
  if (sums_.empty()) return c;
  // One host sync for the loss and every gradient.
  const at::Tensor host = at::stack(sums_).to(at::kCPU);
  const double* v = host.data_ptr<double>();
  double grads = 0;
  for (size_t i = with_loss ? 1 : 0; i < sums_.size(); ++i) grads += v[i];
  c.loss = with_loss ? v[0] : std::numeric_limits<double>::quiet_NaN();
  if (t.loss_nonfinite && with_loss && !std::isfinite(c.loss)) {
    c.trigger = "loss_nonfinite";
    c.detail = "loss = " + number_text(c.loss);
  } else if (t.grad_nonfinite && !std::isfinite(grads)) {
    c.trigger = "grad_nonfinite";
    c.detail = bad_grads_text() + "; loss = " + number_text(c.loss);
  } else if (t.spike_k > 0 && with_loss && history_size_ == history_.size()) {
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
  for (const auto& [name, p] : params_) {
    const at::Tensor& g = p.grad();
    if (!g.defined() || all_finite(g)) continue;
    if (bad++ == 0) {
      first = name;
      nan = g.isnan().sum().item<int64_t>();
      inf = g.isinf().sum().item<int64_t>();
    }
  }
  return fmt::format(
      "gradient of {} holds {} NaN, {} Inf ({} parameter{} with non-finite "
      "gradients)",
      first, nan, inf, bad, bad == 1 ? "" : "s");
}

AnomalyWatch::Pattern AnomalyWatch::pattern(const at::Tensor& loss) const {
  at::RecordFunctionGuard no_callbacks(false);
  at::NoGradGuard no_grad;
  Pattern p;
  const double l = loss.defined() && loss.numel() > 0 ? loss_scalar(loss).item<double>()
                                                      : std::numeric_limits<double>::quiet_NaN();
  std::memcpy(&p.loss_bits, &l, sizeof l);
  p.loss_nan = std::isnan(l);
  for (const auto& [name, t] : params_) {
    const at::Tensor& g = t.grad();
    p.bad_grads.push_back(g.defined() && !all_finite(g));
  }
  return p;
}

at::Tensor AnomalyWatch::run(int64_t step, c10::function_ref<at::Tensor()> f,
                             const std::function<void(bool)>& record) {
  bool watch = bound() && static_cast<int64_t>(replays_) < options_.on_anomaly.max_replays &&
               options_.step.contains(step);
  if (watch) {
    try {
      snapshot_.capture();
    } catch (const std::exception& e) {
      ++errors_;
      report_error("precprobe: step " + std::to_string(step) +
                   ": taking the snapshot failed, the step is not watched: " + what_of(e));
      watch = false;
    }
  }
  at::Tensor loss = f();  // the user's exceptions propagate unchanged
  if (!watch) return loss;
  Check c;
  try {
    c = check(loss);
  } catch (const std::exception& e) {
    ++errors_;
    report_error("precprobe: step " + std::to_string(step) +
                 ": checking the triggers failed: " + what_of(e));
    return loss;
  }
  if (c.trigger.empty()) {
    remember(c.loss);
    return loss;
  }
  return replay(step, f, loss, c, record);
}

at::Tensor AnomalyWatch::replay(int64_t step, c10::function_ref<at::Tensor()> f,
                                const at::Tensor& loss, const Check& why,
                                const std::function<void(bool)>& record) {
  ++replays_;
  Pattern first;
  try {
    first = pattern(loss);
    snapshot_.restore();
  } catch (const std::exception& e) {
    ++errors_;
    report_error("precprobe: step " + std::to_string(step) + " (" + why.detail +
                 "): restoring the snapshot failed, the step is not replayed: " + what_of(e));
    return loss;
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
  at::Tensor again;
  if (!recording(true)) {
    recording(false);
    return f();  // the state was put back: the step runs once more, unrecorded
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
    if (r.found) {
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
  return again;
}

}  // namespace detail
}  // namespace precprobe
