// The accuracy checklist (`precprobe check DIR`): data, hyper-parameter, API and mixed
// precision items, each with a verdict ("problem" / "ok" / "n/a") and the evidence behind it.
//
// The probe writes what it observes (PrecisionDebugger::observe_batch, the checks made at
// start(model), lr_range_test) as ScalarRecords named "check/..." in events.jsonl.zst; the
// names are the constants below (docs/dump-format.md). The analysis also reads the loss
// ("loss" scalar), the gradient monitor's grads stream, the scaler stream and the ops (for
// the overflow origin). Rules and thresholds are in docs/checklist.md.
//
// Torch-free. Functions are pure apart from reading: call from any thread, each with its own
// DumpReader. They throw precprobe::Error for input that is not a dump.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "precprobe/analysis.h"

namespace precprobe {

namespace check_scalar {
// One observed batch: "begin" first (value: epoch, -1 unknown), then the others.
inline constexpr std::string_view kBatchBegin = "check/batch/begin";
inline constexpr std::string_view kTraining = "check/batch/training";  ///< model mode 0/1
inline constexpr std::string_view kGradEnabled = "check/batch/grad";   ///< grad mode 0/1
/// BatchNorm/Dropout modules in training mode (-1: model unknown).
inline constexpr std::string_view kStatModulesTraining = "check/batch/stat_modules_training";
inline constexpr std::string_view kInputsNumel = "check/batch/inputs_numel";
inline constexpr std::string_view kInputsNan = "check/batch/inputs_nan";
inline constexpr std::string_view kInputsInf = "check/batch/inputs_inf";
inline constexpr std::string_view kChannelMean = "check/batch/mean/";  ///< + channel index
inline constexpr std::string_view kChannelStd = "check/batch/std/";    ///< + channel index
inline constexpr std::string_view kTargetsNumel = "check/batch/targets_numel";
inline constexpr std::string_view kIgnored = "check/batch/ignored";       ///< == ignore index
inline constexpr std::string_view kLabelCount = "check/batch/label/";     ///< + label value
inline constexpr std::string_view kLabelHash = "check/batch/label_hash";  ///< low 48 bits
inline constexpr std::string_view kDistinctLabels = "check/batch/distinct";
// Written once by start(model).
inline constexpr std::string_view kInitParams = "check/init/params";         ///< weights checked
inline constexpr std::string_view kInitZero = "check/init/zero/";            ///< + parameter name
inline constexpr std::string_view kInitIdentical = "check/init/identical/";  ///< + name
inline constexpr std::string_view kHashHi = "check/model/hash_hi";           ///< module_hash >> 32
inline constexpr std::string_view kHashLo = "check/model/hash_lo";  ///< module_hash & 2^32-1
inline constexpr std::string_view kExpectedHashHi = "check/model/expected_hash_hi";
inline constexpr std::string_view kExpectedHashLo = "check/model/expected_hash_lo";
// lr_range_test and the training learning rate.
inline constexpr std::string_view kLrRangeLo = "check/lr_range/lo";
inline constexpr std::string_view kLrRangeHi = "check/lr_range/hi";
// Written by the debugger: parameters named at start(model), and, per step, each op of user
// code that read a parameter gradient between GradScaler::scale() and unscale_() (value: the
// scale).
inline constexpr std::string_view kParamsNamed = "check/params_named";
inline constexpr std::string_view kScaledGradRead = "check/scaled_grad_read/";  ///< + op

// Written by the debugger's periodic replica check ("replica_check_every").
inline constexpr std::string_view kReplicaTensors = "replicas/tensors";
inline constexpr std::string_view kReplicaMismatched = "replicas/mismatched";  ///< count
inline constexpr std::string_view kReplicaStructureDiffers = "replicas/structure_differs";
inline constexpr std::string_view kReplicaDiffersPrefix = "replicas/differs/";  ///< + name
inline constexpr std::string_view kLr = "lr";      ///< logged by the user
inline constexpr std::string_view kLoss = "loss";  ///< logged by the user
}  // namespace check_scalar

enum class Verdict : uint8_t { kProblem, kOk, kNotApplicable };

/// "problem" | "ok" | "n/a"
std::string_view to_string(Verdict v) noexcept;

struct CheckItem {
  std::string id;     ///< stable key, e.g. "data.missing_values"
  std::string group;  ///< "data" | "hyper-parameters" | "api" | "mixed precision"
  std::string title;  ///< one line for people
  Verdict verdict = Verdict::kNotApplicable;
  std::string evidence;  ///< what was seen (or why the item cannot be decided)
  std::vector<std::pair<std::string, double>> figures;  ///< the numbers behind the verdict
};

struct ChecklistOptions {
  std::optional<uint64_t> module_hash;  ///< expected module_hash (overrides the dump's)
};

struct ChecklistResult {
  std::string path;
  std::vector<CheckItem> items;

  bool problem() const noexcept;
  /// The item with this id, or nullptr.
  const CheckItem* find(std::string_view id) const noexcept;
  /// The items that are a problem, likely cause first: data and API mistakes before their
  /// symptoms (a diverging loss, an overflow). The JSON lists their ids as "likely_causes".
  std::vector<const CheckItem*> problems_by_cause() const;
  std::string to_json() const;
};

ChecklistResult run_checklist(DumpReader& reader, const ChecklistOptions& options = {},
                              const ReadOptions& read = {});
ChecklistResult run_checklist(const DumpData& data, const ChecklistOptions& options = {});

}  // namespace precprobe
