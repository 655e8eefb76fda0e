// Single-pass statistics of CPU tensors: a strided walk that hands contiguous runs of at
// most kStatsBlock elements to the vectorised block kernels (and to the hasher while the
// run is still in L1), plus the ATen fallback for other devices and the cache key.
#include "stats/stats.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <memory>
#include <string>

#include "precprobe/error.h"
#include "stats/stats_internal.h"
#include "stats/stats_kernels.h"
#include "stats/tensor_hasher.h"

namespace precprobe {
namespace detail {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Runs at least this long are summarised where they lie; shorter ones are first packed into
// a block buffer so that per-block overhead stays amortised (e.g. rows of a narrow view).
constexpr int64_t kDirectRun = 512;

// The dimensions of a view after dropping size-1 dims and merging dims that are
// contiguous with each other. `repeat` counts the copies left out by dropping stride-0
// (expanded) dims, when the walk order allows it.
struct Geometry {
  c10::SmallVector<int64_t, 8> sizes;
  c10::SmallVector<int64_t, 8> strides;
  int64_t repeat = 1;
};

void coalesce(Geometry& g) {
  Geometry out;
  out.repeat = g.repeat;
  for (size_t d = 0; d < g.sizes.size(); ++d) {
    if (g.sizes[d] == 1) continue;
    if (!out.sizes.empty() && out.strides.back() == g.strides[d] * g.sizes[d]) {
      out.sizes.back() *= g.sizes[d];
      out.strides.back() = g.strides[d];
    } else {
      out.sizes.push_back(g.sizes[d]);
      out.strides.push_back(g.strides[d]);
    }
  }
  g = std::move(out);
}

// Logical (row-major) order: what the hash needs.
Geometry logical_geometry(const at::Tensor& t) {
  Geometry g;
  g.sizes.assign(t.sizes().begin(), t.sizes().end());
  g.strides.assign(t.strides().begin(), t.strides().end());
  coalesce(g);
  return g;
}

// Memory order: statistics do not depend on element order, so a transposed matrix is read
// as the contiguous block it is, and expanded dims are read once and counted `repeat` times.
Geometry memory_geometry(const at::Tensor& t) {
  Geometry g;
  c10::SmallVector<std::pair<int64_t, int64_t>, 8> dims;  // (stride, size)
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 1) continue;
    if (t.stride(d) == 0) {
      g.repeat *= t.size(d);
      continue;
    }
    dims.emplace_back(t.stride(d), t.size(d));
  }
  std::stable_sort(dims.begin(), dims.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [stride, size] : dims) {
    g.sizes.push_back(size);
    g.strides.push_back(stride);
  }
  coalesce(g);
  return g;
}

// Running totals; float64 sums of block sums are compensated (Neumaier) so that the error
// stays that of one block however many blocks there are.
struct Totals {
  double sum = 0, sum_c = 0, sumsq = 0, sumsq_c = 0;
  double min = kInf, max = -kInf;
  int64_t zero = 0, neg = 0, pos = 0, nan = 0, pinf = 0, ninf = 0;

  static void add(double& s, double& c, double v) {
    const double t = s + v;
    if (std::isfinite(t)) c += std::abs(s) >= std::abs(v) ? (s - t) + v : (v - t) + s;
    s = t;
  }
  void add(const BlockStats& b) {
    add(sum, sum_c, b.sum);
    add(sumsq, sumsq_c, b.sumsq);
    min = std::min(min, b.min);
    max = std::max(max, b.max);
    zero += b.zero;
    neg += b.neg;
    pos += b.pos;
    nan += b.nan;
    pinf += b.pinf;
    ninf += b.ninf;
  }
};

// The range bins of an element type (stats_kernels.h): floating types have them, integers
// and bool have none.
template <typename T>
struct RangeLayout {
  static constexpr int kBins = 0, kMinExp = 0;
};
template <>
struct RangeLayout<float> {
  static constexpr int kBins = kFloatRangeBins, kMinExp = kFloatRangeMinExp;
};
template <>
struct RangeLayout<c10::BFloat16> : RangeLayout<float> {};
template <>
struct RangeLayout<c10::Half> : RangeLayout<float> {};
template <>
struct RangeLayout<double> {
  static constexpr int kBins = kDoubleRangeBins, kMinExp = kDoubleRangeMinExp;
};

