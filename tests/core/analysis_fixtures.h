// Builders of synthetic records for the analysis tests.
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "precprobe/analysis.h"
#include "support/ieee_specials.h"

namespace precprobe::test {

/// Statistics of a small vector, computed here in float64 (finite values only).
inline TensorStats stats_of(const std::vector<double>& v, std::string dtype = "Float") {
  TensorStats t;
  t.dtype = std::move(dtype);
  t.shape = {static_cast<int64_t>(v.size())};
  t.numel = static_cast<int64_t>(v.size());
  double sum = 0, sq = 0;
  int64_t finite = 0;
  t.min = kInf;
  t.max = -kInf;
  for (double x : v) {
    if (std::isnan(x)) {
      ++t.nan;
      continue;
    }
    if (std::isinf(x)) {
      ++(x > 0 ? t.pinf : t.ninf);
      continue;
    }
    if (std::fpclassify(x) == FP_ZERO)
      ++t.zero;
    else if (x < 0)
      ++t.neg;
    else
      ++t.pos;
    t.min = std::min(t.min, x);
    t.max = std::max(t.max, x);
    sum += x;
    sq += x * x;
    ++finite;
  }
  if (finite == 0)
    t.min = t.max = t.mean = t.norm = kNaN;
  else {
    t.mean = sum / static_cast<double>(finite);
    t.norm = std::sqrt(sq);
  }
  return t;
}

inline Arg targ(const std::vector<double>& v) { return Arg{stats_of(v), ""}; }
inline Arg varg(std::string json) { return Arg{std::nullopt, std::move(json)}; }

struct OpSpec {
  std::string op;
  int64_t seq;
  std::vector<Arg> in, out;
  int64_t call = 0;
  int32_t depth = 0;
  Direction dir = Direction::kForward;
  uint32_t thread = 0;
};

inline OpRecord make_op(int64_t step, int rank, const OpSpec& s) {
  OpRecord r;
  r.step = step;
  r.rank = rank;
  r.seq = s.seq;
  r.op = s.op;
  r.call = s.call;
  r.depth = s.depth;
  r.dir = s.dir;
  r.thread = s.thread;
  r.inputs = s.in;
  r.outputs = s.out;
  return r;
}

/// Ops in file order for one step of one rank.
inline void add_step(DumpData& d, int64_t step, int rank, const std::vector<OpSpec>& ops) {
  for (const OpSpec& s : ops) d.ops.push_back(make_op(step, rank, s));
}

/// Multiplies every finite value of the statistics by f (as if each element were).
inline Arg scaled(const Arg& a, double f) {
  Arg b = a;
  if (b.tensor) {
    TensorStats& t = *b.tensor;
    t.min *= f;
    t.max *= f;
    t.mean *= f;
    t.norm *= std::fabs(f);
    if (f < 0) std::swap(t.min, t.max);
  }
  return b;
}

// Two records of one op: A's and B's.
inline std::pair<DumpData, DumpData> one_op(const std::string& op, std::vector<Arg> in_a,
                                            std::vector<Arg> out_a, std::vector<Arg> in_b,
                                            std::vector<Arg> out_b,
                                            Direction dir = Direction::kForward) {
  DumpData a, b;
  add_step(a, 0, 0, {{op, 0, std::move(in_a), std::move(out_a), 0, 0, dir}});
  add_step(b, 0, 0, {{op, 0, std::move(in_b), std::move(out_b), 0, 0, dir}});
  return {a, b};
}

inline Arg hashed(Arg a, uint64_t h) {
  a.tensor->hash = h;
  return a;
}

}  // namespace precprobe::test
