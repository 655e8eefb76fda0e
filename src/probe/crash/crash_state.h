// What the fatal-signal handler (crash_flush.cpp) needs to know about the thread that
// crashed and about the started debugger, kept so that a signal handler may read it.
//
// InflightOps: the op callbacks (callbacks.cpp) push the name of every op and autograd
// node a thread starts and pop it when it ends, while the op callback is installed (the
// observed steps). The names are the registry's OpInfo strings (live for the process) or
// the RecordFunction's own (alive while it runs): the handler, running on the crashing
// thread inside the innermost op, copies the innermost one. Plain thread-local data with
// no constructor or destructor, so that reading it in a signal handler allocates nothing.
//
// Threads: inflight() is the calling thread's own; arm/disarm/set_crash_step are called by
// the debugger's controlling thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "precprobe/writer.h"

namespace precprobe {
namespace detail {

struct ThreadState;

struct InflightOps {
  static constexpr int32_t kMax = 32;  ///< deeper ops are counted, not named
  const char* names[kMax];
  int32_t depth;             ///< ops and nodes running on this thread now
  const ThreadState* state;  ///< the thread's nesting state (its record thread index)
};

/// The calling thread's in-flight ops (zero-initialised: no guard, no destructor).
inline InflightOps& inflight() noexcept {
  static thread_local InflightOps ops;
  return ops;
}

inline void inflight_push(const char* name, const ThreadState* state) noexcept {
  InflightOps& s = inflight();
  if (s.depth >= 0 && s.depth < InflightOps::kMax) s.names[s.depth] = name;
  s.state = state;
  std::atomic_signal_fence(std::memory_order_release);  // the name before the depth
  ++s.depth;
}

inline void inflight_pop() noexcept {
  InflightOps& s = inflight();
  if (s.depth > 0) --s.depth;
}

/// What the crash flusher thread (not in signal context) finishes after a fatal signal:
/// `drain` emits the statistics engine's records of every op that ended, `writer` is
/// flushed, and `writer`'s meta.json is marked "crashed".
struct CrashTarget {
  std::shared_ptr<DumpWriter> writer;
  std::function<void()> drain;
};

/// The started debugger: a crash now writes `<rank_dir>/crash.json` and flushes `target`.
void arm_crash_flush(const std::string& rank_dir, std::shared_ptr<CrashTarget> target);
/// stop(): a crash now only chains to the previous handler.
void disarm_crash_flush() noexcept;
/// The debugger's step, for the crash record.
void set_crash_step(int64_t step) noexcept;

}  // namespace detail
}  // namespace precprobe
