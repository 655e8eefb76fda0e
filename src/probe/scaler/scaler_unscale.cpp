// Check-and-unscale of one optimizer's gradients, per parameter group.
//
// CPU gradients: one fused pass per gradient (grad_loops.h), host results at once.
// CUDA gradients: PyTorch's kernels, bucketed per (device, dtype) as grad_scaler.py does, plus
// _foreach_norm before and after for the logs; nothing is read back here (see resolve_groups).
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/grad_mode.h>
#include <torch/optim/optimizer.h>

#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "precprobe/error.h"
#include "scaler/scaler_internal.h"
#include "support/grad_loops.h"
#include "support/own_code.h"
#include "support/torch_compat.h"

namespace precprobe {
namespace detail {
namespace {

at::Tensor& flag_for(std::vector<DeviceFlag>& flags, c10::Device device) {
  for (auto& f : flags) {
    if (f.device == device) return f.found_inf;
  }
  flags.push_back({device, at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device))});
  return flags.back().found_inf;
}

// The tensor whose values get unscaled: the gradient, or the values of a sparse gradient
// after coalescing (duplicates summed first, so an overflowing sum is seen).
at::Tensor values_to_unscale(at::Tensor& grad) {
  if (grad.is_sparse()) {
    if (!grad.is_coalesced()) grad = grad.coalesce();
    return grad._values();
  }
  // An overlapping gradient (expanded, stride 0) cannot be scaled in place element-wise.
  if (at::has_internal_overlap(grad) == at::MemOverlap::Yes) grad = grad.contiguous();
  return grad;
}

struct CudaBucket;
// (device type, device index, dtype): c10::Device has no ordering.
using BucketMap = std::map<std::tuple<int, int, int>, CudaBucket>;

struct CudaBucket {
  c10::Device device{c10::kCPU};
  std::vector<at::Tensor> grads;
  std::vector<std::pair<int, at::Tensor>> params;
};

void unscale_cuda_group(BucketMap& buckets, const at::Tensor& inv_scale, GroupCheck& g,
                        std::vector<DeviceFlag>& flags) {
  for (auto& [key, bucket] : buckets) {
    const c10::Device device = bucket.device;
    at::Tensor inv = inv_scale.to(device, /*non_blocking=*/true);
    at::Tensor found = at::zeros({}, inv.options());
    for (auto& n : at::_foreach_norm(bucket.grads)) {
      g.dev_norms_scaled.push_back(n.to(at::kDouble));
    }
    at::_amp_foreach_non_finite_check_and_unscale_(bucket.grads, found, inv);
    for (auto& n : at::_foreach_norm(bucket.grads)) g.dev_norms.push_back(n.to(at::kDouble));
    flag_for(flags, device).add_(found);
    at::Tensor found_here = found.to(at::kDouble).reshape({1});
    g.dev_found_inf = g.dev_found_inf.defined()
                          ? g.dev_found_inf + found_here.to(g.dev_found_inf.device())
                          : found_here;
    for (auto& p : bucket.params) g.dev_params.push_back(std::move(p));
  }
}

}  // namespace

UnscaleResult check_and_unscale_cpu(at::Tensor& grad, float inv_scale, bool write) {
  UnscaleAcc acc;
  // The loop writes through raw pointers, which no op callback sees: the statistics engine
  // is told first, and the version bumped after, as ATen's in-place unscale does.
  if (write) before_own_write(grad);
  const bool ok = dispatch_fused(grad.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    for_each_span<T>(grad, [&](T* p, int64_t n, int64_t stride) {
      if (write) {
        unscale_span<T, true>(p, n, stride, inv_scale, acc);
      } else {
        unscale_span<T, false>(p, n, stride, inv_scale, acc);
      }
    });
  });
  if (write && ok && !grad.is_inference()) grad.unsafeGetTensorImpl()->bump_version();
  if (!ok) {
    throw Error(std::string("GradScaler: cannot unscale a gradient of dtype ") +
                c10::toString(grad.scalar_type()) + " (allowed: Float, Double, BFloat16)");
  }
  return {acc.non_finite, acc.sumsq_scaled, acc.sumsq_unscaled};
}

