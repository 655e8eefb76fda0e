// Deferred statistics: tensor descriptors, the host backend and the completion queue (see
// stats_batch.h).
#include "stats/stats_batch.h"

#include <torch/csrc/api/include/torch/version.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <utility>

#include "cuda/stats_kernel.h"

// float8 dtypes exist from LibTorch 2.1 on (PRECPROBE_TORCH_AT_LEAST(2, 1) of torch_compat.h,
// which pulls in RecordFunction, not needed here).
#define PRECPROBE_HAS_FLOAT8 \
  (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1))

namespace precprobe {
namespace detail {

int reduce_dtype_of(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return kReduceF32;
    case c10::ScalarType::Double:
      return kReduceF64;
    case c10::ScalarType::Half:
      return kReduceF16;
    case c10::ScalarType::BFloat16:
      return kReduceBF16;
#if PRECPROBE_HAS_FLOAT8
    case c10::ScalarType::Float8_e4m3fn:
      return kReduceF8E4M3FN;
    case c10::ScalarType::Float8_e5m2:
      return kReduceF8E5M2;
#endif
    default:
      return -1;
  }
}

bool make_reduce_desc(const at::Tensor& t, ReduceDesc& d, int64_t& repeat) {
  if (!t.defined() || t.layout() != c10::kStrided || t.is_quantized() || t.is_nested() ||
      !t.has_storage() || t.is_conj() || t.is_neg() || t._is_zerotensor())
    return false;
  const int dtype = reduce_dtype_of(t.scalar_type());
  if (dtype < 0) return false;
  d = ReduceDesc{};
  d.dtype = static_cast<uint8_t>(dtype);
  d.numel = t.numel();
  repeat = 1;
  if (d.numel == 0) {
    d.data = nullptr;
    d.ndim = 1;
    d.sizes[0] = 0;
    d.strides[0] = 1;
    return true;
  }
  d.data = t.data_ptr();
  if (d.data == nullptr) return false;
  // Memory order, as stats.cpp's memory_geometry(): statistics ignore element order.
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (int64_t k = 0; k < t.dim(); ++k) {
    if (t.size(k) == 1) continue;
    if (t.stride(k) == 0) {
      repeat *= t.size(k);
      continue;
    }
    dims.emplace_back(t.stride(k), t.size(k));
  }
  std::stable_sort(dims.begin(), dims.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& [stride, size] : dims) {
    if (!merged.empty() && merged.back().first == stride * size) {
      merged.back().second *= size;
      merged.back().first = stride;
    } else {
      merged.emplace_back(stride, size);
    }
  }
  if (merged.size() > static_cast<size_t>(kReduceMaxDims)) return false;
  d.ndim = static_cast<int32_t>(merged.size());
  int64_t count = 1;
  for (size_t k = 0; k < merged.size(); ++k) {
    d.strides[k] = merged[k].first;
    d.sizes[k] = merged[k].second;
    count *= merged[k].second;
  }
  d.numel = count;  // the distinct elements read; numel() == count * repeat
  return true;
}

void fill_from_reduce(const at::Tensor& t, const ReduceStats& r, int64_t repeat, TensorStats& out) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  out.dtype = c10::toString(t.scalar_type());
  out.shape.assign(t.sizes().begin(), t.sizes().end());
  out.device = t.device().str();
  out.requires_grad = t.requires_grad();
  out.numel = t.numel();
  out.hash.reset();
  out.hist.clear();
  out.range.clear();  // the device kernel counts no exponents (docs/cuda.md)
  out.has_range = false;
  const auto n = [repeat](unsigned long long v) { return static_cast<int64_t>(v) * repeat; };
  out.nan = n(r.nan);
  out.pinf = n(r.pinf);
  out.ninf = n(r.ninf);
  out.zero = n(r.zero);
  out.neg = n(r.neg);
  out.pos = n(r.pos);
  if (out.zero + out.neg + out.pos == 0) {
    out.min = out.max = out.mean = out.norm = kNaN;
    return;
  }
  const double k = static_cast<double>(repeat);
  out.min = r.min;
  out.max = r.max;
  out.mean = r.sum * k / static_cast<double>(out.zero + out.neg + out.pos);
  out.norm = std::sqrt(r.sumsq * k);
}

namespace {

class HostInFlight : public ReduceInFlight {
 public:
  HostInFlight(std::vector<ReduceStats> results, std::shared_ptr<HostReduceBackend::Hold> hold)
      : results_(std::move(results)),
        hold_(std::move(hold)),
        held_(hold_->on),
        releases_(hold_->releases) {}
  bool ready() override { return !held_ || hold_->releases > releases_; }
  void wait() override { held_ = false; }  // a blocking wait always ends
  const ReduceStats* results() const override { return results_.data(); }

