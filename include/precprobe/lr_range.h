// The learning-rate range test (L. N. Smith, "Cyclical Learning Rates for Training Neural
// Networks", 2017): the learning rate grows exponentially from lr_min to lr_max, one
// training step each, the loss is recorded, and the range where the (smoothed) loss falls
// fastest per decade of learning rate is returned. `precprobe check` then says whether the
// training learning rate lies in that range (docs/checklist.md, item hp.learning_rate).
//
// Torch-free: the caller's `train_step(lr)` sets the optimizer's learning rate, runs one
// step on a fresh batch and returns the loss. Run it on a copy of the model (it trains).
// Call from one thread; train_step is called on that thread.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace precprobe {

class DumpWriter;

struct LrRangeOptions {
  double lr_min = 1e-7;
  double lr_max = 10.0;
  int64_t steps = 100;      ///< steps from lr_min to lr_max (>= 5)
  double smoothing = 0.98;  ///< EMA factor of the loss, bias-corrected (0: none)
  /// Stop once the smoothed loss exceeds this multiple of its minimum (diverged), or is
  /// not finite.
  double stop_factor = 4.0;
  /// The range is the contiguous run of points around the steepest descent whose slope
  /// (d smoothed loss / d log10 lr) is at least this fraction of the steepest slope.
  double steep_fraction = 0.5;
};

struct LrRangeResult {
  std::vector<double> lrs;       ///< learning rate of each step run
  std::vector<double> losses;    ///< loss returned by train_step
  std::vector<double> smoothed;  ///< bias-corrected EMA of the loss
  double lr_lo = 0, lr_hi = 0;   ///< the range where the loss falls fastest
  double lr_steepest = 0;        ///< learning rate at the steepest descent
  bool diverged = false;         ///< stopped early by stop_factor / a non-finite loss
  bool found = false;            ///< the loss fell somewhere (else lr_lo = lr_hi = 0)
};

/// Runs the test. Throws precprobe::Error on bad options (naming the option). When
/// `writer` is given (e.g. PrecisionDebugger::writer()), the curve ("check/lr_range/lr",
/// "check/lr_range/loss", step = index) and the range ("check/lr_range/lo", "/hi") are
/// written to its events stream.
LrRangeResult lr_range_test(const std::function<double(double lr)>& train_step,
                            const LrRangeOptions& options = {}, DumpWriter* writer = nullptr);

}  // namespace precprobe
