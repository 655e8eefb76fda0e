// Borrowed tensor memory: see borrowed_memory.h.
#include "stats/borrowed_memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/Storage.h>
#include <c10/core/TensorImpl.h>

#include <mutex>
#include <unordered_map>

namespace precprobe {
namespace detail {
namespace {

struct Entry {
  c10::DeleterFnPtr original = nullptr;  ///< the allocator's deleter, called once at the end
  uint32_t readers = 0;                  ///< outstanding borrows
  bool freed = false;                    ///< its storage let go of it while borrowed
};

struct Table {
  std::mutex mu;
  std::unordered_map<void*, Entry> entries;  // keyed by the DataPtr's context
  size_t deferred = 0;
};

Table& table() {
  static auto* t = new Table();  // leaked: storages are freed during static destruction too
  return *t;
}

// The deleter swapped into a borrowed storage's DataPtr: frees now, or when the last borrow
// ends.
void deferring_delete(void* ctx) {
  Table& t = table();
  c10::DeleterFnPtr original = nullptr;
  {
    std::lock_guard<std::mutex> lk(t.mu);
    auto it = t.entries.find(ctx);
    if (it == t.entries.end()) return;  // unreachable: swapped deleters have an entry
    if (it->second.readers > 0) {
      it->second.freed = true;
      ++t.deferred;
      return;
    }
    original = it->second.original;
    t.entries.erase(it);
  }
  original(ctx);
}

// The deleter of a borrowed tensor's own DataPtr: ends one borrow.
void end_borrow(void* ctx) {
  Table& t = table();
  c10::DeleterFnPtr original = nullptr;
  {
    std::lock_guard<std::mutex> lk(t.mu);
    auto it = t.entries.find(ctx);
    if (it == t.entries.end()) return;
    if (--it->second.readers > 0 || !it->second.freed) return;
    original = it->second.original;
    --t.deferred;
    t.entries.erase(it);
  }
  original(ctx);
}

bool cpu_allocator_deleter(c10::DeleterFnPtr d) {
  return d != nullptr && (d == c10::GetCPUAllocator()->raw_deleter() ||
                          d == c10::GetDefaultCPUAllocator()->raw_deleter());
}

// The storage's DataPtr, writable (1.13: data_ptr(); 2.x: mutable_data_ptr()).
template <typename S>
auto writable_data_ptr(S& s, int) -> decltype(s.mutable_data_ptr()) {
  return s.mutable_data_ptr();
}
template <typename S>
c10::DataPtr& writable_data_ptr(S& s, long) {
  return s.data_ptr();
}

}  // namespace

at::Tensor borrow(const at::Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || t.layout() != c10::kStrided || t.is_quantized() ||
      t.is_nested() || !t.has_storage() || t.is_conj() || t.is_neg() || t._is_zerotensor())
    return {};
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
  if (storage == nullptr) return {};
  // Read through the const accessor first: 2.x's mutable_data_ptr() materialises a
  // copy-on-write storage, and such a storage has no CPU allocator deleter anyway.
  const c10::DataPtr& seen = static_cast<const c10::StorageImpl*>(storage)->data_ptr();
  void* const ctx = seen.get_context();
  void* const data = seen.get();
  if (ctx == nullptr || data == nullptr) return {};
  const c10::DeleterFnPtr d = seen.get_deleter();
  if (d != &deferring_delete && !cpu_allocator_deleter(d)) return {};
  c10::DataPtr& dp = writable_data_ptr(*storage, 0);
  Table& tab = table();
  {
    std::lock_guard<std::mutex> lk(tab.mu);
    auto it = tab.entries.find(ctx);
    if (it == tab.entries.end()) {
      if (d == &deferring_delete || !dp.compare_exchange_deleter(d, &deferring_delete)) return {};
      it = tab.entries.emplace(ctx, Entry{d}).first;
    } else if (dp.get_deleter() != &deferring_delete || it->second.freed) {
      return {};  // another DataPtr with this context (not ours): leave it alone
    }
    ++it->second.readers;
  }
  c10::Storage own(c10::Storage::use_byte_size_t(), storage->nbytes(),
                   c10::DataPtr(data, ctx, &end_borrow, t.device()),
                   /*allocator=*/nullptr, /*resizable=*/false);
  auto view = c10::make_intrusive<c10::TensorImpl>(
      std::move(own), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  view->set_sizes_and_strides(t.sizes(), t.strides());
  view->set_storage_offset(t.storage_offset());
  return at::Tensor(std::move(view));
}

bool cpu_allocator_memory(const at::Tensor& t) noexcept {
  if (!t.defined() || !t.device().is_cpu() || !t.has_storage()) return false;
  const c10::StorageImpl* storage =
      t.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  if (storage == nullptr) return false;
  const c10::DeleterFnPtr d = storage->data_ptr().get_deleter();
  return d == &deferring_delete || cpu_allocator_deleter(d);
}

BorrowCounts borrow_counts() {
  Table& t = table();
  std::lock_guard<std::mutex> lk(t.mu);
  BorrowCounts c;
  c.deferred_frees = t.deferred;
  for (const auto& [ctx, e] : t.entries) {
    c.outstanding += e.readers;
    if (!e.freed) ++c.tracked;
  }
  return c;
}

}  // namespace detail
}  // namespace precprobe
