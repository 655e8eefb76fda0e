// GradMonitor: fused per-parameter statistics (CPU) or device-side statistics read back in
// one transfer (CUDA), then the watchpoints on the host.
#include "precprobe/grad_monitor.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "precprobe/error.h"
#include "precprobe/writer.h"
#include "support/grad_loops.h"

namespace precprobe {
namespace {

// The last `capacity` finite positive values of one statistic, for its running median.
class History {
 public:
  explicit History(size_t capacity = 1) : values_(capacity) {}
  void push(double v) {
    if (!(v > 0) || !std::isfinite(v)) return;
    values_[next_] = v;
    next_ = (next_ + 1) % values_.size();
    size_ = std::min(size_ + 1, values_.size());
  }
  size_t size() const { return size_; }
  /// The median of what is held (size() > 0); `scratch` is reused storage.
  double median(std::vector<double>& scratch) const {
    scratch.assign(values_.begin(), values_.begin() + static_cast<std::ptrdiff_t>(size_));
    const auto mid = scratch.begin() + static_cast<std::ptrdiff_t>(size_ / 2);
    std::nth_element(scratch.begin(), mid, scratch.end());
    if (size_ % 2 == 1) return *mid;
    return 0.5 * (*mid + *std::max_element(scratch.begin(), mid));
  }

 private:
  std::vector<double> values_;
  size_t next_ = 0, size_ = 0;
};

struct Entry {
  std::string name;
  at::Tensor param;
  at::Tensor prev;        // the weights at the previous observe(), same strides when dense
  History norms;          // gradient norms, for grad_exploding_factor
  History changes;        // ||w_t - w_(t-1)||, for weight_change_too_large_factor
  int64_t small_run = 0;  // observations in a row with 0 < ratio < weight_change_too_small
};

// Everything observe() needs about one parameter, before it becomes a GradRecord.
struct Raw {
  bool has_grad = false;
  int64_t grad_numel = 0;
  detail::GradAcc g;
  int64_t weight_numel = 0;
  bool has_prev = false;
  detail::WeightAcc w;
};

constexpr int kDeviceFields = 12;  // see device_row()

// A complex tensor is read as its real and imaginary parts (view_as_real): the norm is the
// same as over |z|, and counts (NaN, Inf, zero) are per component. A cast to a real dtype
// would drop the imaginary parts (and call a gradient with zero real parts all zero).
at::Tensor components(const at::Tensor& t) {
  return t.is_complex() ? at::view_as_real(t.is_conj() ? t.resolve_conj() : t) : t;
}

// How many components components(t) has.
int64_t component_count(const at::Tensor& t) { return t.numel() * (t.is_complex() ? 2 : 1); }

// The tensor whose elements describe the gradient (components()), and how many implicit
// zeros it omits.
std::pair<at::Tensor, int64_t> grad_values(const at::Tensor& grad) {
  if (!grad.is_sparse()) return {components(grad), 0};
  at::Tensor v = grad.coalesce()._values();
  return {components(v), component_count(grad) - component_count(v)};
}

void cpu_grad(const at::Tensor& grad, Raw& r) {
  r.has_grad = true;
  r.grad_numel = component_count(grad);
  auto [values, implicit_zeros] = grad_values(grad);
  if (!detail::fused_dtype_supported(values.scalar_type())) values = values.to(at::kFloat);
  detail::dispatch_fused(values.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    detail::for_each_span<T>(values, [&](T* p, int64_t n, int64_t stride) {
      detail::grad_stats_span<T>(p, n, stride, r.g);
    });
  });
  r.g.zero += implicit_zeros;
  r.g.finite += implicit_zeros;
}

// ||w||², and against the previous copy ||w_prev||², ||w - w_prev||², refreshing the copy.
void cpu_weight(Entry& e, bool ratio, Raw& r) {
  at::Tensor w = components(e.param.detach());
  r.weight_numel = w.numel();
  if (!w.is_non_overlapping_and_dense()) w = w.contiguous();
  if (!detail::fused_dtype_supported(w.scalar_type())) w = w.to(at::kFloat);
  const bool first = !e.prev.defined();
  if (ratio && first) e.prev = at::empty_like(w);  // same strides: same memory order
  r.has_prev = ratio && !first;
  detail::dispatch_fused(w.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    const T* wp = static_cast<const T*>(w.data_ptr());
    T* pp = r.has_prev ? static_cast<T*>(e.prev.data_ptr()) : nullptr;
    detail::weight_update_span<T>(wp, pp, w.numel(), r.w);
  });
  if (ratio && first) e.prev.copy_(w);
}

