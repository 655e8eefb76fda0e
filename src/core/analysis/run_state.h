// RunStateBuilder: how each rank's run ended (RunState, precprobe/analysis.h), from the
// "step_end" events an analysis passes over anyway and the rank directories. Private to
// src/core/analysis; not thread-safe (one per analysis).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "precprobe/analysis.h"

namespace precprobe::analysis_detail {

class RunStateBuilder {
 public:
  /// Any events line; only "step_end" counts.
  void add(const ScalarRecord& r) {
    if (r.name != kStepEndEventName) return;
    auto [it, added] = last_end_.try_emplace(r.rank, r.step);
    if (!added && r.step > it->second) it->second = r.step;
  }
  /// Reads each rank's meta.json (as the reader parsed it) and crash.json.
  RunState finish(const std::vector<RankInfo>& ranks) const;

 private:
  std::map<int, int64_t> last_end_;  // rank -> last step_end
};

}  // namespace precprobe::analysis_detail
