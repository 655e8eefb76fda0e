// align: Myers' difference algorithm (E. W. Myers, "An O(ND) difference algorithm and its
// variations", Algorithmica 1, 1986) in its linear-space form: find the middle snake of an
// optimal edit path by searching from both ends at once, split there, repeat on the halves.
// The structure and the cost heuristic follow GNU diff (gnulib diffseq.h): a split whose
// search passes `too_expensive` edit steps settles for the diagonal that got furthest, so a
// pair of very different sequences costs about (n + m) sqrt(n + m), not (n + m)^2; the work
// bound `max_cost` caps even that. Memory: two arrays of n + m + 3 offsets and one flag
// per element.
#include "align.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>
#include <unordered_map>

#include "precprobe/analysis.h"

namespace precprobe {
namespace analysis_detail {
namespace {

using Offset = std::ptrdiff_t;
constexpr Offset kOffsetMax = std::numeric_limits<Offset>::max();

// Where a task splits: A[xoff, xmid) x B[yoff, ymid) and A[xmid, xlim) x B[ymid, ylim); a
// half is "minimal" when its search need not give up early.
struct Partition {
  Offset xmid, ymid;
  bool lo_minimal, hi_minimal;
};

struct Task {
  Offset xoff, xlim, yoff, ylim;
  bool minimal;
};

class Differ {
 public:
  Differ(size_t n, size_t m, const AlignEqual& eq, size_t max_cost)
      : m_(static_cast<Offset>(m)),
        eq_(eq),
        budget_(max_cost),
        fdiag_(n + m + 3),
        bdiag_(n + m + 3),
        changed_a_(n, false),
        changed_b_(m, false) {
    // GNU diff's bound on one split's search: about sqrt(n + m), at least 4096 edit steps.
    Offset t = 1;
    for (size_t diags = n + m + 3; diags != 0; diags >>= 2) t <<= 1;
    too_expensive_ = std::max<Offset>(4096, t);
  }

  Alignment run();

 private:
  bool equal(Offset x, Offset y) {
    ++work_;
    return eq_(static_cast<size_t>(x), static_cast<size_t>(y));
  }
  bool over_budget() const { return work_ > budget_; }
  Partition diag(Offset xoff, Offset xlim, Offset yoff, Offset ylim, bool minimal);
  Partition give_up(Offset xoff, Offset xlim, Offset yoff, Offset ylim, Offset fmin, Offset fmax,
                    Offset bmin, Offset bmax);
  void mark(const Task& t) {
    for (Offset x = t.xoff; x < t.xlim; ++x) changed_a_[static_cast<size_t>(x)] = true;
    for (Offset y = t.yoff; y < t.ylim; ++y) changed_b_[static_cast<size_t>(y)] = true;
  }

