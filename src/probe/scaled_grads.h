// Whether parameter gradients hold loss-scaled values right now: the window from
// GradScaler::scale() to GradScaler::unscale_() (or update()). The observer flags ops of
// user code that read a parameter's gradient inside it (gradient clipping or a penalty
// computed on scaled gradients; checklist item mp.clip_before_unscale).
//
// Threads: set from the training thread, read from any thread (an atomic).
#pragma once

namespace precprobe {
namespace detail {

/// The scale the gradients are (about to be) multiplied by; 0 outside the window.
void set_scaled_grads_window(float scale) noexcept;
float scaled_grads_window() noexcept;

}  // namespace detail
}  // namespace precprobe
