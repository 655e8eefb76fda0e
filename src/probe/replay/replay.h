// AnomalyWatch: "record": "on_anomaly". Around each step run through
// PrecisionDebugger::run_step it snapshots the training state (step_snapshot.h; the bulk of
// the copy overlaps the step), runs the step with nothing observed, and checks the triggers
// (non-finite loss, non-finite gradient, loss spike) in one pass over each gradient, which
// also gives what it writes for every checked step: the losses (scalar "loss", or "loss/0",
// "loss/1", ... when the step returned several) and each gradient's norm, max, mean and
// NaN/Inf counts (grads records without weight statistics).
// On a trigger it restores the snapshot, runs the same step again
// with every op recorded, checks that the replay reproduced the anomaly, finds and
// classifies the origin op (replay_origin.h), saves its inputs and writes the "anomaly"
// event (docs/dump-format.md). Training continues from the replayed state.
//
// Threads: the controlling thread (the training loop).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/FunctionRef.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "precprobe/options.h"
#include "precprobe/writer.h"
#include "replay/step_snapshot.h"

namespace precprobe {
namespace detail {

class Observer;

class AnomalyWatch {
 public:
  /// `writer` and `observer` must outlive the watch.
  AnomalyWatch(const DebuggerOptions& options, DumpWriter* writer, Observer* observer,
               std::string rank_dir);

  /// Throws precprobe::Error for an optimizer the snapshot does not support. The gradients
  /// checked are those of every optimizer's parameters.
  void bind(torch::nn::Module* model, const std::vector<torch::optim::Optimizer*>& optimizers);
  void unbind() noexcept;
  bool bound() const noexcept { return snapshot_.bound(); }

  /// Runs step `step`: f(), or, on an anomaly, f() again from the snapshot with every op
  /// recorded (the caller keeps what the last run of f returned). f returns the step's
  /// losses, every one checked; `several` (read once f has returned): they are named
  /// "loss/<i>", else "loss".
  /// `record(true)` makes the debugger record this step's ops, `record(false)` finishes
  /// them (drained, on disk). Exceptions of f propagate; the watch's own failures are
  /// reported and counted.
  void run(int64_t step, c10::function_ref<std::vector<at::Tensor>()> f, const bool& several,
           const std::function<void(bool)>& record);

  uint64_t replays() const noexcept { return replays_; }
  uint64_t errors() const noexcept { return errors_; }
  /// Bytes of the snapshot (the last one taken, after unbind()).
  int64_t snapshot_bytes() const;

 private:
  struct Check {
    std::string trigger;  // "" = healthy
    std::string detail;
    std::vector<std::string> names;  // of the losses ("loss", or "loss/0", "loss/1", ...)
    std::vector<double> values;      // each loss as one float64 (NaN: empty or undefined)
    std::vector<bool> present;       // a loss of at least one element
    double loss = 0;                 // the finite losses' sum: the spike check's value
    bool with_loss = false;          // some loss of at least one element
  };
  /// What the one pass over a parameter's gradient found.
  struct GradStat {
    bool has_grad = false;
    double sumsq = 0, abs_sum = 0, abs_max = 0;  // over finite elements
    int64_t nan = 0, inf = 0, finite = 0;
  };
  /// Each loss's bits and which gradients are non-finite: what a replay must reproduce.
  struct Pattern {
    std::vector<uint64_t> loss_bits;
    std::vector<bool> loss_nan;
    std::vector<bool> bad_grads;
    bool operator==(const Pattern& o) const;
  };
  Check check(const std::vector<at::Tensor>& losses, bool several);
  /// Fills stats_ (one per params_) and each loss's float64 value (NaN: none).
  void read_grads(const std::vector<at::Tensor>& losses, Check& c);
  /// The step's loss scalars and, with `grads`, one GradRecord per parameter.
  void write_records(int64_t step, const Check& c, bool grads) noexcept;
  Pattern pattern(const std::vector<at::Tensor>& losses) const;
  std::string bad_grads_text() const;
  void remember(double loss);
  void replay(int64_t step, c10::function_ref<std::vector<at::Tensor>()> f,
              const std::vector<at::Tensor>& losses, const Check& why,
              const std::function<void(bool)>& record);

  DebuggerOptions options_;
  DumpWriter* writer_;
  Observer* observer_;
  std::string rank_dir_;
  StepSnapshot snapshot_;
  std::vector<std::pair<std::string, at::Tensor>> params_;  // (name, parameter)
  std::vector<GradStat> stats_;                             // of the step last checked
  std::vector<at::Tensor> rows_;                            // device gradients' statistics
  bool replay_grads_recorded_ = false;     // the gradient monitor records a replayed step
  std::vector<double> history_, scratch_;  // spike window (ring)
  size_t history_next_ = 0, history_size_ = 0;
  uint64_t replays_ = 0;
  uint64_t errors_ = 0;
  int64_t last_bytes_ = 0;  // the snapshot's size when it was last unbound
};

}  // namespace detail
}  // namespace precprobe
