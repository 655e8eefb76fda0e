// Pieces shared by observer.cpp and callbacks.cpp: what is known about an op from its
// schema, the per-thread nesting state, and the global callback plumbing.
//
// Threads: lookup_op() and thread_state() may be called from any thread (the registry is
// locked, the state is thread-local). install/uninstall from the controlling thread.
#pragma once

#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>

#include <cstdint>
#include <string>
#include <vector>

namespace precprobe {
namespace detail {

class Observer;

/// Facts about one dispatcher op (one schema), computed once per process.
struct OpInfo {
  std::string name;                ///< "aten::add_"
  std::string overload;            ///< "Tensor"
  std::vector<size_t> write_args;  ///< positions of arguments the op writes (alias "a!")
  /// Positions of arguments with any alias annotation ("a!" or "a"): written, or handed
  /// back as (a view of) the output, e.g. resolve_conj's self or copy_'s destination.
  std::vector<size_t> alias_args;
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
  int32_t depth = 0;             ///< enclosing dispatcher ops (since the current node)
  std::vector<NodeFrame> nodes;  ///< autograd nodes being run, innermost last
  uint64_t generation = 0;       ///< Observer generation `index` belongs to
  uint32_t index = 0;            ///< small thread index for that Observer
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

/// A non-tensor argument as JSON text: `1`, `0.5`, `[1,2]`, `"mean"`, `null`, `true`.
/// Non-finite doubles become the strings "nan", "inf", "-inf".
std::string ivalue_to_json(const c10::IValue& v);

/// Writes `t` as a NumPy .npy (v1.0) file compressed with zstd at `level`, creating parent
/// directories. BFloat16 is written as float32 (NumPy has no bfloat16). Returns "" or an
/// error message; never throws.
std::string write_npy_zst(const at::Tensor& t, const std::string& path, int level);

}  // namespace detail
}  // namespace precprobe
