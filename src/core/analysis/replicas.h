// Reading the debugger's replica-check events ("replicas/..." scalars) into a
// ReplicaSummary; shared by summary and the checklist.
#pragma once

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "precprobe/analysis.h"
#include "precprobe/checklist.h"
#include "precprobe/records.h"

namespace precprobe {
namespace analysis_detail {

// Replica-check events of the first rank that has any; a check failed when its mismatch
// count or its structure flag is non-zero.
struct ReplicaCounter {
  std::optional<int> rank;
  std::set<int64_t> failed_steps;

  void add(const ScalarRecord& r, ReplicaSummary& rs) {
    namespace cs = check_scalar;
    const std::string_view n = r.name;
    if (n.substr(0, 9) != "replicas/") return;
    if (!rank) rank = r.rank;
    if (r.rank != *rank) return;
    if (n == cs::kReplicaTensors) {
      ++rs.checks;
    } else if (n == cs::kReplicaMismatched || n == cs::kReplicaStructureDiffers) {
      if (r.value > 0) failed_steps.insert(r.step);
      if (n == cs::kReplicaStructureDiffers && r.value > 0) rs.structure_differs = true;
    } else if (n.substr(0, cs::kReplicaDiffersPrefix.size()) == cs::kReplicaDiffersPrefix) {
      std::string name(n.substr(cs::kReplicaDiffersPrefix.size()));
      if (std::find(rs.mismatched.begin(), rs.mismatched.end(), name) == rs.mismatched.end())
        rs.mismatched.push_back(std::move(name));
    }
  }
  void finish(ReplicaSummary& rs) const {
    rs.failed_checks = static_cast<int64_t>(failed_steps.size());
    if (!failed_steps.empty()) rs.first_failed_step = *failed_steps.begin();
  }
};

}  // namespace analysis_detail
}  // namespace precprobe
