// Nesting of op records within one (rank, step), shared by find_overflow and compare --first.
//
// Nesting is read from seq (taken when an op STARTS) and depth alone, so it holds whatever
// order the records were written in (the probe writes them in seq order; a writer that
// emits at op end would put inner ops first). The ops of one thread, in seq order, are a
// pre-order walk of the call tree: op D ran inside op C exactly when both ran on the same
// thread, D started later, and every op of that thread from C up to D is deeper than C.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace precprobe::analysis_detail {

struct OpPlace {
  int64_t seq = 0;
  uint32_t thread = 0;
  int32_t depth = 0;
};

/// The ops of one (rank, step) by thread, each thread's in seq order.
class CallTree {
 public:
  explicit CallTree(const std::vector<OpPlace>& ops) : ops_(ops) {
    for (size_t i = 0; i < ops.size(); ++i) by_thread_[ops[i].thread].push_back(i);
    for (auto& [thread, v] : by_thread_) {
      std::stable_sort(v.begin(), v.end(),
                       [&](size_t x, size_t y) { return ops[x].seq < ops[y].seq; });
      for (size_t k = 0; k < v.size(); ++k) rank_in_thread_[v[k]] = k;
    }
  }

  /// True when op `inner` ran inside op `outer` (indices into the constructor's vector).
  bool nested(size_t inner, size_t outer) const {
    const OpPlace &d = ops_[inner], &c = ops_[outer];
    if (d.thread != c.thread || d.seq <= c.seq || d.depth <= c.depth) return false;
    const std::vector<size_t>& v = by_thread_.at(c.thread);
    for (size_t k = rank_in_thread_.at(outer) + 1; k < v.size() && v[k] != inner; ++k) {
      if (ops_[v[k]].depth <= c.depth) return false;
    }
    return true;
  }

  /// From the earliest (by seq) of `cands`, descends into the earliest candidate nested in
  /// it, repeatedly; returns the innermost one. `cands` (indices) is not empty.
  size_t innermost_earliest(const std::vector<size_t>& cands) const {
    size_t c = cands.front();
    for (size_t i : cands) {
      if (ops_[i].seq < ops_[c].seq) c = i;
    }
    for (;;) {
      std::optional<size_t> best;
      for (size_t d : cands) {
        if (nested(d, c) && (!best || ops_[d].seq < ops_[*best].seq)) best = d;
      }
      if (!best) return c;
      c = *best;
    }
  }

 private:
  const std::vector<OpPlace>& ops_;
  std::map<uint32_t, std::vector<size_t>> by_thread_;
  std::map<size_t, size_t> rank_in_thread_;
};

}  // namespace precprobe::analysis_detail
