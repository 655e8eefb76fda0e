// The ATen path of the statistics (tensors not on the CPU), the header fields every path
// fills, range statistics' dense-to-sparse step, and the cache key of a tensor.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <limits>
#include <string>

#include "stats/stats.h"
#include "stats/stats_internal.h"

namespace precprobe {
namespace detail {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const char* layout_name(c10::Layout layout) {
  switch (layout) {
    case c10::kStrided:
      return "Strided";
    case c10::kSparse:
      return "Sparse";
    case c10::kSparseCsr:
      return "SparseCsr";
    case c10::kSparseCsc:
      return "SparseCsc";
    case c10::kSparseBsr:
      return "SparseBsr";
    case c10::kSparseBsc:
      return "SparseBsc";
    case c10::kMkldnn:
      return "Mkldnn";
    default:
      return "Unknown";
  }
}

// dtype_name() into `out`, reusing its buffer.
void assign_dtype_name(const at::Tensor& t, std::string& out) {
  if (!t.defined()) {
    out.assign("undefined");
    return;
  }
  out.assign(c10::toString(t.scalar_type()));
  if (t.layout() != c10::kStrided) out.append(":").append(layout_name(t.layout()));
}

}  // namespace

std::string dtype_name(const at::Tensor& t) {
  std::string name;
  assign_dtype_name(t, name);
  return name;
}

void fill_header(const at::Tensor& t, TensorStats& out) {
  // Assigned in place (no temporary strings): the training thread fills one per tensor it
  // summarises itself.
  assign_dtype_name(t, out.dtype);
  out.shape.clear();
  out.device.assign("cpu");
  out.requires_grad = false;
  out.numel = 0;
  out.nan = out.pinf = out.ninf = out.zero = out.neg = out.pos = 0;
  out.min = out.max = out.mean = out.norm = kNaN;
  out.hash.reset();
  out.range.clear();
  out.has_range = false;
  if (!t.defined()) return;
  out.shape.assign(t.sizes().begin(), t.sizes().end());
  if (!t.is_cpu()) out.device = t.device().str();
  out.requires_grad = t.requires_grad();
  out.numel = t.numel();
}

at::Tensor values_view(const at::Tensor& t) {
  at::Tensor v = t;
  if (v.is_conj()) v = v.resolve_conj();
  if (v.is_neg()) v = v.resolve_neg();
  if (v.is_complex()) v = at::view_as_real(v);
  return v;
}

void fill_range(const int64_t* bins, int num_bins, int min_exponent, int64_t repeat,
                TensorStats& out) {
  out.range.clear();
  out.has_range = true;
  for (int i = 0; i < num_bins; ++i) {
    if (bins[i] != 0) out.range.emplace_back(min_exponent + i, bins[i] * repeat);
  }
}

void range_with_aten(const at::Tensor& t, TensorStats& out) {
  // float64 holds every floating value exactly; frexp's exponent k puts |x| in
  // [2^(k-1), 2^k), so the binade is k - 1 (subnormals included).
  at::NoGradGuard no_grad;
  const at::Tensor x = values_view(t.detach()).to(at::kDouble).reshape({-1});
  const at::Tensor keep = at::isfinite(x).logical_and(x.ne(0));
  const at::Tensor k = std::get<1>(at::frexp(x.masked_select(keep)));
  const at::Tensor index = k.to(at::kLong).sub(1 + kRangeMinExponent);
  const int bins = kRangeMaxExponent - kRangeMinExponent + 1;
  const at::Tensor counts = at::bincount(index, {}, bins).cpu().contiguous();
  fill_range(counts.data_ptr<int64_t>(), bins, kRangeMinExponent, 1, out);
}

void summarize_with_aten(const at::Tensor& t, TensorStats& out, bool with_hash, bool with_range) {
  out.hist.clear();
  fill_header(t, out);
  if (!t.defined() || t.numel() == 0 || t.layout() != c10::kStrided || t.is_meta()) {
    if (with_hash) out.hash = detail::logical_order_hash(t);
    return;
  }
  at::NoGradGuard no_grad;
  // float64 holds every value of every real dtype but int64 beyond 2^53; the device does
  // all the work and one 10-element tensor comes back.
  const at::Tensor x = values_view(t.detach()).to(at::kDouble);
  const at::Tensor finite = at::isfinite(x);
  const at::Tensor v = x.masked_fill(finite.logical_not(), 0.0);
  const at::Tensor r =
      at::stack({x.isnan().sum().to(at::kDouble), at::isposinf(x).sum().to(at::kDouble),
                 at::isneginf(x).sum().to(at::kDouble), x.eq(0).sum().to(at::kDouble),
                 v.lt(0).sum().to(at::kDouble), v.gt(0).sum().to(at::kDouble), v.sum(),
                 v.mul(v).sum(), x.masked_fill(finite.logical_not(), kInf).min(),
                 x.masked_fill(finite.logical_not(), -kInf).max()})
          .cpu();
  const double* q = r.data_ptr<double>();
  out.nan = static_cast<int64_t>(q[0]);
  out.pinf = static_cast<int64_t>(q[1]);
  out.ninf = static_cast<int64_t>(q[2]);
  out.zero = static_cast<int64_t>(q[3]);
  out.neg = static_cast<int64_t>(q[4]);
  out.pos = static_cast<int64_t>(q[5]);
  const int64_t finite_count = out.zero + out.neg + out.pos;
  if (finite_count > 0) {
    out.min = q[8];
    out.max = q[9];
    out.mean = q[6] / static_cast<double>(finite_count);
    out.norm = std::sqrt(q[7]);
  }
  if (with_range && (at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type())))
    range_with_aten(t, out);
  if (with_hash) out.hash = detail::logical_order_hash(t);
}

TensorKey make_key(const at::Tensor& t) noexcept {
  TensorKey k;
  if (!t.defined()) return k;
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  k.dtype = static_cast<int8_t>(t.scalar_type());
  if (impl->has_storage()) {
    k.storage = impl->unsafe_storage().unsafeGetStorageImpl();  // no reference count taken
    k.offset = impl->storage_offset();
  }
  // splitmix64 finalizer over (ndim, sizes, strides): cheap and well mixed.
  auto mix = [](uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
  };
  // A conjugate or negative view shares its base's memory, geometry and version: the bits
  // that say how its values are read are part of what it is.
  uint64_t h =
      mix(0, static_cast<uint64_t>(impl->dim()) | (impl->is_conj() ? uint64_t{1} << 32 : 0) |
                 (impl->is_neg() ? uint64_t{1} << 33 : 0));
  if (impl->layout() == c10::kStrided) {
    for (int64_t s : impl->sizes()) h = mix(h, static_cast<uint64_t>(s));
    for (int64_t s : impl->strides()) h = mix(h, static_cast<uint64_t>(s));
  }
  k.geometry = h;
  const auto& vc = impl->version_counter();
  // Without a storage the key cannot tell two tensors apart (sparse, nested...).
  k.versioned = vc.enabled() && k.storage != nullptr;
  k.version = k.versioned ? vc.current_version() : 0;
  return k;
}

}  // namespace detail
}  // namespace precprobe
