// TEMPORARY stand-in for the stats helper's kernels (deleted once stats_kernels.cpp lands on
// main). Slow but simple: converts to float64 and loops.
#if __has_include("stats_kernels_present.h")
#else
#include <ATen/ATen.h>

#include <cmath>
#include <functional>
#include <limits>

#include "stats.h"

namespace precprobe {
namespace detail {

void summarize(const at::Tensor& t, TensorStats& out, bool with_hash) noexcept {
  try {
    if (!t.defined()) {
      out.dtype = "undefined";
      return;
    }
    out.dtype = c10::toString(t.scalar_type());
    out.shape.assign(t.sizes().begin(), t.sizes().end());
    out.device = t.device().str();
    out.requires_grad = t.requires_grad();
    out.numel = t.numel();
    out.nan = out.pinf = out.ninf = out.zero = out.neg = out.pos = 0;
    double mn = std::numeric_limits<double>::infinity(), mx = -mn, sum = 0, sq = 0;
    int64_t finite = 0;
    auto d = t.detach().to(at::kDouble).contiguous();
    const double* p = d.data_ptr<double>();
    for (int64_t i = 0; i < d.numel(); ++i) {
      double v = p[i];
      if (std::isnan(v)) {
        ++out.nan;
        continue;
      }
      if (std::isinf(v)) {
        v > 0 ? ++out.pinf : ++out.ninf;
        continue;
      }
      if (v == 0) ++out.zero;
      if (v < 0) ++out.neg;
      if (v > 0) ++out.pos;
      mn = std::min(mn, v);
      mx = std::max(mx, v);
      sum += v;
      sq += v * v;
      ++finite;
    }
    const double nan = std::numeric_limits<double>::quiet_NaN();
    out.min = finite ? mn : nan;
    out.max = finite ? mx : nan;
    out.mean = finite ? sum / static_cast<double>(finite) : nan;
    out.norm = finite ? std::sqrt(sq) : nan;
    if (with_hash) out.hash = 0;
  } catch (...) {
  }
}

TensorKey make_key(const at::Tensor& t) noexcept {
  TensorKey k;
  if (!t.defined() || !t.has_storage()) return k;
  k.storage = t.storage().unsafeGetStorageImpl();
  k.offset = t.storage_offset();
  uint64_t h = 1469598103934665603ull;
  for (auto s : t.sizes()) h = (h ^ static_cast<uint64_t>(s)) * 1099511628211ull;
  for (auto s : t.strides()) h = (h ^ static_cast<uint64_t>(s)) * 1099511628211ull;
  k.geometry = h;
  k.dtype = static_cast<int8_t>(t.scalar_type());
  k.versioned = !t.is_inference();
  if (k.versioned) k.version = t._version();
  return k;
}

size_t TensorKeyHash::operator()(const TensorKey& k) const noexcept {
  return std::hash<const void*>()(k.storage) ^ (k.geometry * 31) ^ (k.version * 7919) ^
         static_cast<size_t>(k.offset);
}

}  // namespace detail
}  // namespace precprobe
#endif
