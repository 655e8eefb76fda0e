// collect(): the checklist's view of the events stream (checklist_observed.h).
#include "checklist_observed.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "precprobe/checklist.h"
#include "replicas.h"

namespace precprobe {
namespace analysis_detail {
namespace {

namespace cs = check_scalar;

bool starts_with(const std::string& s, std::string_view p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

int64_t suffix_int(const std::string& s, std::string_view p) {
  return std::strtoll(s.c_str() + p.size(), nullptr, 10);
}

void add_batch_scalar(Batch& b, const ScalarRecord& r) {
  const std::string& n = r.name;
  const double v = r.value;
  const auto i = static_cast<int64_t>(v);
  if (n == cs::kTraining)
    b.training = v > 0.5;
  else if (n == cs::kGradEnabled)
    b.grad = v > 0.5;
  else if (n == cs::kStatModulesTraining)
    b.stat_modules_training = i;
  else if (n == cs::kInputsNumel)
    b.inputs_numel = i;
  else if (n == cs::kInputsNan)
    b.nan = i;
  else if (n == cs::kInputsInf)
    b.inf = i;
  else if (starts_with(n, cs::kChannelMean))
    b.channels[suffix_int(n, cs::kChannelMean)].first = v;
  else if (starts_with(n, cs::kChannelStd))
    b.channels[suffix_int(n, cs::kChannelStd)].second = v;
  else if (n == cs::kTargetsNumel)
    b.targets_numel = i;
  else if (n == cs::kIgnored)
    b.ignored = i;
  else if (n == cs::kDistinctLabels)
    b.distinct = i;
  else if (n == cs::kLabelHash)
    b.label_hash = v;
  else if (starts_with(n, cs::kLabelCount))
    b.labels[suffix_int(n, cs::kLabelCount)] += i;
}

}  // namespace

// Scalars of the first rank only: the checklist judges one training process.

Observed collect(const std::vector<ScalarRecord>& scalars) {
  Observed o;
  if (scalars.empty()) return o;
  const int rank = scalars.front().rank;
  Batch* cur = nullptr;
  analysis_detail::ReplicaCounter replicas;
  for (const ScalarRecord& r : scalars) {
    if (r.rank != rank || is_anomaly_event(r)) continue;
    replicas.add(r, o.replicas);
    const std::string& n = r.name;
    if (n == cs::kBatchBegin) {
      o.batches.emplace_back();
      cur = &o.batches.back();
      cur->step = r.step;
      cur->epoch = static_cast<int64_t>(r.value);
    } else if (starts_with(n, "check/batch/")) {
      if (cur != nullptr) add_batch_scalar(*cur, r);
    } else if (n == cs::kInitParams) {
      o.init_params = r.value;
    } else if (starts_with(n, cs::kInitZero)) {
      o.init_zero.push_back(n.substr(cs::kInitZero.size()));
    } else if (starts_with(n, cs::kInitIdentical)) {
      o.init_identical.push_back(n.substr(cs::kInitIdentical.size()));
    } else if (n == cs::kHashHi) {
      o.hash_hi = r.value;
    } else if (n == cs::kHashLo) {
      o.hash_lo = r.value;
    } else if (n == cs::kExpectedHashHi) {
      o.exp_hi = r.value;
    } else if (n == cs::kExpectedHashLo) {
      o.exp_lo = r.value;
    } else if (n == cs::kLrRangeLo) {
      o.lr_lo = r.value;
    } else if (n == cs::kLrRangeHi) {
      o.lr_hi = r.value;
    } else if (n == cs::kLr) {
      o.lr.push_back(r.value);
    } else if (is_loss_scalar(n)) {
      auto it = std::find_if(o.losses.begin(), o.losses.end(),
                             [&](const Observed::Series& s) { return s.name == n; });
      if (it == o.losses.end()) it = o.losses.insert(o.losses.end(), {n, {}});
      it->points.emplace_back(r.step, r.value);
    } else if (n == cs::kOptimizers) {
      o.optimizers = std::max(o.optimizers.value_or(0.0), r.value);
    } else if (n == cs::kParamsNamed) {
      o.params_named = std::max(o.params_named.value_or(0.0), r.value);
    } else if (starts_with(n, cs::kScaledGradRead)) {
      o.scaled_reads.push_back({r.step, n.substr(cs::kScaledGradRead.size()), r.value});
    }
  }
  replicas.finish(o.replicas);
  return o;
}

}  // namespace analysis_detail
}  // namespace precprobe