// One block's statistics and, with range != nullptr (floating types), its exponent counts.
template <typename T>
void block(const T* p, int64_t n, BlockStats& b, int64_t* range) {
  if constexpr (RangeLayout<T>::kBins > 0) {
    block_stats(p, n, b, range);
  } else {
    block_stats(p, n, b);
  }
}

// Receives the elements of a view in walk order and summarises (and/or hashes) them.
template <typename T, bool kStats>
class BlockSink {
 public:
  explicit BlockSink(TensorHasher* hasher, int64_t* range = nullptr)
      : hasher_(hasher), range_(range) {}

  void run(const T* p, int64_t n) {
    if (n >= kDirectRun) {
      flush();
      for (int64_t i = 0; i < n; i += kStatsBlock) process(p + i, std::min(kStatsBlock, n - i));
      return;
    }
    while (n > 0) {
      const int64_t m = std::min(n, kStatsBlock - fill_);
      std::copy(p, p + m, buf_ + fill_);
      fill_ += m;
      p += m;
      n -= m;
      if (fill_ == kStatsBlock) flush();
    }
  }
  void gather(const T* p, int64_t n, int64_t stride) {
    while (n > 0) {
      const int64_t m = std::min(n, kStatsBlock - fill_);
      T* dst = buf_ + fill_;
      for (int64_t i = 0; i < m; ++i) dst[i] = p[i * stride];
      fill_ += m;
      p += m * stride;
      n -= m;
      if (fill_ == kStatsBlock) flush();
    }
  }
  void flush() {
    if (fill_ > 0) process(buf_, fill_);
    fill_ = 0;
  }
  const Totals& totals() const { return totals_; }

 private:
  void process(const T* p, int64_t n) {
    if (kStats) {
      BlockStats b;
      block(p, n, b, range_);
      totals_.add(b);
    }
    if (hasher_) hasher_->update(p, static_cast<size_t>(n) * sizeof(T));
  }

  TensorHasher* hasher_;
  int64_t* range_;
  Totals totals_;
  int64_t fill_ = 0;
  T buf_[kStatsBlock];
};

