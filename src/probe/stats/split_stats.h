// SplitSummary: the statistics of one large tensor computed by every thread that can help,
// bit for bit what one thread's summarize() gives.
//
// summarize() reads a contiguous floating tensor as blocks of kStatsBlock elements and adds
// the blocks' partials (sums, min/max, counts) in block order. A SplitSummary hands out the
// blocks in chunks to whichever threads call work(), keeps each block's partial, and
// finish() adds them in block order: the same additions in the same order, so the result
// does not depend on how many threads took part or which chunk each took. Range
// statistics are exponent counts (integers), added per chunk in any order.
//
// The statistics engine uses it where the training thread must wait for a tensor's
// statistics: a queued tensor an in-place op is about to overwrite (StatsEngine::
// before_write) is computed by the training thread and the statistics worker together
// instead of by the training thread alone.
//
// Threads: work() from any number of threads at once; wait_done() and finish() from the
// thread that owns the summary, after its own work() returned.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "precprobe/records.h"
#include "stats/stats_kernels.h"

namespace precprobe {
namespace detail {

class SplitSummary {
 public:
  /// Blocks a thread claims at a time: 32 Ki elements (128 KiB of float), about ten
  /// microseconds, so the owner waits at most that long for a helper's last chunk.
  static constexpr int64_t kChunkBlocks = 8;
  /// Tensors with fewer elements are not split: the handover would cost more than it saves.
  static constexpr int64_t kMinNumel = int64_t{1} << 18;

  /// Whether summarize(t, out, with_hash, with_range) of `t` can be computed in parts:
  /// a contiguous Float, Double, BFloat16 or Half CPU tensor of at least kMinNumel
  /// elements, without conj/neg bits, not a ZeroTensor, and no hash (the hash is one
  /// sequential stream).
  static bool eligible(const at::Tensor& t, bool with_hash) noexcept;

  /// `t` must be eligible and stay readable (unwritten) until finish().
  SplitSummary(at::Tensor t, bool with_range);
  SplitSummary(const SplitSummary&) = delete;
  SplitSummary& operator=(const SplitSummary&) = delete;

  /// Computes chunks until none is left to claim; with `interrupt`, returns early after a
  /// chunk once *interrupt is above 0. Returns whether chunks are left to claim. `owner`:
  /// the thread that made the summary (the others' chunks make it shared()). Any thread;
  /// never throws.
  bool work(bool owner, const std::atomic<int>* interrupt = nullptr) noexcept;
  /// Whether every chunk has been claimed (a helper has nothing to do).
  bool all_claimed() const noexcept { return next_.load(std::memory_order_relaxed) >= num_chunks_; }
  /// Waits until every claimed chunk is computed (a chunk is short: spins, then yields).
  void wait_done() const noexcept;
  /// summarize(t, out, false, with_range)'s result. After wait_done().
  void finish(TensorStats& out) const;
  /// Drops the tensor (after finish(); outside any lock: it may free memory). work() never
  /// reads it, so a helper arriving late stays safe.
  void release() noexcept { t_.reset(); }
  /// Whether a thread other than the owner computed a chunk (after wait_done()).
  bool shared() const noexcept { return shared_.load(std::memory_order_relaxed); }

 private:
  at::Tensor t_;
  c10::ScalarType type_;
  const void* data_ = nullptr;
  int64_t numel_ = 0;
  int64_t num_blocks_ = 0;
  int64_t num_chunks_ = 0;
  bool with_range_ = false;
  std::vector<BlockStats> blocks_;
  std::mutex range_mu_;           // range_, added to once per chunk
  std::vector<int64_t> range_;    // exponent counts, when with_range_
  std::atomic<int64_t> next_{0};  // the next chunk to claim
  std::atomic<int64_t> done_{0};  // chunks computed
  std::atomic<bool> shared_{false};
};

}  // namespace detail
}  // namespace precprobe
