// The loss scale in `compare` (docs/cli.md, "Loss scale"). A run whose GradScaler scaled the
// loss (AMP) holds every gradient multiplied by its scale; the run it is compared with (fp32,
// or another scale) does not. The backward ops of a step whose scales differ are compared
// with A's gradient arguments divided by the scales' ratio: those whose magnitude, A's over
// B's, is nearer that ratio than 1. The saved activations and weights a backward op also
// reads are left as they are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "precprobe/analysis.h"
#include "precprobe/records.h"

namespace precprobe::analysis_detail {

/// Per (step, rank): the scale the run's GradScaler multiplied the loss by in that step (its
/// first scaler record there; the scaler counts its own updates, one per step of a loop that
/// calls update() every step). A (step, rank) without one has scale 1.
using LossScales = std::map<std::pair<int64_t, int>, double>;
double loss_scale_of(const LossScales& scales, const std::pair<int64_t, int>& key);

/// An argument of A divided by the loss scale: (output?, index).
using ScaledArgs = std::vector<std::pair<bool, size_t>>;

/// A's record of a backward op with the gradient arguments divided by `factor` (A's loss scale
/// over B's); which ones go to `scaled`.
OpRecord unscaled(const OpRecord& a, const OpRecord& b, double factor, ScaledArgs& scaled);

/// Notes "a / loss scale F" on the compared arguments that were divided.
void note_unscaled(const ScaledArgs& scaled, double factor, std::vector<ArgCompare>& args);

}  // namespace precprobe::analysis_detail
