// GradMonitor: per-parameter gradient and weight health, once per training step, with
// watchpoints evaluated online (after MindInsight's debugger list: gradient vanishing,
// gradient exploding, weight not changed, weight change too large / too small, tensor all
// zero).
//
// **Example**:
//
//     precprobe::GradMonitorOptions o;
//     o.watch.grad_exploding_factor = 100.0;  // ||g|| > 100 x its running median
//     o.on_watch = [](const precprobe::WatchHit& h) { std::cerr << h.param << " " << h.watch; };
//     precprobe::GradMonitor monitor(*model, o);
//     for (...) {
//       loss.backward();
//       optimizer.step();
//       auto records = monitor.observe(step);  // after step(): sees this step's update
//       optimizer.zero_grad();
//     }
//
// Cost: one fused pass over each gradient and one over each weight (float64 accumulation, no
// ATen reductions on the CPU; on CUDA the statistics stay on the device until one transfer
// per observe()). The update ratio ||w_t - w_{t-1}|| / ||w_{t-1}|| needs the previous
// weights: a copy of every parameter, i.e. as much memory again as the model's parameters
// (extra_bytes() says how much). Set GradMonitorOptions::update_ratio = false to do without
// (then no weight_* change watchpoints).
//
// Threads: construct and observe() from one thread (the training loop), between backward()
// and zero_grad(). The callback runs on that thread; exceptions from it are caught and
// reported through precprobe::report_error().
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "precprobe/records.h"

namespace torch {
namespace nn {
class Module;
}
}  // namespace torch

namespace precprobe {

class DumpWriter;

/// Thresholds of the watchpoints; nullopt / false turns one off. The names in quotes are
/// what GradRecord::watch and WatchHit::watch hold. A watchpoint fires on a condition that
/// persists or on a change out of line with the parameter's own history (its running median),
/// never on one ordinary step: the defaults come from healthy runs measured in
/// docs/grad-monitor.md. Non-finite gradients and all-zero tensors fire at once.
struct WatchThresholds {
  /// "grad_vanishing": mean |g| over finite elements below this.
  std::optional<double> grad_vanishing = 1e-9;
  /// "grad_exploding": ||g|| (finite part) above this many times the median of the
  /// parameter's own last `median_window` finite non-zero norms, once it has `warmup` of them
  /// (a norm's scale depends on the loss's reduction and the parameter: judged on its own).
  std::optional<double> grad_exploding_factor = 10.0;
  /// "grad_exploding": ||g|| above this absolute value. Off by default: 1e3 is a healthy
  /// norm under a sum-reduced loss and an explosion under a mean-reduced one.
  std::optional<double> grad_exploding;
  /// "grad_exploding": any NaN/Inf in the gradient (at once).
  bool grad_exploding_nonfinite = true;
  /// "grad_all_zero": every gradient element is zero (a dead parameter).
  bool grad_all_zero = true;
  /// "weight_all_zero": every weight element is zero.
  bool weight_all_zero = true;
  /// "weight_not_changed": update ratio exactly 0 (the step did not move the parameter).
  bool weight_not_changed = true;
  /// "weight_change_too_large": update ratio above this, and the change ||w_t - w_(t-1)||
  /// above `weight_change_too_large_factor` times the median of the parameter's own last
  /// changes, once it has `warmup` of them. The ratio alone is large whenever ||w|| is small
  /// (a bias that starts at zero, a scalar crossing zero) while the step is the usual one.
  std::optional<double> weight_change_too_large = 0.1;
  /// See weight_change_too_large; nullopt: the ratio threshold alone.
  std::optional<double> weight_change_too_large_factor = 10.0;
  /// "weight_change_too_small": update ratio above 0 and below this on
  /// `weight_change_too_small_steps` observations in a row (fires then, and every that many
  /// steps while it lasts).
  std::optional<double> weight_change_too_small = 1e-4;
  /// See weight_change_too_small; >= 1.
  int64_t weight_change_too_small_steps = 100;
  /// Length of the per-parameter history the running medians are taken over; >= 1.
  int64_t median_window = 50;
  /// Values a history needs before a median-relative watchpoint may fire; in [1, median_window].
  int64_t warmup = 5;
};

/// One watchpoint that fired.
struct WatchHit {
  int64_t step = 0;
  std::string param;
  std::string watch;     ///< e.g. "grad_exploding"
  double value = 0;      ///< the statistic compared (NaN/Inf count for non-finite grads)
  double threshold = 0;  ///< the threshold it crossed (0 for the all-zero / not-changed ones)
};

struct GradMonitorOptions {
  /// Keep a copy of the previous weights to compute update ratios (memory: one more copy
  /// of every parameter).
  bool update_ratio = true;
  WatchThresholds watch;
  /// Called for every hit, on the thread that calls observe().
  std::function<void(const WatchHit&)> on_watch;
};

class GradMonitor {
 public:
  /// Watches module.named_parameters() (recursively). The module's parameters must stay the
  /// same tensors (they are held by reference). Throws precprobe::Error naming a bad
  /// WatchThresholds field (a window < 1, a warmup outside [1, median_window]).
  explicit GradMonitor(const torch::nn::Module& module, GradMonitorOptions options = {});
  explicit GradMonitor(std::vector<std::pair<std::string, at::Tensor>> named,
                       GradMonitorOptions options = {});
  ~GradMonitor();
  GradMonitor(const GradMonitor&) = delete;
  GradMonitor& operator=(const GradMonitor&) = delete;

  /// One record per parameter (in named_parameters() order) for `step`; submitted to
  /// `writer` when given. Call after optimizer.step(): the update ratio compares with the
  /// weights of the previous observe() (0 at the first). Never throws.
  std::vector<GradRecord> observe(int64_t step, DumpWriter* writer = nullptr) noexcept;
  /// As observe(), for the parameters at `indices` (positions in the watched order; out of
  /// range ones are ignored) only: the others keep their previous weights and histories.
  std::vector<GradRecord> observe_params(int64_t step, const std::vector<size_t>& indices,
                                         DumpWriter* writer = nullptr) noexcept;

  /// Bytes held for previous weights.
  size_t extra_bytes() const noexcept;
  /// Number of watched parameters.
  size_t size() const noexcept;
  const GradMonitorOptions& options() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace precprobe
