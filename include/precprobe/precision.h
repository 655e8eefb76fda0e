// Precision readiness, torch-free: from the range statistics of one run (TensorStats::range,
// recorded with "statistics": {"range": true}), which ops and modules would overflow, turn
// subnormal or flush to zero in fp16, bf16, fp8 E4M3 or fp8 E5M2, with and without per-tensor
// scaling; the loss scales under which fp16 gradients survive; the modules to keep in fp32
// under autocast. `precprobe precision` prints it; docs/precision.md explains the model.
//
// Pure functions of the records (like analysis.h): callable from any thread, each call with
// its own DumpReader.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "precprobe/analysis.h"

namespace precprobe {

/// A floating-point format by its range (round to nearest even, as casts do).
struct FloatFormat {
  std::string_view name;           ///< "fp16", "bf16", "e4m3", "e5m2"
  std::string_view long_name;      ///< "IEEE binary16", ...
  double max = 0;                  ///< largest finite value
  int min_normal_exponent = 0;     ///< 2^min_normal_exponent is the smallest normal value
  int min_subnormal_exponent = 0;  ///< 2^min_subnormal_exponent is the smallest subnormal
  /// |x| above this rounds beyond `max` (to Inf; to NaN in e4m3, which has no Inf): max plus
  /// half a unit in the last place. At it exactly, the tie goes to the even code:
  double overflow_threshold = 0;
  /// beyond max when max's code is odd (fp16, bf16, e5m2), to max when it is even (e4m3).
  bool tie_overflows = true;

  /// fp16 (max 65504, 2^-14, 2^-24), bf16 (max 3.39e38, 2^-126, 2^-133), e4m3 (OCP FP8
  /// E4M3FN: max 448, 2^-6, 2^-9), e5m2 (max 57344, 2^-14, 2^-16); nullptr for other names.
  static const FloatFormat* find(std::string_view name) noexcept;
  /// Whether |x| = a (finite, >= 0) rounds beyond max.
  bool overflows(double a) const noexcept {
    return a > overflow_threshold || (tie_overflows && !(a < overflow_threshold));
  }
};

/// How values are scaled into the format before the cast.
enum class PrecisionScaling : uint8_t {
  kNone,    ///< "none": as they are
  kTensor,  ///< "tensor": each tensor by the power of two that brings its |max| closest to
            ///< the format's max without exceeding it (fp8 recipes' per-tensor scaling)
};

enum class PrecisionVerdict : uint8_t {
  kFits,             ///< "fits": nothing overflows, at most 0.1 % of non-zero values flush
  kFitsWithScaling,  ///< "fits_with_scaling": fits only with per-tensor scaling
  kKeepFp32,         ///< "keep_fp32": does not fit even with per-tensor scaling
};
std::string_view to_string(PrecisionVerdict v) noexcept;

/// Shares of finite non-zero elements (fractions in [0, 1]).
struct PrecisionShares {
  /// At or above the overflow threshold: the binades wholly above it, and, inside the
  /// threshold's own binade, the tensor's |max| when it reaches the threshold (a lower bound
  /// there; whether anything overflows is exact).
  double overflow = 0;
  double subnormal = 0;      ///< rounded to a non-zero subnormal of the format
  double flush_to_zero = 0;  ///< below half the smallest subnormal: rounded to zero
};

/// One op record name over every step and rank: its output tensors.
struct OpPrecision {
  std::string op;                    ///< record name, "aten::addmm.0.forward"
  std::string direction;             ///< "forward" | "backward"
  std::string module;                ///< summary --by module's attribution; "" before any parameter
  int64_t tensors = 0;               ///< output tensors with range statistics, over all steps
  int64_t elements = 0;              ///< their finite non-zero elements
  PrecisionShares unscaled, scaled;  ///< without and with per-tensor scaling
  bool overflows = false;            ///< some element overflows without scaling (exact)
  PrecisionVerdict verdict = PrecisionVerdict::kFits;
  /// Backward ops: no overflow and at most 0.1 % flushed with the gradients multiplied by
  /// the recommended loss scale. Forward ops: same as fitting unscaled.
  bool fits_at_loss_scale = true;
};

struct ModulePrecision {
  std::string module;
  int64_t ops = 0;
  int64_t elements = 0;
  PrecisionShares unscaled, scaled;
  PrecisionVerdict verdict = PrecisionVerdict::kFits;  ///< the worst of its ops
  /// The plan: keep this module in fp32 under autocast. Scaling none: a forward op does not
  /// fit as is, or a backward op does not fit at the recommended loss scale. Scaling tensor:
  /// an op does not fit even with per-tensor scaling. Never for module "" (the ops before any
  /// parameter: data preparation).
  bool keep_fp32 = false;
};

/// What GradScaler would do, replayed over the recorded steps' gradient |max|.
struct ScalerReplay {
  double initial_scale = 0;
  int64_t skipped_steps = 0;  ///< steps whose gradients overflow at the scale of that step
  std::optional<int64_t> first_skipped_step;
  double final_scale = 0;    ///< after the last recorded step
  double flush_to_zero = 0;  ///< share of gradient elements flushed at initial_scale
};

/// Loss scales (powers of two) for gradients in the format, from the backward ops' outputs
/// (views and copies left out, and the 0-dim gradient of the loss itself: the scale).
struct LossScaleAdvice {
  bool available = false;  ///< backward outputs with range statistics were recorded
  double low = 0;          ///< smallest scale flushing at most 0.1 % of gradient elements
  double high = 0;         ///< largest scale under which no gradient overflows
  bool feasible = false;   ///< low <= high
  /// max(low, high / 8): headroom of 8 against overflow, never below `low`; `high` when
  /// infeasible (an overflow skips a step; a flushed gradient only loses that value)
  double recommended = 0;
  double flush_at_recommended = 0;
  ScalerReplay at_recommended;  ///< GradScaler started at `recommended`
  ScalerReplay default_65536;   ///< GradScaler's default start, 65536
};

struct PrecisionOptions {
  const FloatFormat* format = nullptr;  ///< required
  PrecisionScaling scaling = PrecisionScaling::kNone;
};

struct PrecisionResult {
  std::string path;
  std::string format;  ///< FloatFormat::name
  PrecisionScaling scaling = PrecisionScaling::kNone;
  int64_t op_records = 0;
  int64_t tensors_with_range = 0;
  /// Floating output tensors without range statistics (older dumps, the switch off, the
  /// device kernel): not judged.
  int64_t tensors_without_range = 0;
  std::optional<int64_t> step_min, step_max;
  /// Forward ops of a training run outside the autograd graph (no output requires grad:
  /// zero_grad, clip_grad_norm_ on .data(), data preparation), not judged. An inference run
  /// (no forward op in the graph) has every op judged.
  int64_t ops_outside_graph = 0;
  /// Ops whose outputs have the statistics of one of their inputs (views, copies, detach):
  /// their values are judged where they were made, not again.
  int64_t ops_passing_on = 0;
  std::vector<OpPrecision> ops;          ///< most harmful first
  std::vector<ModulePrecision> modules;  ///< in order of first appearance
  LossScaleAdvice loss_scale;
  /// Notes for people (e.g. gradients recorded under a loss scale).
  std::vector<std::string> notes;

