// Differences no op reads (compare.cpp's; docs/cli.md, "Dead differences"). Private to
// src/core/analysis; included by compare.cpp only.
//
// A parameter's gradient is a buffer the runs write into: autograd's AccumulateGrad adds each
// backward's gradient onto it (aten::add_, node torch::autograd::AccumulateGrad), zero_grad
// zeroes it (aten::zero_, after LibTorch's C++ aten::detach) or sets it to None (no op: the
// next backward takes its gradient over). Two programs that zero gradients at different times
// (PyTorch's GAN zeroes both optimizers before each backward, its LibTorch port only the one
// it is about to step) accumulate onto different values: the accumulation's output differs,
// and whether that matters depends on who reads it. So an accumulation whose difference is
// only the gradient it adds onto (input #0; the incoming gradient agrees) is not judged
// itself: it carries the difference on (cause "carried"), and the records are followed
// forward (provenance.h: a tensor is known by its statistics):
//   - an op that reads it (the optimizer's update of the parameter, a clip's norm) is judged,
//     the input counting as made by the accumulation (cause "accumulated");
//   - an op that overwrites it (zero_, fill_, copy_ into it) before any read makes it dead;
//     a view of it (zero_grad's detach) carries it on to that op; another accumulation onto
//     it carries it on;
//   - a difference that leaves the step unread is followed into the rank's next step
//     compared (CompareMerge): overwritten there or never touched (set to None, freed) before
//     any read, it is dead; the last step's are dead at the end of what was recorded.
// Not tracked across steps (limitation): a difference left unread by its step that the next
// step reads by an op other than an accumulation is neither dead nor judged there.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "compare_group.h"
#include "compare_parts.h"
#include "op_names.h"
#include "provenance.h"

namespace precprobe::analysis_detail {

/// A backward op of autograd's AccumulateGrad that adds the incoming gradient (input #1) onto
/// the parameter's gradient (input #0): aten::add_, or aten::add where the graph is kept.
inline bool is_accumulation(const OpRecord& r) {
  return r.dir == Direction::kBackward && (r.op == "aten::add_" || r.op == "aten::add") &&
         r.node.find("AccumulateGrad") != std::string::npos && r.inputs.size() >= 2 &&
         r.inputs[0].is_tensor() && r.inputs[1].is_tensor();
}

/// What op `r` does to the tensor it reads as input `k`.
enum class Touch : uint8_t { kRead, kOverwrite, kAlias, kAccumulate };

inline Touch touch_of(const OpRecord& r, size_t k) {
  static const OpNames kOverwrite{"aten::zero_",      "aten::fill_",    "aten::copy_",
                                  "aten::normal_",    "aten::uniform_", "aten::random_",
                                  "aten::bernoulli_", "aten::set_"};
  static const OpNames kAlias{"aten::detach",         "aten::detach_",        "aten::alias",
                              "aten::view",           "aten::_reshape_alias", "aten::reshape",
                              "aten::requires_grad_", "aten::view_as",        "aten::flatten"};
  if (r.op == "aten::_foreach_zero_") return Touch::kOverwrite;  // every tensor of its list
  if (k != 0) return Touch::kRead;
  if (kOverwrite.contains(r.op)) return Touch::kOverwrite;
  if (kAlias.contains(r.op)) return Touch::kAlias;
  if (is_accumulation(r)) return Touch::kAccumulate;
  return Touch::kRead;
}

class DeadTracker {
 public:
  DeadTracker(const std::vector<OpRecord>& a, const std::vector<OpRecord>& b,
              const Provenance& prov_a, const Provenance& prov_b, int64_t step)
      : a_(a),
        b_(b),
        prov_a_(prov_a),
        prov_b_(prov_b),
        step_(step),
        val_a_(a.size(), -1),
        val_b_(b.size(), -1) {}

