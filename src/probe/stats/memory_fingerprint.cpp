// memory_fingerprint: see memory_fingerprint.h.
#include "stats/memory_fingerprint.h"

#include <algorithm>
#include <cstring>

namespace precprobe {
namespace detail {

namespace {

constexpr size_t kLine = 64;
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// Calls f(offset, salt) for every 64-byte line memory_fingerprint() reads in `n` bytes
// (n >= 64), in order, and pf(offset) for the line kAhead samples ahead.
template <class F, class P>
void for_each_sampled_line(size_t n, F&& f, P&& pf) {
  constexpr size_t kAhead = 16;
  f(size_t{0}, uint64_t{1});
  f(n - kLine, uint64_t{2});
  const size_t lines = n / kLine;
  const size_t k = std::clamp<size_t>(lines / 16, 16, 256);
  const size_t stride = lines / k;
  if (stride == 0) return;
  // Line i of the sample: a fixed pseudo-random line within the i-th stride.
  auto line = [stride](size_t i) {
    uint64_t r = (i + 1) * kGolden;
    r ^= r >> 29;
    return (i * stride + ((r >> 32) * stride >> 32)) * kLine;
  };
  for (size_t i = 0; i < k; ++i) {
    if (i + kAhead < k) pf(line(i + kAhead));
    f(line(i), uint64_t{i + 3});
  }
}

}  // namespace

uint64_t memory_fingerprint(const void* p, size_t n) noexcept {
  constexpr size_t kWords = kLine / 8;
  constexpr uint64_t kMul = 0xff51afd7ed558ccdULL;
  const auto* bytes = static_cast<const unsigned char*>(p);
  // One lane per word of a line: no lane waits for another line's result, so the sampled
  // lines (cold: last written a step ago) are fetched in parallel, with a prefetch kAhead
  // lines ahead; a serial hash took ~16 us per 256 KB tensor, mostly memory latency.
  uint64_t lane[kWords];
  for (size_t j = 0; j < kWords; ++j) lane[j] = kGolden ^ n ^ ((j + 1) * 0x632be59bd9b4e019ULL);
  auto finish = [&lane] {
    uint64_t h = 0;
    for (uint64_t x : lane) {
      h ^= x;
      h *= kMul;
      h ^= h >> 32;
    }
    return h;
  };
  if (n < kLine) return finish();
  for_each_sampled_line(
      n,
      [&](size_t at, uint64_t salt) {
        uint64_t w[kWords];
        std::memcpy(w, bytes + at, kLine);
        for (size_t j = 0; j < kWords; ++j) lane[j] = (lane[j] ^ w[j] ^ salt) * kMul;
      },
      [bytes](size_t at) { __builtin_prefetch(bytes + at); });
  return finish();
}

void write_unread_marker(void* p, size_t n) noexcept {
  auto* bytes = static_cast<unsigned char*>(p);
  // Byte i of the marker depends on i only: two runs of a program (or its Python original)
  // see the same bytes. Bits 6 and 7 of every byte are clear: no float of any width (fp8 to
  // double, little-endian: its sign in bit 7 and its exponent's top bit in bit 6 of its last
  // byte) is NaN or Inf, nor fp8's *fnuz NaN (0x80); each is positive and below 2.
  auto fill = [bytes](size_t at, size_t len) {
    for (size_t i = at; i < at + len; i += 8) {
      uint64_t z = (i / 8 + 1) * kGolden;  // splitmix64 of the word's index
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      z = (z ^ (z >> 31)) & 0x3f3f3f3f3f3f3f3fULL;
      std::memcpy(bytes + i, &z, std::min<size_t>(8, at + len - i));
    }
  };
  if (n < kLine) {
    fill(0, n);
    return;
  }
  for_each_sampled_line(
      n, [&fill](size_t at, uint64_t) { fill(at, kLine); }, [](size_t) {});
}

}  // namespace detail
}  // namespace precprobe