// [has_grad, sumsq, abs_sum, abs_max, nan, inf, zero, finite, w_sumsq, prev_sumsq,
//  delta_sumsq, w_zero] as float64 on the parameter's device; no host synchronisation.
at::Tensor device_row(Entry& e, bool ratio) {
  const auto opts = e.param.options().dtype(at::kDouble);
  std::vector<at::Tensor> f(kDeviceFields);
  const at::Tensor zero = at::zeros({}, opts);
  for (auto& t : f) t = zero;
  const at::Tensor& grad = e.param.grad();
  if (grad.defined()) {
    auto [values, implicit_zeros] = grad_values(grad);
    const at::Tensor g = values.to(at::kDouble);
    const at::Tensor fin = g.isfinite(), nan = g.isnan();
    const at::Tensor a = at::where(fin, g.abs(), zero);
    f[0] = at::ones({}, opts);
    f[1] = a.square().sum();
    f[2] = a.sum();
    f[3] = g.numel() > 0 ? a.max() : zero;
    f[4] = nan.sum().to(at::kDouble);
    f[5] = (~fin & ~nan).sum().to(at::kDouble);
    f[6] = (g == 0).sum().to(at::kDouble) + static_cast<double>(implicit_zeros);
    f[7] = fin.sum().to(at::kDouble) + static_cast<double>(implicit_zeros);
  }
  const at::Tensor w = components(e.param.detach()).to(at::kDouble);
  f[8] = w.square().sum();
  f[11] = (w == 0).sum().to(at::kDouble);
  if (ratio && e.prev.defined()) {
    const at::Tensor p = components(e.prev).to(at::kDouble);
    f[9] = p.square().sum();
    f[10] = (w - p).square().sum();
    e.prev.copy_(e.param.detach());
  } else if (ratio) {
    e.prev = e.param.detach().clone();
    f[9] = at::full({}, -1.0, opts);  // marks "no previous weights yet"
  }
  return at::stack(f);
}

Raw raw_from_row(const double* v, const Entry& e, bool ratio) {
  Raw r;
  r.has_grad = v[0] > 0;
  r.grad_numel = component_count(e.param);
  r.g.sumsq = v[1];
  r.g.abs_sum = v[2];
  r.g.abs_max = v[3];
  r.g.nan = static_cast<int64_t>(v[4]);
  r.g.inf = static_cast<int64_t>(v[5]);
  r.g.zero = static_cast<int64_t>(v[6]);
  r.g.finite = static_cast<int64_t>(v[7]);
  r.weight_numel = component_count(e.param);
  r.w.sumsq = v[8];
  r.has_prev = ratio && v[9] >= 0;
  r.w.sumsq_prev = v[9];
  r.w.sumsq_delta = v[10];
  r.w.zero = static_cast<int64_t>(v[11]);
  return r;
}

double update_ratio(const detail::WeightAcc& w) {
  const double delta = std::sqrt(w.sumsq_delta), prev = std::sqrt(w.sumsq_prev);
  if (prev > 0) return delta / prev;
  return delta > 0 ? std::numeric_limits<double>::infinity() : 0.0;
}

}  // namespace

struct GradMonitor::Impl {
  GradMonitorOptions o;
  std::vector<Entry> entries;

  void hit(GradRecord& r, const char* watch, double value, double threshold) {
    r.watch.emplace_back(watch);
    if (!o.on_watch) return;
    try {
      o.on_watch(WatchHit{r.step, r.param, watch, value, threshold});
    } catch (const std::exception& ex) {
      report_error(std::string("GradMonitor: the watch callback threw: ") + ex.what());
    } catch (...) {
      report_error("GradMonitor: the watch callback threw");
    }
  }