  /// An op of one run only: what it does to the tracked tensors it reads.
  void one_run_op(bool side_b, size_t k) {
    const OpRecord& r = (side_b ? b_ : a_)[k];
    auto& val = side_b ? val_b_ : val_a_;
    for (size_t in = 0; in < r.inputs.size(); ++in) {
      const int32_t t = value_in(side_b, k, in);
      if (t < 0) continue;
      const Touch touch = touch_of(r, in);
      if (touch == Touch::kAlias || touch == Touch::kAccumulate) {
        if (val[k] < 0) val[k] = t;  // the same buffer, carried on
      } else {
        settle(t, touch == Touch::kOverwrite ? Fate::kOverwritten : Fate::kRead, r.op);
      }
    }
  }

  /// Before the pair (A's i, B's j) is judged: the inputs it reads (not overwrites, views or
  /// accumulates onto) that hold a carried difference are judged as made by the accumulation.
  void before_pair(size_t i, size_t j, std::vector<InputOrigin>& origins) {
    for (size_t k = 0; k < origins.size(); ++k) {
      if (touch_of(a_[i], k) != Touch::kRead || !a_[i].inputs[k].is_tensor()) continue;
      const int32_t ta = value_in(false, i, k), tb = value_in(true, j, k);
      const int32_t d = carried(ta)   ? values_[static_cast<size_t>(ta)].diff
                        : carried(tb) ? values_[static_cast<size_t>(tb)].diff
                                      : -1;
      if (d < 0) continue;
      const Diff& c = diffs_[static_cast<size_t>(d)];
      InputOrigin& o = origins[k];
      o = InputOrigin{};
      o.judged = true;
      o.carried = true;
      // Its rounding: a few units of the value's precision (compare_pair judges it against
      // this alone, not the errors the step's other ops show).
      const TensorStats& t = *a_[i].inputs[k].tensor;
      o.bound = 4 * std::max(unit_roundoff(t.dtype), std::ldexp(1.0, -24));
      o.made_a = {a_[c.i].name(), "onto " + c.onto_a};
      o.made_b = {b_[c.j].name(), "onto " + c.onto_b};
    }
  }

