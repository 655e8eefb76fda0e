// grad_scaler_sequence: precprobe::GradScaler on CUDA through a fixed sequence of steps,
// printed as CSV, for tests/cuda/grad_scaler_compare.py, which runs the same sequence through
// torch.amp.GradScaler("cuda") in Python and compares the two line by line (scale, growth
// tracker, found-inf, skipped step, parameters' bits). Both sides compute every input from
// the step number with the same float64 formulas (glibc's sin, exact powers of ten), so
// they feed bit-identical tensors to the same LibTorch kernels.
//
//   grad_scaler_sequence [--steps 1000]
//
// Two modes, one after the other, each with its own scaler (init_scale 2^16, growth
// factor 2, backoff 0.5, growth_interval 20) and SGD (lr 0.1 / 1e-3, two parameter groups):
//   fed       the scaled gradients are set directly: sines over 7 decades with +Inf, -Inf,
//             NaN, huge finite (3e38, which overflows when unscaled by a scale < 1), float32
//             denormals, and a burst of 40 Inf steps (500-539) that backs the scale off to
//             2^-24;
//   autocast  a Linear(16, 16) under fp16 autocast, loss = mean(out.float()^2), with Inf,
//             NaN and 1e4-times inputs at some steps; the scale also grows until the fp16
//             backward overflows by itself.
// Output: "mode,step,found_inf,skipped,scale,growth_tracker,params" (params: the float32
// bits of every parameter, hex, ':'-separated). Exit status 0, or 2 without a GPU.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "precprobe/grad_scaler.h"

namespace {

const double kDecades[7] = {1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0};

// The scaled gradients of step i for a parameter of `n` elements in group `g` (fed mode).
std::vector<float> fed_gradient(int i, int g, int n) {
  std::vector<float> v(n);
  for (int k = 0; k < n; ++k) {
    double x = std::sin(0.37 * i + k + 3 * g) * kDecades[i % 7];
    if (g == 0 && k == 1 && i % 89 == 5) x = INFINITY;
    if (g == 1 && k == 2 && i % 101 == 17) x = -INFINITY;
    if (g == 0 && k == 0 && i % 113 == 31) x = std::numeric_limits<double>::quiet_NaN();
    if (g == 1 && k == 0 && i % 71 == 3) x = 3e38;
    if (g == 1 && k == 1 && i % 61 == 7) x = 1e-42;  // a float32 denormal
    if (g == 0 && k == 2 && i >= 500 && i < 540) x = INFINITY;
    v[k] = static_cast<float>(x);
  }
  return v;
}

// The input batch of step i (autocast mode), 8 x 16.
std::vector<float> batch(int i) {
  std::vector<float> v(8 * 16);
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 16; ++c) {
      double x = std::sin(0.1 * (r * 16 + c) + i);
      if (i % 59 == 29) x *= 1e4;
      v[r * 16 + c] = static_cast<float>(x);
    }
  if (i % 97 == 13) v[0] = std::numeric_limits<float>::infinity();
  if (i % 131 == 7) v[1 * 16 + 1] = std::numeric_limits<float>::quiet_NaN();
  return v;
}

at::Tensor cuda_tensor(const std::vector<float>& v, at::IntArrayRef shape) {
  return torch::from_blob(const_cast<float*>(v.data()), shape, at::kFloat).clone().to(at::kCUDA);
}

std::string param_bits(const std::vector<at::Tensor>& params) {
  std::string s;
  char buf[16];
  for (const auto& p : params) {
    const at::Tensor c = p.detach().cpu().contiguous();
    const float* d = c.data_ptr<float>();
    for (int64_t i = 0; i < c.numel(); ++i) {
      uint32_t bits = 0;
      std::memcpy(&bits, &d[i], sizeof bits);
      std::snprintf(buf, sizeof buf, "%s%08" PRIx32, s.empty() ? "" : ":", bits);
      s += buf;
    }
  }
  return s;
}

