// The device statistics path of StatsEngine (compiled only with PRECPROBE_WITH_CUDA): CUDA
// tensors are reduced by the fused kernel of stats_kernel.cu on their stream, the results
// copied asynchronously into pinned memory behind a CUDA event, and the statistics worker
// completes their slots once the event has passed. Nothing here waits on the device except
// wait_device_stats() (StatsEngine::drain()).
#pragma once

#include <cstddef>
#include <memory>

#include "stats/stats_engine.h"

namespace precprobe {
namespace detail {

/// Takes over slot `s` (its tensor in s->tensor) when it is a statistics job on a CUDA tensor
/// the kernel reads and no hash is wanted: launches its reduction on s->stream (or the
/// device's current stream), keeps the tensor alive until the results are on the host and
/// leaves the slot kRunning; poll_device_stats()/wait_device_stats() fill s->stats and mark
/// it kDone. False: nothing done, compute the slot as before (summarize()).
bool defer_device_stats(const std::shared_ptr<Slot>& s, bool with_hash);

/// Completes the slots whose results have arrived (cudaEventQuery); never blocks on the device.
size_t poll_device_stats();

/// Completes every deferred slot, waiting for the device (cudaEventSynchronize).
size_t wait_device_stats();

/// Deferred slots whose results have not been read yet.
size_t device_stats_in_flight();

}  // namespace detail
}  // namespace precprobe
