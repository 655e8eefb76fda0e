// Whether gradients hold loss-scaled values right now: the window from GradScaler::scale()
// to GradScaler::unscale_() (or update()). The observer flags ops of user code that read,
// inside it, a parameter's gradient or a tensor a backward op produced in it (gradient
// clipping or a penalty computed on scaled gradients; checklist item mp.clip_before_unscale).
//
// Threads: set from the training thread, read from any thread (an atomic).
#pragma once

#include <cstdint>

namespace precprobe {
namespace detail {

/// Opens the window (the scale the gradients are about to be multiplied by) or closes it
/// (0). Opening a closed window starts a new window id.
void set_scaled_grads_window(float scale) noexcept;
/// The scale while the window is open, else 0.
float scaled_grads_window() noexcept;
/// Which window is (or was last) open: changes each time a closed window opens.
uint64_t scaled_grads_window_id() noexcept;

}  // namespace detail
}  // namespace precprobe
