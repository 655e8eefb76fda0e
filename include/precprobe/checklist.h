// The accuracy checklist (`precprobe check DIR`): data, hyper-parameter, API and mixed
// precision items, each with a verdict ("problem" / "ok" / "n/a") and the evidence behind it.
//
// The probe writes what it observes (PrecisionDebugger::observe_batch, the checks made at
// start(model), lr_range_test) as ScalarRecords named "check/..." in events.jsonl.zst; the
// names are the constants of dump_format.h (docs/dump-format.md). The analysis also reads the loss
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
#include "precprobe/dump_format.h"

namespace precprobe {

// The event names (check_scalar::...) are in precprobe/dump_format.h.

enum class Verdict : uint8_t { kProblem, kOk, kNotApplicable };

/// "problem" | "ok" | "n/a"
std::string_view to_string(Verdict v) noexcept;

struct CheckItem {
  std::string id;  ///< stable key, e.g. "data.missing_values"
  std::string
      group;  ///< "run" | "data" | "hyper-parameters" | "api" | "numerics" | "mixed precision"
  std::string title;  ///< one line for people
  Verdict verdict = Verdict::kNotApplicable;
  std::string evidence;  ///< what was seen (or why the item cannot be decided)
  std::vector<std::pair<std::string, double>> figures;  ///< the numbers behind the verdict

  /// The figure with this name, or nullopt.
  std::optional<double> figure(std::string_view name) const noexcept;
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
  nlohmann::json to_json() const;
};

ChecklistResult run_checklist(DumpReader& reader, const ChecklistOptions& options = {},
                              const ReadOptions& read = {});
ChecklistResult run_checklist(const DumpData& data, const ChecklistOptions& options = {});

}  // namespace precprobe