  /// After the pair is judged into `v` (the comparison at `op` of compare_group's list):
  /// decides whether it is an accumulation that carries a difference (then not divergent)
  /// and notes what it does to the tracked tensors it reads. Returns true when the op only
  /// carries, views or overwrites a tracked difference: its error says nothing of the run's
  /// rounding (compare_group leaves it out of the errors seen).
  bool after_pair(size_t i, size_t j, size_t op, PairVerdict& v, double seen_error,
                  const CompareOptions& opt) {
    const OpRecord& ra = a_[i];
    const OpRecord& rb = b_[j];
    bool quiet = false;
    const size_t n = std::min(ra.inputs.size(), rb.inputs.size());
    std::vector<int32_t> ta(n, -1), tb(n, -1);
    for (size_t k = 0; k < n; ++k) {
      ta[k] = value_in(false, i, k);
      tb[k] = value_in(true, j, k);
    }
    if (n >= 2 && is_accumulation(ra) && is_accumulation(rb) &&
        carries(ra, rb, v, ta[0], tb[0], seen_error, opt)) {
      const int32_t d = static_cast<int32_t>(diffs_.size());
      Diff c;
      c.i = i;
      c.j = j;
      c.op = op;
      c.onto_a = onto(false, i);
      c.onto_b = onto(true, j);
      c.va = add_value(false, d, ra.outputs.empty() ? nullptr : &ra.outputs[0]);
      c.vb = add_value(true, d, rb.outputs.empty() ? nullptr : &rb.outputs[0]);
      diffs_.push_back(std::move(c));
      for (int32_t t : {ta[0], tb[0]})
        if (t >= 0) settle(t, Fate::kCarriedOn, ra.op);
      val_a_[i] = diffs_.back().va;
      val_b_[j] = diffs_.back().vb;
      OpCompare& oc = v.oc;
      v.divergent = v.beyond_rounding_only = false;
      oc.classification = "noise";
      oc.cause = "carried";
      oc.made_by_a.clear();
      oc.made_by_b.clear();
      oc.made_by_values.clear();
      if (!oc.args.empty())
        oc.args[0].note = "the gradient it accumulates onto differs (A: " + diffs_.back().onto_a +
                          "; B: " + diffs_.back().onto_b + "): carried on, judged where it is read";
      return true;
    }
    for (size_t k = 0; k < n; ++k) {
      if (ta[k] < 0 && tb[k] < 0) continue;
      const Touch touch = touch_of(ra, k);
      const bool carries_in = carried(ta[k]) || carried(tb[k]);
      if (touch == Touch::kAlias) {
        if (ta[k] >= 0 && val_a_[i] < 0) val_a_[i] = ta[k];
        if (tb[k] >= 0 && val_b_[j] < 0) val_b_[j] = tb[k];
        quiet = quiet || carries_in;
        continue;
      }
      const Fate f = touch == Touch::kOverwrite ? Fate::kOverwritten : Fate::kRead;
      for (int32_t t : {ta[k], tb[k]})
        if (t >= 0) settle(t, f, ra.op);
      quiet = quiet || (carries_in && touch == Touch::kOverwrite);
    }
    // Any other divergent op of one tensor output (a buffer filled with another constant, a
    // metric's temporary): dead when both runs overwrite that output before any read within
    // the step; otherwise (read, or left to later steps) it stays divergent.
    auto one_tensor = [](const OpRecord& r) {
      return !r.outputs_uninitialized() &&
             std::count_if(r.outputs.begin(), r.outputs.end(),
                           [](const Arg& o) { return o.is_tensor(); }) == 1 &&
             r.outputs[0].is_tensor();
    };
    if (v.divergent && one_tensor(ra) && one_tensor(rb) && val_a_[i] < 0 && val_b_[j] < 0) {
      const int32_t d = static_cast<int32_t>(diffs_.size());
      Diff c;
      c.i = i;
      c.j = j;
      c.op = op;
      c.plain = true;
      c.va = add_value(false, d, &ra.outputs[0]);
      c.vb = add_value(true, d, &rb.outputs[0]);
      val_a_[i] = c.va;
      val_b_[j] = c.vb;
      diffs_.push_back(std::move(c));
    }
    return quiet;
  }

  /// A divergent op whose output both runs overwrote before any read (its comparison in
  /// compare_group's list, its position in A, and what to list).
  struct DeadOp {
    size_t op = 0, i = 0;
    DeadDifference dead;
  };

  /// The group's end: the carried differences no op read and both runs overwrote are dead
  /// (into res); those still open in a run, and the tensors made before the step, go to `g`
  /// for the next step (CompareMerge). `ops`: compare_group's comparisons, `module_of`,
  /// `shapes`: the module of each op of A, the shapes of each parameter the group reads.
  std::vector<DeadOp> finish(const std::vector<PairVerdict>& ops,
                             const std::vector<std::string>& module_of, GroupResult& g) const {
    std::vector<DeadOp> dead_ops;
    for (const Diff& c : diffs_) {
      const Value& va = values_[static_cast<size_t>(c.va)];
      const Value& vb = values_[static_cast<size_t>(c.vb)];
      if (c.plain) {
        if (va.fate.fate != Fate::kOverwritten || vb.fate.fate != Fate::kOverwritten) continue;
        const OpCompare& oc = ops[c.op].oc;
        DeadOp d{c.op, c.i, {}};
        d.dead.step = oc.step;
        d.dead.rank = oc.rank;
        d.dead.seq_a = oc.seq_a;
        d.dead.seq_b = oc.seq_b;
        d.dead.name = oc.name;
        d.dead.module = module_of[c.i];
        d.dead.param = oc.param;
        d.dead.reason = overwritten_reason(va.fate);
        dead_ops.push_back(std::move(d));
        continue;
      }
      auto any = [&](Fate f) { return va.fate.fate == f || vb.fate.fate == f; };
      if (any(Fate::kRead) || any(Fate::kCarriedOn)) continue;  // judged where read
      const OpCompare& oc = ops[c.op].oc;
      DeadDifference d;
      d.step = oc.step;
      d.rank = oc.rank;
      d.seq_a = oc.seq_a;
      d.seq_b = oc.seq_b;
      d.name = oc.name;
      d.module = module_of[c.i];
      d.param = param_of_gradient(d.module, c.i);
      if (va.fate.fate == Fate::kOverwritten && vb.fate.fate == Fate::kOverwritten) {
        d.reason = overwritten_reason(va.fate);
        ++g.part.dead_ops;
        g.part.dead.push_back(std::move(d));
        continue;
      }
      OpenCarry open;
      open.dead = std::move(d);
      if (va.stats != nullptr) open.stats_a = *va.stats;
      if (vb.stats != nullptr) open.stats_b = *vb.stats;
      open.fate_a = va.fate;
      open.fate_b = vb.fate;
      g.open.push_back(std::move(open));
    }
    for (const Value& v : values_) {
      if (v.diff >= 0 || v.stats == nullptr) continue;
      EntryTouch e;
      e.side_b = v.side_b;
      e.stats = *v.stats;
      e.stats.hist.clear();
      e.stats.range.clear();
      e.fate = v.fate;
      g.entries.push_back(std::move(e));
    }
    return dead_ops;
  }