  /// A history long enough for a median-relative watchpoint.
  bool warm(const History& h) const { return h.size() >= static_cast<size_t>(o.watch.warmup); }
  void weight_watches(GradRecord& r, Entry& e, const detail::WeightAcc& w);
  GradRecord to_record(int64_t step, Entry& e, const Raw& raw);
  std::vector<GradRecord> observe(int64_t step, const std::vector<size_t>& indices,
                                  DumpWriter* writer) noexcept;
  std::vector<double> scratch;  // median workspace
};

// weight_change_too_large compares the change itself, ||w_t - w_(t-1)||, with the parameter's
// own usual change: the ratio alone is large whenever ||w|| is small (a bias that starts at
// zero, a scalar crossing zero) while the step is as usual.
void GradMonitor::Impl::weight_watches(GradRecord& r, Entry& e, const detail::WeightAcc& w) {
  const WatchThresholds& t = o.watch;
  const double ur = r.update_ratio;
  const double change = std::sqrt(w.sumsq_delta);
  if (t.weight_not_changed && !(ur > 0)) hit(r, "weight_not_changed", ur, 0);
  if (t.weight_change_too_large && ur > *t.weight_change_too_large) {
    if (!t.weight_change_too_large_factor) {
      hit(r, "weight_change_too_large", ur, *t.weight_change_too_large);
    } else if (warm(e.changes)) {
      const double usual = *t.weight_change_too_large_factor * e.changes.median(scratch);
      if (change > usual) {
        // The ratio this step's change would have had at `usual`: the bound crossed.
        const double prev = std::sqrt(w.sumsq_prev);
        hit(r, "weight_change_too_large", ur,
            std::max(*t.weight_change_too_large, prev > 0 ? usual / prev : 0.0));
      }
    }
  }
  e.changes.push(change);
  if (t.weight_change_too_small && ur > 0 && ur < *t.weight_change_too_small) {
    ++e.small_run;
    if (e.small_run % t.weight_change_too_small_steps == 0)
      hit(r, "weight_change_too_small", ur, *t.weight_change_too_small);
  } else {
    e.small_run = 0;
  }
}

GradRecord GradMonitor::Impl::to_record(int64_t step, Entry& e, const Raw& raw) {
  const WatchThresholds& t = o.watch;
  GradRecord r;
  r.step = step;
  r.param = e.name;
  r.has_grad = raw.has_grad;
  if (raw.has_grad) {
    r.grad_norm = std::sqrt(raw.g.sumsq);
    r.grad_abs_max = raw.g.abs_max;
    r.grad_abs_mean = raw.g.finite > 0 ? raw.g.abs_sum / static_cast<double>(raw.g.finite) : 0;
    r.grad_nan = raw.g.nan;
    r.grad_inf = raw.g.inf;
  }
  r.weight_norm = std::sqrt(raw.w.sumsq);
  r.update_ratio = raw.has_prev ? update_ratio(raw.w) : 0.0;

  if (raw.has_grad) {
    const int64_t bad = r.grad_nan + r.grad_inf;
    if (t.grad_exploding_nonfinite && bad > 0) {
      hit(r, "grad_exploding", static_cast<double>(bad), 0);
    } else if (t.grad_exploding && r.grad_norm > *t.grad_exploding) {
      hit(r, "grad_exploding", r.grad_norm, *t.grad_exploding);
    } else if (t.grad_exploding_factor && bad == 0 && warm(e.norms)) {
      const double bound = *t.grad_exploding_factor * e.norms.median(scratch);
      if (r.grad_norm > bound) hit(r, "grad_exploding", r.grad_norm, bound);
    }
    if (bad == 0) e.norms.push(r.grad_norm);
    if (t.grad_vanishing && raw.g.finite > 0 && r.grad_abs_mean < *t.grad_vanishing) {
      hit(r, "grad_vanishing", r.grad_abs_mean, *t.grad_vanishing);
    }
    if (t.grad_all_zero && raw.grad_numel > 0 && raw.g.zero == raw.grad_numel) {
      hit(r, "grad_all_zero", 0, 0);
    }
  }
  if (t.weight_all_zero && raw.weight_numel > 0 && raw.w.zero == raw.weight_numel) {
    hit(r, "weight_all_zero", 0, 0);
  }
  if (raw.has_prev) weight_watches(r, e, raw.w);
  return r;
}

