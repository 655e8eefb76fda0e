// The streaming hash behind precprobe::tensor_hash: XXH3-64 (XXH3_64bits, seed 0, default
// secret) over a header (the c10 dtype name, the number of dimensions and each size as
// little-endian int64) followed by the element bytes in logical row-major order. Feeding
// the bytes in any chunking gives the same value, which is what lets contiguous tensors
// and strided views hash alike. Where libxxhash ships its x86 dispatcher, updates use its
// AVX2/AVX-512 code (same values, ~3x faster than the SSE2 default on L1-resident blocks).
// One TensorHasher per thread; it is a plain value.
#pragma once

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#if defined(PRECPROBE_HAVE_XXH_DISPATCH)
#include <xxh_x86dispatch.h>
#endif

#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <cstring>
#include <string_view>

namespace precprobe {
namespace detail {

class TensorHasher {
 public:
  TensorHasher() noexcept {
    std::memset(static_cast<void*>(&state_), 0, sizeof state_);
    XXH3_64bits_reset(&state_);
  }
  TensorHasher(const TensorHasher&) = delete;
  TensorHasher& operator=(const TensorHasher&) = delete;

  void header(std::string_view dtype, c10::IntArrayRef sizes) noexcept {
    update(dtype.data(), dtype.size());
    const int64_t ndim = static_cast<int64_t>(sizes.size());
    update(&ndim, sizeof ndim);
    update(sizes.data(), sizes.size() * sizeof(int64_t));
  }
  void update(const void* p, size_t bytes) noexcept {
    if (bytes == 0) return;
#if defined(PRECPROBE_HAVE_XXH_DISPATCH)
    XXH3_64bits_update_dispatch(&state_, p, bytes);
#else
    XXH3_64bits_update(&state_, p, bytes);
#endif
  }
  uint64_t digest() const noexcept { return XXH3_64bits_digest(&state_); }

 private:
  XXH3_state_t state_;
};

}  // namespace detail
}  // namespace precprobe
