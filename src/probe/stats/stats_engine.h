// StatsEngine: computes the statistics of the tensors an op observer captures, off the
// training thread, and hands finished op records back in execution order.
//
// The observer captures a tensor by its TensorKey and, for the worker, a borrow of its
// memory (borrowed_memory.h): never a reference, which would change autograd's decisions. A key
// already seen this step shares the earlier Slot (a cache hit); a new one becomes a Slot that is
// either summarised at once (small tensors, or async off) or queued for the worker thread. Pending
// ops wait in a FIFO until they have ended and every Slot they reference is done; the emitter then
// passes them on, in order.
//
// In-place safety: before an op that writes to a tensor runs, before_write() finishes
// (claims and computes inline, or waits for) every queued job on that tensor's storage,
// so no statistic is ever computed from data an op has already overwritten. After
// computing, the version counter is checked again; a change is counted as `stale`.
// before_write() also retires every cached slot on that storage: the version counter in
// a key does not see writes made through another tensor on the same storage with its own
// counter (`.data()` and `variable_data()` give a fresh counter at version 0, so
// clip_grad_norm_'s `p.grad().data().mul_()` leaves `p.grad()`'s key, and the key of the
// next `p.grad().data()`, as they were).
// Back-pressure: while the bytes held by queued jobs exceed max_pending_bytes, the
// capturing thread computes queued jobs itself.
//
// Threads: capture(), before_write(), push_op(), end_op() may be called from any observed
// thread; drain() and clear_cache() from the controlling thread. The emit function runs on
// the worker thread (async) or on the thread that ended the op / called drain().
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "precprobe/records.h"
#include "stats/block_pool.h"
#include "stats/memory_fingerprint.h"
#include "stats/stats.h"

