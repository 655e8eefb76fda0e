// What the probe benches share: CPU-time and page-fault counters, the median of a sample,
// "--malloc tuned", which gives every variant of a bench tune_malloc's settings (so that
// one without the debugger runs with them too: one process cannot hold both), and
// "--threads", the threading both arms of a ratio run in.
#pragma once

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <malloc.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
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

/// OpenBLAS's thread count; -1 when the BLAS loaded is not OpenBLAS.
inline int blas_threads() {
  using Fn = int (*)();
  if (auto f = reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, "openblas_get_num_threads"))) return f();
  return -1;
}

/// --threads: "free-core" runs the model on one intra-op thread with OpenBLAS pinned to one
/// thread, leaving the other cores to the statistics worker and the writer (BENCHMARKS.md's
/// "free core"); "default" leaves LibTorch's and OpenBLAS's thread counts as a program
/// finds them (its "default threading"). Prints the setting; false (and a message) for
/// another mode.
inline bool apply_threading(const std::string& mode) {
  if (mode != "free-core" && mode != "default") {
    std::fprintf(stderr, "--threads %s: use free-core or default\n", mode.c_str());
    return false;
  }
  if (mode == "free-core") {
    at::set_num_threads(1);
    using Fn = void (*)(int);
    if (auto f = reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(1);
  }
  std::printf("threads: %s (intra-op %d, OpenBLAS %d, %ld cores online)\n", mode.c_str(),
              at::get_num_threads(), blas_threads(), ::sysconf(_SC_NPROCESSORS_ONLN));
  return true;
}

}  // namespace bench
}  // namespace precprobe
