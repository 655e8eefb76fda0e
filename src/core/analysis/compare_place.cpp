// A place of ops of one run only judged by its outputs (compare_parts.h; docs/cli.md, "Ops
// of one run only compared by their results").
#include <algorithm>
#include <iterator>
#include <tuple>

#include "compare_parts.h"
#include "pairing.h"
#include "provenance.h"

namespace precprobe::analysis_detail {

// Ops of one run only between the same two compared ops: a different implementation of the
// same computation (LibTorch's C++ nn::Linear as t + addmm, Python's as aten::linear; x * 1.0
// as mul.Scalar in C++, mul.Tensor in Python) or a different computation (a layer without
// its bias, a constant 1.01). Ops of the place are compared by their first output, in order:
// an op of A with the first op of B after the last one taken that has the same name,
// direction and first output's dtype and shape; and the last op of each side, whatever their
// names, when their first outputs have the same dtype and shape. Identical, or within the
// rounding of the op (of every op of the place, for the last ones) plus what the compared ops
// before it already carried, is the same computation; beyond that the place is divergent.
// `seen_error` is the largest relative output error of the group's compared ops so far.
bool same_first_output(const OpRecord& x, const OpRecord& y) {
  if (x.outputs.empty() || y.outputs.empty() || !x.outputs[0].is_tensor() ||
      !y.outputs[0].is_tensor() || x.outputs_uninitialized() || y.outputs_uninitialized() ||
      x.dir != y.dir)
    return false;
  const TensorStats& tx = *x.outputs[0].tensor;
  const TensorStats& ty = *y.outputs[0].tensor;
  return tx.dtype == ty.dtype && tx.shape == ty.shape;
}

double output_bound(const OpRecord& r) {
  const OpNoise nz = op_noise(r, r);
  return nz.outputs.empty() ? 0 : nz.outputs[0].bound;
}

// The same op on other operands (a conv given a tensor padded by reflection and padding 0,
// against padding 1): the inputs that differ in shape or in value, shown beside the output
// that decides.
void shown_input_differences(const OpRecord& la, const OpRecord& lb, OpCompare& oc) {
  for (size_t k = 0; k < std::min(la.inputs.size(), lb.inputs.size()); ++k) {
    const Arg& x = la.inputs[k];
    const Arg& y = lb.inputs[k];
    ArgCompare ac;
    ac.io = "input";
    ac.index = static_cast<int>(k);
    if (x.is_tensor() && y.is_tensor()) {
      if (x.tensor->shape == y.tensor->shape) continue;
      compare_stats(*x.tensor, *y.tensor, ac);
      auto text = [](const std::vector<int64_t>& shape) {
        std::string t = "[";
        for (size_t d = 0; d < shape.size(); ++d) t += (d ? "," : "") + std::to_string(shape[d]);
        return t + "]";
      };
      ac.note = "shape differs: " + text(x.tensor->shape) + " vs " + text(y.tensor->shape);
    } else if (!x.is_tensor() && !y.is_tensor()) {
      if (x.value == y.value || spelled_default(x, y)) continue;
      ac.tensor = false;
      ac.exact = false;
      ac.error = ac.abs_error = kCompareInf;
      ac.note = "value differs: " + display_value(x.value) + " vs " + display_value(y.value);
    } else {
      continue;
    }
    oc.args.push_back(std::move(ac));
  }
}

PairVerdict judge_place(const OpRecord& la, const OpRecord& lb, double bound, double seen_error,
                        const CompareOptions& opt) {
  PairVerdict v;
  OpCompare& oc = v.oc;
  identify(la, lb, oc);
  ArgCompare ac;
  ac.io = "output";
  ac.index = 0;
  compare_stats(*la.outputs[0].tensor, *lb.outputs[0].tensor, ac);
  oc.exact = ac.exact;
  oc.output_error = ac.error;
  const OpNoise na = op_noise(la, lb);
  const double scale = na.outputs.empty() ? 0 : na.outputs[0].scale;
  oc.error = relative(ac.abs_error, scale);
  oc.bound = bound;
  oc.inherited = seen_error;
  const double allowed = bound + opt.inherited_weight * seen_error;
  oc.ratio = !(oc.error > 0) ? 0 : allowed > 0 ? oc.error / allowed : kCompareInf;
  ac.note = "ops of one run only, compared by their output: " + la.name() + " vs " + lb.name();
  oc.args.push_back(std::move(ac));
  if (la.op == lb.op) shown_input_differences(la, lb, oc);
  v.divergent = !oc.exact && oc.ratio > opt.noise_factor && oc.error - seen_error > opt.rtol;
  oc.classification = oc.exact ? "match" : v.divergent ? "divergent" : "noise";
  return v;
}

// The same op on the same kinds of operands: the same overload, a tensor where the other has
// a tensor (0-d numbers aside, as in pairing), the same shapes. A Scalar against a Tensor
// operand of another shape is another computation (ToTensor's division by 255 against
// Normalize's by the std), not to be judged by its output.
bool same_operands(const OpRecord& x, const OpRecord& y) {
  if (x.overload != y.overload) return false;
  auto operands = [](const OpRecord& r) {
    std::vector<const std::vector<int64_t>*> shapes;
    for (const Arg& in : r.inputs)
      if (in.is_tensor() && !is_wrapped_number(*in.tensor)) shapes.push_back(&in.tensor->shape);
    return shapes;
  };
  const auto sx = operands(x), sy = operands(y);
  if (sx.size() != sy.size()) return false;
  for (size_t k = 0; k < sx.size(); ++k)
    if (*sx[k] != *sy[k]) return false;
  return true;
}

// The parameters the ops `at` of `ops` read, sorted.
std::vector<std::string> params_read(const std::vector<OpRecord>& ops,
                                     const std::vector<int64_t>& at) {
  std::vector<std::string> p;
  for (int64_t k : at)
    for (const Arg& in : ops[static_cast<size_t>(k)].inputs)
      if (in.is_tensor() && !in.tensor->param.empty()) p.push_back(in.tensor->param);
  std::sort(p.begin(), p.end());
  p.erase(std::unique(p.begin(), p.end()), p.end());
  return p;
}

// Both sides of a place read a parameter in common (a layer without its bias reads one less).
bool same_params_read(const std::vector<OpRecord>& a, const std::vector<int64_t>& only_a,
                      const std::vector<OpRecord>& b, const std::vector<int64_t>& only_b) {
  const std::vector<std::string> pa = params_read(a, only_a), pb = params_read(b, only_b);
  std::vector<std::string> common;
  std::set_intersection(pa.begin(), pa.end(), pb.begin(), pb.end(), std::back_inserter(common));
  return !common.empty();
}

// The first compared op after the place that reads either run's last output reads both, as
// the same input: the two last ops made what the computation goes on with. Python 2.x's
// multi-head attention ends its input projection with v = proj[2], LibTorch's C++ with
// q * scaling; q is read next on both sides, v and q are no one value. The reader need not
// be the op that closes the place: BatchNorm's num_batches_tracked += 1 runs between a conv
// and the batch_norm that reads it. The search stops after kFeedsWithin compared ops (an
// output read that much later is not what the computation goes on with).
bool feeds_next(const std::vector<OpRecord>& a, const std::vector<OpRecord>& b, int64_t la,
                int64_t lb, const PlaceEnd& end) {
  if (!end.pairs || !end.prov_a || !end.prov_b) return false;
  constexpr int kFeedsWithin = 64;
  auto reads = [](const Provenance& prov, const OpRecord& r, int64_t at, int64_t made, size_t k) {
    return r.inputs[k].is_tensor() && prov.producer(static_cast<size_t>(at), k) == made;
  };
  int compared = 0;
  for (size_t p = end.at; p < end.pairs->size() && compared < kFeedsWithin; ++p) {
    const auto [i, j] = (*end.pairs)[p];
    if (i < 0 || j < 0) continue;
    ++compared;
    const OpRecord& next_a = a[static_cast<size_t>(i)];
    const OpRecord& next_b = b[static_cast<size_t>(j)];
    bool read_a = false, read_b = false;
    for (size_t k = 0; k < next_a.inputs.size(); ++k)
      read_a |= reads(*end.prov_a, next_a, i, la, k);
    for (size_t k = 0; k < next_b.inputs.size(); ++k)
      read_b |= reads(*end.prov_b, next_b, j, lb, k);
    if (!read_a && !read_b) continue;
    const size_t inputs = std::min(next_a.inputs.size(), next_b.inputs.size());
    for (size_t k = 0; k < inputs; ++k)
      if (reads(*end.prov_a, next_a, i, la, k) && reads(*end.prov_b, next_b, j, lb, k)) return true;
    return false;
  }
  return false;
}

// The comparisons of one place, divergent or not, in A's order.
std::vector<PlaceVerdict> compare_place(const std::vector<OpRecord>& a,
                                        const std::vector<OpRecord>& b,
                                        const std::vector<int64_t>& only_a,
                                        const std::vector<int64_t>& only_b, double seen_error,
                                        const CompareOptions& opt, const PlaceEnd& end) {
  std::vector<PlaceVerdict> out;
  if (only_a.empty() || only_b.empty()) return out;
  auto at = [](const std::vector<OpRecord>& ops, int64_t k) -> const OpRecord& {
    return ops[static_cast<size_t>(k)];
  };
  size_t next_b = 0;
  bool last_done = false;
  for (int64_t ka : only_a) {
    const OpRecord& ra = at(a, ka);
    for (size_t m = next_b; m < only_b.size(); ++m) {
      const OpRecord& rb = at(b, only_b[m]);
      if (rb.op != ra.op || !same_first_output(ra, rb) || !same_operands(ra, rb)) continue;
      next_b = m + 1;
      last_done = last_done || (ka == only_a.back() && m + 1 == only_b.size());
      out.push_back(
          {judge_place(ra, rb, std::max(output_bound(ra), output_bound(rb)), seen_error, opt), ka,
           only_b[m]});
      break;
    }
  }
  const OpRecord& la = at(a, only_a.back());
  const OpRecord& lb = at(b, only_b.back());
  // The last ops are compared whatever their names only inside the model, where both sides'
  // ops of the place read a parameter in common (nn.Linear as aten::linear against t +
  // addmm), and where the compared op after the place reads them both: elsewhere (a metric's
  // item(), the data pipeline's own ops) two last ops of one shape need not compute the same
  // thing at all.
  if (!last_done && same_first_output(la, lb) && same_params_read(a, only_a, b, only_b) &&
      feeds_next(a, b, only_a.back(), only_b.back(), end)) {
    double bound = 0;  // the rounding the place may make: every op's, on both sides
    for (int64_t k : only_a) bound += output_bound(at(a, k));
    for (int64_t k : only_b) bound += output_bound(at(b, k));
    PairVerdict v = judge_place(la, lb, bound, seen_error, opt);
    // A layer without its bias: the parameters one side's ops of the place read alone.
    const std::vector<std::string> pa = params_read(a, only_a), pb = params_read(b, only_b);
    std::string alone;
    for (const auto& [mine, theirs, side] :
         {std::make_tuple(&pa, &pb, " (A only)"), std::make_tuple(&pb, &pa, " (B only)")})
      for (const std::string& p : *mine)
        if (!std::binary_search(theirs->begin(), theirs->end(), p))
          alone += (alone.empty() ? "" : ", ") + p + side;
    if (!alone.empty()) v.oc.args.front().note += "; parameters read by one run only: " + alone;
    out.push_back({std::move(v), only_a.back(), only_b.back()});
  }
  return out;
}

}  // namespace precprobe::analysis_detail
