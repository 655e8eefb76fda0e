// A tensor whose memory no op wrote yet (an empty() result, a grown resize_, an out=
// buffer): its bytes fingerprinted at capture, so that a later op reading them as data
// can tell whether something wrote them since. See stats_engine.h (Slot::unread_fp).
#include <ATen/Context.h>

#include <utility>

#include "stats/memory_fingerprint.h"
#include "stats/stats_engine.h"
#include "support/torch_compat.h"

namespace precprobe {
namespace detail {

namespace {

// The bytes a dense CPU tensor's elements cover, {nullptr, 0} for another tensor: what the
// unread fingerprint reads and the marker is written into.
std::pair<void*, size_t> unread_span(const at::Tensor& t) {
  if (!t.defined() || !t.is_cpu() || t.layout() != c10::kStrided ||
      !t.is_non_overlapping_and_dense())
    return {nullptr, 0};
  const int64_t bytes = static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
  const void* data = first_byte(t);
  if (bytes <= 0 || data == nullptr) return {nullptr, 0};
  return {const_cast<void*>(data), static_cast<size_t>(bytes)};
}

}  // namespace

void take_unread_fingerprint(Slot& s, const at::Tensor& t) {
  const auto [data, bytes] = unread_span(t);
  if (data == nullptr) return;
  s.unread_data = data;
  s.unread_bytes = static_cast<int64_t>(bytes);
  s.unread_fp = unread_fingerprint(data, bytes);
}

void mark_unread_memory(const at::Tensor& t) {
#if PRECPROBE_TORCH_AT_LEAST(2, 1)
  // Deterministic mode fills it with NaN (or an integer's largest value) inside empty: a
  // marker of its own, which a program that reads uninitialized memory is meant to see.
  if (at::globalContext().deterministicAlgorithms() &&
      at::globalContext().deterministicFillUninitializedMemory())
    return;
#endif
  const auto [data, bytes] = unread_span(t);
  if (data != nullptr) write_unread_marker(data, bytes);
}

uint64_t unread_fingerprint(const void* p, size_t n) noexcept {
  if (n >= 64) return memory_fingerprint(p, n);
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a over every byte of a small tensor
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

bool unread_unchanged(const Slot& hit, const at::Tensor& t) {
  if (hit.unread_bytes == 0) return true;  // not a CPU tensor: as it was captured
  if (!t.is_cpu() || first_byte(t) != hit.unread_data ||
      static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size()) != hit.unread_bytes)
    return false;
  return unread_fingerprint(hit.unread_data, static_cast<size_t>(hit.unread_bytes)) ==
         hit.unread_fp;
}

}  // namespace detail
}  // namespace precprobe