  static std::string overwritten_reason(const ValueFate& f) {
    return "overwritten by " + f.by + " at step " + std::to_string(f.step) + " before any read";
  }

 private:
  struct Value {
    bool side_b = false;
    int32_t diff = -1;  // the carried difference, or -1: a tensor made before the step
    const TensorStats* stats = nullptr;
    ValueFate fate;
  };
  struct Diff {
    size_t i = 0, j = 0, op = 0;
    bool plain = false;  // a divergent op's output, not a gradient accumulation's
    int32_t va = -1, vb = -1;
    std::string onto_a, onto_b;
  };

  // Whether the paired accumulation carries a difference of the gradient it adds onto: its
  // input #0 differs, its number arguments agree, and its output differs beyond what the
  // group's rounding explains (the verdict found it divergent, or the difference is larger
  // than 10 times the rounding seen so far), or input #0 is a difference carried on. The
  // incoming gradient may differ too: a backward summed before it accumulates in one run
  // (PyTorch's (real + fake).backward()) is accumulated twice in the other (LibTorch's two
  // backward() calls), and an addition adds no error of its own worth judging; where the two
  // runs end with the same sum, the output agrees and nothing is carried.
  bool carries(const OpRecord& ra, const OpRecord& rb, const PairVerdict& v, int32_t ta, int32_t tb,
               double seen_error, const CompareOptions& opt) const {
    const OpCompare& oc = v.oc;
    const size_t n_in = std::min(ra.inputs.size(), rb.inputs.size());
    if (oc.args.size() < n_in || oc.args[0].exact) return false;
    for (size_t k = 1; k < n_in; ++k)
      if (!oc.args[k].tensor && !oc.args[k].exact) return false;  // another alpha
    if (carried(ta) || carried(tb)) return true;
    if (v.divergent) return true;
    const double allowed =
        opt.noise_factor * (std::ldexp(1.0, -24) + opt.inherited_weight * seen_error);
    auto beyond = [&](const ArgCompare& ac, const TensorStats& t) {
      const double e = relative(ac.abs_error, magnitude(t));
      return e > allowed && e > opt.rtol;
    };
    // Made by a compared op (a zeros of that shape both runs made, the gradient left before
    // the step) and differing beyond the rounding the group has seen so far, it is the
    // schedule's, where the output differs as much.
    if (!beyond(oc.args[0], *ra.inputs[0].tensor)) return false;
    for (size_t k = n_in; k < oc.args.size(); ++k) {
      const ArgCompare& ac = oc.args[k];
      const size_t out = static_cast<size_t>(ac.index);
      if (ac.tensor && out < ra.outputs.size() && ra.outputs[out].is_tensor() &&
          beyond(ac, *ra.outputs[out].tensor))
        return true;
    }
    return false;
  }