namespace {

void check_thresholds(const WatchThresholds& t) {
  auto bad = [](const std::string& field, int64_t v, const char* why) {
    throw Error("GradMonitorOptions: watch." + field + " = " + std::to_string(v) + ": " + why);
  };
  if (t.median_window < 1) bad("median_window", t.median_window, "must be >= 1");
  if (t.warmup < 1 || t.warmup > t.median_window)
    bad("warmup", t.warmup, "must be in [1, median_window]");
  if (t.weight_change_too_small_steps < 1)
    bad("weight_change_too_small_steps", t.weight_change_too_small_steps, "must be >= 1");
}

}  // namespace

GradMonitor::GradMonitor(const torch::nn::Module& module, GradMonitorOptions options)
    : GradMonitor(
          [&module] {
            std::vector<std::pair<std::string, at::Tensor>> named;
            for (const auto& item : module.named_parameters(/*recurse=*/true))
              named.emplace_back(item.key(), item.value());
            return named;
          }(),
          std::move(options)) {}

GradMonitor::GradMonitor(std::vector<std::pair<std::string, at::Tensor>> named,
                         GradMonitorOptions options)
    : impl_(std::make_unique<Impl>()) {
  check_thresholds(options.watch);
  impl_->o = std::move(options);
  const auto window = static_cast<size_t>(impl_->o.watch.median_window);
  for (auto& [name, t] : named) {
    Entry e;
    e.name = std::move(name);
    e.param = std::move(t);
    e.norms = History(window);
    e.changes = History(window);
    impl_->entries.push_back(std::move(e));
  }
}

GradMonitor::~GradMonitor() = default;

std::vector<GradRecord> GradMonitor::observe(int64_t step, DumpWriter* writer) noexcept {
  std::vector<size_t> all(impl_->entries.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return impl_->observe(step, all, writer);
}

std::vector<GradRecord> GradMonitor::observe_params(int64_t step,
                                                    const std::vector<size_t>& indices,
                                                    DumpWriter* writer) noexcept {
  return impl_->observe(step, indices, writer);
}

std::vector<GradRecord> GradMonitor::Impl::observe(int64_t step, const std::vector<size_t>& indices,
                                                   DumpWriter* writer) noexcept {
  std::vector<GradRecord> out;
  try {
    at::NoGradGuard no_grad;
    const bool ratio = o.update_ratio;
    std::vector<size_t> which;
    for (size_t i : indices)
      if (i < entries.size()) which.push_back(i);
    std::vector<Raw> raws(which.size());
    std::vector<size_t> on_device;  // positions in `which`
    std::vector<at::Tensor> rows;
    for (size_t k = 0; k < which.size(); ++k) {
      Entry& e = entries[which[k]];
      if (!e.param.device().is_cpu()) {
        on_device.push_back(k);
        rows.push_back(device_row(e, ratio));
        continue;
      }
      if (e.param.grad().defined()) cpu_grad(e.param.grad(), raws[k]);
      cpu_weight(e, ratio, raws[k]);
    }
    if (!rows.empty()) {
      for (auto& row : rows) row = row.to(rows.front().device(), /*non_blocking=*/true);
      const at::Tensor host = at::stack(rows).to(at::kCPU).contiguous();  // one transfer
      const double* v = host.data_ptr<double>();
      for (size_t k = 0; k < on_device.size(); ++k) {
        raws[on_device[k]] =
            raw_from_row(v + k * kDeviceFields, entries[which[on_device[k]]], ratio);
      }
    }
    out.reserve(raws.size());
    for (size_t k = 0; k < raws.size(); ++k) {
      out.push_back(to_record(step, entries[which[k]], raws[k]));
      if (writer != nullptr) {
        GradRecord copy = out.back();
        writer->submit(std::move(copy));
      }
    }
  } catch (const std::exception& ex) {
    report_error(std::string("GradMonitor::observe: ") + ex.what());
  }
  return out;
}

size_t GradMonitor::extra_bytes() const noexcept {
  size_t n = 0;
  for (const auto& e : impl_->entries) {
    if (e.prev.defined()) n += e.prev.numel() * e.prev.element_size();
  }
  return n;
}

size_t GradMonitor::size() const noexcept { return impl_->entries.size(); }

const GradMonitorOptions& GradMonitor::options() const noexcept { return impl_->o; }

}  // namespace precprobe
