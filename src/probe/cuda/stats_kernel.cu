// The fused statistics kernel: one launch reduces a batch of tensors (any of the dtypes of
// stats_reduce.h, strided up to kReduceMaxDims dims, read in place) into one ReduceStats per
// tensor. Each tensor gets a run of blocks; every thread walks its grid-stride share with the
// element rules of stats_reduce.h, warps combine with shuffles, blocks through shared memory,
// and the last block of a tensor to finish (a ticket counter) combines the block partials in
// block order, so a result does not depend on which block ran first.
#include <cuda_runtime.h>

#include "stats_kernel.h"

namespace precprobe {
namespace detail {
namespace {

__device__ __forceinline__ void shuffle_combine(ReduceStats& s, int offset) {
  constexpr unsigned kAll = 0xffffffffu;
  ReduceStats o;
  o.sum = __shfl_down_sync(kAll, s.sum, offset);
  o.sumsq = __shfl_down_sync(kAll, s.sumsq, offset);
  o.min = __shfl_down_sync(kAll, s.min, offset);
  o.max = __shfl_down_sync(kAll, s.max, offset);
  o.zero = __shfl_down_sync(kAll, s.zero, offset);
  o.neg = __shfl_down_sync(kAll, s.neg, offset);
  o.pos = __shfl_down_sync(kAll, s.pos, offset);
  o.nan = __shfl_down_sync(kAll, s.nan, offset);
  o.pinf = __shfl_down_sync(kAll, s.pinf, offset);
  o.ninf = __shfl_down_sync(kAll, s.ninf, offset);
  reduce_combine(s, o);
}

// Lane 0 of each warp ends with the warp's total.
__device__ __forceinline__ void warp_reduce(ReduceStats& s) {
  for (int offset = 16; offset > 0; offset >>= 1) shuffle_combine(s, offset);
}

// Reads a partial written by another block (L2, not a possibly stale L1 line).
__device__ __forceinline__ ReduceStats load_partial(const ReduceStats* p) {
  ReduceStats s;
  s.sum = __ldcg(&p->sum);
  s.sumsq = __ldcg(&p->sumsq);
  s.min = __ldcg(&p->min);
  s.max = __ldcg(&p->max);
  s.zero = __ldcg(&p->zero);
  s.neg = __ldcg(&p->neg);
  s.pos = __ldcg(&p->pos);
  s.nan = __ldcg(&p->nan);
  s.pinf = __ldcg(&p->pinf);
  s.ninf = __ldcg(&p->ninf);
  return s;
}

__global__ void __launch_bounds__(kReduceThreads)
    reduce_stats_kernel(const ReduceDesc* __restrict__ descs, int num_descs,
                        ReduceStats* __restrict__ partials, unsigned int* __restrict__ counters,
                        ReduceStats* __restrict__ results) {
  __shared__ ReduceStats warp_totals[kReduceThreads / 32];
  __shared__ bool last_block;
  // The tensor this block works on: the last descriptor with first_block <= blockIdx.x.
  int lo = 0, hi = num_descs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (descs[mid].first_block <= blockIdx.x) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const ReduceDesc& d = descs[lo];
  const uint32_t local = blockIdx.x - d.first_block;

  ReduceStats s;
  reduce_init(s);
  reduce_strided_any(d, static_cast<int64_t>(local) * kReduceThreads + threadIdx.x,
                     static_cast<int64_t>(d.num_blocks) * kReduceThreads, s);

  warp_reduce(s);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_totals[warp] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    ReduceStats b = warp_totals[0];
    for (int w = 1; w < kReduceThreads / 32; ++w) reduce_combine(b, warp_totals[w]);
    if (d.num_blocks == 1) {
      results[lo] = b;
      last_block = false;
    } else {
      partials[blockIdx.x] = b;
      __threadfence();  // the partial is visible before the ticket is taken
      const unsigned int ticket = atomicAdd(&counters[lo], 1u);
      last_block = ticket == d.num_blocks - 1;
    }
  }
  __syncthreads();
  if (!last_block || threadIdx.x != 0) return;
  // Every block of this tensor has written its partial: combine them in block order.
  __threadfence();
  ReduceStats total = load_partial(&partials[d.first_block]);
  for (uint32_t k = 1; k < d.num_blocks; ++k)
    reduce_combine(total, load_partial(&partials[d.first_block + k]));
  results[lo] = total;
  counters[lo] = 0;  // reusable by the next launch without a memset
}

}  // namespace

int launch_reduce_stats(const ReduceDesc* descs, int num_descs, uint32_t total_blocks,
                        ReduceStats* partials, unsigned int* counters, ReduceStats* results,
                        CUstream_st* stream) {
  if (num_descs <= 0 || total_blocks == 0) return 0;
  reduce_stats_kernel<<<total_blocks, kReduceThreads, 0, stream>>>(descs, num_descs, partials,
                                                                   counters, results);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace detail
}  // namespace precprobe