  // What the gradient an accumulation adds onto was, in its run.
  std::string onto(bool side_b, size_t k) const {
    const Provenance& prov = side_b ? prov_b_ : prov_a_;
    const auto& ops = side_b ? b_ : a_;
    const int64_t p = prov.producer(k, 0);
    if (p < 0) return "the gradient the step before left";
    return ops[static_cast<size_t>(p)].name();
  }

  // The tracked tensor input `in` of op k of a run holds: one an earlier op of the group
  // carries, or one made before the step (registered at its first read; parameters aside).
  int32_t value_in(bool side_b, size_t k, size_t in) {
    const auto& ops = side_b ? b_ : a_;
    if (in >= ops[k].inputs.size() || !ops[k].inputs[in].is_tensor()) return -1;
    const Provenance& prov = side_b ? prov_b_ : prov_a_;
    const int64_t p = prov.producer(k, in);
    if (p >= 0) return (side_b ? val_b_ : val_a_)[static_cast<size_t>(p)];
    const TensorStats& t = *ops[k].inputs[in].tensor;
    if (!t.param.empty() || t.numel == 0) return -1;
    const uint64_t key = stats_digest(t) * 2 + (side_b ? 1 : 0);
    auto [lo, hi] = entries_.equal_range(key);
    for (auto it = lo; it != hi; ++it)
      if (same_stats(*values_[static_cast<size_t>(it->second)].stats, t)) return it->second;
    const int32_t id = add_value(side_b, -1, &ops[k].inputs[in]);
    entries_.emplace(key, id);
    return id;
  }

  // Whether tracked tensor t holds a gradient's difference an accumulation carries.
  bool carried(int32_t t) const {
    if (t < 0) return false;
    const int32_t d = values_[static_cast<size_t>(t)].diff;
    return d >= 0 && !diffs_[static_cast<size_t>(d)].plain;
  }

  int32_t add_value(bool side_b, int32_t diff, const Arg* arg) {
    Value v;
    v.side_b = side_b;
    v.diff = diff;
    v.stats = arg != nullptr && arg->is_tensor() ? &*arg->tensor : nullptr;
    values_.push_back(v);
    return static_cast<int32_t>(values_.size() - 1);
  }

  void settle(int32_t t, Fate f, const std::string& by) {
    ValueFate& vf = values_[static_cast<size_t>(t)].fate;
    if (vf.fate != Fate::kOpen) return;  // its first touch decides
    vf.fate = f;
    vf.by = by;
    vf.step = step_;
  }

  // The parameter of `module` whose gradient the accumulation of A's op k is: the one
  // parameter of that module, of the gradient's shape, that the group's ops read.
  std::string param_of_gradient(const std::string& module, size_t k) const {
    if (module.empty() || a_[k].outputs.empty() || !a_[k].outputs[0].is_tensor()) return {};
    const std::vector<int64_t>& shape = a_[k].outputs[0].tensor->shape;
    std::string found;
    for (const OpRecord& r : a_) {
      for (const Arg& in : r.inputs) {
        if (!in.is_tensor() || in.tensor->param.empty() || in.tensor->shape != shape) continue;
        const std::string& p = in.tensor->param;
        if (p.size() <= module.size() || p.compare(0, module.size(), module) != 0 ||
            p[module.size()] != '.' || p.find('.', module.size() + 1) != std::string::npos)
          continue;
        if (found.empty()) {
          found = p;
        } else if (found != p) {
          return {};  // two of that shape (a BatchNorm's weight and bias): not said
        }
      }
    }
    return found;
  }

  const std::vector<OpRecord>& a_;
  const std::vector<OpRecord>& b_;
  const Provenance& prov_a_;
  const Provenance& prov_b_;
  int64_t step_;
  std::vector<int32_t> val_a_, val_b_;  // by op: the tracked tensor its output holds
  std::vector<Value> values_;
  std::vector<Diff> diffs_;
  std::unordered_multimap<uint64_t, int32_t> entries_;  // tensors made before the step
};

}  // namespace precprobe::analysis_detail
