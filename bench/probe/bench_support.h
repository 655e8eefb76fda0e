// What the probe benches share: CPU-time and page-fault counters, the median of a sample,
// and "--malloc tuned", which gives every variant of a bench tune_malloc's settings (so that
// one without the debugger runs with them too: one process cannot hold both).
#pragma once

#include <malloc.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "support/malloc_tuning.h"

namespace precprobe {
namespace bench {

/// Milliseconds of `clock` (CLOCK_THREAD_CPUTIME_ID, CLOCK_PROCESS_CPUTIME_ID, ...).
inline double cpu_ms(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return 1e3 * static_cast<double>(ts.tv_sec) + 1e-6 * static_cast<double>(ts.tv_nsec);
}

/// Minor page faults of the process so far.
inline long minor_faults() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

/// The settings "tune_malloc" applies at start(), for the whole process, now.
inline void apply_tuned_malloc() {
  mallopt(M_MMAP_THRESHOLD, detail::kTunedMmapThreshold);
  mallopt(M_TRIM_THRESHOLD, detail::kTunedTrimThreshold);
}

}  // namespace bench
}  // namespace precprobe
