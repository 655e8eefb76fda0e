// OwnCodeGuard: marks the calling thread as running precprobe's own code, so that the op
// callbacks (callbacks.cpp) ignore every ATen op it calls, start and end alike.
//
// It replaces at::RecordFunctionGuard(false) on the op path: on LibTorch 1.13 every toggle of
// that guard copies the thread's RecordFunction state and rebuilds its callback list
// (callgrind: ~5,500 instructions per guard; the two guards of a recorded aten::add were
// 11,000 of the 27,000 instructions its record cost the training thread). This guard is a
// thread-local bool. Other
// RecordFunction callbacks (a profiler) still see the ATen ops precprobe calls itself, which
// on the op path are rare (device tensors, lazy conj/neg, zero tensors).
#pragma once

#include <ATen/core/grad_mode.h>
#include <c10/core/AutogradState.h>
#include <c10/core/GradMode.h>

namespace at {
class Tensor;
}

namespace precprobe {
namespace detail {

inline thread_local bool tl_own_code = false;

class OwnCodeGuard {
 public:
  OwnCodeGuard() noexcept : prev_(tl_own_code) { tl_own_code = true; }
  ~OwnCodeGuard() { tl_own_code = prev_; }
  OwnCodeGuard(const OwnCodeGuard&) = delete;
  OwnCodeGuard& operator=(const OwnCodeGuard&) = delete;

 private:
  bool prev_;
};

/// The calling thread's autograd state: libc10's thread_local, whose address is fetched once
/// per thread. GradMode::is_enabled()/set_enabled() reach it through a call into libc10 and
/// __tls_get_addr each time (~50 instructions); its get/set_grad_mode() are inline.
inline c10::AutogradState& autograd_state() noexcept {
  static thread_local c10::AutogradState* const state = &c10::AutogradState::get_tls_state();
  return *state;
}

/// GradMode::is_enabled() without the call into libc10.
inline bool grad_enabled() noexcept { return autograd_state().get_grad_mode(); }

/// at::NoGradGuard for the op path: grad mode off inside, the caller's restored on exit,
/// without the two writes when it is already off (the optimizer's step, evaluation, nested
/// guards), and through autograd_state() (a recorded op made ten grad-mode calls into
/// libc10 before: callgrind, `bench_debugger --records`).
class GradOffGuard {
 public:
  explicit GradOffGuard(bool enabled) noexcept : was_enabled_(enabled) {
    if (was_enabled_) autograd_state().set_grad_mode(false);
  }
  GradOffGuard() noexcept : GradOffGuard(grad_enabled()) {}
  ~GradOffGuard() {
    if (was_enabled_) autograd_state().set_grad_mode(true);
  }
  GradOffGuard(const GradOffGuard&) = delete;
  GradOffGuard& operator=(const GradOffGuard&) = delete;

 private:
  bool was_enabled_;
};

/// precprobe's own code is about to write `t` outside an observed op (GradScaler's fused
/// unscale, a snapshot's restore): the attached Observer, if any, treats it as it treats an
/// in-place op before it runs (nothing queued still reads the old values afterwards, and no
/// cached statistics of that storage are served again). Callers bump the version after the
/// write, as an in-place op does. Any thread; never throws.
void before_own_write(const at::Tensor& t) noexcept;

}  // namespace detail
}  // namespace precprobe
