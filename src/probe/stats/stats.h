// Statistics of one tensor in a single pass over its memory, and a cheap key that tells
// whether a tensor seen before may have changed since.
//
// summarize() reads a CPU tensor once, in place (views are walked through their strides,
// never copied), and fills a TensorStats: exact NaN/+Inf/-Inf/zero/negative/positive
// counts and min/max/mean/L2 norm over the finite values accumulated in float64; with
// with_hash, also the tensor hash of precprobe/hash.h from the same pass. Tensors on other
// devices (CUDA...) are reduced there with ATen ops and only a dozen numbers come back.
//
// Both functions may be called from any thread, concurrently, on tensors no other thread
// writes to meanwhile. They run no autograd; the device path dispatches ATen ops, so an op
// observer should call summarize() under `at::RecordFunctionGuard off(false)`.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>

#include "precprobe/records.h"

namespace precprobe {
namespace detail {

/// Fills `out` from `t` (all fields except `param` and `list_index`, which are left as
/// they are). Never throws: a tensor whose data cannot be read (meta, sparse, mkldnn,
/// nested, quantized) gets its dtype, shape and device, zero counts and NaN statistics.
/// With `with_range`, floating and complex tensors also get their range statistics
/// (TensorStats::range, has_range), counted in the same pass over the memory.
///
/// Per dtype:
/// - floating types (Float, Double, Half, BFloat16): as TensorStats documents.
/// - integer types: no NaN/Inf; sums in float64 (int64 values above 2^53 round); on the
///   CPU also `hist` when the values span fewer than kHistogramSpan integers (a second
///   pass over the tensor).
/// - Bool: false counts as zero, true as positive; min/max are 0/1.
/// - complex: the real and imaginary parts are summarised as 2*numel real values
///   (counts are over components, `numel` stays the element count).
/// The dtype string is c10's name ("Float", "BFloat16", "ComplexFloat"...); for a
/// non-strided layout it is followed by the layout, e.g. "Float:Sparse"; an undefined
/// tensor gives "undefined".
void summarize(const at::Tensor& t, TensorStats& out, bool with_hash,
               bool with_range = false) noexcept;

/// Sets out.hist for an integer CPU tensor `t` whose min/max are already in `out` (a
/// second pass; see TensorStats::hist for when it is kept), else clears it. May throw
/// c10::Error (summarize() catches).
void add_histogram(const at::Tensor& t, TensorStats& out);

/// The ATen-reduction path used for tensors not on the CPU (exposed so that tests can run
/// it on CPU tensors and compare it with the single-pass kernel). May throw c10::Error.
void summarize_with_aten(const at::Tensor& t, TensorStats& out, bool with_hash,
                         bool with_range = false);

/// Whether `t` holds a NaN or an Inf, read once at memory speed (overflow_check's fast
/// path): a vectorised test of the exponent bits, nothing counted or written. Integer and
/// bool tensors never do. Complex: either component. False for tensors whose values cannot
/// be read (meta, sparse, quantized, nested). Never throws (a failure reports an error and
/// answers false).
bool has_non_finite(const at::Tensor& t) noexcept;

/// Whether `t` holds a NaN or a +Inf (a -inf alone does not: a mask's; complex: any
/// non-finite component). For the rare ops of overflow_check's mask steps, not a fast path.
/// Never throws (a failure reports an error and answers true).
bool has_nan_or_pinf(const at::Tensor& t) noexcept;

/// Whether every element of `t` is 0 or -inf (and one is -inf): an additive attention mask,
/// whatever made it (MaskWatch::may_take_mask). For overflow_check's rare ops whose input
/// held -inf, not a fast path. Never throws (a failure reports an error and answers false).
bool only_zero_or_minus_inf(const at::Tensor& t) noexcept;

/// The logical-order hash of precprobe::tensor_hash (see precprobe/hash.h).
uint64_t logical_order_hash(const at::Tensor& t);

/// Identifies a tensor's values cheaply, to cache statistics per tensor.
///
/// Two live tensors with equal keys view the same bytes of the same storage the same way,
/// and nothing changed them in place through autograd-visible ops in between: every
/// in-place op (`add_`, `zero_`, `copy_`, optimizer updates) bumps the version counter that
/// a tensor shares with all its views. Not detected: writes through `data_ptr()` or through
/// `.data` (which gets a fresh counter), and any change to an inference tensor
/// (InferenceMode tensors have no counter). `versioned` is false for those and for tensors
/// without a storage (sparse, nested): do not cache by key when it is false.
/// A storage address can be reused once its tensor is freed, so a cache must keep the
/// tensor (or a weak reference checked for expiry) alive alongside its key.
/// Tensors on one storage with different counters (`.data()` gives a fresh one at version
/// 0) can have equal keys while an op wrote the memory through one of them: a cache must
/// also drop its keys for a storage when an op writes to it (StatsEngine::before_write).
struct TensorKey {
  const void* storage = nullptr;  ///< the StorageImpl (nullptr: undefined / no storage)
  int64_t offset = 0;             ///< storage offset in elements
  uint64_t geometry = 0;          ///< hash of sizes and strides
  uint32_t version = 0;           ///< version counter (0 when not versioned)
  int8_t dtype = -1;              ///< c10::ScalarType, -1 when undefined
  bool versioned = false;         ///< false: the key cannot detect changes, do not cache

  bool operator==(const TensorKey& o) const noexcept {
    return storage == o.storage && offset == o.offset && geometry == o.geometry &&
           version == o.version && dtype == o.dtype && versioned == o.versioned;
  }
  bool operator!=(const TensorKey& o) const noexcept { return !(*this == o); }
};

/// The StorageImpl of `t` (identity of its memory), or nullptr.
inline const void* storage_of(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return nullptr;
  return t.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
}

/// The key of `t` now. Constant time (one pass over sizes/strides). Never throws.
TensorKey make_key(const at::Tensor& t) noexcept;

/// std::unordered_map<TensorKey, V, TensorKeyHash>. Inline: a capture hashes up to four keys.
struct TensorKeyHash {
  size_t operator()(const TensorKey& k) const noexcept {
    uint64_t h = reinterpret_cast<uintptr_t>(k.storage);
    h = h * 0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(k.offset);
    h = h * 0x9e3779b97f4a7c15ULL ^ k.geometry;
    h = h * 0x9e3779b97f4a7c15ULL ^
        (static_cast<uint64_t>(k.version) << 8 | static_cast<uint8_t>(k.dtype));
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

}  // namespace detail
}  // namespace precprobe
