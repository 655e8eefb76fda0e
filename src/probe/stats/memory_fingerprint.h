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

}  // namespace detail
}  // namespace precprobe
