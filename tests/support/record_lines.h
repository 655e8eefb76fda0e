// Op records as the lines the writer writes for them, for differential tests that require two
// runs of one program to record the same thing (async vs sync statistics, reuse on vs off).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "precprobe/records.h"

namespace precprobe::test {

/// Every record as its JSON line (all fields, statistics included), autograd's sequence
/// numbers left out: they count on across runs in one process.
inline std::vector<std::string> record_lines(const std::vector<OpRecord>& ops) {
  std::vector<std::string> out;
  for (OpRecord r : ops) {
    r.seqnr = -1;
    std::string s;
    append_json(r, s);
    out.push_back(std::move(s));
  }
  return out;
}

/// Where two lists of lines first differ, for a failure message.
inline std::string first_difference(const std::vector<std::string>& a,
                                    const std::vector<std::string>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] != b[i])
      return "at " + std::to_string(i) + " of " + std::to_string(a.size()) + " and " +
             std::to_string(b.size()) + ":\n  " + a[i] + "\n  " + b[i];
  return "lengths " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
}

}  // namespace precprobe::test
