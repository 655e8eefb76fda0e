// Reading a tensor's memory later, on another thread, without holding a reference to it.
//
// A reference held by the statistics worker changes what LibTorch does: autograd takes over
// (steals) an incoming gradient only when nothing else holds its TensorImpl
// (AccumulateGrad: `new_grad.use_count() <= num_expected_refs`), and accumulates into a
// buffer in place only when nothing else holds its storage (InputBuffer's
// `can_accumulate_inplace`: `storage().use_count() == 1`). With a reference held, the same
// program runs `new_empty_strided` + `copy_` or an out-of-place `add` instead, depending on
// thread timing. So the worker holds no reference: `borrow()` makes a tensor of its own
// (its own TensorImpl and StorageImpl, a non-owning DataPtr) over the same memory, and
// keeps the memory itself from being freed until that tensor is gone: the storage's DataPtr
// deleter is swapped (`DataPtr::compare_exchange_deleter`) for one that defers the free
// while a borrow is outstanding. Nothing the program can observe changes: reference
// counts, versions and addresses of live tensors stay as they are.
//
// Only memory of the CPU allocator is borrowed (its DataPtr's context is the allocation,
// its deleter `GetCPUAllocator()->raw_deleter()`). Anything else (user memory from
// from_blob, other devices) is not: the caller computes at once instead.
//
// Threads: any. A process-wide table under one mutex, leaked on purpose (storages freed
// during static destruction still find it).
#pragma once

#include <ATen/core/Tensor.h>

namespace precprobe {
namespace detail {

/// A tensor over `t`'s memory that holds no reference to `t`, its TensorImpl or its
/// StorageImpl, and keeps that memory allocated until the result (and every tensor sharing
/// its storage) is gone; the memory is freed then if `t`'s storage let go of it meanwhile.
/// Undefined when `t`'s memory cannot be borrowed (the caller then reads `t` at once). The
/// result has `t`'s dtype, sizes, strides and storage offset, and no autograd metadata.
at::Tensor borrow(const at::Tensor& t);

/// Whether `t`'s memory is the CPU allocator's (what borrow() accepts): memory the program
/// owns (from_blob) is not. Never throws.
bool cpu_allocator_memory(const at::Tensor& t) noexcept;

/// Outstanding borrows and storages whose free is deferred right now (tests).
struct BorrowCounts {
  size_t outstanding = 0;
  size_t deferred_frees = 0;
  size_t tracked = 0;  ///< storages whose deleter is swapped and still alive
};
BorrowCounts borrow_counts();

}  // namespace detail
}  // namespace precprobe