namespace precprobe {
namespace detail {

/// One distinct tensor version of this step (stats), or one tensor file to write (save).
struct Slot {
  enum State : uint8_t { kQueued, kRunning, kDone };
  std::atomic<uint8_t> state{kQueued};
  TensorStats stats;
  /// Read once, then released: the tensor itself when read at once, else a borrow of its
  /// memory (borrowed_memory.h) that holds no reference to the tensor or its storage.
  at::Tensor tensor;
  TensorKey key;  ///< at capture time
  /// Keeps the StorageImpl's address from being reused while the key is cached (a freed
  /// storage's address can come back for a new tensor with an equal key).
  std::optional<c10::weak_intrusive_ptr<c10::StorageImpl>> storage_alive;
  /// The version counter the tensor had at capture. A view made below autograd gets its
  /// base's counter attached later, so the tensor's own counter can change identity.
  std::optional<c10::VariableVersion> counter;
  int64_t bytes = 0;           ///< held bytes while queued
  std::string save_path;       ///< non-empty: write the tensor here instead of stats
  bool stale = false;          ///< the version changed before the stats were computed
  bool requires_grad = false;  ///< the captured tensor's (a borrow has no autograd metadata)
  /// Uninitialized memory (an aten::empty* output): only dtype/shape/numel are kept; counts
  /// are 0 and statistics NaN, so garbage never reads as NaN/Inf, here or where the same
  /// tensor is a later op's input (a cache hit).
  bool unread = false;
  /// An unread CPU tensor's memory as it was at capture (unread_fingerprint()): a later op
  /// outside a kernel is served this slot only while the memory still holds the same bytes,
  /// i.e. nothing wrote it through a pointer meanwhile (at::tensor({...})'s memcpy, a data
  /// loader filling at::empty's memory). 0 bytes: not taken (the slot serves as before).
  const void* unread_data = nullptr;
  int64_t unread_bytes = 0;
  uint64_t unread_fp = 0;
  /// Also count the range statistics (TensorStats::range) of a floating tensor.
  bool range = false;
  /// Captured below the ADInplaceOrView dispatch key, i.e. inside another op's kernel:
  /// that kernel may still write the tensor without bumping its version counter, so the
  /// slot must not stand for the tensor once the kernel returns (see CaptureOptions).
  bool untracked = false;
  /// Its storage was written since capture (before_write()): the cache entry no longer
  /// stands for the tensor. Guarded by StatsEngine::mu_.
  bool overwritten = false;
  uint64_t serial = 0;      ///< creation order (StatsEngine::next_serial())
  const char* origin = "";  ///< the op that captured it (static storage), for messages
  /// Device tensors: the stream current when captured; the statistics are computed on it,
  /// after the kernels that produced the tensor.
  c10::optional<c10::Stream> stream;
  /// A view covering exactly the memory of a tensor summarised this step (`t()`, `view`,
  /// `reshape`, `detach`, `permute` of a dense tensor): counts, min, max, mean and norm
  /// do not depend on element order, so they are `base`'s; this slot holds only its own
  /// shape in `stats.shape` and is done at once (see stats_of()).
  std::shared_ptr<Slot> base;
  /// May stand for its key in later steps (the cache across steps): dense CPU memory of the
  /// CPU allocator, at least StatsEngine's carry threshold. Set at capture.
  bool carryable = false;
  /// memory_fingerprint() of the memory the statistics were computed from, taken by
  /// compute() when `carryable` (written before `state` becomes kDone).
  bool fingerprinted = false;
  uint64_t fingerprint = 0;
  const void* data = nullptr;  ///< the first byte summarised (carryable slots)
  /// The cache epoch (one per step, StatsEngine::clear_cache()) in which the slot stands for
  /// its key as it is; in a later epoch it does so only after its fingerprint matched the
  /// memory again. Guarded by StatsEngine::mu_.
  uint64_t epoch = 0;
};

/// A fingerprint of `n` bytes at `p` (memory_fingerprint() from 64 bytes on, every byte
/// below): what an unread slot's memory held at capture.
uint64_t unread_fingerprint(const void* p, size_t n) noexcept;
/// The first byte of `t`'s elements, read without materialising a copy-on-write storage
/// (2.x's data_ptr() would). Inline: capture() calls it for every tensor it may carry.
inline const void* first_byte(const at::Tensor& t) {
  const c10::StorageImpl* s = t.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  const char* base = static_cast<const char*>(s->data_ptr().get());
  return base == nullptr ? nullptr : base + t.storage_offset() * t.element_size();
}
/// Slot `s` of unread tensor `t`: the bytes a dense CPU tensor covers, fingerprinted
/// (unread_data, unread_bytes, unread_fp); nothing for another tensor.
void take_unread_fingerprint(Slot& s, const at::Tensor& t);
/// A fresh allocation's memory (an aten::empty* output outside any kernel) marked with
/// write_unread_marker(), before its slot is fingerprinted: a program that fills it through
/// data_ptr() with the bytes it held (zeros into fresh pages, a scalar into a block that
/// held the same scalar) changes its fingerprint all the same. Dense CPU memory only;
/// nothing under LibTorch's deterministic fill, which marks it with NaN itself.
void mark_unread_memory(const at::Tensor& t);
/// Whether `t` is the memory unread slot `hit` was captured from and still holds those
/// bytes (a slot without a fingerprint: true).
bool unread_unchanged(const Slot& hit, const at::Tensor& t);

/// A new Slot, from the pool (block_pool.h): slots are made on the training thread and
/// freed where their op is emitted.
inline std::shared_ptr<Slot> make_slot() {
  return std::allocate_shared<Slot>(PoolAllocator<Slot>());
}

/// The statistics a finished slot stands for (its base's, with its own shape), copied once
/// into `out` (assigned when it holds statistics already: their storage is reused).
inline TensorStats& stats_of(const Slot& s, std::optional<TensorStats>& out) {
  const TensorStats& from = s.base ? s.base->stats : s.stats;
  TensorStats& t = out ? (*out = from) : out.emplace(from);
  if (s.base) t.shape = s.stats.shape;
  return t;
}

/// How StatsEngine::capture() treats a tensor.
struct CaptureOptions {
  /// Uninitialized memory: keep dtype/shape/numel only (see Slot::unread).
  bool unread = false;
  /// Unread when this step has not seen the tensor yet, or saw it only as uninitialized
  /// memory: an op running inside another op's kernel may be handed a buffer that kernel
  /// allocated and has not written yet.
  bool unread_if_new = false;
  /// Never reuse a cached slot: the op now ending wrote the tensor, possibly without a
  /// version bump (inside a kernel).
  bool fresh = false;
  /// The capture happens inside another op's kernel (Slot::untracked).
  bool untracked = false;
  /// A new slot also gets range statistics (Slot::range). A cached one is reused as it is.
  bool range = false;
  /// An untracked slot created at or after this serial is not reused: the op now ending
  /// ran (or contained) the kernel that may have written the tensor since.
  uint64_t reuse_before = UINT64_MAX;
};

/// The op being captured on this thread (a string that lives for the process), for
/// diagnostics in Slot::origin.
void set_capture_origin(const char* op) noexcept;

/// One input or output of a pending op.
struct ArgRef {
  std::shared_ptr<Slot> slot;  ///< tensors
  c10::IValue value;           ///< non-tensor arguments, turned into JSON when emitted
  const std::string* param = nullptr;
  int64_t list_index = -1;
  bool requires_grad = false;
  bool is_tensor = false;
};

/// The arguments of one side of a call: most ops have at most four, held inline (no
/// allocation per record).
using ArgRefs = c10::SmallVector<ArgRef, 4>;

/// An op call waiting for its statistics. Header fields are final once pushed;
/// outputs are filled by end_op() on the thread that ran the op.
struct PendingOp {
  OpRecord header;  ///< everything but inputs/outputs
  ArgRefs in, out;
  std::atomic<bool> ended{false};
  bool flush_marker = false;  ///< not an op: flush the writer when reached
};

/// A new PendingOp, from the pool (as make_slot()).
inline std::shared_ptr<PendingOp> make_pending_op() {
  return std::allocate_shared<PendingOp>(PoolAllocator<PendingOp>());
}

struct EngineConfig {
  bool async = true;
  bool with_hash = false;
  /// Tensors with fewer elements are summarised inline (cheaper than a handover).
  int64_t inline_numel = 4096;
  /// The cache across steps ("reuse_across_steps"): statistics of a tensor of at least
  /// `carry_bytes` whose key (storage, version, geometry) and memory fingerprint are
  /// unchanged since an earlier step are reused. Smaller tensors are read again (as cheap
  /// as the check).
  bool carry = true;
  int64_t carry_bytes = int64_t{16} << 10;
  /// Bytes held by queued jobs before the capturing thread helps.
  int64_t max_pending_bytes = int64_t{256} << 20;
  /// Write a tensor file; returns "" or an error message. Runs where the slot is computed.
  std::function<std::string(const at::Tensor&, const std::string&)> save_tensor;
  /// Receives each finished op, in push order. Never throws (errors are reported).
  std::function<void(PendingOp&)> emit;
};

struct EngineCounters {
  uint64_t summarised = 0, cached = 0, inline_computed = 0, worker_computed = 0;
  uint64_t claimed_for_write = 0, waited_for_write = 0, backpressure = 0, stale = 0;
  uint64_t saved = 0, save_errors = 0;
  uint64_t bytes = 0;  ///< bytes summarised
  /// Cache hits served by a slot of an earlier step (its fingerprint matched), and carried
  /// slots whose fingerprint did not match (memory written without an op).
  uint64_t carried = 0, carry_mismatches = 0;
};

class StatsEngine {
 public:
  explicit StatsEngine(EngineConfig config);
  ~StatsEngine();  ///< drains and joins
  StatsEngine(const StatsEngine&) = delete;
  StatsEngine& operator=(const StatsEngine&) = delete;