// Calls fn(offset) for every index of the first `nd_outer` dims of g, in row-major order.
template <typename Fn>
void for_each_outer(const Geometry& g, size_t nd_outer, Fn&& fn) {
  c10::SmallVector<int64_t, 8> index(nd_outer, 0);
  int64_t offset = 0;
  while (true) {
    fn(offset);
    size_t d = nd_outer;
    for (; d-- > 0;) {
      offset += g.strides[d];
      if (++index[d] < g.sizes[d]) break;
      offset -= g.strides[d] * g.sizes[d];
      index[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) return;
  }
}

// Visits every element once in the order of g's dims, in runs along the last one.
template <typename T, typename Sink>
void walk(const T* base, const Geometry& g, Sink& sink) {
  const size_t nd = g.sizes.size();
  if (nd == 0) {  // a single element
    sink.run(base, 1);
  } else {
    const int64_t inner = g.sizes[nd - 1];
    const int64_t inner_stride = g.strides[nd - 1];
    for_each_outer(g, nd - 1, [&](int64_t offset) {
      if (inner_stride == 1) {
        sink.run(base + offset, inner);
      } else {
        sink.gather(base + offset, inner, inner_stride);
      }
    });
  }
  sink.flush();
}

// Elements a tile buffer of walk_tiled holds (256 KiB of float32: L2-resident).
constexpr int64_t kTileElements = int64_t(1) << 18;

// Whether the logical walk of g reads memory across its last dim while the dim before
// it is the near one (a transposed matrix): then walk_tiled is much faster than walk.
bool wants_tiles(const Geometry& g) {
  const size_t nd = g.sizes.size();
  if (nd < 2) return false;
  const int64_t row_stride = g.strides[nd - 2], col_stride = g.strides[nd - 1];
  return col_stride != 1 && row_stride != 0 && row_stride < col_stride &&
         g.sizes[nd - 1] * 2 <= kTileElements;
}

// Logical order for wants_tiles() geometries: copies groups of rows of the last two dims
// into a buffer, reading along the near dim, then hands the rows on in order. The buffer's
// row pitch is padded off a power of two so that its rows do not share L1 sets.
template <typename T, typename Sink>
void walk_tiled(const T* base, const Geometry& g, Sink& sink) {
  const size_t nd = g.sizes.size();
  const int64_t rows = g.sizes[nd - 2], cols = g.sizes[nd - 1];
  const int64_t row_stride = g.strides[nd - 2], col_stride = g.strides[nd - 1];
  const int64_t pitch = cols + 64 / static_cast<int64_t>(sizeof(T));
  const int64_t group = std::min<int64_t>(rows, std::clamp<int64_t>(kTileElements / pitch, 1, 64));
  std::unique_ptr<T[]> tile(new T[static_cast<size_t>(group * pitch)]);  // not vector<bool>
  for_each_outer(g, nd - 2, [&](int64_t offset) {
    for (int64_t r0 = 0; r0 < rows; r0 += group) {
      const int64_t nr = std::min(group, rows - r0);
      const T* src = base + offset + r0 * row_stride;
      for (int64_t c = 0; c < cols; ++c) {
        const T* col = src + c * col_stride;
        for (int64_t r = 0; r < nr; ++r) tile[r * pitch + c] = col[r * row_stride];
      }
      for (int64_t r = 0; r < nr; ++r) sink.run(tile.get() + r * pitch, cols);
    }
  });
  sink.flush();
}

template <typename T, typename Sink>
void walk_logical(const T* base, const Geometry& g, Sink& sink) {
  if (wants_tiles(g)) {
    walk_tiled(base, g, sink);
  } else {
    walk(base, g, sink);
  }
}

void fill_stats(const Totals& s, int64_t repeat, TensorStats& out) {
  const double r = static_cast<double>(repeat);
  out.nan = s.nan * repeat;
  out.pinf = s.pinf * repeat;
  out.ninf = s.ninf * repeat;
  out.zero = s.zero * repeat;
  out.neg = s.neg * repeat;
  out.pos = s.pos * repeat;
  if (out.zero + out.neg + out.pos == 0) {
    out.min = out.max = out.mean = out.norm = kNaN;
    return;
  }
  const double sum = (s.sum + s.sum_c) * r;
  out.min = s.min;
  out.max = s.max;
  out.mean = sum / static_cast<double>(out.zero + out.neg + out.pos);
  out.norm = std::sqrt((s.sumsq + s.sumsq_c) * r);
}

// `view` holds the values (for complex: view_as_real of the tensor); `hasher` has already
// received the header of the original tensor. With `with_range` (and out != nullptr) a
// floating view also gets its range statistics, counted in the same pass.
template <typename T>
void summarize_cpu(const at::Tensor& view, TensorStats* out, TensorHasher* hasher,
                   bool with_range) {
  using Range = RangeLayout<T>;
  const T* base = static_cast<const T*>(view.data_ptr());
  const int64_t n = view.numel();
  int64_t bins[Range::kBins > 0 ? Range::kBins : 1];  // zeroed only when used
  int64_t* range = nullptr;
  if (Range::kBins > 0 && with_range && out != nullptr) {
    std::fill_n(bins, Range::kBins, int64_t{0});
    range = bins;
  }
  const auto finish = [&](const Totals& s, int64_t repeat) {
    fill_stats(s, repeat, *out);
    if (range != nullptr) fill_range(range, Range::kBins, Range::kMinExp, repeat, *out);
  };
  if (view.is_contiguous()) {  // the common case: blocks straight from memory
    if (out == nullptr) {
      hasher->update(base, static_cast<size_t>(n) * sizeof(T));
      return;
    }
    Totals s;
    for (int64_t i = 0; i < n; i += kStatsBlock) {
      const int64_t m = std::min(kStatsBlock, n - i);
      BlockStats b;
      block(base + i, m, b, range);
      s.add(b);
      if (hasher) hasher->update(base + i, static_cast<size_t>(m) * sizeof(T));
    }
    finish(s, 1);
    return;
  }
  if (hasher == nullptr) {  // statistics only: any order will do
    const Geometry g = memory_geometry(view);
    BlockSink<T, true> sink(nullptr, range);
    walk(base, g, sink);
    finish(sink.totals(), g.repeat);
    return;
  }
  const Geometry g = logical_geometry(view);
  if (out == nullptr) {
    BlockSink<T, false> sink(hasher);
    walk_logical(base, g, sink);
    return;
  }
  BlockSink<T, true> sink(hasher, range);
  walk_logical(base, g, sink);
  finish(sink.totals(), g.repeat);
}

// Calls summarize_cpu<T> for the C++ type T of the view's dtype; false if unsupported.
bool dispatch_cpu(const at::Tensor& view, TensorStats* out, TensorHasher* hasher, bool with_range) {
  switch (view.scalar_type()) {
    case at::kFloat:
      summarize_cpu<float>(view, out, hasher, with_range);
      return true;
    case at::kDouble:
      summarize_cpu<double>(view, out, hasher, with_range);
      return true;
    case at::kBFloat16:
      summarize_cpu<c10::BFloat16>(view, out, hasher, with_range);
      return true;
    case at::kHalf:
      summarize_cpu<c10::Half>(view, out, hasher, with_range);
      return true;
    case at::kByte:
      summarize_cpu<uint8_t>(view, out, hasher, with_range);
      return true;
    case at::kChar:
      summarize_cpu<int8_t>(view, out, hasher, with_range);
      return true;
    case at::kShort:
      summarize_cpu<int16_t>(view, out, hasher, with_range);
      return true;
    case at::kInt:
      summarize_cpu<int32_t>(view, out, hasher, with_range);
      return true;
    case at::kLong:
      summarize_cpu<int64_t>(view, out, hasher, with_range);
      return true;
    case at::kBool:
      summarize_cpu<bool>(view, out, hasher, with_range);
      return true;
    default:
      return false;
  }
}

// Whether the values can be read through data_ptr() and strides on this thread.
bool readable_on_cpu(const at::Tensor& t) {
  return t.layout() == c10::kStrided && t.device().is_cpu() && !t.is_quantized() &&
         !t.is_nested() && t.has_storage();
}

// Hashes `t` (header included) and, when out != nullptr, summarises it into *out.
// Returns false when the dtype has no CPU kernel.
bool run_cpu(const at::Tensor& t, TensorStats* out, TensorHasher* hasher, bool with_range) {
  if (hasher) hasher->header(dtype_name(t), t.sizes());
  if (t.numel() == 0) return true;
  // A ZeroTensor (autograd's efficient zeros) has no data behind its pointer: rare, so
  // materialise it.
  const at::Tensor values = values_view(t._is_zerotensor() ? at::zeros(t.sizes(), t.options()) : t);
  if (values.data_ptr() == nullptr) return false;
  return dispatch_cpu(values, out, hasher, with_range);
}

// Receives the runs of a walk and tests them for NaN/Inf (has_non_finite).
template <typename T>
struct DetectSink {
  bool found = false;
  void run(const T* p, int64_t n) {
    if (!found) found = any_non_finite(p, n);
  }
  void gather(const T* p, int64_t n, int64_t stride) {
    for (int64_t i = 0; i < n && !found; ++i) {
      const double x = static_cast<double>(p[i * stride]);
      found = !std::isfinite(x);
    }
  }
  void flush() {}
};

template <typename T>
bool detect_cpu(const at::Tensor& v) {
  const T* base = static_cast<const T*>(v.data_ptr());
  if (v.is_non_overlapping_and_dense()) return any_non_finite(base, v.numel());
  DetectSink<T> sink;
  walk(base, memory_geometry(v), sink);
  return sink.found;
}

}  // namespace

