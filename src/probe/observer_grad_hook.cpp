// Observer: the gradient monitor's hook on gradient clearing (zero_grad after this step's
// backward), found among the ops of user code the observer sees.
#include "observer.h"
#include "observer_internal.h"

namespace precprobe {
namespace detail {

void Observer::set_grad_hook(std::vector<at::Tensor> params, std::function<void()> fn) {
  hook_params_ = std::move(params);
  grad_hook_ = std::move(fn);
}

void Observer::maybe_run_grad_hook(c10::ArrayRef<const c10::IValue> inputs, const OpInfo& info) {
  if (!thread_state().nodes.empty() || !grad_hook_) return;  // backward accumulates grads
  // Only an op that clears gradients (zero_grad: detach_ then zero_) after this step's
  // backward: earlier, the gradients are the previous step's; other in-place writes
  // (unscale, clipping, a user's edit) come before the optimizer step, whose update the
  // monitor's update ratio must see (step() observes then).
  if (!backward_seen_.load(std::memory_order_relaxed)) return;
  if (info.name != "aten::zero_" && info.name != "aten::detach_") return;
  for (size_t i : info.write_args) {
    if (i >= inputs.size()) continue;
    bool hit = false;
    for_each_tensor(inputs[i], [&](const at::Tensor& t) {
      const void* s = storage_of(t);
      for (const at::Tensor& p : hook_params_)
        if (s != nullptr && p.grad().defined() && storage_of(p.grad()) == s) hit = true;
    });
    if (hit) {
      grad_hook_armed_.store(false, std::memory_order_release);
      grad_hook_();
      return;
    }
  }
}

}  // namespace detail
}  // namespace precprobe
