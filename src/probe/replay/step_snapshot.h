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
// begin_capture() / finish_capture() around the step take the same snapshot with the bulk of
// it off the training thread: what the step may change before optimizer.step() (buffers —
// BatchNorm's running statistics change in forward —, RNG states, step counts, group
// options, state made or re-made) is copied at once, and the parameters with their
// optimizer state tensors are copied by a helper thread while forward runs
// (snapshot_copier.h: the first gradient hook of the step holds backward until every copy is
// done; version counters show a write that came first). A write found there makes that step's
// snapshot invalid and every later capture synchronous. Parameters off the CPU: synchronous
// always.
//
// Threads: the controlling thread only, between steps (begin_capture() and finish_capture()
// around one).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "replay/snapshot_copier.h"

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
  /// Starts a capture that overlaps the step run right after it (synchronous, as capture(),
  /// when overlap() is off or cannot be had). Throws as capture().
  void begin_capture();
  /// Ends it, after the step: "" when the snapshot is valid, else the name of a tensor the
  /// step wrote before its copy was known to be complete; the snapshot is then not valid
  /// (captured() is false) and overlap() turns off for good. Never throws.
  std::string finish_capture() noexcept;
  /// Ends it without using it (the step threw): not captured(). Never throws.
  void abandon_capture() noexcept;
  /// Whether begin_capture() overlaps the step (default on). Off: capture() on the spot.
  void set_overlap(bool on) noexcept;
  bool overlap() const noexcept { return overlap_; }
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
  struct KeyIndex;  // optimizer state key -> slot of the parameter
  /// A parameter or buffer of the model (or a parameter only an optimizer has). `job`: the
  /// parameter's index in the copier's jobs, -1 for a buffer.
  struct Slot {
    at::Tensor live, saved;
    int64_t job = -1;
    std::string name;
  };
  /// One optimizer's state: its per-parameter entries and its groups' options.
  struct Optim {
    torch::optim::Optimizer* optimizer = nullptr;
    const StateKind* kind = nullptr;
    std::vector<std::unique_ptr<Entry>> entries;
    std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> groups;
  };
  /// Copies o's state; with `jobs`, its tensors of known parameters that the helper can copy
  /// go there instead.
  void capture_state(Optim& o, std::vector<std::vector<SnapshotCopier::Pair>>* jobs);
  static void restore_state(Optim& o);
  void capture_groups_and_rng();
  bool overlap_ready() noexcept;

  std::vector<Optim> optims_;
  std::vector<Slot> tensors_;
  size_t params_ = 0;  // slots with a job
  std::unique_ptr<KeyIndex> key_index_;
  SnapshotCopier copier_;
  std::vector<std::vector<SnapshotCopier::Pair>> jobs_;  // filled by begin_capture()
  bool overlap_ = true;
  bool pending_ = false;  // between begin_capture() and finish_capture()
  at::Tensor cpu_rng_;
  std::vector<at::Tensor> cuda_rng_;
  bool captured_ = false;
};

}  // namespace detail
}  // namespace precprobe
