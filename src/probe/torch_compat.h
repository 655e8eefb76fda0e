// Differences between LibTorch versions, in one place. Every use of an API that changed
// between 1.13 and 2.x goes through here, guarded by TORCH_VERSION_MAJOR/MINOR.
#pragma once

#include <torch/csrc/api/include/torch/version.h>

#define PRECPROBE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||            \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#include <ATen/record_function.h>

#include <string>

namespace precprobe {
namespace detail {

/// Whether `fn` is a dispatcher op (it has a schema) and, if so, its overload name.
/// 1.13 returns c10::optional<OperatorName>; 2.x std::optional (same use).
inline bool op_overload_name(const at::RecordFunction& fn, std::string* overload) {
  auto name = fn.operator_name();
  if (!name) return false;
  if (overload) *overload = name->overload_name;
  return true;
}

/// The schema of a dispatcher op event, or nullopt for other events.
#if PRECPROBE_TORCH_AT_LEAST(2, 0)
inline std::optional<c10::FunctionSchema> op_schema(const at::RecordFunction& fn) {
  return fn.operator_schema();
}
#else
inline c10::optional<c10::FunctionSchema> op_schema(const at::RecordFunction& fn) {
  return fn.operator_schema();
}
#endif

}  // namespace detail
}  // namespace precprobe
