// tune_malloc: see malloc_tuning.h.
#include "support/malloc_tuning.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace precprobe {
namespace detail {

std::string tune_malloc(bool enabled) noexcept {
  if (!enabled) return "off";
#if defined(__GLIBC__)
  static std::once_flag once;
  static const char* outcome = "set";
  try {
    std::call_once(once, [] {
      const char* tunables = std::getenv("GLIBC_TUNABLES");
      if ((tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) ||
          std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr ||
          std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
          std::getenv("MALLOC_TOP_PAD_") != nullptr) {
        outcome = "kept (the program's own malloc settings)";
        return;
      }
      if (mallopt(M_MMAP_THRESHOLD, kTunedMmapThreshold) != 1 ||
          mallopt(M_TRIM_THRESHOLD, kTunedTrimThreshold) != 1) {
        // mallopt answers 0 when the process's malloc is not glibc's (a sanitizer's, tcmalloc's
        // with its own mallopt): a fact about the process, not an error of the run. Said once.
        outcome = "not applied (mallopt refused: malloc is not glibc's)";
        std::fputs(
            "precprobe: tune_malloc not applied: mallopt refused the settings (this process's "
            "malloc is not glibc's); the allocator is left as it is\n",
            stderr);
        return;
      }
      // Said once, not counted as an error.
      std::fputs(
          "precprobe: glibc malloc set for this process: M_TRIM_THRESHOLD 1 GiB, "
          "M_MMAP_THRESHOLD 32 MiB, so that memory freed during a step is not returned to the "
          "kernel and faulted in again (\"tune_malloc\": false leaves malloc as it is)\n",
          stderr);
    });
  } catch (...) {
    return "failed";
  }
  return outcome;
#else
  return "not glibc";
#endif
}

}  // namespace detail
}  // namespace precprobe
