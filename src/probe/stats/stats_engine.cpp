// StatsEngine: see stats_engine.h.
#include "stats/stats_engine.h"

#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#ifdef __linux__
#include <pthread.h>
#endif

#include "precprobe/error.h"
#include "stats/borrowed_memory.h"
#include "support/own_code.h"
#if PRECPROBE_WITH_CUDA
#include "cuda/stats_cuda.h"  // CUDA tensors: fused kernel, results read by the worker
#endif

namespace precprobe {
namespace detail {
namespace {

// The worker is woken early only when this much work waits; otherwise it looks again
// within kShortSleep. Waking a sleeping thread costs the training thread a syscall.
constexpr size_t kWakeJobs = 64;
constexpr int64_t kWakeBytes = int64_t{8} << 20;
constexpr auto kShortSleep = std::chrono::microseconds(500);
constexpr auto kIdleSleep = std::chrono::milliseconds(20);
// Before sleeping, the worker polls for new jobs this long: ops come in bursts.
constexpr auto kSpin = std::chrono::microseconds(50);

thread_local const char* tl_origin = "";

// The engine's critical sections are a few hash-table or queue operations. A thread that
// finds mu_ taken tries again for a moment before sleeping on it: a sleeper costs the holder
// a futex wake at unlock (a syscall and a wake-up of the other core), which perf showed on
// the training thread's side as much as the probe's own capture work (L1 async, h=256).
constexpr int kLockTries = 64;

void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void lock_soon(std::unique_lock<std::mutex>& lk) {
  for (int i = 0; i < kLockTries; ++i) {
    if (lk.try_lock()) return;
    cpu_relax();
  }
  lk.lock();
}

std::unique_lock<std::mutex> lock_soon(std::mutex& m) {
  std::unique_lock<std::mutex> lk(m, std::defer_lock);
  lock_soon(lk);
  return lk;
}

}  // namespace

void set_capture_origin(const char* op) noexcept { tl_origin = op; }

StatsEngine::StatsEngine(EngineConfig config) : cfg_(std::move(config)) {
  if (cfg_.async) worker_ = std::thread([this] { worker_main(); });
}

StatsEngine::~StatsEngine() {
  drain();
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

uint64_t StatsEngine::next_serial() const {
  // Written under mu_ by capture(); a relaxed read is enough: the caller compares it with
  // serials of slots made later on its own thread (or, on other threads, under mu_).
  return serial_.load(std::memory_order_relaxed);
}

namespace {

// The key of the memory a dense tensor covers, whatever its sizes and strides: the same
// for a tensor and its full views. Sizes and strides are replaced by the element count
// (a distinct tag keeps it apart from the keys of make_key()).
TensorKey dense_key(TensorKey key, int64_t numel) {
  key.geometry = (static_cast<uint64_t>(numel) * 0x9e3779b97f4a7c15ULL) ^ 0xd3a5e0f1c2b4a697ULL;
  return key;
}

// Whether the statistics of `t` equal those of any other tensor covering the same memory:
// dense (every element of the span once) and read as stored (no lazy conj/neg).
bool order_free(const at::Tensor& t) {
  return t.layout() == c10::kStrided && t.numel() > 0 && t.is_non_overlapping_and_dense() &&
         !t.is_conj() && !t.is_neg() && !t._is_zerotensor();
}

}  // namespace

StatsEngine::StorageEntries& StatsEngine::entries_locked(const void* storage) {
  auto [it, added] = cache_.try_emplace(storage);
  if (added) {
    const uint64_t bit = storage_bit(storage);
    if ((cached_storages_.load(std::memory_order_relaxed) & bit) == 0)
      cached_storages_.fetch_or(bit, std::memory_order_release);
  }
  return it->second;
}

std::shared_ptr<Slot>* StatsEngine::find_locked(StorageEntries& e, const TensorKey& key) {
  for (auto& [k, slot] : e.keys)
    if (k == key) return &slot;
  return nullptr;
}

void StatsEngine::remember_locked(StorageEntries& e, const TensorKey& key,
                                  const std::shared_ptr<Slot>& s) {
  for (size_t i = 0; i < e.keys.size(); ++i) {
    if (e.keys[i].first != key) continue;
    e.keys[i].second = s;
    // A retired entry that stands for a new slot must be retired again by the next write:
    // it moves to the end of the retired ones, out of their range.
    if (i < e.retired) std::swap(e.keys[i], e.keys[--e.retired]);
    return;
  }
  e.keys.emplace_back(key, s);
}

bool StatsEngine::known_unread(const at::Tensor& t) {
  const TensorKey key = make_key(t);
  if (!key.versioned || key.storage == nullptr) return false;
  std::lock_guard<std::mutex> lk(mu_);
  auto it = cache_.find(key.storage);
  if (it == cache_.end()) return false;
  const std::shared_ptr<Slot>* hit = find_locked(it->second, key);
  return hit != nullptr && (*hit)->unread && !(*hit)->overwritten && (*hit)->epoch == epoch_ &&
         unread_unchanged(**hit, t);
}

std::shared_ptr<Slot> StatsEngine::capture(const at::Tensor& t, const CaptureOptions& how) {
  TensorKey key = make_key(t);
  const bool cacheable = key.versioned && key.storage != nullptr;
  // An unread slot (memory nothing had written when it was captured) stands for the tensor
  // later only while its memory holds the bytes it held then: a program fills at::empty's
  // memory through data_ptr() (as at::tensor({...}) and data loaders do) with no op and no
  // version bump. Inside a kernel it stands as it is: the kernel may have written part of its
  // buffer, and what it has not written is still garbage.
  auto usable = [&how, &t](const Slot& hit) {
    return !hit.overwritten && !how.fresh && !(hit.untracked && hit.serial >= how.reuse_before) &&
           (!hit.unread || how.untracked || unread_unchanged(hit, t));
  };
  // A slot carried from an earlier step stands for `t` after a fingerprint check.
  auto current = [&](Slot& hit) { return hit.epoch == epoch_ || current_locked(hit, t, how); };
  const bool dense = cacheable && order_free(t);
  // The hash depends on element order: with it, only the exact key is shared.
  const bool by_memory = dense && !cfg_.with_hash;
  std::unique_lock<std::mutex> lk = lock_soon(mu_);
  // The cached slot of this key, when it no longer stands for the tensor: replaced below by
  // the statistics of the tensor as it is now (the entry keeps it alive until then).
  const Slot* cached = nullptr;
  StorageEntries* entries = nullptr;
  if (cacheable) {
    // Found, or made for the slot remembered below: one hash lookup for a new storage.
    entries = &entries_locked(key.storage);
    if (std::shared_ptr<Slot>* hit = find_locked(*entries, key)) {
      if (usable(**hit) && current(**hit)) {
        bump_locked(kCached);
        return *hit;
      }
      cached = hit->get();
    }
  }
  TensorKey memory_key;
  if (by_memory) {
    memory_key = dense_key(key, t.numel());
    std::shared_ptr<Slot>* whole = find_locked(*entries, memory_key);  // by_memory: cacheable
    if (whole != nullptr && usable(**whole) && cached == nullptr && current(**whole)) {
      auto v = make_slot();  // a full view of a tensor summarised this step
      v->base = *whole;
      v->key = key;
      v->origin = tl_origin;
      v->untracked = v->base->untracked;
      v->unread = v->base->unread;
      v->serial = v->base->serial;
      v->epoch = epoch_;
      v->stats.shape.assign(t.sizes().begin(), t.sizes().end());
      v->storage_alive = v->base->storage_alive;
      v->state.store(Slot::kDone, std::memory_order_relaxed);
      remember_locked(*entries, key, v);
      bump_locked(kCached);
      return v;
    }
  }
  auto s = make_slot();
  s->key = key;
  s->origin = tl_origin;
  // unread_if_new: also when this step knows the tensor only as uninitialized memory (an
  // aten::empty* output, retired since by the write of the kernel now running around us,
  // which may not have written it yet: a nested as_strided of sum's out= buffer).
  s->unread = how.unread || (how.unread_if_new &&
                             (cached == nullptr || cached->unread || cached->epoch != epoch_));
  if (s->unread) take_unread_fingerprint(*s, t);
  s->untracked = how.untracked;
  s->range = how.range;
  s->serial = serial_.fetch_add(1, std::memory_order_relaxed);
  s->epoch = epoch_;
  s->carryable = cfg_.carry && dense && !s->unread && !s->untracked && t.is_cpu() &&
                 static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size()) >=
                     cfg_.carry_bytes &&
                 cpu_allocator_memory(t);
  if (key.versioned) s->counter = t.unsafeGetTensorImpl()->version_counter();
  if (key.storage)
    s->storage_alive = t.unsafeGetTensorImpl()->unsafe_storage().getWeakStorageImpl();
  bump_locked(kSummarised);
  if (cacheable) {
    if (by_memory) remember_locked(*entries, memory_key, s);
    remember_locked(*entries, key, s);
  }
  bump_locked(kBytes, static_cast<uint64_t>(t.numel()) * t.element_size());
  s->requires_grad = t.requires_grad();
  // Untracked tensors are read now: the kernel around this op may write them next.
  bool now = s->unread || s->untracked || !cfg_.async || key.storage == nullptr ||
             t.numel() < cfg_.inline_numel;
  // The worker reads a borrow of the memory, never a reference to the tensor: a reference
  // would change autograd's decisions (borrowed_memory.h). Memory that cannot be borrowed
  // is read now.
  at::Tensor borrowed;
  if (!now && t.is_cpu()) {
    borrowed = borrow(t);
    now = !borrowed.defined();
  }
  if (now) {
    bump_locked(kInline);
    s->state.store(Slot::kRunning, std::memory_order_relaxed);
    lk.unlock();
    s->tensor = t;
#if PRECPROBE_WITH_CUDA
    if (cfg_.async && defer_device_stats(s, cfg_.with_hash || s->range)) return s;  // no sync here
#endif
    compute(*s);
    return s;
  }
  s->tensor = borrowed.defined() ? std::move(borrowed) : t;
  s->bytes = static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
  if (!t.is_cpu())
    s->stream = c10::impl::getDeviceGuardImpl(t.device().type())->getStream(t.device());
  enqueue_locked(s, lk);
  return s;
}

void StatsEngine::capture_for_save(const at::Tensor& t, std::string path) {
  auto s = make_slot();
  s->key = make_key(t);
  if (s->key.versioned) s->counter = t.unsafeGetTensorImpl()->version_counter();
  s->save_path = std::move(path);
  // As in capture(): the worker gets a borrow of CPU memory, or the file is written now.
  bool now = !cfg_.async || s->key.storage == nullptr;
  if (!now && t.is_cpu()) s->tensor = borrow(t);
  now = now || (t.is_cpu() && !s->tensor.defined());
  if (!s->tensor.defined()) s->tensor = t;
  s->bytes = static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
  std::unique_lock<std::mutex> lk(mu_);
  if (now) {
    s->state.store(Slot::kRunning, std::memory_order_relaxed);
    lk.unlock();
    compute(*s);
    return;
  }
  enqueue_locked(std::move(s), lk);
}

uint64_t StatsEngine::storage_bit(const void* storage) noexcept {
  const uint64_t h = (reinterpret_cast<uintptr_t>(storage) >> 4) * 0x9e3779b97f4a7c15ULL;
  return uint64_t{1} << (h >> 58);
}

void StatsEngine::retire_storage(const void* storage) {
  auto it = cache_.find(storage);
  if (it == cache_.end()) return;
  // Only the entries cached (or replaced) since the last write: a storage written many
  // times a step costs each write its new entries, not all of them again.
  StorageEntries& e = it->second;
  for (size_t i = e.retired; i < e.keys.size(); ++i) e.keys[i].second->overwritten = true;
  e.retired = e.keys.size();
}

void StatsEngine::enqueue_locked(std::shared_ptr<Slot> s, std::unique_lock<std::mutex>& lk) {
  held_bytes_ += s->bytes;
  pending_jobs_.fetch_add(1, std::memory_order_release);
  queue_.push_back(std::move(s));
  if (worker_sleeping_ &&
      (worker_idle_ || queue_.size() >= kWakeJobs || held_bytes_ >= kWakeBytes)) {
    worker_sleeping_ = false;
    work_cv_.notify_one();
  }
  while (held_bytes_ > cfg_.max_pending_bytes && help_one_locked(lk)) bump_locked(kBackpressure);
}

void StatsEngine::compute(Slot& s) {
  OwnCodeGuard own;  // our own ATen calls are not observed (the worker also disables them)
  GradOffGuard no_grad;
  at::Tensor t = std::move(s.tensor);
  try {
    c10::OptionalStreamGuard on_stream(s.stream);
    if (!s.save_path.empty()) {
      std::string err = cfg_.save_tensor ? cfg_.save_tensor(t, s.save_path) : "no tensor sink";
      if (err.empty()) {
        bump(kSaved);
      } else {
        bump(kSaveErrors);
        report_error("precprobe: cannot save tensor " + s.save_path + ": " + err);
      }
    } else if (s.unread && t.layout() == at::kStrided) {
      summarize(t.as_strided({0}, {1}), s.stats, false);  // dtype and device, no data read
      s.stats.shape.assign(t.sizes().begin(), t.sizes().end());
      s.stats.numel = t.numel();
      s.stats.requires_grad = t.requires_grad();
    } else {
      summarize(t, s.stats, cfg_.with_hash, s.range);
      s.stats.requires_grad = s.requires_grad;  // a borrow has no autograd metadata
      // Before the version check below: a write racing the read makes the slot stale.
      if (s.carryable) s.data = first_byte(t);
      if (s.data != nullptr) {
        s.fingerprint = memory_fingerprint(s.data, t.numel() * t.element_size());
        s.fingerprinted = true;
      }
    }
    if (s.counter && s.counter->current_version() != s.key.version) {
      s.stale = true;
      s.fingerprinted = false;
      bump(kStale);
      report_error(std::string("precprobe: a tensor captured by ") + s.origin +
                   " changed in place before its statistics were computed (version " +
                   std::to_string(s.key.version) + " -> " +
                   std::to_string(s.counter->current_version()) + ")");
    }
  } catch (const std::exception& e) {
    report_error(std::string("precprobe: statistics failed: ") + e.what());
  } catch (...) {
    report_error("precprobe: statistics failed");
  }
  t.reset();  // may free memory: outside any lock
  s.state.store(Slot::kDone, std::memory_order_release);
}

void StatsEngine::run_claimed(const std::shared_ptr<Slot>& s, std::unique_lock<std::mutex>& lk) {
  running_.push_back(s.get());
  lk.unlock();
#if PRECPROBE_WITH_CUDA
  // Launched: the worker completes it. The device kernel counts no exponents: range
  // statistics take the ATen path.
  if (!(cfg_.async && defer_device_stats(s, cfg_.with_hash || s->range)))
#endif
    compute(*s);
  lock_soon(lk);
  held_bytes_ -= s->bytes;
  running_.erase(std::find(running_.begin(), running_.end(), s.get()));
  pending_jobs_.fetch_sub(1, std::memory_order_release);
  done_cv_.notify_all();
}

bool StatsEngine::help_one_locked(std::unique_lock<std::mutex>& lk) {
  while (!queue_.empty()) {
    std::shared_ptr<Slot> s = std::move(queue_.front());
    queue_.pop_front();
    uint8_t expected = Slot::kQueued;
    if (s->state.compare_exchange_strong(expected, Slot::kRunning)) {
      run_claimed(s, lk);
      return true;
    }
  }
  return false;
}

void StatsEngine::before_write(const at::Tensor& t) {
  const void* storage = storage_of(t);
  if (storage == nullptr) return;
  const bool cached =
      (cached_storages_.load(std::memory_order_acquire) & storage_bit(storage)) != 0;
  if (!cached && pending_jobs_.load(std::memory_order_acquire) == 0) return;
  std::unique_lock<std::mutex> lk = lock_soon(mu_);
  // Slots cached on this storage stop standing for their keys: this write may go through
  // a tensor with another version counter (a `.data()` alias) and leave their keys as
  // they are. The slots stay in the cache, marked, so the step still knows the tensor.
  if (cached) retire_storage(storage);
  for (;;) {
    // Queued jobs on this storage: compute them here, now (the queue is short: the worker
    // keeps up, and a scan is cheaper than indexing every job by storage).
    std::shared_ptr<Slot> mine;
    for (auto& q : queue_) {
      uint8_t expected = Slot::kQueued;
      if (q->key.storage == storage && q->state.compare_exchange_strong(expected, Slot::kRunning)) {
        mine = q;
        break;
      }
    }
    if (mine) {
      bump_locked(kClaimed);
      run_claimed(mine, lk);
      continue;
    }
    // What is left is being computed by another thread right now.
    auto busy = std::find_if(running_.begin(), running_.end(),
                             [storage](const Slot* r) { return r->key.storage == storage; });
    if (busy == running_.end()) return;
    bump_locked(kWaited);
    done_cv_.wait(lk);
  }
}

void StatsEngine::push_op(std::shared_ptr<PendingOp> op) {
  std::unique_lock<std::mutex> lk = lock_soon(mu_);
  ops_.push_back(std::move(op));
}

void StatsEngine::end_op(PendingOp& op) {
  op.ended.store(true, std::memory_order_release);
  if (!cfg_.async) emit_ready();
}

void StatsEngine::clear_cache() {
  decltype(cache_) old;
  {
    std::lock_guard<std::mutex> lk(mu_);
    old.swap(cache_);
    // As many buckets as the step that ended needed: growing them from one, step after
    // step, rehashed the map some ten times a step (~200 instructions a record, callgrind).
    try {
      cache_.reserve(old.size());
    } catch (...) {  // fewer buckets: it grows as before
    }
    cached_storages_.store(0, std::memory_order_release);
    ++epoch_;
    if (!cfg_.carry) return;
    // Carried: slots not retired by a write whose storage is still alive. A freed
    // storage's key cannot come back (the weak reference keeps its address), but its entry
    // would only take room. A slot the worker has not computed yet is carried too; it
    // serves a later step only once done and fingerprinted (current_locked()).
    for (auto& [storage, e] : old) {
      StorageEntries* kept = nullptr;
      for (auto& [key, slot] : e.keys) {
        const Slot& c = *slot;
        if (!c.carryable || c.base || c.overwritten ||
            (c.state.load(std::memory_order_acquire) == Slot::kDone && !c.fingerprinted) ||
            !c.storage_alive || c.storage_alive->expired())
          continue;
        if (kept == nullptr) kept = &entries_locked(storage);
        kept->keys.emplace_back(key, slot);
      }
    }
  }
}  // slots freed here, outside the lock

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

bool StatsEngine::op_ready(const PendingOp& op) const {
  if (op.flush_marker) return true;
  if (!op.ended.load(std::memory_order_acquire)) return false;
  for (const auto* args : {&op.in, &op.out})
    for (const auto& a : *args)
      if (a.slot &&
          (a.slot->state.load(std::memory_order_acquire) != Slot::kDone ||
           (a.slot->base && a.slot->base->state.load(std::memory_order_acquire) != Slot::kDone)))
        return false;
  return true;
}

void StatsEngine::emit_ready() {
  std::lock_guard<std::mutex> emit_lock(emit_mu_);
  for (;;) {
    std::shared_ptr<PendingOp> op;
    {
      std::unique_lock<std::mutex> lk = lock_soon(mu_);
      if (ops_.empty() || !op_ready(*ops_.front())) return;
      op = std::move(ops_.front());
      ops_.pop_front();
    }
    try {
      cfg_.emit(*op);
    } catch (...) {
      report_error("precprobe: emitting a record failed");
    }
  }
}

void StatsEngine::drain() {
  {
    std::unique_lock<std::mutex> lk(mu_);
    while (help_one_locked(lk)) {
    }
    while (pending_jobs_.load(std::memory_order_acquire) != 0) done_cv_.wait(lk);
  }
#if PRECPROBE_WITH_CUDA
  wait_device_stats();  // slots deferred to the device: their events
#endif
  emit_ready();
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
  return c;
}

void StatsEngine::worker_main() {
#ifdef __linux__
  pthread_setname_np(pthread_self(), "precprobe-stats");  // top -H, perf, gdb
#endif
  at::RecordFunctionGuard no_callbacks(false);
  at::NoGradGuard no_grad;
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    bool worked = false;
    while (help_one_locked(lk)) {
      bump_locked(kWorker);
      worked = true;
      if (!ops_.empty()) {
        lk.unlock();
        emit_ready();
        lock_soon(lk);
      }
    }
    if (stop_) break;
    lk.unlock();
#if PRECPROBE_WITH_CUDA
    poll_device_stats();  // slots whose device results have arrived
#endif
    emit_ready();
    if (worked) {  // more is likely to come soon
      auto until = std::chrono::steady_clock::now() + kSpin;
      while (pending_jobs_.load(std::memory_order_acquire) == 0 &&
             std::chrono::steady_clock::now() < until) {
        cpu_relax();
      }
    }
    lock_soon(lk);
    if (!queue_.empty() || stop_) continue;
    worker_idle_ = ops_.empty();
    worker_sleeping_ = true;
    work_cv_.wait_for(lk, worker_idle_
                              ? std::chrono::duration_cast<std::chrono::microseconds>(kIdleSleep)
                              : kShortSleep);
    worker_sleeping_ = false;
  }
}

}  // namespace detail
}  // namespace precprobe
