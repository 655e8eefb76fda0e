// StepSnapshot: the training state before a step, so that "record": "on_anomaly" can put
// it back and run the same step again (replay.cpp). Holds deep copies of the model's
// parameters and buffers, each optimizer's per-parameter state (tensors and scalars such as
// Adam's step count) and its param_groups' options, and the RNG states (CPU default
// generator; CUDA's when available). Several optimizers (a GAN's two) are snapshot alike.
//
// capture() copies into buffers allocated once (copy_), so a healthy step allocates
// nothing but the CPU generator's 5 KB state tensor; buffers are (re)made only when the
// state's structure changes (Adam creates its state at the first step). Gradients are not
// part of it (zero_grad() belongs inside the step): restore() zeroes them.
//
// Threads: the controlling thread only, between steps.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torch {
namespace nn {
class Module;
}
namespace optim {
class Optimizer;
class OptimizerParamState;
class OptimizerOptions;
}  // namespace optim
}  // namespace torch

namespace precprobe {
namespace detail {

struct StateKind;

class StepSnapshot {
 public:
  StepSnapshot();
  ~StepSnapshot();
  StepSnapshot(const StepSnapshot&) = delete;
  StepSnapshot& operator=(const StepSnapshot&) = delete;

  /// Binds to `model` (may be null) and `optimizers` (at least one, none null; all must
  /// outlive the snapshot or the next bind()). Throws precprobe::Error for an optimizer whose
  /// state it cannot copy (supported: SGD, Adam, AdamW, RMSprop, Adagrad).
  void bind(torch::nn::Module* model, const std::vector<torch::optim::Optimizer*>& optimizers);
  void unbind() noexcept;
  bool bound() const noexcept { return !optims_.empty(); }

  /// Copies the live state into the snapshot. Throws (c10::Error, std::bad_alloc).
  void capture();
  /// Puts the captured state back (the optimizer's state entries created since are
  /// removed). Throws.
  void restore();
  bool captured() const noexcept { return captured_; }

  /// Bytes of tensor data the snapshot holds (parameters, buffers, optimizer state, RNG).
  int64_t bytes() const;
  /// The parts of bytes(): parameters and buffers, optimizer state.
  int64_t model_bytes() const;
  int64_t optimizer_bytes() const;
  /// Optimizer `i`'s type as the snapshot knows it ("AdamW"), "" when there is none.
  const char* optimizer_name(size_t i = 0) const noexcept;

 private:
  struct Entry;
  /// One optimizer's state: its per-parameter entries and its groups' options.
  struct Optim {
    torch::optim::Optimizer* optimizer = nullptr;
    const StateKind* kind = nullptr;
    std::vector<std::unique_ptr<Entry>> entries;
    std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> groups;
  };
  static void capture_state(Optim& o);
  static void restore_state(Optim& o);

  std::vector<Optim> optims_;
  std::vector<std::pair<at::Tensor, at::Tensor>> tensors_;  // (live, saved)
  at::Tensor cpu_rng_;
  std::vector<at::Tensor> cuda_rng_;
  bool captured_ = false;
};

}  // namespace detail
}  // namespace precprobe
