// Observer: the check of reads of loss-scaled gradients inside the scaled-gradient window
// (scaled_grads.h; checklist item mp.clip_before_unscale). Off the per-op path unless a
// GradScaler window is open.
#include <algorithm>
#include <string>

#include "capture/observer.h"
#include "capture/observer_internal.h"
#include "precprobe/dump_format.h"
#include "scaler/scaled_grads.h"

namespace precprobe {
namespace detail {

namespace {

// Ops that measure or combine gradient values: what clipping and gradient penalties run.
// Moving, copying or communicating scaled gradients (cat, view, copy_, all-reduce) is fine
// and never flagged.
bool measures(const std::string& op) {
  static const char* const kOps[] = {"aten::norm",        "aten::linalg_vector_norm",
                                     "aten::linalg_norm", "aten::frobenius_norm",
                                     "aten::pow",         "aten::square",
                                     "aten::sum",         "aten::mean",
                                     "aten::abs",         "aten::max",
                                     "aten::amax",        "aten::sqrt",
                                     "aten::mul",         "aten::div",
                                     "aten::dot",         "aten::vdot",
                                     "aten::matmul",      "aten::add",
                                     "aten::sub"};
  for (const char* o : kOps)
    if (op == o) return true;
  return false;
}

bool is_scalar_operand(const c10::IValue& v) {
  if (v.isScalar()) return true;
  return v.isTensor() && v.toTensor().defined() && v.toTensor().numel() == 1;
}

}  // namespace

void Observer::note_backward_outputs(const std::vector<c10::IValue>& outputs) {
  std::lock_guard<std::mutex> lk(flagged_mu_);
  const uint64_t id = scaled_grads_window_id();
  if (id != window_id_) {
    window_grads_.clear();
    window_id_ = id;
  }
  for (const auto& v : outputs)
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (storage_of(t) != nullptr)
        window_grads_.push_back(t.unsafeGetTensorImpl()->unsafe_storage().getWeakStorageImpl());
    });
}

void Observer::check_scaled_grad_read(c10::ArrayRef<const c10::IValue> inputs, const OpInfo& info,
                                      float scale) {
  if (!measures(info.name)) return;
  // Few ops of user code run in the window (between backward() and the scaler's
  // unscale_), so the gradients' storages are looked up per op rather than cached.
  std::vector<const void*> grads;
  grads.reserve(param_tensors_.size());
  for (const at::Tensor& p : param_tensors_) {
    const at::Tensor& g = p.grad();
    if (g.defined()) grads.push_back(storage_of(g));
  }
  {
    std::lock_guard<std::mutex> lk(flagged_mu_);
    if (window_id_ == scaled_grads_window_id())
      for (const auto& w : window_grads_) grads.push_back(w._unsafe_get_target());
  }
  if (grads.empty()) return;
  size_t reads = 0;
  bool other_scalar = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (std::find(info.write_args.begin(), info.write_args.end(), i) != info.write_args.end())
      continue;  // written, not read: zero_grad, the clip's in-place mul_
    bool hit = false;
    for_each_tensor(inputs[i], [&](const at::Tensor& t) {
      const void* s = storage_of(t);
      if (s != nullptr && std::find(grads.begin(), grads.end(), s) != grads.end()) hit = true;
    });
    if (hit) {
      ++reads;
    } else if (is_scalar_operand(inputs[i])) {
      other_scalar = true;
    }
  }
  if (reads == 0) return;
  // g * inv_scale, g / scale: PyTorch's recipe for penalties unscales this way by hand.
  if (reads == 1 && other_scalar && (info.name == "aten::mul" || info.name == "aten::div")) return;
  int64_t step = 0;
  {
    std::lock_guard<std::mutex> lk(engine_->order_mutex());
    step = step_;
  }
  {
    std::lock_guard<std::mutex> lk(flagged_mu_);
    if (!flagged_.emplace(step, info.name).second) return;
  }
  ScalarRecord r;
  r.step = step;
  r.name = std::string(check_scalar::kScaledGradRead) + info.name;
  r.value = scale;
  writer_->submit(std::move(r));
}

}  // namespace detail
}  // namespace precprobe
