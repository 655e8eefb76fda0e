// Where the tensors a group's paired ops read were made, and the differences held until a
// later op reconciles them (compare.cpp's; docs/cli.md, "Differences made by ops of one run
// only"). Private to src/core/analysis; included by compare.cpp only.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compare_parts.h"
#include "pairing.h"
#include "provenance.h"

namespace precprobe::analysis_detail {

// The parameter each op of a group reads, or for an op of an optimizer step (a forward op
// run without grad mode) that reads none, the parameter the next op of its run of such ops
// reads: an optimizer works on a parameter's state (its momentum buffer, Adam's moments) and
// then updates the parameter, so its ops before the update are that parameter's.
inline std::vector<std::string> params_of(const std::vector<OpRecord>& ops) {
  std::vector<std::string> out(ops.size());
  auto own = [](const OpRecord& r) -> std::string {
    for (const Arg& in : r.inputs)
      if (in.is_tensor() && !in.tensor->param.empty()) return in.tensor->param;
    return {};
  };
  auto no_grad = [](const OpRecord& r) {
    return r.dir == Direction::kForward && r.grad.has_value() && !*r.grad;
  };
  std::string next;  // the parameter read next in the current run of no-grad ops
  for (size_t k = ops.size(); k-- > 0;) {
    out[k] = own(ops[k]);
    if (!no_grad(ops[k])) {
      next.clear();
      continue;
    }
    if (!out[k].empty()) {
      next = out[k];
    } else {
      out[k] = next;
    }
  }
  return out;
}

// Where the tensor inputs of each paired op were made (provenance.h), judged once per pair.
class Origins {
 public:
  Origins(const std::vector<OpRecord>& a, const std::vector<OpRecord>& b,
          const analysis_detail::AlignPairs& pairs, bool first_step)
      : a_(a),
        b_(b),
        prov_a_(a),
        prov_b_(b),
        first_step_(first_step),
        partner_a_(a.size(), -1),
        partner_b_(b.size(), -1),
        model_a_(first_model_op(a)),
        model_b_(first_model_op(b)) {
    for (const auto& [i, j] : pairs) {
      if (i < 0 || j < 0) continue;
      partner_a_[static_cast<size_t>(i)] = j;
      partner_b_[static_cast<size_t>(j)] = i;
    }
  }

  const analysis_detail::Provenance& provenance_a() const { return prov_a_; }
  const analysis_detail::Provenance& provenance_b() const { return prov_b_; }

  // A's op ka and B's op kb were compared with each other (a place's ops, by their outputs).
  void compared(int64_t ka, int64_t kb) {
    partner_a_[static_cast<size_t>(ka)] = kb;
    partner_b_[static_cast<size_t>(kb)] = ka;
  }

  // By input index of the pair (A's op i, B's op j).
  std::vector<InputOrigin> of(size_t i, size_t j) const {
    const size_t n = std::min(a_[i].inputs.size(), b_[j].inputs.size());
    std::vector<InputOrigin> out(n);
    // An op that makes no tensor (item(), is_nonzero) hands a number to the host: where the
    // number matters, the op that takes it as an argument compares it. Metrics' item() of one
    // run may pair with another item() of the other run.
    if (std::none_of(a_[i].outputs.begin(), a_[i].outputs.end(),
                     [](const Arg& o) { return o.is_tensor(); }))
      return out;
    for (size_t k = 0; k < n; ++k) {
      if (!a_[i].inputs[k].is_tensor() || !b_[j].inputs[k].is_tensor()) continue;
      const int64_t pa = prov_a_.producer(i, k), pb = prov_b_.producer(j, k);
      const bool compared_a = pa >= 0 && partner_a_[static_cast<size_t>(pa)] >= 0;
      const bool compared_b = pb >= 0 && partner_b_[static_cast<size_t>(pb)] >= 0;
      InputOrigin& o = out[k];
      if (compared_a && compared_b) continue;  // the compared ops' verdicts cover it
      if (pa < 0 && pb < 0) {
        // Made before the step in both runs: at the first step compared that is the start
        // (the loaded state, the data made up front), which must be the same; later, the
        // state the steps before left, judged there.
        // Forward ops only: a backward op reads what autograd saved, which ops not recorded
        // (nested in a recorded one) may have made in this step.
        o.judged = first_step_ && a_[i].dir == Direction::kForward;
        o.before_step = true;
        o.bound = std::ldexp(1.0, -24);
        continue;
      }
      o.judged = true;
      std::vector<Number> numbers_a, numbers_b;
      const int64_t last_a = chain(a_, prov_a_, partner_a_, pa, o, o.made_a, numbers_a);
      const int64_t last_b = chain(b_, prov_b_, partner_b_, pb, o, o.made_b, numbers_b);
      o.values = numbers_differ(numbers_a, numbers_b);
      o.data = last_a < model_a_ && last_b < model_b_;
      if (!(o.bound > 0)) o.bound = std::ldexp(1.0, -24);
    }
    return out;
  }

