// Near-tie flips in `compare` (docs/cli.md, "Near-tie flips"). An op that decides by
// comparing values (max pooling, argmax, sort, topk, ...) picks another element when two
// candidates are tied or nearly tied and the runs round them differently: its index output
// (or the index input of its backward) differs between the runs although every float it
// read differs only by rounding. What it routes is then *moved*, not perturbed: a max-pool
// backward sends a gradient to the other element of a tied window. Statistics (min, max,
// mean, norm) barely see a moved element, yet the ops that consume it (a convolution's
// grad_input) differ by a large part of one element's contribution, far beyond their
// rounding bound. The error model cannot bound that, so those ops must not be called
// divergent on its account.
//
// FlipTracker follows one (step, rank) group of run A in order: a decision op whose
// integer argument differs is a flip; its tensor outputs, and the outputs of every later op
// that consumes one of them (a tensor is recognised by its statistics, exactly equal),
// are downstream of it. Downstream ops are still compared; compare_groups reports one that
// the rounding model alone would have called divergent as excused by the flip.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "precprobe/analysis.h"
#include "precprobe/records.h"

namespace precprobe::analysis_detail {

/// True for ops whose integer argument records a decision taken by comparing floats.
bool is_decision_op(const std::string& op);

class FlipTracker {
 public:
  struct Source {
    int64_t seq = 0;
    std::string name;  ///< "aten::max_pool2d_with_indices_backward.1.backward"
  };

  /// Feeds the next paired op of the group (`a`: run A's record, `oc`: its comparison).
  /// Returns the flip it is downstream of (itself when it is a flip), else nothing.
  std::optional<Source> observe(const OpRecord& a, const OpCompare& oc);

 private:
  struct Fingerprint {
    const TensorStats* stats = nullptr;  // into the group's records, which outlive this
    std::size_t source = 0;              // index into sources_
  };
  void taint_outputs(const OpRecord& a, std::size_t source);

  std::vector<Source> sources_;
  std::unordered_multimap<uint64_t, Fingerprint> tainted_;  // by a digest of the statistics
};

}  // namespace precprobe::analysis_detail