 private:
  std::vector<ReduceStats> results_;
  std::shared_ptr<HostReduceBackend::Hold> hold_;
  bool held_;
  int releases_;
};

}  // namespace

std::unique_ptr<ReduceInFlight> HostReduceBackend::launch(
    std::vector<ReduceDesc> descs, uint32_t /*total_blocks*/,
    const c10::optional<c10::Stream>& /*stream*/) {
  ++launches_;
  std::vector<ReduceStats> results(descs.size());
  std::mt19937 rng(static_cast<uint32_t>(launches_));
  for (size_t i = 0; i < descs.size(); ++i) {
    // The kernel's partition: thread t of block b reads b*T + t, then every blocks*T-th.
    const int64_t threads = int64_t{descs[i].num_blocks} * kReduceThreads;
    std::vector<ReduceStats> shares(static_cast<size_t>(threads));
    for (int64_t k = 0; k < threads; ++k) {
      reduce_init(shares[k]);
      if (!reduce_strided_any(descs[i], k, threads, shares[k]))
        throw std::runtime_error("HostReduceBackend: unknown dtype");
    }
    std::shuffle(shares.begin(), shares.end(), rng);  // any combine order
    ReduceStats total = shares[0];
    for (size_t k = 1; k < shares.size(); ++k) reduce_combine(total, shares[k]);
    results[i] = total;
  }
  return std::make_unique<HostInFlight>(std::move(results), hold_);
}

DeferredStats::DeferredStats(std::unique_ptr<ReduceBackend> backend)
    : backend_(std::move(backend)) {}

DeferredStats::~DeferredStats() {
  try {
    wait_all();
  } catch (...) {
  }
}

bool DeferredStats::supported(const at::Tensor& t) {
  ReduceDesc d;
  int64_t repeat = 1;
  return make_reduce_desc(t, d, repeat);
}

void DeferredStats::submit(std::vector<Item> items, const c10::optional<c10::Stream>& stream) {
  if (items.empty()) return;
  auto batch = std::make_unique<Batch>();
  std::vector<ReduceDesc> descs(items.size());
  batch->repeat.resize(items.size());
  uint32_t blocks = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!make_reduce_desc(items[i].tensor, descs[i], batch->repeat[i]))
      throw std::invalid_argument("DeferredStats: a tensor the kernel cannot read");
    descs[i].first_block = blocks;
    descs[i].num_blocks = reduce_blocks_for(descs[i].numel);
    blocks += descs[i].num_blocks;
  }
  batch->handle = backend_->launch(std::move(descs), blocks, stream);
  batch->items = std::move(items);
  std::lock_guard<std::mutex> lk(mu_);
  batches_.push_back(std::move(batch));
}

size_t DeferredStats::complete(std::vector<std::unique_ptr<Batch>>& done) {
  size_t n = 0;
  for (auto& b : done) {
    const ReduceStats* r = b->handle->results();
    for (size_t i = 0; i < b->items.size(); ++i) {
      Item& it = b->items[i];
      if (it.out) fill_from_reduce(it.tensor, r[i], b->repeat[i], *it.out);
      it.tensor.reset();  // the device may reuse the memory now
      if (it.done) it.done();
      ++n;
    }
  }
  done.clear();  // frees the device and pinned buffers
  return n;
}

size_t DeferredStats::poll() {
  std::lock_guard<std::mutex> order(complete_mu_);
  std::vector<std::unique_ptr<Batch>> done;
  {
    std::lock_guard<std::mutex> lk(mu_);
    // Oldest first, stopping at the first unfinished batch: results leave in launch order.
    size_t k = 0;
    while (k < batches_.size() && batches_[k]->handle->ready()) ++k;
    for (size_t i = 0; i < k; ++i) done.push_back(std::move(batches_[i]));
    batches_.erase(batches_.begin(), batches_.begin() + static_cast<std::ptrdiff_t>(k));
  }
  return complete(done);
}

size_t DeferredStats::wait_all() {
  std::lock_guard<std::mutex> order(complete_mu_);
  std::vector<std::unique_ptr<Batch>> done;
  {
    std::lock_guard<std::mutex> lk(mu_);
    done.swap(batches_);
  }
  for (auto& b : done) b->handle->wait();
  return complete(done);
}

size_t DeferredStats::in_flight() const {
  std::lock_guard<std::mutex> lk(mu_);
  return batches_.size();
}

}  // namespace detail
}  // namespace precprobe