  /// The slot holding `t`'s statistics this step (shared on a cache hit).
  std::shared_ptr<Slot> capture(const at::Tensor& t, const CaptureOptions& how = {});
  /// The serial the next new slot gets.
  uint64_t next_serial() const;
  /// Whether this step captured `t`, as it is now, as uninitialized memory (Slot::unread)
  /// and nothing wrote its storage since.
  bool known_unread(const at::Tensor& t);
  /// Queues writing `t` to `path` (task "tensor"); kept in order with in-place writes.
  void capture_for_save(const at::Tensor& t, std::string path);
  /// Called before an op writes to `t` (every such op, busy or not): no queued job may
  /// still read its storage after, and no cached slot on it is reused.
  void before_write(const at::Tensor& t);
  /// Appends an op (or flush marker) to the in-order FIFO. Holds `order_mutex()` already
  /// when the caller needs seq numbers to match the FIFO order.
  void push_op(std::shared_ptr<PendingOp> op);
  /// Marks `op` ended (outputs captured); emits inline in sync mode.
  void end_op(PendingOp& op);
  /// Ends the cache's step: forgets this step's keys (slots live on in pending ops) but
  /// those of carryable slots that are done and unchanged, which a later step may reuse
  /// after checking their fingerprint.
  void clear_cache();
  /// Finishes every job and emits every ended op. Ops that never ended stay queued.
  void drain();
  /// Whether any job is queued or running (cheap; any thread).
  bool busy() const noexcept { return pending_jobs_.load(std::memory_order_acquire) != 0; }

