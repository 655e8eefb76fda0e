// Pieces shared by observer.cpp and callbacks.cpp: what is known about an op from its
// schema, the per-thread nesting state, and the global callback plumbing.
//
// Threads: lookup_op() and thread_state() may be called from any thread (the registry is
// locked, the state is thread-local). install/uninstall from the controlling thread.
#pragma once

#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "stats/stats.h"

namespace precprobe {
namespace detail {

class Observer;

/// Facts about one dispatcher op (one schema), computed once per process.
struct OpInfo {
  std::string name;  ///< "aten::add_"
  /// Dense per-process index of the op's name (every overload of a name shares it): the
  /// Observer counts calls per name in a vector indexed by it (observer.h, OpCallCounts).
  uint32_t name_index = 0;
  std::string overload;            ///< "Tensor"
  std::vector<size_t> write_args;  ///< positions of arguments the op writes (alias "a!")
  /// Positions of arguments with any alias annotation ("a!" or "a"): written, or handed
  /// back as (a view of) the output, e.g. resolve_conj's self or copy_'s destination.
  std::vector<size_t> alias_args;
  /// aten::empty* (OpRecord::outputs_uninitialized()): the outputs are garbage, unread.
  bool outputs_uninitialized = false;
  /// outputs_uninitialized without an out= argument: memory allocated by the call itself,
  /// which outside kernels gets mark_unread_memory().
  bool fresh_allocation = false;
  /// Positions of the out= arguments (keyword-only and written: `*, Tensor(a!) out`): a
  /// destination. Its values before the op are not an input of it, and are often memory
  /// nothing has written yet (a kernel's at::empty buffer): never read at the op's start.
  std::vector<size_t> out_args;
  /// Ops that hand back memory no op may have written, whatever their name says.
  enum class Regrows : uint8_t {
    kNo,
    kIfGrown,  ///< resize_, resize_as_, _resize_output_: the elements past the old size
    kAlways,   ///< set_ to a Storage (or to nothing): memory whose contents are unknown
  };
  Regrows regrows = Regrows::kNo;
  /// Every return is a view of an argument the op does not write (`Tensor(a)`: select,
  /// slice, view, t, expand, as_strided...): its values are the argument's, so it can hold
  /// NaN/Inf only if the argument did — never an origin for overflow_check.
  bool returns_view = false;
  /// One of ATen's dropouts (ModuleOp::is_dropout): overflow_check's placement.
  bool dropout = false;
};

/// overflow_check's memory of tensors known to hold no NaN/Inf (an output it tested, or
/// uninitialized memory, which is never read): an in-place op's written argument found
/// here is not read again before the op. One entry per storage (a direct-mapped table of
/// TensorKeys: a collision only costs a read). A write to a storage forgets it, whichever
/// alias (`.data()`) it goes through; weak references keep a remembered StorageImpl's
/// address from being reused. Any thread.
class FiniteMemo {
 public:
  bool known(const at::Tensor& t) {
    const TensorKey k = make_key(t);
    if (!k.versioned) return false;
    std::lock_guard<std::mutex> lk(mu_);
    return slots_[index(k.storage)].key == k;
  }
  void note(const at::Tensor& t) {
    const TensorKey k = make_key(t);
    if (!k.versioned) return;
    std::lock_guard<std::mutex> lk(mu_);
    Entry& e = slots_[index(k.storage)];
    if (e.key.storage != k.storage || !e.alive)
      e.alive = t.unsafeGetTensorImpl()->unsafe_storage().getWeakStorageImpl();
    e.key = k;
  }
  void forget(const void* storage) {
    if (storage == nullptr) return;
    std::lock_guard<std::mutex> lk(mu_);
    Entry& e = slots_[index(storage)];
    if (e.key.storage == storage) e.key = TensorKey{};
  }
  void clear() {
    std::lock_guard<std::mutex> lk(mu_);
    for (Entry& e : slots_) e = Entry{};
  }

 private:
  static constexpr size_t kSlots = 1024;
  static size_t index(const void* storage) noexcept {
    const uint64_t h = (reinterpret_cast<uintptr_t>(storage) >> 4) * 0x9e3779b97f4a7c15ULL;
    return static_cast<size_t>(h >> 54);  // 10 bits
  }
  struct Entry {
    TensorKey key;
    std::optional<c10::weak_intrusive_ptr<c10::StorageImpl>> alive;
  };
  std::mutex mu_;
  std::array<Entry, kSlots> slots_;
};

/// The OpInfo of a dispatcher op event; nullptr for other events (engine markers,
/// backward nodes, user scopes). Entries live for the whole process.
const OpInfo* lookup_op(const at::RecordFunction& fn);

/// An autograd node the thread is running.
struct NodeFrame {
  std::string name;
  int64_t seqnr = -1;
  int32_t saved_depth = 0;
  bool engine = false;  ///< the engine's evaluation of the node, around the node itself
};

struct ThreadState {
  int32_t depth = 0;  ///< enclosing dispatcher ops (since the current node)
  /// The depth of the outermost enclosing op whose outputs are uninitialized memory
  /// (aten::empty*), -1 outside one: what an op nested in it overwrites or hands back is
  /// that fresh allocation, garbage until written (LibTorch 2.x's deterministic mode runs
  /// fill_(NaN) inside empty).
  int32_t uninitialized_depth = -1;
  std::vector<NodeFrame> nodes;  ///< autograd nodes being run, innermost last
  uint64_t generation = 0;       ///< Observer generation `index` belongs to
  uint32_t index = 0;            ///< small thread index for that Observer
  /// A thread outside the training step (Observer::outside_step): its own call counts per op
  /// name (OpInfo::name_index), for step `own_calls_step` of Observer generation
  /// `own_calls_generation`. Its calls never shift the call indices of the step's ops.
  std::vector<int64_t> own_calls;
  int64_t own_calls_step = -1;
  uint64_t own_calls_generation = 0;
};

ThreadState& thread_state() noexcept;

/// Installs the global callback routing to `o` (nullptr: removes it). Returns the handle.
uint64_t install_callbacks(Observer* o);
/// Removes the callback and waits until no thread is inside a callback for the observer.
void uninstall_callbacks(uint64_t handle) noexcept;

/// Calls `fn` on each tensor of an argument: a tensor, a tensor list, or a list holding
/// tensors.
template <typename Fn>
void for_each_tensor(const c10::IValue& v, Fn&& fn) {
  if (v.isTensor()) {
    fn(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec()) fn(t);
  } else if (v.isList()) {
    for (const auto& e : v.toListRef())
      if (e.isTensor()) fn(e.toTensor());
  }
}

/// Whether a list argument holds a tensor anywhere: a Tensor?[] (aten::index's indices) may
/// start with None, as `x[:, idx]` gives [None, idx].
inline bool list_holds_tensor(const c10::IValue& v) {
  if (!v.isList()) return false;
  for (const auto& e : v.toListRef())
    if (e.isTensor()) return true;
  return false;
}

/// A non-tensor argument as JSON text: `1`, `0.5`, `[1,2]`, `"mean"`, `null`, `true`.
/// Non-finite doubles become the strings "nan", "inf", "-inf".
std::string ivalue_to_json(const c10::IValue& v);

/// Writes `t` as a NumPy .npy (v1.0) file compressed with zstd at `level`, creating parent
/// directories. BFloat16 is written as float32 (NumPy has no bfloat16). Returns "" or an
/// error message; never throws.
std::string write_npy_zst(const at::Tensor& t, const std::string& path, int level);

}  // namespace detail
}  // namespace precprobe