void print_row(const char* mode, int step, bool found_inf, bool skipped,
               precprobe::GradScaler& scaler, const std::vector<at::Tensor>& params) {
  std::printf("%s,%d,%d,%d,%.9g,%" PRId64 ",%s\n", mode, step, found_inf ? 1 : 0, skipped ? 1 : 0,
              static_cast<double>(scaler.get_scale()), scaler.get_growth_tracker(),
              param_bits(params).c_str());
}

precprobe::GradScalerOptions scaler_options() {
  precprobe::GradScalerOptions o;
  o.init_scale = 65536.0;
  o.growth_factor = 2.0;
  o.backoff_factor = 0.5;
  o.growth_interval = 20;
  o.collapse_scale = 0;  // no warnings on stderr: the burst collapses the scale on purpose
  o.collapse_backoffs = 0;
  return o;
}

// PyTorch's `with torch.autocast("cuda", dtype=torch.float16):` in C++.
class Fp16Autocast {
 public:
  Fp16Autocast() {
    prev_enabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
    prev_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kHalf);
    at::autocast::increment_nesting();
  }
  ~Fp16Autocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCUDA, prev_enabled_);
    at::autocast::set_autocast_dtype(at::kCUDA, prev_dtype_);
  }
  Fp16Autocast(const Fp16Autocast&) = delete;
  Fp16Autocast& operator=(const Fp16Autocast&) = delete;

 private:
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kHalf;
};

void run_fed(int steps) {
  std::vector<at::Tensor> params = {torch::zeros({3}, at::kCUDA).requires_grad_(true),
                                    torch::zeros({3}, at::kCUDA).requires_grad_(true)};
  std::vector<torch::optim::OptimizerParamGroup> groups = {
      torch::optim::OptimizerParamGroup({params[0]}),
      torch::optim::OptimizerParamGroup({params[1]})};
  torch::optim::SGD opt(groups, torch::optim::SGDOptions(0.1));
  precprobe::GradScaler scaler(scaler_options());
  const at::Tensor one = torch::ones({}, at::kCUDA);
  for (int i = 0; i < steps; ++i) {
    (void)scaler.scale(one);
    for (int g = 0; g < 2; ++g) params[g].mutable_grad() = cuda_tensor(fed_gradient(i, g, 3), {3});
    const bool stepped = scaler.step(opt);
    scaler.update();
    print_row("fed", i, !stepped, !stepped, scaler, params);
  }
}

void run_autocast(int steps) {
  std::vector<float> w(16 * 16);
  for (int k = 0; k < 16 * 16; ++k) w[k] = static_cast<float>((k % 7 - 3) * 0.01);
  torch::nn::Linear lin(16, 16);
  {
    torch::NoGradGuard no_grad;
    lin->weight.copy_(torch::from_blob(w.data(), {16, 16}, at::kFloat));
    lin->bias.zero_();
  }
  lin->to(at::kCUDA);
  std::vector<at::Tensor> params = {lin->weight, lin->bias};
  std::vector<torch::optim::OptimizerParamGroup> groups = {
      torch::optim::OptimizerParamGroup({lin->weight}),
      torch::optim::OptimizerParamGroup({lin->bias})};
  torch::optim::SGD opt(groups, torch::optim::SGDOptions(1e-3));
  precprobe::GradScaler scaler(scaler_options());
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    const at::Tensor x = cuda_tensor(batch(i), {8, 16});
    at::Tensor loss;
    {
      Fp16Autocast autocast;
      const at::Tensor out = lin->forward(x);
      loss = out.to(at::kFloat).pow(2).mean();
    }
    scaler.scale(loss).backward();
    const bool stepped = scaler.step(opt);
    scaler.update();
    print_row("autocast", i, !stepped, !stepped, scaler, params);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 1000;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--steps") steps = std::atoi(argv[i + 1]);
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "grad_scaler_sequence: no CUDA device\n");
    return 2;
  }
  std::printf("mode,step,found_inf,skipped,scale,growth_tracker,params\n");
  run_fed(steps);
  run_autocast(steps);
  return 0;
}