bool has_nan_or_pinf(const at::Tensor& t) noexcept {
  try {
    if (!t.defined() || t.is_meta() || t.numel() == 0) return false;
    if (!at::isFloatingType(t.scalar_type()) && !at::isComplexType(t.scalar_type())) return false;
    if (t.is_complex()) return has_non_finite(t);
    if (t.layout() != c10::kStrided || t.is_quantized() || t.is_nested()) return false;
    const at::Tensor v = t.detach();
    return at::logical_or(v.isnan(), v.isposinf()).any().item<bool>();
  } catch (const std::exception& e) {
    report_error(std::string("precprobe: the NaN/+Inf test failed: ") + e.what());
  } catch (...) {
    report_error("precprobe: the NaN/+Inf test failed");
  }
  return true;
}

bool only_zero_or_minus_inf(const at::Tensor& t) noexcept {
  try {
    if (!t.defined() || t.is_meta() || t.numel() == 0 || !at::isFloatingType(t.scalar_type()))
      return false;
    if (t.layout() != c10::kStrided || t.is_quantized() || t.is_nested()) return false;
    const at::Tensor v = t.detach();
    const at::Tensor minus_inf = v.isneginf();
    return minus_inf.any().item<bool>() && at::logical_or(v == 0, minus_inf).all().item<bool>();
  } catch (const std::exception& e) {
    report_error(std::string("precprobe: the additive mask test failed: ") + e.what());
  } catch (...) {
    report_error("precprobe: the additive mask test failed");
  }
  return false;
}

