// What the checklist's items share (private to checklist*.cpp): thresholds (documented in
// docs/checklist.md), item helpers, and the item functions of checklist_data.cpp and
// checklist_training.cpp that checklist.cpp's build() calls.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> before fmt 11)

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "checklist_observed.h"
#include "checklist_records.h"
#include "precprobe/checklist.h"

namespace precprobe::checklist_detail {

using analysis_detail::Batch;
using analysis_detail::Observed;
using analysis_detail::RecordsView;

// Thresholds, documented in docs/checklist.md.
inline constexpr double kMaxClassRatio = 10.0;  // max/min label count
// Inputs: a problem beyond these (what hurts training); within them, "standardised" when
// also inside the next two (wording only: a centring off by half a std, or [0, 1] pixels,
// trains as well).
inline constexpr double kMaxRms = 10.0;                // root mean square of an input channel
inline constexpr double kMaxChannelSpread = 1000.0;    // largest / smallest channel rms
inline constexpr double kMaxAbsMean = 0.25;            // standardised channel mean
inline constexpr double kMinStd = 0.5, kMaxStd = 2.0;  // standardised channel std
inline constexpr double kSingleLabelShare = 0.5;       // batches holding one label: sorted data
inline constexpr int64_t kMinSortedBatch = 8;          // batches smaller than this are not judged
inline constexpr size_t kEpochPrefix = 3;              // first batches compared across epochs
inline constexpr double kMaxIgnoredShare = 0.9;
inline constexpr size_t kMinLossPoints = 10;
inline constexpr double kDivergeFactor = 1.5;  // last-window mean / first-window mean
inline constexpr double kMinRelDecrease = 0.01;
// The losses of a game: judged for divergence only. Exploding: the last window's root mean
// square over the first's; opposed: two losses whose values correlate below this.
inline constexpr double kExplodeFactor = 100.0;
inline constexpr double kOpposedCorrelation = -0.3;

inline CheckItem item(std::string id, std::string group, std::string title) {
  CheckItem c;
  c.id = std::move(id);
  c.group = std::move(group);
  c.title = std::move(title);
  return c;
}

inline void set(CheckItem& c, Verdict v, std::string evidence) {
  c.verdict = v;
  c.evidence = std::move(evidence);
}

inline constexpr const char* kNoBatches =
    "no batch observed (call dbg.observe_batch(inputs, targets))";
inline constexpr const char* kNoInput =
    "no batch observed and no op reading a parameter was recorded, so the model's input is "
    "unknown (call dbg.observe_batch(inputs, targets), or record ops: data_mode)";

// Where the records-based verdicts take the model's input from.
inline std::string input_source(const RecordsView& rv) {
  return fmt::format(
      "the model's input (the non-parameter input of {}, the first op of a training pass "
      "reading a parameter) in {} steps",
      rv.inputs.front().op, rv.inputs.size());
}

// The steps' inputs the data items judge: those of training steps, else all.
inline std::vector<RecordsView::Input> judged_inputs(const RecordsView& rv) {
  std::vector<RecordsView::Input> train;
  for (const auto& in : rv.inputs)
    if (in.train) train.push_back(in);
  return train.empty() ? rv.inputs : train;
}

inline std::string join_first(const std::vector<std::string>& names, size_t n = 5) {
  std::vector<std::string> head(names.begin(), names.begin() + std::min(n, names.size()));
  std::string s = fmt::format("{}", fmt::join(head, ", "));
  if (names.size() > n) s += fmt::format(", ... ({} in all)", names.size());
  return s;
}

// ---- data (checklist_data.cpp)
CheckItem check_missing(const Observed& o, const RecordsView& rv);
CheckItem check_imbalance(const Observed& o, const RecordsView& rv);
CheckItem check_normalised(const Observed& o, const RecordsView& rv);
CheckItem check_shuffling(const Observed& o, const RecordsView& rv);
CheckItem check_ignore_index(const Observed& o, const RecordsView& rv);

// ---- the loss trend (checklist_loss.cpp)
CheckItem check_loss(const Observed& o, const RecordsView& rv,
                     const std::vector<ScalerRecord>& scaler);

// ---- hyper-parameters, API and graph (checklist_training.cpp)
CheckItem check_lr(const Observed& o);
CheckItem check_mode(const Observed& o, const RecordsView& rv, int64_t op_records);
CheckItem check_frozen(const std::vector<GradRecord>& grads);
CheckItem check_init(const Observed& o, const RecordsView& rv);
CheckItem check_module_hash(const Observed& o, const ChecklistOptions& options);

}  // namespace precprobe::checklist_detail