  /// The modules to keep in fp32 under autocast (ModulePrecision::keep_fp32), in order.
  std::vector<std::string> keep_fp32_modules() const;
  /// {"format", "scaling", "ops": [{"op", "direction", "module", "overflow", "subnormal",
  /// "flush_to_zero", "verdict"}], "modules": [...], "loss_scale": {"recommended", "low",
  /// "high", "default_65536"}}; shares as fractions of the selected scaling.
  nlohmann::json to_json() const;
};

/// Throws precprobe::Error when no tensor of the dump has range statistics ("no range
/// statistics: record with \"statistics\": {\"range\": true}") or no format is given.
PrecisionResult analyse_precision(DumpReader& reader, const PrecisionOptions& options,
                                  const ReadOptions& read = {});
PrecisionResult analyse_precision(const DumpData& data, const PrecisionOptions& options);

/// The counts of one range histogram in `format` with every value multiplied by 2^shift:
/// the building block of analyse_precision, exposed for tests. `abs_max` is the tensor's
/// largest finite |x| (before the shift).
struct RangeCounts {
  int64_t elements = 0, overflow = 0, subnormal = 0, flush_to_zero = 0;
  bool any_overflow = false;
};
RangeCounts classify_range(const std::vector<std::pair<int32_t, int64_t>>& range, double abs_max,
                           int shift, const FloatFormat& format) noexcept;
/// The per-tensor scaling shift: the largest k with abs_max * 2^k <= format.max (0 when
/// abs_max is not a positive finite number).
int tensor_scale_shift(double abs_max, const FloatFormat& format) noexcept;

}  // namespace precprobe
