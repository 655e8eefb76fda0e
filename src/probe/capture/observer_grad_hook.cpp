// Observer: the gradient monitor's hook on gradient clearing (zero_grad after this step's
// backward), found among the ops of user code the observer sees.
//
// A gradient is fresh when it changed since its parameter was last observed: other memory
// (a backward that found none, set_to_none) or a version counter moved by anything but the
// clearing itself (a backward's accumulation, unscaling, clipping). Storage, not the tensor:
// zero_grad may replace the gradient by its detach(), which shares storage and counter. Clearing
// ops keep a stale gradient stale: zero_ moves the counter by one, detach_ not at all. So a
// zero_grad() that clears gradients no backward wrote since (a GAN's G.zero_grad() before
// G's own backward) observes nothing, and the step's end observes them after G's step.
#include "capture/observer.h"
#include "capture/observer_internal.h"

namespace precprobe {
namespace detail {

void Observer::set_grad_hook(std::vector<at::Tensor> params,
                             std::function<void(const std::vector<size_t>&)> fn) {
  std::lock_guard<std::mutex> lk(hook_mu_);
  hook_params_.clear();
  for (at::Tensor& p : params) {
    HookParam h;
    h.param = std::move(p);
    remember_grad(h);
    hook_params_.push_back(std::move(h));
  }
  grad_hook_ = std::move(fn);
}

bool Observer::grad_fresh(const HookParam& h) const {
  const at::Tensor& g = h.param.grad();
  if (!g.defined()) return false;
  return storage_of(g) != h.grad || static_cast<int64_t>(g._version()) != h.version;
}

void Observer::remember_grad(HookParam& h) const {
  const at::Tensor& g = h.param.grad();
  h.grad = g.defined() ? storage_of(g) : nullptr;
  h.version = g.defined() ? static_cast<int64_t>(g._version()) : -1;
}

std::vector<size_t> Observer::take_unobserved_grads() {
  std::lock_guard<std::mutex> lk(hook_mu_);
  std::vector<size_t> out;
  for (size_t i = 0; i < hook_params_.size(); ++i) {
    HookParam& h = hook_params_[i];
    if (h.observed) continue;
    h.observed = true;
    remember_grad(h);
    out.push_back(i);
  }
  return out;
}

void Observer::maybe_run_grad_hook(c10::ArrayRef<const c10::IValue> inputs, const OpInfo& info) {
  if (!thread_state().nodes.empty() || !grad_hook_) return;  // backward accumulates grads
  // Only an op that clears gradients (zero_grad: detach_ then zero_). Observed only after
  // this step's backward: earlier, the gradients are the previous step's; other in-place
  // writes (unscale, clipping, a user's edit) come before the optimizer step, whose update
  // the monitor's update ratio must see (step() observes then).
  const bool zero = info.name == "aten::zero_";
  if (!zero && info.name != "aten::detach_") return;
  const bool after_backward = backward_seen_.load(std::memory_order_relaxed);
  std::vector<size_t> fresh;
  {
    std::lock_guard<std::mutex> lk(hook_mu_);
    for (size_t i : info.write_args) {
      if (i >= inputs.size()) continue;
      for_each_tensor(inputs[i], [&](const at::Tensor& t) {
        const void* s = storage_of(t);
        if (s == nullptr) return;
        for (HookParam& h : hook_params_) {
          const at::Tensor& g = h.param.grad();
          if (!g.defined() || storage_of(g) != s) continue;
          if (after_backward && !h.observed && grad_fresh(h)) {
            // The first clearing of a fresh gradient: observe every fresh one now.
            for (size_t k = 0; k < hook_params_.size(); ++k) {
              HookParam& o = hook_params_[k];
              if (o.observed || !grad_fresh(o)) continue;
              o.observed = true;
              remember_grad(o);
              fresh.push_back(k);
            }
          }
          // A gradient just observed, or stale, stays so through its clearing.
          if (!grad_fresh(h) && zero) h.version += 1;
        }
      });
    }
  }
  if (!fresh.empty()) grad_hook_(fresh);
}

}  // namespace detail
}  // namespace precprobe
