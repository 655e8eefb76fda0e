// Nesting of op records within one (rank, step), shared by find_overflow and compare --first.
//
// Records are written when an op ENDS while seq is taken when it STARTS, and the ops of one
// thread nest properly. So op D ran inside op C exactly when both ran on the same thread, D
// started later (larger seq), ended earlier (earlier file position), and is deeper.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace precprobe::analysis_detail {

struct OpPlace {
  int64_t seq = 0;
  size_t pos = 0;  ///< position in file order within the (rank, step)
  uint32_t thread = 0;
  int32_t depth = 0;
};

/// From the earliest (by seq) of `cands`, descends into the earliest candidate nested in it,
/// repeatedly; returns the index into `cands` of the innermost one. `cands` is not empty.
inline size_t innermost_earliest(const std::vector<OpPlace>& cands) {
  size_t c = 0;
  for (size_t i = 1; i < cands.size(); ++i) {
    if (cands[i].seq < cands[c].seq) c = i;
  }
  for (;;) {
    std::optional<size_t> best;
    for (size_t d = 0; d < cands.size(); ++d) {
      const OpPlace &x = cands[d], &o = cands[c];
      const bool nested =
          x.thread == o.thread && x.seq > o.seq && x.pos < o.pos && x.depth > o.depth;
      if (nested && (!best || x.seq < cands[*best].seq)) best = d;
    }
    if (!best) return c;
    c = *best;
  }
}

}  // namespace precprobe::analysis_detail
