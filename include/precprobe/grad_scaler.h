// GradScaler: dynamic loss scaling for LibTorch, with PyTorch's semantics
// (torch/amp/grad_scaler.py and _amp_update_scale_), that also logs what it saw: per step,
// per optimizer and parameter group, whether a gradient was non-finite, which parameters,
// the gradient norm before and after unscaling, the scale and the growth tracker.
//
// **Example** (the Python twin is in docs/gradscaler.md):
//
//     precprobe::GradScaler scaler;                      // init_scale 65536, interval 2000
//     for (auto& batch : loader) {
//       opt.zero_grad();
//       auto loss = loss_fn(model->forward(batch.data), batch.target);
//       scaler.scale(loss).backward();
//       scaler.unscale_(opt);                            // optional: clip true gradients
//       torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
//       scaler.step(opt);                                // skipped on Inf/NaN gradients
//       scaler.update();
//     }
//
// Several optimizers (a GAN's two) share one scaler as in PyTorch: unscale_(opt) and step(opt)
// per optimizer, one update(); each optimizer is skipped on its own Inf/NaN gradients, and the
// scale backs off once per update from the sum of every optimizer's found_inf.
//
// CPU gradients are checked and unscaled by one fused pass per gradient (LibTorch 1.13 has
// no CPU AMP kernels); CUDA gradients go through at::_amp_foreach_non_finite_check_and_unscale_
// and at::_amp_update_scale_ with no host synchronisation except where PyTorch has one (step()
// reads found_inf). Records go to the running PrecisionDebugger's writer, or to a writer the
// scaler owns when GradScalerOptions::log_path is set, and to history() in memory.
//
// Threads: a GradScaler is used from one thread (the training loop), like the optimizers it
// drives. Misuse of the state machine (unscale_ twice, step before scale...) throws
// precprobe::Error with PyTorch's message, as PyTorch raises.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
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
namespace optim {
class Optimizer;
}
namespace serialize {
class OutputArchive;
class InputArchive;
}  // namespace serialize
}  // namespace torch

namespace c10d {
class ProcessGroup;
}

namespace precprobe {

class DumpWriter;

struct GradScalerOptions {
  /// Scale before the first update (PyTorch: 2**16).
  double init_scale = 65536.0;
  /// Multiplier after `growth_interval` consecutive finite steps; must be > 1.
  double growth_factor = 2.0;
  /// Multiplier after a step with Inf/NaN gradients; must be in (0, 1).
  double backoff_factor = 0.5;
  /// Finite steps in a row before the scale grows; must be >= 1.
  int64_t growth_interval = 2000;
  /// false: scale() returns the loss, step() calls optimizer.step(), the rest does nothing.
  bool enabled = true;
  /// When set, the scaler owns a DumpWriter at this directory and writes scaler.jsonl.zst
  /// there (instead of to the running debugger's dump). Created like any rank directory.
  std::string log_path;
  /// Replace the files of a non-empty `log_path`.
  bool log_overwrite = false;
  /// Collapse warning: the scale fell below this (0 disables).
  double collapse_scale = 1.0;
  /// Collapse warning: this many backoffs in a row (0 disables).
  int64_t collapse_backoffs = 10;
  /// Records kept by history(); the oldest quarter is dropped when full.
  size_t history_capacity = 100000;
  /// Names of non-finite parameters kept per group record.
  size_t max_bad_names = 8;
};

class GradScaler {
 public:
  /// Throws precprobe::Error on invalid options (as PyTorch asserts) or an unusable log_path.
  explicit GradScaler(GradScalerOptions options = {});
  ~GradScaler();
  GradScaler(const GradScaler&) = delete;
  GradScaler& operator=(const GradScaler&) = delete;

  /// loss * scale. The scale tensor (float32) is created on loss's device at the first call.
  at::Tensor scale(const at::Tensor& loss);
  /// Divides the optimizer's gradients by the scale in place and records whether any is
  /// Inf/NaN. At most once per optimizer between update()s, and not after step().
  void unscale_(torch::optim::Optimizer& optimizer);
  /// unscale_ (if not done), then optimizer.step() unless a gradient was non-finite.
  /// Returns false when the step was skipped.
  bool step(torch::optim::Optimizer& optimizer);
  /// Updates the scale from the Inf/NaN checks of every optimizer since the last update
  /// (backoff, or growth after growth_interval finite steps), or sets it to `new_scale`.
  /// Writes this step's records.
  void update(std::optional<float> new_scale = std::nullopt);

  /// The current scale (init_scale before the first scale(); 1 when disabled).
  float get_scale();
  /// Finite steps since the last backoff or growth.
  int64_t get_growth_tracker();
  bool is_enabled() const noexcept;
  double get_growth_factor() const noexcept;
  double get_backoff_factor() const noexcept;
  int64_t get_growth_interval() const noexcept;
  /// Number of update() calls so far (the "step" of records).
  int64_t update_count() const noexcept;
  /// True once the collapse warning was given.
  bool collapsed() const noexcept;

  /// Writes PyTorch's state_dict keys: "scale", "growth_factor", "backoff_factor",
  /// "growth_interval", "_growth_tracker" (nothing when disabled, as PyTorch).
  void save(torch::serialize::OutputArchive& archive);
  /// Reads them back. Throws precprobe::Error when the archive lacks them.
  void load(torch::serialize::InputArchive& archive);

  /// Names for the logs, used when no debugger started with a model can name a parameter.
  void set_parameter_names(const torch::nn::Module& module);
  void set_parameter_names(const std::vector<std::pair<std::string, at::Tensor>>& named);

  /// found_inf is all-reduced (MAX) over this group at every unscale_, so all ranks skip
  /// the same steps. nullptr turns it off.
  void set_process_group(c10::intrusive_ptr<c10d::ProcessGroup> group);

  /// The last records (at most history_capacity), oldest first.
  const std::vector<ScalerRecord>& history();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace precprobe
