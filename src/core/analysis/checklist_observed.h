// What `precprobe check` reads from the first rank's events: the batches observe_batch
// registered, the initial-model checks, the learning-rate range, losses, scaled-gradient
// reads and replica checks, gathered into one value the checklist items judge.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "precprobe/analysis.h"
#include "precprobe/records.h"

namespace precprobe {
namespace analysis_detail {

struct Batch {
  int64_t step = 0;
  int64_t epoch = -1;
  std::optional<bool> training, grad;
  int64_t stat_modules_training = -1;
  int64_t inputs_numel = 0, nan = 0, inf = 0;
  std::map<int64_t, std::pair<double, double>> channels;  // channel -> (mean, std)
  int64_t targets_numel = 0, ignored = 0, distinct = -1;
  std::map<int64_t, int64_t> labels;
  std::optional<double> label_hash;
  bool is_train() const { return grad.value_or(true); }
};

struct Observed {
  std::vector<Batch> batches;
  std::optional<double> init_params;
  std::vector<std::string> init_zero, init_identical;
  std::optional<double> hash_hi, hash_lo, exp_hi, exp_lo;
  std::optional<double> lr_lo, lr_hi;
  std::vector<double> lr;
  /// Every logged loss (is_loss_scalar: a name containing "loss"), in order of first use.
  struct Series {
    std::string name;
    std::vector<std::pair<int64_t, double>> points;  // (step, value)
  };
  std::vector<Series> losses;
  /// Optimizers of the run: check/optimizers (written by the debugger's start()).
  std::optional<double> optimizers;
  std::optional<double> params_named;
  struct ScaledRead {
    int64_t step;
    std::string op;
    double scale;
  };
  std::vector<ScaledRead> scaled_reads;
  ReplicaSummary replicas;
};

/// Gathers the scalars of the first rank present in `scalars` (the checklist judges one
/// training process).
Observed collect(const std::vector<ScalarRecord>& scalars);

}  // namespace analysis_detail
}  // namespace precprobe