  Offset m_;
  const AlignEqual& eq_;
  size_t budget_, work_ = 0;
  Offset too_expensive_;
  bool approximate_ = false;
  std::vector<Offset> fdiag_, bdiag_;  // furthest x reached per diagonal d = x - y
  std::vector<bool> changed_a_, changed_b_;
};

// The middle snake of A[xoff, xlim) x B[yoff, ylim), whose first and last elements differ.
Partition Differ::diag(Offset xoff, Offset xlim, Offset yoff, Offset ylim, bool minimal) {
  Offset* const fd = fdiag_.data() + m_ + 1;  // diagonals -m - 1 .. n + 1
  Offset* const bd = bdiag_.data() + m_ + 1;
  const Offset dmin = xoff - ylim, dmax = xlim - yoff;
  const Offset fmid = xoff - yoff, bmid = xlim - ylim;
  Offset fmin = fmid, fmax = fmid, bmin = bmid, bmax = bmid;
  const bool odd = ((fmid - bmid) & 1) != 0;
  fd[fmid] = xoff;
  bd[bmid] = xlim;
  for (Offset c = 1;; ++c) {
    // One more edit step forward on every diagonal in reach, then backward.
    if (fmin > dmin) {
      fd[--fmin - 1] = -1;
    } else {
      ++fmin;
    }
    if (fmax < dmax) {
      fd[++fmax + 1] = -1;
    } else {
      --fmax;
    }
    for (Offset d = fmax; d >= fmin; d -= 2) {
      const Offset tlo = fd[d - 1], thi = fd[d + 1];
      Offset x = tlo < thi ? thi : tlo + 1;
      Offset y = x - d;
      while (x < xlim && y < ylim && equal(x, y)) {
        ++x;
        ++y;
      }
      fd[d] = x;
      if (odd && bmin <= d && d <= bmax && bd[d] <= x) return Partition{x, y, true, true};
    }
    if (bmin > dmin) {
      bd[--bmin - 1] = kOffsetMax;
    } else {
      ++bmin;
    }
    if (bmax < dmax) {
      bd[++bmax + 1] = kOffsetMax;
    } else {
      --bmax;
    }
    for (Offset d = bmax; d >= bmin; d -= 2) {
      const Offset tlo = bd[d - 1], thi = bd[d + 1];
      Offset x = tlo < thi ? tlo : thi - 1;
      Offset y = x - d;
      while (xoff < x && yoff < y && equal(x - 1, y - 1)) {
        --x;
        --y;
      }
      bd[d] = x;
      if (!odd && fmin <= d && d <= fmax && x <= fd[d]) return Partition{x, y, true, true};
    }
    work_ += static_cast<size_t>(fmax - fmin + bmax - bmin + 2);
    if (over_budget() || (!minimal && c >= too_expensive_))
      return give_up(xoff, xlim, yoff, ylim, fmin, fmax, bmin, bmax);
  }
}

// GNU diff's heuristic: split at the forward diagonal that got furthest (largest x + y) or
// the backward one that got furthest back, whichever advanced more.
Partition Differ::give_up(Offset xoff, Offset xlim, Offset yoff, Offset ylim, Offset fmin,
                          Offset fmax, Offset bmin, Offset bmax) {
  approximate_ = true;
  const Offset* const fd = fdiag_.data() + m_ + 1;
  const Offset* const bd = bdiag_.data() + m_ + 1;
  Offset fxybest = -1, fxbest = 0;
  for (Offset d = fmax; d >= fmin; d -= 2) {
    Offset x = std::min(fd[d], xlim), y = x - d;
    if (ylim < y) {
      x = ylim + d;
      y = ylim;
    }
    if (fxybest < x + y) {
      fxybest = x + y;
      fxbest = x;
    }
  }
  Offset bxybest = kOffsetMax, bxbest = 0;
  for (Offset d = bmax; d >= bmin; d -= 2) {
    Offset x = std::max(xoff, bd[d]), y = x - d;
    if (y < yoff) {
      x = yoff + d;
      y = yoff;
    }
    if (x + y < bxybest) {
      bxybest = x + y;
      bxbest = x;
    }
  }
  if ((xlim + ylim) - bxybest < fxybest - (xoff + yoff))
    return Partition{fxbest, fxybest - fxbest, true, false};
  return Partition{bxbest, bxybest - bxbest, false, true};
}

Alignment Differ::run() {
  std::vector<Task> todo{{0, static_cast<Offset>(changed_a_.size()), 0, m_, false}};
  while (!todo.empty()) {
    Task t = todo.back();
    todo.pop_back();
    while (t.xoff < t.xlim && t.yoff < t.ylim && equal(t.xoff, t.yoff)) {
      ++t.xoff;
      ++t.yoff;
    }
    while (t.xoff < t.xlim && t.yoff < t.ylim && equal(t.xlim - 1, t.ylim - 1)) {
      --t.xlim;
      --t.ylim;
    }
    const bool both = t.xoff < t.xlim && t.yoff < t.ylim;
    if (!both || over_budget()) {
      approximate_ = approximate_ || both;  // left unsearched: unpaired on both sides
      mark(t);
      continue;
    }
    const Partition p = diag(t.xoff, t.xlim, t.yoff, t.ylim, t.minimal);
    if ((p.xmid == t.xoff && p.ymid == t.yoff) || (p.xmid == t.xlim && p.ymid == t.ylim)) {
      approximate_ = true;  // no progress (not expected): leave the task unpaired
      mark(t);
      continue;
    }
    todo.push_back({p.xmid, t.xlim, p.ymid, t.ylim, p.hi_minimal});
    todo.push_back({t.xoff, p.xmid, t.yoff, p.ymid, p.lo_minimal});
  }
  // The unchanged elements of A and B correspond in order; in each gap, A's elements first.
  Alignment out;
  out.approximate = approximate_;
  const size_t n = changed_a_.size(), m = changed_b_.size();
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && (changed_a_[i] || j == m)) {
      out.pairs.emplace_back(i++, -1);
    } else if (j < m && (changed_b_[j] || i == n)) {
      out.pairs.emplace_back(-1, j++);
    } else {
      out.pairs.emplace_back(i++, j++);
    }
  }
  return out;
}

}  // namespace

Alignment align(size_t n, size_t m, const AlignEqual& eq, size_t max_cost) {
  return Differ(n, m, eq, max_cost).run();
}

}  // namespace analysis_detail

std::vector<std::pair<int64_t, int64_t>> align_sequences(const std::vector<std::string>& a,
                                                         const std::vector<std::string>& b,
                                                         size_t max_cost) {
  std::unordered_map<std::string, uint32_t> ids;
  auto intern = [&](const std::vector<std::string>& v) {
    std::vector<uint32_t> out;
    out.reserve(v.size());
    for (const std::string& s : v)
      out.push_back(ids.emplace(s, static_cast<uint32_t>(ids.size())).first->second);
    return out;
  };
  const std::vector<uint32_t> ia = intern(a), ib = intern(b);
  return analysis_detail::align(
             a.size(), b.size(), [&](size_t i, size_t j) { return ia[i] == ib[j]; }, max_cost)
      .pairs;
}

}  // namespace precprobe
