// Deferred statistics of many tensors per launch: the host half of the device statistics
// path, independent of CUDA so that CPU builds compile and test it.
//
// make_reduce_desc() describes a tensor for the kernel of stats_reduce.h (in memory order,
// without a copy); a ReduceBackend launches a batch of descriptors and reports, without
// blocking, when the results are there; DeferredStats keeps each batch's tensors alive until
// then and, on poll() (the statistics worker) or wait_all() (drain), fills the TensorStats of
// every tensor of a finished batch exactly as summarize() would and calls its completion.
// The CUDA backend (cuda/stats_cuda.cpp) launches on the tensors' stream, copies the results
// into pinned memory asynchronously and records an event; HostReduceBackend runs the same
// per-element code on the CPU for tests and can hold a batch "in flight" until released.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "precprobe/records.h"
#include "stats/stats_reduce.h"

namespace precprobe {
namespace detail {

/// The ReduceDtype of a dtype, or -1 when the kernel does not read it (integers, bool,
/// complex, float8 variants other than e4m3fn/e5m2 and, before LibTorch 2.1, all float8).
int reduce_dtype_of(c10::ScalarType type);

/// Describes strided `t` in memory order (size-1 dims dropped, stride-0 dims counted in
/// `repeat`, contiguous dims merged). False when the kernel cannot read it: unsupported dtype
/// or layout, conj/neg bits, a ZeroTensor, more than kReduceMaxDims dims after merging,
/// no data. first_block/num_blocks are left 0.
bool make_reduce_desc(const at::Tensor& t, ReduceDesc& d, int64_t& repeat);

/// `out` as summarize() fills it for `t` (dtype, shape, device, requires_grad, numel) with
/// the statistics of `r` counted `repeat` times; hash unset, hist empty.
void fill_from_reduce(const at::Tensor& t, const ReduceStats& r, int64_t repeat, TensorStats& out);

/// One launched batch. results() is valid once ready() returned true or wait() returned.
class ReduceInFlight {
 public:
  virtual ~ReduceInFlight() = default;
  virtual bool ready() = 0;  ///< non-blocking (cudaEventQuery)
  virtual void wait() = 0;   ///< blocks (cudaEventSynchronize); the worker or drain only
  virtual const ReduceStats* results() const = 0;
};

class ReduceBackend {
 public:
  virtual ~ReduceBackend() = default;
  /// Launches descs (first_block/num_blocks filled in by the caller) on `stream`; throws on
  /// a launch failure. Must not block on the device.
  virtual std::unique_ptr<ReduceInFlight> launch(std::vector<ReduceDesc> descs,
                                                 uint32_t total_blocks,
                                                 const c10::optional<c10::Stream>& stream) = 0;
};

/// Runs the kernel's per-thread code on the host: each descriptor is split into the strided
/// shares of the kernel's threads (num_blocks * kReduceThreads), combined in a shuffled
/// order. While hold(true) is on, new batches stay not ready until release() (or their
/// wait()): the test stand-in for a kernel still running.
class HostReduceBackend : public ReduceBackend {
 public:
  std::unique_ptr<ReduceInFlight> launch(std::vector<ReduceDesc> descs, uint32_t total_blocks,
                                         const c10::optional<c10::Stream>& stream) override;
  void hold(bool on) { hold_->on = on; }
  void release() {
    hold_->on = false;
    ++hold_->releases;
  }
  int launches() const { return launches_; }

  struct Hold {
    bool on = false;   ///< batches launched now are held
    int releases = 0;  ///< release() calls so far
  };

 private:
  int launches_ = 0;
  std::shared_ptr<Hold> hold_ = std::make_shared<Hold>();
};

class DeferredStats {
 public:
  struct Item {
    at::Tensor tensor;  ///< held until its batch completed
    TensorStats* out = nullptr;
    std::function<void()> done;  ///< after *out is filled (on the completing thread)
  };

  explicit DeferredStats(std::unique_ptr<ReduceBackend> backend);
  ~DeferredStats();  ///< waits for every batch in flight

  /// Whether make_reduce_desc() accepts `t`.
  static bool supported(const at::Tensor& t);
  /// Launches one batch for `items` (every tensor on `stream`'s device; all supported()).
  /// Never blocks on the device. Throws (nothing launched, nothing held) when the launch
  /// fails or an item is not supported.
  void submit(std::vector<Item> items, const c10::optional<c10::Stream>& stream);
  /// Completes the batches whose results are there, oldest first; returns how many items.
  size_t poll();
  /// Completes every batch in flight, waiting as needed.
  size_t wait_all();
  size_t in_flight() const;

 private:
  struct Batch {
    std::vector<Item> items;
    std::vector<int64_t> repeat;
    std::unique_ptr<ReduceInFlight> handle;
  };
  size_t complete(std::vector<std::unique_ptr<Batch>>& done);

  std::unique_ptr<ReduceBackend> backend_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Batch>> batches_;  // launch order
  std::mutex complete_mu_;                       // one completer at a time: order kept
};

}  // namespace detail
}  // namespace precprobe
