// The per-element rules of the device statistics kernel (src/probe/cuda/stats_kernel.cu),
// in one header that compiles for the host (g++) and the device (nvcc): the bit-exact decoders
// of every reduced dtype, the accumulate/combine steps of a partial result, the tensor
// descriptor a launch reads (up to kReduceMaxDims sizes/strides, walked without a copy) and
// the strided loop one thread runs over its share of a tensor. Torch-free and allocation-free.
//
// The rules are those of the CPU block kernels (stats_kernels.cpp): NaN, +Inf and -Inf are
// counted and left out of everything else; zero (+0 and -0), negative and positive count the
// finite values; min, max, sum and sum of squares are over the finite values, in float64.
// reduce_combine() is associative and commutative for the counts, min and max; the sums are
// float64 additions, so partial results combined in another order differ only by rounding.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define PRECPROBE_HD __host__ __device__ __forceinline__
#else
#define PRECPROBE_HD inline
#endif

namespace precprobe {
namespace detail {

/// The dtypes the device kernel reads. Values are part of the descriptor (kept stable).
enum ReduceDtype : uint8_t {
  kReduceF32 = 0,
  kReduceF64 = 1,
  kReduceF16 = 2,
  kReduceBF16 = 3,
  kReduceF8E4M3FN = 4,  ///< float8_e4m3fn: no Inf, S.1111.111 is NaN, max 448
  kReduceF8E5M2 = 5,    ///< float8_e5m2: the upper byte of an IEEE half
  kReduceNumDtypes = 6
};

/// Dims a descriptor holds after size-1 dims are dropped and contiguous dims merged.
constexpr int kReduceMaxDims = 8;

/// One tensor of a launch. `data` points at element 0 (storage offset applied); elements
/// are visited in row-major order of sizes[0..ndim), element i at
/// data + sum_k index_k(i) * strides[k] elements. ndim == 0 means one element.
struct ReduceDesc {
  const void* data;
  int64_t numel;
  int64_t sizes[kReduceMaxDims];
  int64_t strides[kReduceMaxDims];
  int32_t ndim;
  uint32_t first_block;  ///< the launch's first block for this tensor
  uint32_t num_blocks;   ///< blocks that share this tensor
  uint8_t dtype;         ///< ReduceDtype
  uint8_t pad[7];
};

/// A partial result. Sums, min and max are over finite values; min/max start at +-Inf.
struct ReduceStats {
  double sum;
  double sumsq;
  double min;
  double max;
  unsigned long long zero;
  unsigned long long neg;
  unsigned long long pos;
  unsigned long long nan;
  unsigned long long pinf;
  unsigned long long ninf;
};

PRECPROBE_HD double reduce_bits_to_double(uint64_t bits) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double(static_cast<long long>(bits));
#else
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
#endif
}

PRECPROBE_HD float reduce_bits_to_float(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __int_as_float(static_cast<int>(bits));
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

PRECPROBE_HD double reduce_inf() { return reduce_bits_to_double(0x7ff0000000000000ULL); }
PRECPROBE_HD double reduce_nan() { return reduce_bits_to_double(0x7ff8000000000000ULL); }

/// 2^e for -1022 <= e <= 1023, exactly.
PRECPROBE_HD double reduce_pow2(int e) {
  return reduce_bits_to_double(static_cast<uint64_t>(e + 1023) << 52);
}

// Decoders: exact for every bit pattern (denormals included); products below are exact
// because the significand has at most 11 bits and the factor is a power of two.

/// IEEE binary16.
PRECPROBE_HD double decode_f16(uint16_t h) {
  const bool neg = (h & 0x8000u) != 0;
  const int exp = (h >> 10) & 0x1f;
  const int man = h & 0x3ff;
  double v;
  if (exp == 0x1f) {
    v = man != 0 ? reduce_nan() : reduce_inf();
  } else if (exp == 0) {
    v = static_cast<double>(man) * reduce_pow2(-24);
  } else {
    v = static_cast<double>(man | 0x400) * reduce_pow2(exp - 25);
  }
  return neg ? -v : v;
}

/// bfloat16: the upper half of a binary32.
PRECPROBE_HD double decode_bf16(uint16_t b) {
  return static_cast<double>(reduce_bits_to_float(static_cast<uint32_t>(b) << 16));
}

/// float8_e4m3fn (bias 7, no Inf; exponent and mantissa all ones is NaN).
PRECPROBE_HD double decode_f8e4m3fn(uint8_t b) {
  const bool neg = (b & 0x80u) != 0;
  const int exp = (b >> 3) & 0xf;
  const int man = b & 0x7;
  double v;
  if (exp == 0xf && man == 0x7) {
    v = reduce_nan();
  } else if (exp == 0) {
    v = static_cast<double>(man) * reduce_pow2(-9);
  } else {
    v = static_cast<double>(man | 0x8) * reduce_pow2(exp - 10);
  }
  return neg ? -v : v;
}

/// float8_e5m2: the upper byte of a binary16.
PRECPROBE_HD double decode_f8e5m2(uint8_t b) {
  return decode_f16(static_cast<uint16_t>(static_cast<uint16_t>(b) << 8));
}

PRECPROBE_HD void reduce_init(ReduceStats& s) {
  s.sum = 0;
  s.sumsq = 0;
  s.min = reduce_inf();
  s.max = -reduce_inf();
  s.zero = s.neg = s.pos = s.nan = s.pinf = s.ninf = 0;
}

/// Adds one value (already widened to float64; widening is exact for every dtype).
PRECPROBE_HD void reduce_add(ReduceStats& s, double x) {
  constexpr double kMax = 1.7976931348623157e308;  // DBL_MAX
  if (x >= -kMax && x <= kMax) {                   // finite: false for NaN and +-Inf
    s.sum += x;
    s.sumsq += x * x;
    s.min = x < s.min ? x : s.min;
    s.max = x > s.max ? x : s.max;
    s.zero += !(x < 0.0) && !(x > 0.0);  // +0 and -0
    s.neg += x < 0.0;
    s.pos += x > 0.0;
  } else {
    s.pinf += x > kMax;
    s.ninf += x < -kMax;
    s.nan += !(x > kMax) && !(x < -kMax);  // neither finite nor infinite
  }
}

/// a := a + b (partial results of disjoint element sets).
PRECPROBE_HD void reduce_combine(ReduceStats& a, const ReduceStats& b) {
  a.sum += b.sum;
  a.sumsq += b.sumsq;
  a.min = b.min < a.min ? b.min : a.min;
  a.max = b.max > a.max ? b.max : a.max;
  a.zero += b.zero;
  a.neg += b.neg;
  a.pos += b.pos;
  a.nan += b.nan;
  a.pinf += b.pinf;
  a.ninf += b.ninf;
}

/// The value at element offset `off` (in elements) of a tensor of dtype D.
template <int D>
PRECPROBE_HD double reduce_load(const void* data, int64_t off) {
  if (D == kReduceF32) return static_cast<double>(static_cast<const float*>(data)[off]);
  if (D == kReduceF64) return static_cast<const double*>(data)[off];
  if (D == kReduceF16) return decode_f16(static_cast<const uint16_t*>(data)[off]);
  if (D == kReduceBF16) return decode_bf16(static_cast<const uint16_t*>(data)[off]);
  if (D == kReduceF8E4M3FN) return decode_f8e4m3fn(static_cast<const uint8_t*>(data)[off]);
  return decode_f8e5m2(static_cast<const uint8_t*>(data)[off]);
}

/// Element offset of the i-th element (row-major over the descriptor's dims).
PRECPROBE_HD int64_t reduce_offset(const ReduceDesc& d, int64_t i) {
  int64_t off = 0;
  for (int k = d.ndim - 1; k > 0; --k) {
    const int64_t q = i / d.sizes[k];
    off += (i - q * d.sizes[k]) * d.strides[k];
    i = q;
  }
  return d.ndim > 0 ? off + i * d.strides[0] : 0;
}

/// Adds elements begin, begin + step, ... of `d` to `s`: one thread's share of a tensor.
template <int D>
PRECPROBE_HD void reduce_strided(const ReduceDesc& d, int64_t begin, int64_t step, ReduceStats& s) {
  if (d.ndim == 1 && d.strides[0] == 1) {  // contiguous: no index arithmetic
    for (int64_t i = begin; i < d.numel; i += step) reduce_add(s, reduce_load<D>(d.data, i));
    return;
  }
  for (int64_t i = begin; i < d.numel; i += step)
    reduce_add(s, reduce_load<D>(d.data, reduce_offset(d, i)));
}

/// reduce_strided for the descriptor's runtime dtype; false for an unknown dtype.
PRECPROBE_HD bool reduce_strided_any(const ReduceDesc& d, int64_t begin, int64_t step,
                                     ReduceStats& s) {
  switch (d.dtype) {
    case kReduceF32:
      reduce_strided<kReduceF32>(d, begin, step, s);
      return true;
    case kReduceF64:
      reduce_strided<kReduceF64>(d, begin, step, s);
      return true;
    case kReduceF16:
      reduce_strided<kReduceF16>(d, begin, step, s);
      return true;
    case kReduceBF16:
      reduce_strided<kReduceBF16>(d, begin, step, s);
      return true;
    case kReduceF8E4M3FN:
      reduce_strided<kReduceF8E4M3FN>(d, begin, step, s);
      return true;
    case kReduceF8E5M2:
      reduce_strided<kReduceF8E5M2>(d, begin, step, s);
      return true;
    default:
      return false;
  }
}

}  // namespace detail
}  // namespace precprobe
