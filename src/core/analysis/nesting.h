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

/// The ops of one (rank, step) by thread, each thread's in seq order, with the extent of
/// each op's subtree (computed once with a stack, so `nested` is O(1)).
class CallTree {
 public:
  explicit CallTree(const std::vector<OpPlace>& ops)
      : ops_(ops), pos_(ops.size()), end_(ops.size()) {
    std::map<uint32_t, std::vector<size_t>> by_thread;
    for (size_t i = 0; i < ops.size(); ++i) by_thread[ops[i].thread].push_back(i);
    for (auto& [thread, v] : by_thread) {
      std::stable_sort(v.begin(), v.end(),
                       [&](size_t x, size_t y) { return ops[x].seq < ops[y].seq; });
      std::vector<size_t> open;  // positions whose subtree has not ended yet
      for (size_t k = 0; k < v.size(); ++k) {
        pos_[v[k]] = k;
        while (!open.empty() && ops[v[k]].depth <= ops[v[open.back()]].depth) {
          end_[v[open.back()]] = k;
          open.pop_back();
        }
        open.push_back(k);
      }
      for (size_t k : open) end_[v[k]] = v.size();
    }
  }

  /// True when op `inner` ran inside op `outer` (indices into the constructor's vector).
  bool nested(size_t inner, size_t outer) const {
    const OpPlace &d = ops_[inner], &c = ops_[outer];
    return d.thread == c.thread && d.depth > c.depth && pos_[inner] > pos_[outer] &&
           pos_[inner] < end_[outer];
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
  std::vector<size_t> pos_;  ///< position of each op in its thread's seq order
  std::vector<size_t> end_;  ///< first position after its subtree
};

}  // namespace precprobe::analysis_detail
