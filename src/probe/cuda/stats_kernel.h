// Host entry point of the fused device statistics kernel (stats_kernel.cu). Torch-free:
// stats_cuda.cpp owns the buffers, the stream and the event; this only launches.
#pragma once

#include <cstdint>

#include "stats/stats_reduce.h"

struct CUstream_st;

namespace precprobe {
namespace detail {

/// Threads per block of the statistics kernel.
constexpr int kReduceThreads = 256;
/// Blocks one tensor gets at most (more would only lengthen the final combine).
constexpr uint32_t kReduceMaxBlocksPerTensor = 1024;
/// Elements a thread reads at least before another block is added for a tensor.
constexpr int64_t kReduceElementsPerThread = 16;

/// Blocks the kernel uses for a tensor of `numel` elements (at least 1).
inline uint32_t reduce_blocks_for(int64_t numel) {
  const int64_t per_block = int64_t{kReduceThreads} * kReduceElementsPerThread;
  int64_t b = (numel + per_block - 1) / per_block;
  if (b < 1) b = 1;
  if (b > kReduceMaxBlocksPerTensor) b = kReduceMaxBlocksPerTensor;
  return static_cast<uint32_t>(b);
}

/// Enqueues one launch on `stream` over `num_descs` tensors whose descriptors (device memory)
/// have first_block/num_blocks laid out back to back, `total_blocks` in all. `partials` holds
/// total_blocks entries, `counters` num_descs zeroed words (left zeroed again), `results`
/// num_descs entries: results[i] is tensor i's statistics once the stream reaches the end of
/// the launch. Returns the cudaError_t of the launch as an int (0: cudaSuccess).
int launch_reduce_stats(const ReduceDesc* descs, int num_descs, uint32_t total_blocks,
                        ReduceStats* partials, unsigned int* counters, ReduceStats* results,
                        CUstream_st* stream);

}  // namespace detail
}  // namespace precprobe
