// StatsEngine's cache of this step's slots (stats_engine.h): keys remembered and indexed by
// storage, retired by a write, carried to a later step after a fingerprint check; and the
// engine's counters. Every function here runs with StatsEngine::mu_ held, or reads atomics.
#include "stats/stats_engine.h"

namespace precprobe {
namespace detail {

void StatsEngine::remember_locked(const TensorKey& key, const std::shared_ptr<Slot>& s) {
  auto [it, added] = cache_.try_emplace(key, s);
  if (!added) {
    const bool retired = it->second->overwritten;  // its key left the storage index then
    it->second = s;
    if (!retired) return;
  }
  index_locked(key);
}

uint64_t StatsEngine::storage_bit(const void* storage) noexcept {
  const uint64_t h = (reinterpret_cast<uintptr_t>(storage) >> 4) * 0x9e3779b97f4a7c15ULL;
  return uint64_t{1} << (h >> 58);
}

void StatsEngine::index_locked(const TensorKey& key) {
  cached_by_storage_[key.storage].push_back(key);
  const uint64_t bit = storage_bit(key.storage);
  if ((cached_storages_.load(std::memory_order_relaxed) & bit) == 0)
    cached_storages_.fetch_or(bit, std::memory_order_release);
}

void StatsEngine::retire_storage(const void* storage) {
  auto it = cached_by_storage_.find(storage);
  if (it == cached_by_storage_.end()) return;
  for (const TensorKey& k : it->second) {
    auto c = cache_.find(k);
    if (c != cache_.end()) c->second->overwritten = true;
  }
  cached_by_storage_.erase(it);
}

bool StatsEngine::current_locked(Slot& hit, const at::Tensor& t, const CaptureOptions& how) {
  // Inside a kernel, a buffer this step has not seen may be that kernel's fresh allocation:
  // it is read as unread memory, never served from an earlier step.
  if (how.unread_if_new || hit.state.load(std::memory_order_acquire) != Slot::kDone ||
      !hit.fingerprinted || (how.range && !hit.range))
    return false;
  if (hit.data == nullptr || first_byte(t) != hit.data) return false;
  const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
  if (memory_fingerprint(hit.data, n) != hit.fingerprint) {
    bump_locked(kCarryMismatch);
    return false;
  }
  hit.epoch = epoch_;
  bump_locked(kCarried);
  return true;
}

EngineCounters StatsEngine::counters() const {
  EngineCounters c;
  auto get = [this](Counter k) { return n_[k].load(std::memory_order_relaxed); };
  c.summarised = get(kSummarised);
  c.cached = get(kCached);
  c.inline_computed = get(kInline);
  c.worker_computed = get(kWorker);
  c.claimed_for_write = get(kClaimed);
  c.waited_for_write = get(kWaited);
  c.backpressure = get(kBackpressure);
  c.stale = get(kStale);
  c.saved = get(kSaved);
  c.save_errors = get(kSaveErrors);
  c.bytes = get(kBytes);
  c.carried = get(kCarried);
  c.carry_mismatches = get(kCarryMismatch);
  c.split = get(kSplit);
  c.split_shared = get(kSplitShared);
  return c;
}

}  // namespace detail
}  // namespace precprobe
