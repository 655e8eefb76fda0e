// align_sequences: longest common subsequence of two name lists, so that one op inserted
// or removed in one run does not shift every later pairing. The common prefix and suffix
// are matched first (the usual case is a small difference in a long step); the middle
// uses the classic O(n*m) table, and above `max_cells` falls back to pairing the k-th
// occurrence of each name on both sides.
#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "precprobe/analysis.h"

namespace precprobe {
namespace {

using Pairs = std::vector<std::pair<int64_t, int64_t>>;

void lcs_middle(const std::vector<std::string>& a, const std::vector<std::string>& b, size_t a0,
                size_t a1, size_t b0, size_t b1, Pairs& out) {
  const size_t n = a1 - a0, m = b1 - b0;
  // len[i][j]: LCS length of a[a0+i..a1) and b[b0+j..b1); min(n, m) < 65536 whenever the
  // caller's cell limit holds, so 16 bits suffice.
  std::vector<uint16_t> len((n + 1) * (m + 1), 0);
  auto at = [&](size_t i, size_t j) -> uint16_t& { return len[i * (m + 1) + j]; };
  for (size_t i = n; i-- > 0;) {
    for (size_t j = m; j-- > 0;) {
      at(i, j) = a[a0 + i] == b[b0 + j] ? static_cast<uint16_t>(at(i + 1, j + 1) + 1)
                                        : std::max(at(i + 1, j), at(i, j + 1));
    }
  }
  size_t i = 0, j = 0;
  while (i < n && j < m) {
    if (a[a0 + i] == b[b0 + j]) {
      out.emplace_back(a0 + i++, b0 + j++);
    } else if (at(i + 1, j) >= at(i, j + 1)) {
      out.emplace_back(a0 + i++, -1);
    } else {
      out.emplace_back(-1, b0 + j++);
    }
  }
  for (; i < n; ++i) out.emplace_back(a0 + i, -1);
  for (; j < m; ++j) out.emplace_back(-1, b0 + j);
}

void occurrence_middle(const std::vector<std::string>& a, const std::vector<std::string>& b,
                       size_t a0, size_t a1, size_t b0, size_t b1, Pairs& out) {
  std::unordered_map<std::string, std::vector<size_t>> in_b;
  for (size_t j = b1; j-- > b0;) in_b[b[j]].push_back(j);  // reversed: pop_back is in order
  std::vector<bool> used(b1 - b0, false);
  for (size_t i = a0; i < a1; ++i) {
    auto it = in_b.find(a[i]);
    if (it == in_b.end() || it->second.empty()) {
      out.emplace_back(i, -1);
      continue;
    }
    used[it->second.back() - b0] = true;
    out.emplace_back(i, it->second.back());
    it->second.pop_back();
  }
  for (size_t j = b0; j < b1; ++j) {
    if (!used[j - b0]) out.emplace_back(-1, j);
  }
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> align_sequences(const std::vector<std::string>& a,
                                                         const std::vector<std::string>& b,
                                                         size_t max_cells) {
  Pairs out;
  size_t pre = 0;
  while (pre < a.size() && pre < b.size() && a[pre] == b[pre]) ++pre;
  size_t suf = 0;
  while (suf < a.size() - pre && suf < b.size() - pre &&
         a[a.size() - 1 - suf] == b[b.size() - 1 - suf])
    ++suf;
  for (size_t i = 0; i < pre; ++i) out.emplace_back(i, i);
  const size_t a1 = a.size() - suf, b1 = b.size() - suf;
  const size_t n = a1 - pre, m = b1 - pre;
  if ((n + 1) * (m + 1) <= max_cells && std::min(n, m) < 65535) {
    lcs_middle(a, b, pre, a1, pre, b1, out);
  } else {
    occurrence_middle(a, b, pre, a1, pre, b1, out);
  }
  for (size_t k = 0; k < suf; ++k) out.emplace_back(a1 + k, b1 + k);
  return out;
}

}  // namespace precprobe
