// What `precprobe check` reads from the op records when the program did not call
// observe_batch(): the model's input per step (the non-parameter floating input of the first
// op that consumes a parameter), the `training` argument of mode-dependent ops in passes with
// and without gradients, every parameter's statistics where it is first read, and the loss
// op's value and target. Rules: docs/checklist.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "precprobe/records.h"

namespace precprobe {
namespace analysis_detail {

struct RecordsView {
  /// The model's input in one step: statistics of the tensor the first parameter-consuming
  /// op of a training pass read that is not a parameter (ops run with gradients off, e.g. an
  /// evaluation pass or a VAE's decode(z) under NoGradGuard, are passed).
  struct Input {
    int64_t step = 0;
    bool train = true;  // the step ran a backward pass
    std::string op;
    int64_t numel = 0, nan = 0, inf = 0;
    double mean = 0, std = 0, abs_max = 0;
    double min = 0, max = 0;  // over the finite values
  };
  std::vector<Input> inputs;

  // Mode-dependent ops (batch_norm, instance_norm, dropout): passes with gradients on (a
  // training pass) and off (an evaluation pass), and those run in the wrong mode. A step
  // holds at most one of each (an evaluation inside a training step is its eval pass).
  // grad_recorded: how many of the ops carried their grad mode (OpRecord::grad); the others'
  // mode was inferred from requires_grad and the step's backward pass.
  int64_t mode_ops = 0, train_passes = 0, eval_passes = 0, grad_recorded = 0;
  int64_t train_in_eval = 0, eval_in_train = 0;
  struct FirstBad {
    std::optional<int64_t> step;
    std::string op;
  };
  FirstBad first_train_in_eval, first_eval_in_train;

  // Weights (floating, dim >= 2) where each is first read.
  int64_t weights = 0;
  std::optional<int64_t> init_step;
  std::vector<std::string> zero, constant;
  std::vector<std::vector<std::string>> identical;  // groups with one hash

  // The loss op per training step: its value and its integer target.
  std::string loss_op;
  std::vector<std::pair<int64_t, double>> loss;
  struct Target {
    int64_t step = 0;
    int64_t numel = 0;
    double min = 0, max = 0;
    std::optional<uint64_t> hash;
    std::vector<std::pair<int64_t, int64_t>> hist;  // (label, count), when recorded
  };
  std::vector<Target> targets;
  std::optional<int64_t> ignore_index;  // the loss op's ignore_index argument
  bool params_named = false;
};

/// Streams the first rank's op records into a RecordsView.
class RecordsCollector {
 public:
  void add(const OpRecord& op);
  RecordsView finish();

 private:
  // Judges the steps before `step` (all of them with `all`) and drops them.
  void flush_before(int64_t step, bool all = false);
  struct ModeUse {
    std::string op;
    bool training = false;
    std::optional<bool> grad;
    bool recorded = false;  // grad from OpRecord::grad, not inferred
  };
  struct Step {
    bool backward = false;
    std::optional<RecordsView::Input> input;
    bool input_decided = false;  // the first op reading a parameter and another tensor seen
    std::vector<ModeUse> modes;
    std::optional<double> loss;
    std::optional<RecordsView::Target> target;
  };
  std::optional<int> rank_;
  std::map<int64_t, Step> steps_;
  std::map<std::string, bool> seen_params_;
  std::map<uint64_t, std::vector<std::string>> by_hash_;
  RecordsView v_;
};

/// Whether `op` is a loss (cross-entropy, NLL, MSE, L1, ...): its output is the loss, its
/// second input the target. Shared by the checklist and the report's loss fallback.
bool is_loss_op(std::string_view op);

}  // namespace analysis_detail
}  // namespace precprobe
