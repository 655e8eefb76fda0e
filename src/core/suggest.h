// "Did you mean" for mistyped names: config keys here, CLI words anywhere else.
// Pure functions; callable from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace precprobe {

/// Optimal-string-alignment distance (Damerau-Levenshtein where no substring is edited
/// twice): insertions, deletions, substitutions and swaps of neighbours cost 1 each.
size_t edit_distance(const std::string& a, const std::string& b);

/// The candidate closest to `word` (case-insensitive), or "" when none is close enough:
/// at most max(1, |candidate| / 3) edits away, so "dump_pth" finds "dump_path" but
/// "x" finds nothing. Ties go to the earlier candidate.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace precprobe
