// Differences between LibTorch versions, in one place. Every use of an API that changed
// between 1.13 and 2.x goes through here (c10d: c10d_compat.h), guarded by
// TORCH_VERSION_MAJOR/MINOR or, where the headers can tell, by a feature test.
#pragma once

#include <torch/csrc/api/include/torch/version.h>

#define PRECPROBE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||            \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#include <ATen/core/function_schema.h>
#include <ATen/record_function.h>

/// ATen's GradScaler kernels _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_
/// have CPU implementations from 2.3 on (PyTorch PR 109281, merged January 2024); before,
/// CUDA only. From 2.3 precprobe's GradScaler uses them for CPU tensors too.
#define PRECPROBE_HAS_CPU_AMP_KERNELS PRECPROBE_TORCH_AT_LEAST(2, 3)

#include <string>

#include "precprobe/error.h"

namespace precprobe {
namespace detail {

/// Whether `fn` is a dispatcher op (it has a schema) and, if so, its overload name.
inline bool op_overload_name(const at::RecordFunction& fn, std::string* overload) {
  auto name = fn.operator_name();
  if (!name) return false;
  if (overload) *overload = name->overload_name;
  return true;
}

/// The schema of a dispatcher op event, or an empty optional for other events. The optional
/// is c10::optional up to 2.2 and std::optional from 2.3 on (c10::optional became an alias):
/// callers use it as `auto`.
inline auto op_schema(const at::RecordFunction& fn) { return fn.operator_schema(); }

/// Inside a catch block of a set-up call: a c10::Error (LibTorch's TORCH_CHECK and friends)
/// leaves as a precprobe::Error that names `what` and carries LibTorch's message without
/// its C++ stack trace; anything else is rethrown as it is.
[[noreturn]] inline void rethrow_c10_as_error(const std::string& what) {
  try {
    throw;
  } catch (const c10::Error& e) {
    throw Error(what + ": " + e.what_without_backtrace());
  }
}

}  // namespace detail
}  // namespace precprobe
