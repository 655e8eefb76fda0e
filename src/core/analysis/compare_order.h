// The order compare reports ops in: by step, then execution order in run A, then rank.
#pragma once

#include <tuple>

#include "precprobe/analysis.h"

namespace precprobe::analysis_detail {

inline bool earlier(const OpCompare& x, const OpCompare& y) {
  return std::tie(x.step, x.seq_a, x.rank) < std::tie(y.step, y.seq_a, y.rank);
}

inline bool earlier(const UnmatchedOp& x, const UnmatchedOp& y) {
  return std::tie(x.step, x.seq, x.rank) < std::tie(y.step, y.seq, y.rank);
}

}  // namespace precprobe::analysis_detail
