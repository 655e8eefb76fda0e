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

/// at::NoGradGuard for the op path: grad mode off inside, the caller's restored on exit,
/// without the two writes when it is already off (the optimizer's step, evaluation, nested
/// guards). libc10 keeps grad mode in a thread_local reached through __tls_get_addr: each
/// is_enabled()/set_enabled() is a call of ~50 instructions, and a recorded op made ten of
/// them (callgrind, `bench_debugger --records`).
class GradOffGuard {
 public:
  explicit GradOffGuard(bool enabled) noexcept : was_enabled_(enabled) {
    if (was_enabled_) c10::GradMode::set_enabled(false);
  }
  GradOffGuard() noexcept : GradOffGuard(c10::GradMode::is_enabled()) {}
  ~GradOffGuard() {
    if (was_enabled_) c10::GradMode::set_enabled(true);
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
