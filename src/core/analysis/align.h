// Sequence alignment for `compare`: Myers' difference algorithm in linear space, on an
// equality of elements given by the caller. Private to src/core/analysis; no state, safe
// to call from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace precprobe::analysis_detail {

/// Pairs (i, j) in order of both sequences; -1 on one side marks an element of the other
/// sequence only.
using AlignPairs = std::vector<std::pair<int64_t, int64_t>>;

/// Whether element i of A and element j of B are the same (need not be transitive).
using AlignEqual = std::function<bool(size_t i, size_t j)>;

struct Alignment {
  AlignPairs pairs;
  /// The work bound cut the search short: the pairs are a common subsequence, each pair
  /// equal, but perhaps not the longest (some equal elements left unpaired).
  bool approximate = false;
};

/// The work one alignment may do before it stops searching (about 0.1 s).
inline constexpr size_t kDefaultAlignCost = size_t{1} << 26;

/// A longest common subsequence of A (n elements) and B (m elements) under `eq`: the common
/// prefix and suffix first, then Myers' O((n + m) D) search (D: the elements of one side
/// only) in O(n + m) memory. `max_cost` bounds the work (diagonals and comparisons
/// visited); past it the search settles for the best split found so far and then leaves the
/// rest unpaired, so the cost stays O(max_cost + n + m) whatever the sequences.
Alignment align(size_t n, size_t m, const AlignEqual& eq, size_t max_cost = kDefaultAlignCost);

}  // namespace precprobe::analysis_detail
