// memory_fingerprint(): the check that lets the statistics engine serve a tensor's
// statistics in a later step (StatsEngine, "reuse_across_steps"): the tensor's memory must
// still fingerprint as it did when its statistics were computed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace precprobe {
namespace detail {

/// A 64-bit fingerprint of the `n` bytes at `p` (n >= 64): the first and last 64 bytes and
/// a fixed pseudo-random sample of the 64-byte lines in between (one line in 16, 16 to 256
/// lines). Two calls sample the same positions for the same n. Changes to memory outside
/// the sampled lines are not seen: the cache across steps relies on it only to catch
/// writes made without an op (memcpy into a reused buffer), which change every line.
uint64_t memory_fingerprint(const void* p, size_t n) noexcept;

/// Writes a fixed marker into the `n` bytes at `p` that memory_fingerprint() (n >= 64) or
/// unread_fingerprint() (every byte below 64) reads: memory no op wrote yet (a fresh
/// at::empty), so that a program filling it through a pointer with the bytes it held
/// already (zeros into fresh pages) still changes its fingerprint. Every float in the marker
/// is finite, positive and below 2.
void write_unread_marker(void* p, size_t n) noexcept;

}  // namespace detail
}  // namespace precprobe
