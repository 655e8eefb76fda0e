#include "precprobe/error.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

namespace precprobe {
namespace {

std::atomic<uint64_t> g_error_count{0};

std::mutex& handler_mutex() {
  static std::mutex m;
  return m;
}

ErrorHandler& handler_slot() {
  static ErrorHandler h;
  return h;
}

// spdlog's default: at most one line a second, so a failing op in a hot loop cannot
// flood the terminal; suppressed messages are counted and mentioned once.
void default_handler(const std::string& message) {
  using Clock = std::chrono::steady_clock;
  static std::mutex m;
  static Clock::time_point last{};
  static uint64_t suppressed = 0;
  std::lock_guard<std::mutex> lock(m);
  auto now = Clock::now();
  if (last != Clock::time_point{} && now - last < std::chrono::seconds(1)) {
    ++suppressed;
    return;
  }
  last = now;
  if (suppressed > 0) {
    std::fprintf(stderr, "[precprobe] error: %s (%llu similar messages suppressed)\n",
                 message.c_str(), static_cast<unsigned long long>(suppressed));
    suppressed = 0;
  } else {
    std::fprintf(stderr, "[precprobe] error: %s\n", message.c_str());
  }
}

}  // namespace

void set_error_handler(ErrorHandler handler) {
  std::lock_guard<std::mutex> lock(handler_mutex());
  handler_slot() = std::move(handler);
}

void report_error(const std::string& message) noexcept {
  g_error_count.fetch_add(1, std::memory_order_relaxed);
  try {
    ErrorHandler h;
    {
      std::lock_guard<std::mutex> lock(handler_mutex());
      h = handler_slot();
    }
    if (h) {
      h(message);
    } else {
      default_handler(message);
    }
  } catch (...) {
    // A throwing handler must not reach the training step.
  }
}

uint64_t error_count() noexcept { return g_error_count.load(std::memory_order_relaxed); }

}  // namespace precprobe
