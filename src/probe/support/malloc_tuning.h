// glibc malloc settings while a debugger is started ("tune_malloc", docs/config.md).
//
// The probe's small per-record allocations (records, slots, names), made on the training
// thread and freed later by the worker and writer threads, sit between the program's tensor
// allocations in glibc's main heap. When they are freed, the free space above the
// program's tensors joins the top of the heap, glibc returns it to the kernel (systrim, once
// the top exceeds M_TRIM_THRESHOLD), and the next tensors of the step fault it in again:
// measured on the reference model at h=256, 600 to 1 600 minor page faults per step against
// 0 to 32 without the debugger, and on bench_dataset_loop 80 000 against 20 000
// (BENCHMARKS.md). A fixed trim threshold of 1 GiB
// and mmap threshold of 32 MiB (glibc's own ceiling for its dynamic threshold) keep the freed
// memory in the heap.
//
// Threads: the controlling thread (start()).
#pragma once

#include <string>

namespace precprobe {
namespace detail {

/// The settings (bytes): M_MMAP_THRESHOLD and M_TRIM_THRESHOLD.
inline constexpr int kTunedMmapThreshold = 32 << 20;
inline constexpr int kTunedTrimThreshold = 1 << 30;

/// Applies the settings once per process when `enabled`, unless the program chose its own
/// (GLIBC_TUNABLES with glibc.malloc.*, or MALLOC_*_ environment variables) or the C library
/// is not glibc. Returns what was done, for the start message and meta.json: "set", "kept
/// (the program's own malloc settings)", "off", "not glibc", "not applied (mallopt refused:
/// malloc is not glibc's)" (a sanitizer's malloc), "failed". Never throws.
std::string tune_malloc(bool enabled) noexcept;

}  // namespace detail
}  // namespace precprobe
