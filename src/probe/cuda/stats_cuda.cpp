// The CUDA backend of DeferredStats (launch, asynchronous copy into pinned memory, event)
// and the StatsEngine hook that hands it CUDA tensors (see stats_cuda.h).
#include "stats_cuda.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "precprobe/error.h"
#include "stats/stats_batch.h"
#include "stats_kernel.h"

namespace precprobe {
namespace detail {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear a non-sticky error
    throw std::runtime_error(std::string("precprobe device statistics: ") + what + ": " +
                             cudaGetErrorString(e));
  }
}

// Pinned host buffers, reused: cudaHostAlloc costs milliseconds, a launch only microseconds.
class PinnedPool {
 public:
  struct Buffer {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  Buffer get(size_t bytes) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (size_t i = 0; i < free_.size(); ++i) {
        if (free_[i].bytes >= bytes) {
          Buffer b = free_[i];
          free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
          return b;
        }
      }
    }
    size_t size = 4096;
    while (size < bytes) size *= 2;
    Buffer b;
    check(cudaHostAlloc(&b.ptr, size, cudaHostAllocDefault), "cudaHostAlloc");
    b.bytes = size;
    return b;
  }
  void put(Buffer b) {
    std::lock_guard<std::mutex> lk(mu_);
    free_.push_back(b);
  }

 private:
  std::mutex mu_;
  std::vector<Buffer> free_;
};

PinnedPool& pinned_pool() {
  static auto* pool = new PinnedPool;  // never destroyed: the CUDA runtime may be gone at exit
  return *pool;
}

size_t round_up(size_t n) { return (n + 255) & ~size_t{255}; }

class CudaInFlight : public ReduceInFlight {
 public:
  CudaInFlight(size_t n, PinnedPool::Buffer host, c10::DataPtr device, cudaEvent_t event,
               int device_index)
      : n_(n), host_(host), device_(std::move(device)), event_(event), index_(device_index) {}
  ~CudaInFlight() override {
    // Only destroyed after ready() or wait(): the device no longer touches the buffers.
    c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(index_));
    cudaEventDestroy(event_);
    device_.clear();
    pinned_pool().put(host_);
  }
  bool ready() override {
    if (done_) return true;
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) return false;
    finish(e);
    return true;
  }
  void wait() override {
    if (!done_) finish(cudaEventSynchronize(event_));
  }
  const ReduceStats* results() const override {
    return reinterpret_cast<const ReduceStats*>(static_cast<const char*>(host_.ptr) +
                                                round_up(n_ * sizeof(ReduceDesc)));
  }

 private:
  void finish(cudaError_t e) {
    done_ = true;
    if (e == cudaSuccess) return;
    cudaGetLastError();
    report_error(std::string("precprobe: device statistics failed: ") + cudaGetErrorString(e));
    // No numbers rather than garbage: zero counts, NaN statistics.
    auto* r = const_cast<ReduceStats*>(results());
    for (size_t i = 0; i < n_; ++i) {
      reduce_init(r[i]);
      r[i].min = r[i].max = reduce_nan();
    }
  }

  size_t n_;
  PinnedPool::Buffer host_;
  c10::DataPtr device_;
  cudaEvent_t event_;
  int index_;
  bool done_ = false;
};