 private:
  // A floating-point number an op of one run only passes: a constant of the program (a clip
  // norm, a slope), as its text shows it, and the op.
  struct Number {
    double value;
    std::string text, op;
  };

  // The floating-point numbers op k passes (integers are dimensions, counts, alphas of 1): its
  // number arguments, and the numbers Python wrapped as 0-d tensors (made by no op: a 0-d
  // tensor an op made, a loss, is a value of the run, not a constant).
  static void numbers_of(const std::vector<OpRecord>& ops, const analysis_detail::Provenance& prov,
                         size_t k, std::vector<Number>& out) {
    const OpRecord& r = ops[k];
    for (size_t i = 0; i < r.inputs.size(); ++i) {
      const Arg& in = r.inputs[i];
      std::optional<double> v;
      std::string text;
      if (in.is_tensor()) {
        if (!analysis_detail::is_wrapped_number(*in.tensor) || in.tensor->dtype == "Long" ||
            in.tensor->dtype == "Int" || in.tensor->dtype == "Bool" || prov.producer(k, i) >= 0)
          continue;
        v = analysis_detail::wrapped_value(*in.tensor);
        if (v) text = shortest_number(*v);
      } else if (in.value.find_first_of(".eE") != std::string::npos && in.value[0] != '[') {
        v = numeric_value(in.value);
        if (v) text = shortest_number(*v);  // 5, as the user typed it; 0.2, not 0.20000000000000001
      }
      if (!v || !std::isfinite(*v)) continue;
      const bool seen = std::any_of(out.begin(), out.end(), [&](const Number& n) {
        return std::equal_to<double>()(n.value, *v) && n.op == r.op;
      });
      if (!seen) out.push_back(Number{*v, text, r.op});
    }
  }

  // "0.5 (A: aten::mul) vs 5 (B: aten::fill_)": the numbers one run's ops pass that the
  // other's do not; "" when the two pass the same numbers.
  static std::string numbers_differ(const std::vector<Number>& a, const std::vector<Number>& b) {
    auto only = [](const std::vector<Number>& x, const std::vector<Number>& y, const char* side) {
      std::string s;
      for (const Number& n : x) {
        if (std::any_of(y.begin(), y.end(),
                        [&](const Number& m) { return std::equal_to<double>()(m.value, n.value); }))
          continue;
        s += (s.empty() ? "" : ", ") + n.text + " (" + side + ": " + n.op + ")";
      }
      return s;
    };
    const std::string in_a = only(a, b, "A"), in_b = only(b, a, "B");
    if (in_a.empty() && in_b.empty()) return {};
    return (in_a.empty() ? std::string("none in A") : in_a) + " vs " +
           (in_b.empty() ? std::string("none in B") : in_b);
  }

  // The ops of one run only upstream of a tensor op `from` made: itself and, through their
  // inputs, the one-run ops that made those, nearest first; their rounding adds to o.bound,
  // the floating-point numbers they pass to `numbers`. Returns the latest of them (-1: none).
  static int64_t chain(const std::vector<OpRecord>& ops, const analysis_detail::Provenance& prov,
                       const std::vector<int64_t>& partner, int64_t from, InputOrigin& o,
                       std::vector<std::string>& names, std::vector<Number>& numbers) {
    constexpr size_t kVisit = 64;
    std::vector<int64_t> todo;
    std::vector<int64_t> seen;
    if (from >= 0 && partner[static_cast<size_t>(from)] < 0) todo.push_back(from);
    for (size_t q = 0; q < todo.size() && seen.size() < kVisit; ++q) {
      const int64_t k = todo[q];
      if (std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
      seen.push_back(k);
      const OpRecord& r = ops[static_cast<size_t>(k)];
      o.bound += output_bound(r);
      if (names.size() < kSequenceDiffNames) names.push_back(r.name());
      numbers_of(ops, prov, static_cast<size_t>(k), numbers);
      for (size_t in = 0; in < r.inputs.size(); ++in) {
        const int64_t p = prov.producer(static_cast<size_t>(k), in);
        if (p >= 0 && partner[static_cast<size_t>(p)] < 0) todo.push_back(p);
      }
    }
    return seen.empty() ? -1 : *std::max_element(seen.begin(), seen.end());
  }

  // The first forward op that reads a parameter: where the model starts (ops.size() if none).
  static int64_t first_model_op(const std::vector<OpRecord>& ops) {
    for (size_t k = 0; k < ops.size(); ++k) {
      if (ops[k].dir != Direction::kForward) continue;
      for (const Arg& in : ops[k].inputs)
        if (in.is_tensor() && !in.tensor->param.empty()) return static_cast<int64_t>(k);
    }
    return static_cast<int64_t>(ops.size());
  }

  const std::vector<OpRecord>& a_;
  const std::vector<OpRecord>& b_;
  analysis_detail::Provenance prov_a_, prov_b_;
  bool first_step_;
  std::vector<int64_t> partner_a_, partner_b_;
  int64_t model_a_, model_b_;
};

// A difference made by ops of one run only may be the same computation in another order:
// Python's multi-head attention scales q after splitting the heads, LibTorch's C++ before,
// so the split's input differs by the scale, and the two runs agree again at the product
// q k^T. Such a difference is held (pending) from the op where it was found, its values
// followed downstream in both runs (provenance.h): a compared op that reads it in both runs
// and whose inputs agree again within rounding reconciles it, and it is no divergence
// (classified noise, cause "reconciled"). A difference no op reconciles by the end of the
// step stands. Outputs that came out the same in both runs carry nothing on.
class Reconciler {
 public:
  Reconciler(size_t na, size_t nb) : taint_a_(na), taint_b_(nb) {}

