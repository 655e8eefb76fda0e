// The streaming hash behind precprobe::tensor_hash: XXH64 (seed 0) over a header (the c10
// dtype name, the number of dimensions and each size as little-endian int64) followed by the
// element bytes in logical row-major order. Feeding the bytes in any chunking gives the same
// value, which is what lets contiguous tensors and strided views hash alike.
// One Hasher per thread; it is a plain value.
#pragma once

#define XXH_STATIC_LINKING_ONLY
#include <c10/util/ArrayRef.h>
#include <xxhash.h>

#include <cstdint>
#include <string_view>

namespace precprobe {
namespace detail {

class TensorHasher {
 public:
  TensorHasher() noexcept { XXH64_reset(&state_, 0); }

  void header(std::string_view dtype, c10::IntArrayRef sizes) noexcept {
    update(dtype.data(), dtype.size());
    const int64_t ndim = static_cast<int64_t>(sizes.size());
    update(&ndim, sizeof ndim);
    update(sizes.data(), sizes.size() * sizeof(int64_t));
  }
  void update(const void* p, size_t bytes) noexcept {
    if (bytes > 0) XXH64_update(&state_, p, bytes);
  }
  uint64_t digest() const noexcept { return XXH64_digest(&state_); }

 private:
  XXH64_state_t state_;
};

}  // namespace detail
}  // namespace precprobe
