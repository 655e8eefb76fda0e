// Private parts of GradScaler: the check-and-unscale of one optimizer's gradients (CPU fused
// pass or CUDA AMP kernels) and PyTorch's scale update rule on the host. Used by
// grad_scaler.cpp from the training thread only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace torch {
namespace optim {
class Optimizer;
}
}  // namespace torch

namespace precprobe {
namespace detail {

/// What unscale_ saw in one parameter group. Host fields are final for CPU gradients; for
/// CUDA gradients the device tensors hold the numbers until resolve_groups() reads them.
struct GroupCheck {
  int group = 0;
  bool found_inf = false;
  int64_t n_bad = 0;
  std::vector<std::string> bad;
  double sumsq_scaled = 0;
  double sumsq_unscaled = 0;
  // ---- CUDA only (undefined / empty on CPU) ----
  at::Tensor dev_found_inf;                  ///< float32 [1] per group (summed over devices)
  std::vector<at::Tensor> dev_norms_scaled;  ///< per-bucket per-parameter norms, before
  std::vector<at::Tensor> dev_norms;         ///< ... and after unscaling
  std::vector<std::pair<int, at::Tensor>> dev_params;  ///< (index in group, param), norm order
};

/// Found-inf flag per device, as PyTorch's found_inf_per_device.
struct DeviceFlag {
  c10::Device device;
  at::Tensor found_inf;  ///< float32 0-d on `device`
};

/// Names a parameter for the logs: (param, group index, index in group) -> name.
using NameFn = std::function<std::string(const at::Tensor&, int, int)>;

/// Refuses FP16 gradients (PyTorch's "Attempting to unscale FP16 gradients."), coalesces
/// sparse ones, then checks and unscales every gradient of `optimizer` in place.
/// `inv_scale` is the float32 0-d 1/scale (on any device; copied per device as needed),
/// `inv_scale_host` the same value on the host. Throws precprobe::Error on FP16.
void check_and_unscale(torch::optim::Optimizer& optimizer, const at::Tensor& inv_scale,
                       float inv_scale_host, size_t max_bad_names, const NameFn& name_of,
                       std::vector<GroupCheck>& groups, std::vector<DeviceFlag>& flags);

/// Reads the device numbers of CUDA groups to the host in one transfer. No-op on CPU.
void resolve_groups(std::vector<GroupCheck>& groups, size_t max_bad_names, const NameFn& name_of);

/// PyTorch's _amp_update_scale_ (AmpGradScalerKernels.cpp), on host values.
/// Returns true when the scale grew.
bool update_scale_host(float& scale, int32_t& growth_tracker, bool found_inf, double growth_factor,
                       double backoff_factor, int64_t growth_interval);

/// One fused pass over a strided CPU tensor: multiplies by inv_scale in place, flags
/// non-finite values, sums squares of finite values before and after (float64).
/// Supports float, double, BFloat16, Half; throws precprobe::Error on other dtypes.
struct UnscaleResult {
  bool non_finite = false;
  double sumsq_scaled = 0;
  double sumsq_unscaled = 0;
};
/// One fused pass over a CPU gradient: finiteness and sums of squares before and after
/// unscaling, with PyTorch's element rule. `write` false leaves the gradient as it is (what
/// it would become is still summed): from LibTorch 2.3 on, ATen's own kernel unscales.
UnscaleResult check_and_unscale_cpu(at::Tensor& grad, float inv_scale, bool write = true);

}  // namespace detail
}  // namespace precprobe
