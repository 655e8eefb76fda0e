// PoolAllocator: recycles the fixed-size blocks of the records the op path makes for every
// op (PendingOp, Slot, the statistics cache's hash nodes) between the threads that make
// them and the threads that free them.
//
// The training thread allocates a record and the statistics worker or the writer frees it.
// With glibc's malloc that pattern misses the per-thread cache on both sides: the block goes
// into the freeing thread's cache (or its arena, under the arena's lock) and the training
// thread takes the slow path for each new one (callgrind, `bench_debugger --records`: ~200
// instructions per such allocation against ~50 for a block the same thread freed). Here each
// thread keeps a list of free blocks per block size; a thread that frees more than it makes
// hands a batch to a shared list (one mutex per kBatch blocks), which the allocating thread
// takes as a whole.
//
// Blocks go back to the system only beyond kMaxSharedBatches on the shared list and when a
// thread exits with more than that. Under AddressSanitizer the pool is bypassed (plain
// operator new/delete), so that a use after free is still reported.
//
// Threads: any. allocate() and deallocate() never block except on the shared list's mutex.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <new>
#include <vector>

namespace precprobe {
namespace detail {

#if defined(__SANITIZE_ADDRESS__)
#define PRECPROBE_POOL_BYPASS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PRECPROBE_POOL_BYPASS 1
#endif
#endif
#ifndef PRECPROBE_POOL_BYPASS
#define PRECPROBE_POOL_BYPASS 0
#endif

/// Free blocks of `Size` bytes, aligned as operator new aligns.
template <std::size_t Size>
class BlockPool {
  static_assert(Size >= sizeof(void*), "a free block holds the next pointer");

 public:
  static constexpr int kBatch = 64;
  static constexpr std::size_t kMaxSharedBatches = 32;  // 2 Ki blocks (~1 MB of Slots)

  static void* take() {
    if (PRECPROBE_POOL_BYPASS) return ::operator new(Size);
    Local& l = local();
    if (l.exited) return ::operator new(Size);
    if (l.head == nullptr) refill(l);
    if (l.head == nullptr) return ::operator new(Size);
    Node* n = l.head;
    l.head = n->next;
    --l.count;
    return n;
  }

  static void give(void* p) noexcept {
    if (PRECPROBE_POOL_BYPASS) {
      ::operator delete(p);
      return;
    }
    Local& l = local();
    if (l.exited) {  // freed by a thread_local destroyed after the pool's
      ::operator delete(p);
      return;
    }
    Node* n = static_cast<Node*>(p);
    n->next = l.head;
    l.head = n;
    if (++l.count >= 2 * kBatch) spill(l);
  }

 private:
  struct Node {
    Node* next;
  };
  struct Local {
    Node* head = nullptr;
    int count = 0;
    bool exited = false;
    // The thread exits: its blocks go to the shared list, or back to the system.
    ~Local() {
      exited = true;
      while (head != nullptr && count >= kBatch) spill_one(*this);
      while (head != nullptr) {
        Node* n = head;
        head = n->next;
        ::operator delete(n);
      }
    }
  };
  struct Shared {
    std::mutex mu;
    std::vector<Node*> batches;   // chains of kBatch blocks
    std::atomic<size_t> size{0};  // batches.size(), read without the lock
  };

  static Local& local() noexcept {
    static thread_local Local l;
    return l;
  }
  static Shared& shared() {
    static Shared* s = new Shared();  // never destroyed: threads may exit after main
    return *s;
  }

  // Moves kBatch blocks of `l` to the shared list (or frees them when it is full).
  static void spill_one(Local& l) noexcept {
    Node* first = l.head;
    Node* last = first;
    for (int i = 1; i < kBatch; ++i) last = last->next;
    l.head = last->next;
    l.count -= kBatch;
    last->next = nullptr;
    Shared& s = shared();
    {
      std::lock_guard<std::mutex> lk(s.mu);
      if (s.batches.size() < kMaxSharedBatches) {
        try {
          s.batches.push_back(first);
          s.size.store(s.batches.size(), std::memory_order_relaxed);
          return;
        } catch (...) {
        }
      }
    }
    while (first != nullptr) {
      Node* n = first;
      first = n->next;
      ::operator delete(n);
    }
  }
  static void spill(Local& l) noexcept {
    while (l.count >= 2 * kBatch) spill_one(l);
  }
  static void refill(Local& l) {
    Shared& s = shared();
    // Nothing handed back (a thread that keeps what it makes): no lock for an empty list.
    if (s.size.load(std::memory_order_relaxed) == 0) return;
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.batches.empty()) return;
    l.head = s.batches.back();
    s.batches.pop_back();
    s.size.store(s.batches.size(), std::memory_order_relaxed);
    l.count = kBatch;
  }
};

/// A standard allocator whose single-object allocations come from BlockPool (std::
/// allocate_shared's control block with its object, a hash node); arrays from operator new.
template <typename T>
struct PoolAllocator {
  using value_type = T;
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "operator new's alignment");

  PoolAllocator() noexcept = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) noexcept {}  // NOLINT: rebinding converts implicitly

  T* allocate(std::size_t n) {
    if (n == 1) return static_cast<T*>(BlockPool<block_size()>::take());
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n == 1) {
      BlockPool<block_size()>::give(p);
    } else {
      ::operator delete(p);
    }
  }
  template <typename U>
  bool operator==(const PoolAllocator<U>&) const noexcept {
    return true;
  }
  template <typename U>
  bool operator!=(const PoolAllocator<U>&) const noexcept {
    return false;
  }

 private:
  // Sizes rounded up to 16 bytes share a pool.
  static constexpr std::size_t block_size() {
    return ((sizeof(T) < sizeof(void*) ? sizeof(void*) : sizeof(T)) + 15) / 16 * 16;
  }
};

}  // namespace detail
}  // namespace precprobe
