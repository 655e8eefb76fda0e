// The scaled-gradient window (scaled_grads.h): opened by GradScaler, read by the observer's
// check of reads inside it (observer_scaled_grads.cpp).
#include "scaler/scaled_grads.h"

#include <atomic>

namespace precprobe {
namespace detail {

namespace {
std::atomic<float> g_scaled_grads_window{0.0f};
std::atomic<uint64_t> g_scaled_grads_window_id{0};
}  // namespace
void set_scaled_grads_window(float scale) noexcept {
  const float before = g_scaled_grads_window.exchange(scale, std::memory_order_acq_rel);
  if (!(before > 0.0f) && scale > 0.0f)
    g_scaled_grads_window_id.fetch_add(1, std::memory_order_acq_rel);
}
uint64_t scaled_grads_window_id() noexcept {
  return g_scaled_grads_window_id.load(std::memory_order_acquire);
}
float scaled_grads_window() noexcept {
  return g_scaled_grads_window.load(std::memory_order_acquire);
}

}  // namespace detail
}  // namespace precprobe