  // An op of one run only: what made its inputs, it carries on.
  void one_run_op(bool in_a, size_t k, const analysis_detail::Provenance& prov,
                  const std::vector<OpRecord>& ops) {
    std::vector<uint32_t> src;
    auto& taint = in_a ? taint_a_ : taint_b_;
    for (size_t in = 0; in < ops[k].inputs.size(); ++in)
      merge(src, from(taint, prov.producer(k, in)));
    taint[k] = std::move(src);
  }

  // A compared op (A's i, B's j) and its comparison. Returns the pending differences it
  // reconciles (ids), after noting what its outputs carry on; `pending_id` >= 0 when its own
  // verdict starts one.
  std::vector<uint32_t> compared_op(size_t i, size_t j, const std::vector<OpRecord>& a,
                                    const std::vector<OpRecord>& b, const Origins& origins,
                                    const OpCompare& oc, int64_t pending_id,
                                    const CompareOptions& opt) {
    std::vector<uint32_t> src;
    bool any_both = false, agree = true;
    const size_t n = std::min(a[i].inputs.size(), b[j].inputs.size());
    for (size_t k = 0; k < n; ++k) {
      const auto& ta = from(taint_a_, origins.provenance_a().producer(i, k));
      const auto& tb = from(taint_b_, origins.provenance_b().producer(j, k));
      if (ta.empty() && tb.empty()) continue;
      merge(src, ta);
      merge(src, tb);
      if (ta.empty() || tb.empty()) {
        agree = false;  // one run's value only went through the difference
        continue;
      }
      any_both = true;
      if (k >= oc.args.size() || !a[i].inputs[k].is_tensor()) continue;
      const ArgCompare& ac = oc.args[k];
      const TensorStats& t = *a[i].inputs[k].tensor;
      const double u = std::max(unit_roundoff(t.dtype), std::ldexp(1.0, -24));
      if (!ac.exact && !(relative(ac.abs_error, magnitude(t)) <= opt.noise_factor * 4 * u))
        agree = false;
    }
    std::vector<uint32_t> reconciled;
    if (pending_id < 0 && any_both && agree) {
      reconciled = std::move(src);  // the same values again: nothing carried on
    } else {
      if (pending_id >= 0) merge(src, {static_cast<uint32_t>(pending_id)});
      bool outputs_differ = false;
      for (const ArgCompare& ac : oc.args)
        outputs_differ = outputs_differ || (equals(ac.io, "output") && !ac.exact);
      if (outputs_differ) {
        taint_a_[i] = src;
        taint_b_[j] = std::move(src);
      }
    }
    return reconciled;
  }

 private:
  static const std::vector<uint32_t>& from(const std::vector<std::vector<uint32_t>>& taint,
                                           int64_t k) {
    static const std::vector<uint32_t> kNone;
    return k >= 0 ? taint[static_cast<size_t>(k)] : kNone;
  }
  static void merge(std::vector<uint32_t>& to, const std::vector<uint32_t>& add) {
    for (uint32_t x : add)
      if (std::find(to.begin(), to.end(), x) == to.end()) to.push_back(x);
  }
  std::vector<std::vector<uint32_t>> taint_a_, taint_b_;
};

}  // namespace precprobe::analysis_detail