  /// Serialises seq assignment with push_op() for callers.
  std::mutex& order_mutex() noexcept { return order_mu_; }
  EngineCounters counters() const;

 private:
  // This step's slots by storage (cache_): every key cached on a storage (a tensor's own
  // key and, for a dense tensor, its memory key too, dense_key()). One hash lookup finds
  // both keys of a tensor; a write to the storage finds every slot it retires. Entries
  // [0, retired) have been retired by a write since they were cached.
  struct StorageEntries {
    c10::SmallVector<std::pair<TensorKey, std::shared_ptr<Slot>>, 2> keys;
    size_t retired = 0;
  };
  /// The entries of `storage`, created empty (and the storage's filter bit set) if none.
  StorageEntries& entries_locked(const void* storage);
  /// The slot cached under `key` in `e`, or nullptr.
  static std::shared_ptr<Slot>* find_locked(StorageEntries& e, const TensorKey& key);
  /// Caches `s` under `key` in `e` (replacing an entry, which is then no longer retired).
  static void remember_locked(StorageEntries& e, const TensorKey& key,
                              const std::shared_ptr<Slot>& s);
  /// Whether `hit` (usable otherwise) stands for `t` now: a slot of this epoch does; a
  /// carried one when `t` is the memory it fingerprinted and still holds the same bytes
  /// there (it then joins this epoch).
  bool current_locked(Slot& hit, const at::Tensor& t, const CaptureOptions& how);
  void enqueue_locked(std::shared_ptr<Slot> s, std::unique_lock<std::mutex>& lk);
  void retire_storage(const void* storage);
  static uint64_t storage_bit(const void* storage) noexcept;
  void compute(Slot& s);
  void run_claimed(const std::shared_ptr<Slot>& s, std::unique_lock<std::mutex>& lk);
  bool help_one_locked(std::unique_lock<std::mutex>& lk);
  void wait_done_locked(Slot& s, std::unique_lock<std::mutex>& lk);
  void emit_ready();
  bool op_ready(const PendingOp& op) const;
  void worker_main();

  EngineConfig cfg_;
  mutable std::mutex mu_;            // cache_, queue_, running_, held_bytes_, ops_, worker flags
  std::mutex order_mu_;              // seq order == FIFO order
  std::mutex emit_mu_;               // one emitter at a time
  std::condition_variable work_cv_;  // worker: jobs or ops
  std::condition_variable done_cv_;  // a slot finished
  // Hash nodes from the pool: a step makes and frees one per new storage.
  using CacheNode = std::pair<const void* const, StorageEntries>;
  std::unordered_map<const void*, StorageEntries, std::hash<const void*>,
                     std::equal_to<const void*>, PoolAllocator<CacheNode>>
      cache_;
  // A one-word filter of the storages cache_ holds, read without the lock: a write to a
  // storage never cached costs a load and a compare.
  std::atomic<uint64_t> cached_storages_{0};
  std::deque<std::shared_ptr<Slot>> queue_;
  std::vector<const Slot*> running_;  // claimed jobs being computed outside the lock
  std::deque<std::shared_ptr<PendingOp>> ops_;
  int64_t held_bytes_ = 0;
  std::atomic<uint64_t> serial_{0};  // written under mu_, read without it
  uint64_t epoch_ = 0;               // steps of the cache (clear_cache())
  std::atomic<int64_t> pending_jobs_{0};
  bool worker_sleeping_ = false;
  bool worker_idle_ = false;
  bool stop_ = false;
  enum Counter : int {
    kSummarised,
    kCached,
    kInline,
    kWorker,
    kClaimed,
    kWaited,
    kBackpressure,
    kStale,
    kSaved,
    kSaveErrors,
    kBytes,
    kCarried,
    kCarryMismatch,
    kNumCounters
  };
  // Counters written with mu_ held are bumped without a locked instruction (each writer
  // holds mu_; readers take a relaxed load); compute()'s, written without it, are atomic.
  void bump_locked(Counter c, uint64_t by = 1) noexcept {
    n_[c].store(n_[c].load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  void bump(Counter c) noexcept { n_[c].fetch_add(1, std::memory_order_relaxed); }
  std::array<std::atomic<uint64_t>, kNumCounters> n_{};
  std::thread worker_;
};

}  // namespace detail
}  // namespace precprobe