bool has_non_finite(const at::Tensor& t) noexcept {
  try {
    if (!t.defined() || t.is_meta() || t.numel() == 0) return false;
    if (!at::isFloatingType(t.scalar_type()) && !at::isComplexType(t.scalar_type())) return false;
    if (!readable_on_cpu(t)) {
      if (t.layout() != c10::kStrided || t.is_quantized() || t.is_nested()) return false;
      return !at::isfinite(t.detach()).all().item<bool>();  // CUDA and other devices
    }
    if (t._is_zerotensor()) return false;
    at::Tensor v = t;
    if (v.is_complex()) v = at::view_as_real(v.is_conj() ? v.conj() : v);  // same magnitudes
    if (v.data_ptr() == nullptr) return false;
    switch (v.scalar_type()) {
      case at::kFloat:
        return detect_cpu<float>(v);
      case at::kDouble:
        return detect_cpu<double>(v);
      case at::kBFloat16:
        return detect_cpu<c10::BFloat16>(v);
      case at::kHalf:
        return detect_cpu<c10::Half>(v);
      default:
        return !at::isfinite(v).all().item<bool>();
    }
  } catch (const std::exception& e) {
    report_error(std::string("precprobe: the NaN/Inf test failed: ") + e.what());
  } catch (...) {
    report_error("precprobe: the NaN/Inf test failed (unknown exception)");
  }
  return false;
}

void summarize(const at::Tensor& t, TensorStats& out, bool with_hash, bool with_range) noexcept {
  try {
    out.hist.clear();
    fill_header(t, out);
    if (!t.defined() || t.is_meta()) {
      if (with_hash) out.hash = detail::logical_order_hash(t);
      return;
    }
    if (!readable_on_cpu(t)) {
      if (t.layout() == c10::kStrided && !t.is_quantized() && !t.is_nested()) {
        summarize_with_aten(t, out, with_hash, with_range);  // CUDA and other devices
      } else if (with_hash) {
        out.hash = detail::logical_order_hash(t);
      }
      return;
    }
    TensorHasher hasher;
    run_cpu(t, &out, with_hash ? &hasher : nullptr, with_range);
    if (with_range && t.numel() == 0 &&
        (at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type())))
      out.has_range = true;                     // recorded: no finite non-zero element
    if (with_hash) out.hash = hasher.digest();  // as logical_order_hash(t)
    if (c10::isIntegralType(t.scalar_type(), /*includeBool=*/false)) add_histogram(t, out);
  } catch (const std::exception& e) {
    report_error(std::string("precprobe: statistics of a ") + out.dtype +
                 " tensor failed: " + e.what());
  } catch (...) {
    report_error("precprobe: statistics of a tensor failed (unknown exception)");
  }
}

uint64_t logical_order_hash(const at::Tensor& t) {
  TensorHasher hasher;
  if (!t.defined() || t.is_meta() || t.layout() != c10::kStrided || t.is_quantized() ||
      t.is_nested()) {
    // No values to read: the header alone (dtype, shape).
    hasher.header(dtype_name(t), t.defined() ? t.sizes() : c10::IntArrayRef{});
    return hasher.digest();
  }
  if (!t.device().is_cpu()) return detail::logical_order_hash(t.detach().cpu());
  run_cpu(t, nullptr, &hasher, false);
  return hasher.digest();
}

}  // namespace detail
}  // namespace precprobe
