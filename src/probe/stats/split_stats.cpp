// SplitSummary: see split_stats.h.
#include "stats/split_stats.h"

#include <algorithm>
#include <thread>

#include "stats/stats_internal.h"

namespace precprobe {
namespace detail {
namespace {

void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Blocks [first, last) of `data` (elements of T), each block's partial into out[i] and,
// with `range`, its exponent counts added there.
template <typename T>
void run_blocks(const void* data, int64_t numel, int64_t first, int64_t last, BlockStats* out,
                int64_t* range) {
  const T* p = static_cast<const T*>(data);
  for (int64_t i = first; i < last; ++i) {
    const int64_t at = i * kStatsBlock;
    const int64_t n = std::min(kStatsBlock, numel - at);
    out[i] = BlockStats{};
    if (range != nullptr) {
      block_stats(p + at, n, out[i], range);
    } else {
      block_stats(p + at, n, out[i]);
    }
  }
}

}  // namespace

bool SplitSummary::eligible(const at::Tensor& t, bool with_hash) noexcept {
  if (with_hash || !t.defined() || t.layout() != c10::kStrided || !t.device().is_cpu() ||
      t.is_quantized() || t.is_nested() || !t.has_storage() || t.numel() < kMinNumel)
    return false;
  switch (t.scalar_type()) {
    case at::kFloat:
    case at::kDouble:
    case at::kBFloat16:
    case at::kHalf:
      break;
    default:
      return false;
  }
  return t.is_contiguous() && !t.is_conj() && !t.is_neg() && !t._is_zerotensor();
}

SplitSummary::SplitSummary(at::Tensor t, bool with_range)
    : t_(std::move(t)), type_(t_.scalar_type()), numel_(t_.numel()), with_range_(with_range) {
  data_ = t_.data_ptr();
  num_blocks_ = (numel_ + kStatsBlock - 1) / kStatsBlock;
  num_chunks_ = (num_blocks_ + kChunkBlocks - 1) / kChunkBlocks;
  blocks_.resize(static_cast<size_t>(num_blocks_));
  if (with_range_) range_.assign(type_ == at::kDouble ? kDoubleRangeBins : kFloatRangeBins, 0);
}

bool SplitSummary::work(bool owner, const std::atomic<int>* interrupt) noexcept {
  const int bins = static_cast<int>(range_.size());
  // This chunk's exponent counts (zeroed only if used).
  int64_t mine[kDoubleRangeBins];
  int64_t* range = with_range_ ? mine : nullptr;
  for (;;) {
    const int64_t c = next_.fetch_add(1, std::memory_order_relaxed);
    if (c >= num_chunks_) return false;
    if (!owner) shared_.store(true, std::memory_order_relaxed);  // seen with done_ below
    if (with_range_) std::fill_n(mine, bins, int64_t{0});
    const int64_t first = c * kChunkBlocks;
    const int64_t last = std::min(num_blocks_, first + kChunkBlocks);
    switch (type_) {
      case at::kFloat:
        run_blocks<float>(data_, numel_, first, last, blocks_.data(), range);
        break;
      case at::kDouble:
        run_blocks<double>(data_, numel_, first, last, blocks_.data(), range);
        break;
      case at::kBFloat16:
        run_blocks<c10::BFloat16>(data_, numel_, first, last, blocks_.data(), range);
        break;
      default:
        run_blocks<c10::Half>(data_, numel_, first, last, blocks_.data(), range);
        break;
    }
    if (with_range_) {  // the chunk's counts are in range_ before it counts as done
      std::lock_guard<std::mutex> lk(range_mu_);
      for (int b = 0; b < bins; ++b) range_[static_cast<size_t>(b)] += mine[b];
    }
    done_.fetch_add(1, std::memory_order_release);
    if (interrupt != nullptr && interrupt->load(std::memory_order_relaxed) > 0)
      return !all_claimed();
  }
}

void SplitSummary::wait_done() const noexcept {
  // A chunk takes about ten microseconds; a helper the kernel preempted mid-chunk takes
  // longer, and then the core is better given up than spun on.
  for (int spins = 0; done_.load(std::memory_order_acquire) < num_chunks_; ++spins) {
    if (spins < 4096) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

void SplitSummary::finish(TensorStats& out) const {
  summarize_from_blocks(t_, blocks_.data(), num_blocks_, with_range_ ? range_.data() : nullptr,
                        out);
}

}  // namespace detail
}  // namespace precprobe