class CudaReduceBackend : public ReduceBackend {
 public:
  std::unique_ptr<ReduceInFlight> launch(std::vector<ReduceDesc> descs, uint32_t total_blocks,
                                         const c10::optional<c10::Stream>& stream) override {
    if (!stream || stream->device_type() != c10::DeviceType::CUDA)
      throw std::invalid_argument("device statistics: no CUDA stream");
    const c10::cuda::CUDAStream cs(c10::cuda::CUDAStream::UNCHECKED, *stream);
    c10::cuda::CUDAStreamGuard on_stream(cs);  // device and current stream
    const size_t n = descs.size();
    const size_t desc_bytes = round_up(n * sizeof(ReduceDesc));
    const size_t result_bytes = round_up(n * sizeof(ReduceStats));
    const size_t partial_bytes = round_up(size_t{total_blocks} * sizeof(ReduceStats));
    const size_t counter_bytes = round_up(n * sizeof(unsigned int));
    PinnedPool::Buffer host = pinned_pool().get(desc_bytes + result_bytes);
    c10::DataPtr device;
    cudaEvent_t event = nullptr;
    try {
      // The caching allocator ties the block to this stream; it is freed only after the
      // event has passed, so no other stream can get it while the kernel runs.
      device = c10::cuda::CUDACachingAllocator::get()->allocate(desc_bytes + result_bytes +
                                                                partial_bytes + counter_bytes);
      char* d = static_cast<char*>(device.get());
      auto* d_descs = reinterpret_cast<ReduceDesc*>(d);
      auto* d_results = reinterpret_cast<ReduceStats*>(d + desc_bytes);
      auto* d_partials = reinterpret_cast<ReduceStats*>(d + desc_bytes + result_bytes);
      auto* d_counters =
          reinterpret_cast<unsigned int*>(d + desc_bytes + result_bytes + partial_bytes);
      std::memcpy(host.ptr, descs.data(), n * sizeof(ReduceDesc));
      cudaStream_t st = cs.stream();
      check(cudaMemcpyAsync(d_descs, host.ptr, n * sizeof(ReduceDesc), cudaMemcpyHostToDevice, st),
            "descriptor upload");
      check(cudaMemsetAsync(d_counters, 0, n * sizeof(unsigned int), st), "counter reset");
      check(static_cast<cudaError_t>(launch_reduce_stats(d_descs, static_cast<int>(n), total_blocks,
                                                         d_partials, d_counters, d_results, st)),
            "kernel launch");
      check(cudaMemcpyAsync(static_cast<char*>(host.ptr) + desc_bytes, d_results,
                            n * sizeof(ReduceStats), cudaMemcpyDeviceToHost, st),
            "result download");
      check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
      check(cudaEventRecord(event, st), "cudaEventRecord");
    } catch (...) {
      // Nothing was enqueued after a failing call; what was enqueued only touches `device`,
      // whose block the caching allocator reuses on this stream only.
      if (event) cudaEventDestroy(event);
      cudaStreamSynchronize(cs.stream());  // the pinned buffer may still be read by a copy
      pinned_pool().put(host);
      throw;
    }
    return std::make_unique<CudaInFlight>(n, host, std::move(device), event, cs.device_index());
  }
};

// Batches in flight before new CUDA jobs fall back to the ATen path (which waits for the
// device): bounds the tensor memory held when the device falls behind the worker.
constexpr size_t kMaxInFlight = 4096;

DeferredStats& device_batches() {
  static auto* d = new DeferredStats(std::make_unique<CudaReduceBackend>());  // never destroyed
  return *d;
}

}  // namespace

bool defer_device_stats(const std::shared_ptr<Slot>& s, bool with_hash) {
  // The hash is not computed on the device (see docs/cuda.md): those jobs keep the old path.
  if (with_hash || !s->save_path.empty() || s->unread) return false;
  const at::Tensor& t = s->tensor;
  if (!t.defined() || !t.is_cuda() || !DeferredStats::supported(t)) return false;
  if (device_batches().in_flight() >= kMaxInFlight && device_batches().poll() == 0 &&
      device_batches().in_flight() >= kMaxInFlight)
    return false;
  c10::optional<c10::Stream> stream = s->stream;
  if (!stream) stream = c10::cuda::getCurrentCUDAStream(t.device().index()).unwrap();
  DeferredStats::Item item;
  item.tensor = t;
  item.out = &s->stats;
  item.done = [s] {  // holds the slot until it is complete
    if (s->counter && s->counter->current_version() != s->key.version) {
      s->stale = true;
      report_error(std::string("precprobe: a tensor captured by ") + s->origin +
                   " changed in place before its statistics were computed (version " +
                   std::to_string(s->key.version) + " -> " +
                   std::to_string(s->counter->current_version()) + ")");
    }
    s->state.store(Slot::kDone, std::memory_order_release);
  };
  std::vector<DeferredStats::Item> items;
  items.push_back(std::move(item));
  try {
    device_batches().submit(std::move(items), stream);
  } catch (const std::exception& e) {
    report_error(std::string("precprobe: ") + e.what() + " (falling back to ATen)");
    return false;
  }
  s->tensor.reset();  // the batch holds it
  return true;
}

size_t poll_device_stats() {
  try {
    return device_batches().poll();
  } catch (const std::exception& e) {
    report_error(std::string("precprobe: device statistics: ") + e.what());
    return 0;
  }
}

size_t wait_device_stats() {
  try {
    return device_batches().wait_all();
  } catch (const std::exception& e) {
    report_error(std::string("precprobe: device statistics: ") + e.what());
    return 0;
  }
}

size_t device_stats_in_flight() { return device_batches().in_flight(); }

}  // namespace detail
}  // namespace precprobe
