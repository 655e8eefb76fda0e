// FlipTracker (flips.h): near-tie flips and the ops downstream of them.
#include "flips.h"

#include <algorithm>

#include "op_names.h"
#include "provenance.h"

namespace precprobe::analysis_detail {
namespace {

// An integer tensor that differs between the runs, same dtype and shape: another choice of
// positions, not another computation.
bool decision_differs(const OpCompare& oc) {
  return std::any_of(oc.args.begin(), oc.args.end(), [](const ArgCompare& a) {
    return a.tensor && !a.exact && !a.dtype_n.empty() && a.dtype_n == a.dtype_b &&
           !(unit_roundoff(a.dtype_n) > 0) && a.shape_n == a.shape_b;
  });
}

}  // namespace

bool is_decision_op(const std::string& op) {
  // Ops whose integer argument (an output, or the input of a backward) is the position a
  // comparison of floats chose.
  static const OpNames kDecisionOps{
      "aten::max_pool1d_with_indices",
      "aten::max_pool2d_with_indices",
      "aten::max_pool3d_with_indices",
      "aten::max_pool2d_with_indices_backward",
      "aten::max_pool3d_with_indices_backward",
      "aten::adaptive_max_pool1d",
      "aten::adaptive_max_pool2d",
      "aten::adaptive_max_pool3d",
      "aten::adaptive_max_pool2d_backward",
      "aten::adaptive_max_pool3d_backward",
      "aten::fractional_max_pool2d",
      "aten::fractional_max_pool3d",
      "aten::fractional_max_pool2d_backward",
      "aten::fractional_max_pool3d_backward",
      "aten::max_unpool2d",
      "aten::max_unpool3d",
      "aten::max",
      "aten::min",
      "aten::argmax",
      "aten::argmin",
      "aten::sort",
      "aten::argsort",
      "aten::topk",
      "aten::kthvalue",
      "aten::median",
      "aten::nanmedian",
      "aten::mode",
      "aten::cummax",
      "aten::cummin",
      "aten::value_selecting_reduction_backward",
  };
  return kDecisionOps.contains(op);
}

void FlipTracker::taint_outputs(const OpRecord& a, std::size_t source) {
  for (const Arg& o : a.outputs) {
    // An all-zero tensor moved nothing, and would match every other zero tensor.
    if (o.is_tensor() && o.tensor->norm > 0)
      tainted_.emplace(stats_digest(*o.tensor), Fingerprint{&*o.tensor, source});
  }
}

std::optional<FlipTracker::Source> FlipTracker::observe(const OpRecord& a, const OpCompare& oc) {
  std::optional<std::size_t> from;
  for (const Arg& in : a.inputs) {
    if (!in.is_tensor() || from) continue;
    const auto [lo, hi] = tainted_.equal_range(stats_digest(*in.tensor));
    for (auto it = lo; it != hi; ++it) {
      if (same_stats(*it->second.stats, *in.tensor)) {
        from = it->second.source;
        break;
      }
    }
  }
  if (is_decision_op(a.op) && !oc.exact && decision_differs(oc)) {
    if (!from) {
      sources_.push_back({a.seq, a.name()});
      from = sources_.size() - 1;
    }
  }
  if (!from) return std::nullopt;
  taint_outputs(a, *from);
  return sources_[*from];
}

}  // namespace precprobe::analysis_detail