void check_and_unscale(torch::optim::Optimizer& optimizer, const at::Tensor& inv_scale,
                       float inv_scale_host, size_t max_bad_names, const NameFn& name_of,
                       std::vector<GroupCheck>& groups, std::vector<DeviceFlag>& flags) {
  at::NoGradGuard no_grad;
  auto& param_groups = optimizer.param_groups();
  // PyTorch refuses FP16 before touching anything.
  for (auto& group : param_groups) {
    for (auto& p : group.params()) {
      if (p.grad().defined() && p.grad().scalar_type() == at::kHalf) {
        throw Error("Attempting to unscale FP16 gradients.");
      }
    }
  }
  for (size_t gi = 0; gi < param_groups.size(); ++gi) {
    GroupCheck g;
    g.group = static_cast<int>(gi);
    BucketMap cuda;
    std::map<int, std::vector<at::Tensor>> cpu_by_dtype;  // for ATen's kernel (>= 2.3)
    auto& params = param_groups[gi].params();
    for (size_t pi = 0; pi < params.size(); ++pi) {
      at::Tensor& p = params[pi];
      if (!p.grad().defined()) continue;
      at::Tensor& grad = p.mutable_grad();
      at::Tensor values = values_to_unscale(grad);
      if (!values.device().is_cpu()) {
        auto& b = cuda[{static_cast<int>(values.device().type()), values.device().index(),
                        static_cast<int>(values.scalar_type())}];
        b.device = values.device();
        b.grads.push_back(values);
        b.params.emplace_back(static_cast<int>(pi), p);
        continue;
      }
      const UnscaleResult r = check_and_unscale_cpu(values, inv_scale_host,
                                                    /*write=*/!PRECPROBE_HAS_CPU_AMP_KERNELS);
      if (PRECPROBE_HAS_CPU_AMP_KERNELS) {
        cpu_by_dtype[static_cast<int>(values.scalar_type())].push_back(values);
      }
      flag_for(flags, values.device());  // a device with gradients gets a flag, as PyTorch
      g.sumsq_scaled += r.sumsq_scaled;
      g.sumsq_unscaled += r.sumsq_unscaled;
      if (r.non_finite) {
        g.found_inf = true;
        if (g.bad.size() < max_bad_names) {
          g.bad.push_back(name_of(p, g.group, static_cast<int>(pi)));
        }
        ++g.n_bad;
      }
    }
#if PRECPROBE_HAS_CPU_AMP_KERNELS
    // PyTorch's own CPU kernel unscales and sets the device flag; the pass above only read
    // (the same element rule, so its per-gradient findings agree: test_grad_scaler_state).
    if (!cpu_by_dtype.empty()) {
      const at::Tensor inv_cpu = inv_scale.to(at::kCPU);
      at::Tensor& flag = flag_for(flags, c10::Device(c10::kCPU));
      for (auto& [dtype, grads] : cpu_by_dtype) {
        at::_amp_foreach_non_finite_check_and_unscale_(grads, flag, inv_cpu);
      }
    }
#else
    if (g.found_inf) flag_for(flags, c10::Device(c10::kCPU)).fill_(1.0f);
#endif
    if (!cuda.empty()) unscale_cuda_group(cuda, inv_scale, g, flags);
    groups.push_back(std::move(g));
  }
}

void resolve_groups(std::vector<GroupCheck>& groups, size_t max_bad_names, const NameFn& name_of) {
  // Every number of every CUDA group in one device->host copy: [found, norms0.., norms1..].
  std::vector<at::Tensor> pieces;
  for (auto& g : groups) {
    if (!g.dev_found_inf.defined()) continue;
    pieces.push_back(g.dev_found_inf.reshape({1}));
    for (auto& n : g.dev_norms_scaled) pieces.push_back(n.reshape({1}));
    for (auto& n : g.dev_norms) pieces.push_back(n.reshape({1}));
  }
  if (pieces.empty()) return;
  for (auto& t : pieces) t = t.to(pieces.front().device(), /*non_blocking=*/true);
  const at::Tensor host = at::cat(pieces).to(at::kCPU).contiguous();
  const double* v = host.data_ptr<double>();
  for (auto& g : groups) {
    if (!g.dev_found_inf.defined()) continue;
    const size_t k = g.dev_norms_scaled.size();
    if (v[0] > 0) g.found_inf = true;
    for (size_t i = 0; i < k; ++i) {
      const double before = v[1 + i], after = v[1 + k + i];
      if (std::isfinite(before)) {
        g.sumsq_scaled += before * before;
        g.sumsq_unscaled += after * after;
        continue;
      }
      ++g.n_bad;
      if (g.bad.size() < max_bad_names) {
        g.bad.push_back(name_of(g.dev_params[i].second, g.group, g.dev_params[i].first));
      }
    }
    v += 1 + 2 * k;
    g.dev_found_inf = at::Tensor();
    g.dev_norms_scaled.clear();
    g.dev_norms.clear();
    g.dev_params.clear();
  }
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wfloat-equal"
bool update_scale_host(float& scale, int32_t& growth_tracker, bool found_inf, double growth_factor,
                       double backoff_factor, int64_t growth_interval) {
  if (found_inf) {
    scale = static_cast<float>(scale * backoff_factor);
    growth_tracker = 0;
    return false;
  }
  // A successful step: the tracker counts it before being compared with the interval.
  const int32_t successful = growth_tracker + 1;
  if (successful == growth_interval) {
    const auto new_scale = static_cast<float>(scale * growth_factor);
    const bool grew = std::isfinite(new_scale) && new_scale != scale;
    if (std::isfinite(new_scale)) scale = new_scale;  // never grow past float32 range
    growth_tracker = 0;
    return grew;
  }
  growth_tracker = successful;
  return false;
}
#pragma GCC diagnostic pop

}  // namespace detail
}  // namespace precprobe
