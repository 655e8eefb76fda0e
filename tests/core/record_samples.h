// Sample records and field-by-field comparison for the core I/O tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "precprobe/records.h"

namespace precprobe::test {

/// Bitwise equality for doubles, so -0.0 != 0.0 and NaN == NaN.
inline bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b));
}

/// The value the reader returns for mean/norm: the float32 rounding when it is finite.
inline double as_float32(double v) {
  auto f = static_cast<float>(v);
  return std::isfinite(f) ? static_cast<double>(f) : v;
}

/// Empty string when equal, else the first differing field.
inline std::string diff(const TensorStats& a, const TensorStats& b) {
  if (a.dtype != b.dtype) return "dtype";
  if (a.shape != b.shape) return "shape";
  if (a.device != b.device) return "device";
  if (a.requires_grad != b.requires_grad) return "rg";
  if (a.numel != b.numel || a.nan != b.nan || a.pinf != b.pinf || a.ninf != b.ninf ||
      a.zero != b.zero || a.neg != b.neg || a.pos != b.pos) {
    return "counts";
  }
  if (!same_bits(a.min, b.min)) return "min";
  if (!same_bits(a.max, b.max)) return "max";
  if (!same_bits(as_float32(a.mean), b.mean)) return "mean";
  if (!same_bits(as_float32(a.norm), b.norm)) return "norm";
  if (a.hash != b.hash) return "hash";
  if (a.param != b.param) return "param";
  if (a.list_index != b.list_index) return "li";
  if (a.hist != b.hist) return "hist";
  if (a.has_range != b.has_range || a.range != b.range) return "range";
  return {};
}

inline std::string diff(const std::vector<Arg>& a, const std::vector<Arg>& b) {
  if (a.size() != b.size()) return "arg count";
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].is_tensor() != b[i].is_tensor()) return "arg kind";
    if (a[i].is_tensor()) {
      auto d = diff(*a[i].tensor, *b[i].tensor);
      if (!d.empty()) return "arg " + std::to_string(i) + " " + d;
    } else if (a[i].value != b[i].value) {
      return "arg " + std::to_string(i) + " value";
    }
  }
  return {};
}

inline std::string diff(const OpRecord& a, const OpRecord& b) {
  if (a.step != b.step || a.seq != b.seq || a.call != b.call) return "step/seq/call";
  if (a.op != b.op || a.overload != b.overload) return "op/ovl";
  if (a.dir != b.dir || a.thread != b.thread || a.depth != b.depth || a.seqnr != b.seqnr) {
    return "dir/thr/depth/sn";
  }
  if (a.scope != b.scope || a.node != b.node || a.module != b.module) return "scope/node/mod";
  if (a.background != b.background || a.optimizer != b.optimizer) return "bg/opt";
  // "grad" is written only when off: on reads back as unknown (DumpReader makes it on).
  if ((a.grad == false) != (b.grad == false)) return "grad";
  auto d = diff(a.inputs, b.inputs);
  if (!d.empty()) return "in: " + d;
  d = diff(a.outputs, b.outputs);
  return d.empty() ? d : "out: " + d;
}

/// A typical statistics record of a float tensor.
inline TensorStats sample_tensor(std::mt19937_64& rng, int64_t n) {
  std::normal_distribution<double> normal(0.0, 1.0);
  TensorStats t;
  t.dtype = "Float";
  t.shape = {n / 16 > 0 ? n / 16 : 1, 16};
  t.numel = n;
  t.neg = n / 2 - 1;
  t.pos = n - t.neg - 1;
  t.zero = 1;
  t.min = -std::fabs(normal(rng)) * 3;
  t.max = std::fabs(normal(rng)) * 3;
  t.mean = normal(rng) * 0.01;
  t.norm = std::fabs(normal(rng)) * std::sqrt(static_cast<double>(n));
  return t;
}

/// A forward op with 2 tensor inputs (one a parameter), 1 scalar input, 1 tensor output.
inline OpRecord sample_op(std::mt19937_64& rng, int64_t step, int64_t seq) {
  OpRecord r;
  r.step = step;
  r.seq = seq;
  r.op = (seq % 3 == 0) ? "aten::addmm" : (seq % 3 == 1 ? "aten::relu" : "aten::mul");
  r.call = seq / 3;
  r.dir = (seq % 5 == 4) ? Direction::kBackward : Direction::kForward;
  r.seqnr = 1000 + seq;
  r.inputs.push_back(Arg{sample_tensor(rng, 4096), {}});
  TensorStats w = sample_tensor(rng, 1024);
  w.requires_grad = true;
  w.param = "layers.0.weight";
  r.inputs.push_back(Arg{w, {}});
  r.inputs.push_back(Arg{std::nullopt, "1"});
  r.outputs.push_back(Arg{sample_tensor(rng, 4096), {}});
  return r;
}

}  // namespace precprobe::test
