// compare_dumps, one (step, rank) group at a time: pairs the ops of the two runs and compares
// them (compare_read.cpp reads the runs and hands the groups over).
//
// Pairing (pairing.h): ops pair only with an op of the same content (op, direction, shapes,
// parameter). Equal sequences pair in order; differing ones are aligned by content, so an
// op inserted in one run leaves the later ops paired with their true counterparts, and the
// ops of one run only are reported (unmatched, sequence_diffs), never compared.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <unordered_map>

#include "arg_rules.h"
#include "compare_group.h"
#include "compare_order.h"
#include "flips.h"
#include "json_util.h"
#include "loss_scale.h"
#include "modules.h"
#include "nesting.h"
#include "pairing.h"
#include "source.h"

namespace precprobe {
namespace {

using analysis_detail::ConstantsUse;
using analysis_detail::ProgramConstants;
using analysis_detail::same_after_broadcast;
using analysis_detail::spelled_default;
constexpr double kInf = std::numeric_limits<double>::infinity();

// One side's arguments against the other's; returns the largest tensor error and sets
// `value_differs` when a non-tensor argument differs in a way rounding cannot explain (a
// different string, integer or list, or a missing argument). Numbers that differ get a
// relative error and are judged by the noise model in compare_pair.
double compare_args(const std::vector<Arg>& a, const std::vector<Arg>& b, const char* io,
                    OpCompare& oc, bool& value_differs) {
  double worst = 0;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    ArgCompare ac;
    ac.io = io;
    ac.index = static_cast<int>(i);
    if (i >= a.size() || i >= b.size()) {
      ac.tensor = (i < a.size() ? a[i] : b[i]).is_tensor();
      ac.error = ac.abs_error = kInf;
      ac.exact = false;
      ac.warning = true;
      // Another LibTorch version may call an overload with more or fewer arguments
      // (aten::_reshape_alias(x, size, stride) vs aten::view(x, size)): noted; the
      // arguments both runs have decide.
      ac.note = i >= a.size() ? "missing in a" : "missing in b";
    } else if (a[i].is_tensor() && b[i].is_tensor()) {
      compare_stats(*a[i].tensor, *b[i].tensor, ac);
      worst = std::max(worst, ac.error);
    } else {
      ac.tensor = false;
      ac.exact = a[i].is_tensor() == b[i].is_tensor() &&
                 (a[i].value == b[i].value || same_after_broadcast(a[i].value, b[i].value));
      if (!ac.exact && spelled_default(a[i], b[i])) {
        // A default spelled out on one side only: Python's argument parser passes
        // device="cpu", pin_memory=False, the input's dtype; LibTorch's C++ API leaves them
        // None. What the default means shows in the outputs, which are compared.
        ac.note = "default on one side: " + a[i].value + " vs " + b[i].value;
      } else if (!ac.exact) {
        ac.note = "value differs: " + a[i].value + " vs " + b[i].value;
        const std::optional<double> x = a[i].is_tensor() ? std::nullopt : numeric_value(a[i].value);
        const std::optional<double> y = b[i].is_tensor() ? std::nullopt : numeric_value(b[i].value);
        const bool integral = a[i].value.find_first_of(".eE") == std::string::npos &&
                              b[i].value.find_first_of(".eE") == std::string::npos;
        if (x.has_value() && y.has_value() && !integral) {
          const double xv = x.value_or(0), yv = y.value_or(0);
          ac.abs_error = std::fabs(xv - yv);
          const double mag = std::max(std::fabs(xv), std::fabs(yv));
          ac.error = ac.abs_error / mag;
          // msprobe's statistics rule, applied to the value itself.
          ac.warning = ac.abs_error / (mag + 1e-10) > 0.5;
        } else {
          ac.error = ac.abs_error = kInf;
          ac.warning = true;
          value_differs = true;
        }
      }
    }
    oc.warning = oc.warning || ac.warning;
    oc.exact = oc.exact && ac.exact;
    oc.args.push_back(std::move(ac));
  }
  return worst;
}

// Which ops a comparison is of: A's place and names, B's seq and name.
void identify(const OpRecord& a, const OpRecord& b, OpCompare& oc) {
  oc.step = a.step;
  oc.rank = a.rank;
  oc.seq_a = a.seq;
  oc.seq_b = b.seq;
  oc.name = a.name();
  oc.name_b = b.name();
  oc.op = a.op;
  oc.direction = std::string(to_string(a.dir));
  oc.scope = a.scope;
}

struct PairVerdict {
  OpCompare oc;
  bool divergent = false;
  bool beyond_rounding_only = false;  // divergent by the ratio alone (no value, no constant)
};

// x / scale with 0 / 0 = 0 and x / 0 = infinity.
double relative(double x, double scale) {
  if (!(x > 0)) return 0;
  return scale > 0 ? x / scale : kInf;
}

// Whether input i of r is a constant of its run. `use` (may be null) notes the question, and
// whether more groups of the run could change the answer (ProgramConstants::settled).
bool run_constant(const ProgramConstants* c, const OpRecord& r, size_t i, ConstantsUse* use) {
  if (c == nullptr) return false;
  if (use != nullptr) {
    use->asked = true;
    if (!c->settled(r, i)) use->unsettled = true;
  }
  return c->constant(r, i);
}

PairVerdict compare_pair(const OpRecord& a_in, const OpRecord& b, const CompareOptions& opt,
                         double loss_scale, const ProgramConstants* const_a,
                         const ProgramConstants* const_b, ConstantsUse* use) {
  // Gradients of a loss scaled by a GradScaler (fp16/bf16 AMP) against a run that scales
  // it otherwise (an fp32 reference): compared as gradients of the same loss.
  analysis_detail::ScaledArgs scaled;
  const bool rescale = std::fabs(loss_scale - 1) > 0 && a_in.dir == Direction::kBackward;
  const OpRecord a_copy =
      rescale ? analysis_detail::unscaled(a_in, b, loss_scale, scaled) : OpRecord{};
  const OpRecord& a = rescale ? a_copy : a_in;
  PairVerdict v;
  OpCompare& oc = v.oc;
  identify(a, b, oc);
  if (!scaled.empty()) oc.loss_scale = loss_scale;
  bool in_value = false, out_value = false;
  oc.args.reserve(std::max(a.inputs.size(), b.inputs.size()) +
                  std::max(a.outputs.size(), b.outputs.size()));
  oc.input_error = compare_args(a.inputs, b.inputs, "input", oc, in_value);
  oc.output_error = compare_args(a.outputs, b.outputs, "output", oc, out_value);
  analysis_detail::note_unscaled(scaled, loss_scale, oc.args);
  // Error the op added; inf - inf (both sides already broken) is inherited, not added.
  oc.score = std::isinf(oc.output_error) && std::isinf(oc.input_error)
                 ? 0
                 : oc.output_error - oc.input_error;
  if (a.outputs_uninitialized()) {
    oc.exact = true;
    oc.warning = false;
    oc.score = 0;
    oc.classification = "match";
    return v;
  }
  if (oc.exact) {
    oc.classification = "match";
    return v;
  }
  // The same outputs: whatever differs in the arguments (a memory_format a port spells
  // otherwise, Contiguous against Preserve for backward's ones_like; an input whose
  // difference the op does not pass on) made no difference to what the op produced. An op
  // diverges only where its outputs differ; the notes say what differed.
  bool same_outputs = true, have_output = false;
  for (const ArgCompare& ac : oc.args) {
    if (ac.io != "output") continue;
    have_output = true;
    same_outputs = same_outputs && ac.exact;
  }
  if (have_output && same_outputs) {
    oc.classification = "noise";
    oc.score = 0;
    return v;
  }
  // Noise model: the error each output carries beyond what its inputs brought, against
  // the rounding the op may make (docs/cli.md, "Noise model").
  const OpNoise nz = op_noise(a, b);
  const size_t n_in = std::min(a.inputs.size(), b.inputs.size());
  double u_op = 0;
  for (const OutputBound& ob : nz.outputs) u_op = std::max(u_op, ob.u);
  if (!(u_op > 0)) u_op = std::ldexp(1.0, -24);
  double inherited = 0;
  bool constant_differs = false;
  for (size_t i = 0; i < oc.args.size() && oc.args[i].io == "input"; ++i) {
    const ArgCompare& ac = oc.args[i];
    if (ac.exact || i >= n_in || (!ac.tensor && spelled_default(a.inputs[i], b.inputs[i])))
      continue;
    double rel = 0;
    if (ac.tensor) {
      rel = relative(ac.abs_error, nz.input_scale[i]);
    } else {
      // A number from the caller (a constant, or a value computed on the host from an
      // earlier item()): one rounding of the op's precision, times the noise factor, is
      // what it may differ by; beyond that the op was called with a different constant.
      rel = ac.error;
      const bool in_a = run_constant(const_a, a, i, use);
      const bool program_constant = run_constant(const_b, b, i, use) || in_a;
      if (program_constant || !(rel <= opt.noise_factor * u_op)) {
        constant_differs = true;  // the op's own cause, not inherited
        if (program_constant) oc.args[i].note += " (a constant of the program: every step)";
        continue;
      }
    }
    inherited += nz.input_kappa[i] * rel;
  }
  oc.inherited = inherited;
  oc.ratio = 0;
  bool have = false;
  for (size_t k = 0; k < oc.args.size(); ++k) {
    const ArgCompare& ac = oc.args[k];
    if (ac.io != "output") continue;
    const size_t out_index = static_cast<size_t>(ac.index);
    if (out_index >= nz.outputs.size()) continue;
    const OutputBound& ob = nz.outputs[out_index];
    // What the op's own rounding and its inputs' differences can explain: bound +
    // weight * inherited. The statistics see only part of an input's difference (its
    // extremes, mean and norm), so the inherited estimate is a lower bound and is weighted
    // (docs/cli.md: measured 12 times too low on the example's batch-summed gradients).
    const double err = relative(ac.abs_error, ob.scale);
    const double allowed = ob.bound + opt.inherited_weight * inherited;
    const double ratio = std::isinf(err) && std::isinf(inherited) ? 0
                         : !(err > 0)                             ? 0
                         : allowed > 0                            ? err / allowed
                                                                  : kInf;
    if (!have || ratio > oc.ratio) {
      have = true;
      oc.ratio = ratio;
      oc.error = err;
      oc.bound = ob.bound;
      oc.terms = static_cast<int64_t>(std::llround(std::min(ob.terms, 9e18)));
    }
  }
  const double added =
      std::isinf(oc.error) && std::isinf(oc.inherited) ? 0 : oc.error - oc.inherited;
  const bool beyond_noise = oc.ratio > opt.noise_factor && added > opt.rtol;
  v.divergent = in_value || out_value || constant_differs || beyond_noise;
  v.beyond_rounding_only = beyond_noise && !in_value && !out_value && !constant_differs;
  oc.classification = v.divergent ? "divergent" : "noise";
  return v;
}

using analysis_detail::earlier;

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
  oc.ratio = !(oc.error > 0) ? 0 : allowed > 0 ? oc.error / allowed : kInf;
  ac.note = "ops of one run only, compared by their output: " + la.name() + " vs " + lb.name();
  oc.args.push_back(std::move(ac));
  v.divergent = !oc.exact && oc.ratio > opt.noise_factor && oc.error - seen_error > opt.rtol;
  oc.classification = oc.exact ? "match" : v.divergent ? "divergent" : "noise";
  return v;
}

// The divergent comparisons of one place, each with the index in A of its op.
std::vector<std::pair<PairVerdict, int64_t>> compare_place(const std::vector<OpRecord>& a,
                                                           const std::vector<OpRecord>& b,
                                                           const std::vector<int64_t>& only_a,
                                                           const std::vector<int64_t>& only_b,
                                                           double seen_error,
                                                           const CompareOptions& opt) {
  std::vector<std::pair<PairVerdict, int64_t>> out;
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
      if (rb.op != ra.op || !same_first_output(ra, rb)) continue;
      next_b = m + 1;
      last_done = last_done || (ka == only_a.back() && m + 1 == only_b.size());
      PairVerdict v =
          judge_place(ra, rb, std::max(output_bound(ra), output_bound(rb)), seen_error, opt);
      if (v.divergent) out.emplace_back(std::move(v), ka);
      break;
    }
  }
  const OpRecord& la = at(a, only_a.back());
  const OpRecord& lb = at(b, only_b.back());
  if (!last_done && same_first_output(la, lb)) {
    double bound = 0;  // the rounding the place may make: every op's, on both sides
    for (int64_t k : only_a) bound += output_bound(at(a, k));
    for (int64_t k : only_b) bound += output_bound(at(b, k));
    PairVerdict v = judge_place(la, lb, bound, seen_error, opt);
    if (v.divergent) out.emplace_back(std::move(v), only_a.back());
  }
  return out;
}

UnmatchedOp unmatched(const OpRecord& r, const char* side) {
  return UnmatchedOp{r.step, r.rank, side, r.seq, r.name()};
}

// The group's earliest divergent op, or an op nested in it that diverges too (nesting.h):
// an outer op inherits the divergence of the op it ran, which is the one to blame.
// `get(k)` is the comparison of the k-th op of `index` (positions in `a`).
template <class Get>
std::optional<OpCompare> group_first(const std::vector<OpRecord>& a,
                                     const std::vector<size_t>& index, Get get) {
  if (index.empty()) return std::nullopt;
  std::vector<analysis_detail::OpPlace> places;
  places.reserve(a.size());
  for (const OpRecord& r : a) places.push_back({r.seq, r.thread, r.depth});
  const analysis_detail::CallTree tree(places);
  const size_t chosen = tree.innermost_earliest(index);
  for (size_t k = 0; k < index.size(); ++k) {
    if (index[k] == chosen) return get(k);
  }
  return std::nullopt;
}

// Module attribution (modules.h), `ops` one step of one rank in seq order.
std::vector<std::string> modules_of(const std::vector<OpRecord>& ops,
                                    const analysis_detail::ModuleOrder* order) {
  std::vector<analysis_detail::ModuleOp> m;
  m.reserve(ops.size());
  for (const OpRecord& r : ops) m.push_back(analysis_detail::module_op(r));
  return analysis_detail::attribute_modules(m, order, analysis_detail::BackwardRule::kInherit);
}

// An op downstream of a near-tie flip (flips.h) that the rounding model alone would call
// divergent is classified noise and counted as excused.
void excuse_after_flip(const std::optional<analysis_detail::FlipTracker::Source>& flip, int64_t seq,
                       PairVerdict& v, CompareResult& res) {
  if (!flip) return;
  v.oc.after_flip = flip->name;
  v.oc.after_flip_seq = flip->seq;
  if (flip->seq == seq) ++res.flip_ops;
  if (!v.divergent || !v.beyond_rounding_only) return;
  v.divergent = false;
  v.oc.classification = "noise";
  v.oc.excused = true;
  ++res.excused_ops;
  if (!res.first_excused || earlier(v.oc, *res.first_excused)) res.first_excused = v.oc;
}

// Adds `m` to the module of its name in `modules` (in order of first appearance; `index`
// by name), or appends it.
void add_module(std::vector<ModuleCompare>& modules, std::map<std::string, size_t>& index,
                ModuleCompare&& m) {
  auto [at, added] = index.emplace(m.module, modules.size());
  if (added) {
    modules.push_back(std::move(m));
    return;
  }
  ModuleCompare& to = modules[at->second];
  to.ops += m.ops;
  to.match += m.match;
  to.noise += m.noise;
  to.divergent += m.divergent;
  to.max_ratio = std::max(to.max_ratio, m.max_ratio);
  if (m.first_divergent &&
      (!to.first_divergent || earlier(*m.first_divergent, *to.first_divergent)))
    to.first_divergent = std::move(m.first_divergent);
}

// Per module in order of first appearance among `ops` (--by module).
std::vector<ModuleCompare> modules_compared(const std::vector<OpCompare>& ops) {
  std::vector<ModuleCompare> out;
  std::map<std::string, size_t> index;
  for (const OpCompare& o : ops) {
    ModuleCompare m;  // the op alone
    m.module = o.module;
    m.ops = 1;
    m.match = o.classification == "match";
    m.noise = o.classification == "noise";
    m.divergent = o.classification == "divergent";
    if (m.divergent) m.first_divergent = o;
    if (std::isfinite(o.ratio)) m.max_ratio = std::max(0.0, o.ratio);
    add_module(out, index, std::move(m));
  }
  return out;
}

}  // namespace

namespace analysis_detail {

GroupResult compare_group(const GroupKey& key, const std::vector<OpRecord>& a,
                          const std::vector<OpRecord>& b, const CompareOptions& opt,
                          double loss_scale, const ModuleOrder* order_a,
                          const ProgramConstants& const_a, const ProgramConstants& const_b,
                          ConstantsUse* use) {
  GroupResult g;
  CompareResult& res = g.part;
  res.ops_a = static_cast<int64_t>(a.size());
  res.ops_b = static_cast<int64_t>(b.size());
  res.groups_compared = 1;
  const std::vector<std::string> module_of = modules_of(a, order_a);
  const GroupPairing paired = pair_ops(a, b, opt.max_align_cost);
  add_sequence_diffs(a, b, paired.pairs, res.sequence_diffs);
  std::vector<OpCompare> divergent, ops;
  ops.reserve(paired.pairs.size());
  // Inexact ops: their positions in A and in `ops` (most ops of two runs are inexact: no
  // copies of them).
  std::vector<size_t> divergent_at, inexact_at, inexact_op;
  FlipTracker flips;
  std::vector<int64_t> only_a, only_b;
  double seen_error = 0;
  // A place of ops of one run only, closed by the next compared op or the group's end.
  auto close_place = [&]() {
    for (auto& [pv, ka] : compare_place(a, b, only_a, only_b, seen_error, opt)) {
      pv.oc.module = module_of[static_cast<size_t>(ka)];
      ++res.divergent_ops;
      divergent.push_back(pv.oc);
      divergent_at.push_back(static_cast<size_t>(ka));
      res.divergent_places.push_back(std::move(pv.oc));
    }
    only_a.clear();
    only_b.clear();
  };
  for (const auto& [i, j] : paired.pairs) {
    if (i < 0 || j < 0) {
      res.unmatched.push_back(i < 0 ? unmatched(b[j], "b") : unmatched(a[i], "a"));
      (i < 0 ? only_b : only_a).push_back(i < 0 ? j : i);
      continue;
    }
    close_place();
    PairVerdict v = compare_pair(a[i], b[j], opt, loss_scale, &const_a, &const_b, use);
    if (std::isfinite(v.oc.error)) seen_error = std::max(seen_error, v.oc.error);
    v.oc.module = module_of[static_cast<size_t>(i)];
    excuse_after_flip(flips.observe(a[i], v.oc), a[i].seq, v, res);
    res.warnings += v.oc.warning ? 1 : 0;
    if (v.oc.classification == "match") {
      ++res.match_ops;
    } else if (v.oc.classification == "noise") {
      ++res.noise_ops;
      if (!v.oc.excused && !std::isnan(v.oc.ratio) &&
          (!res.max_noise || v.oc.ratio > res.max_noise->ratio))
        res.max_noise = v.oc;
    } else {
      ++res.divergent_ops;
    }
    if (v.divergent) {
      divergent.push_back(v.oc);
      divergent_at.push_back(static_cast<size_t>(i));
    }
    if (!v.oc.exact) {
      inexact_op.push_back(ops.size());
      inexact_at.push_back(static_cast<size_t>(i));
    }
    ++res.matched;
    ops.push_back(std::move(v.oc));
  }
  close_place();
  g.first_divergent = group_first(a, divergent_at, [&](size_t k) { return divergent[k]; });
  g.first_inexact = group_first(a, inexact_at, [&](size_t k) { return ops[inexact_op[k]]; });
  res.aligned_by_lcs = paired.by == PairedBy::kContent ? 1 : 0;
  res.aligned_by_thread = paired.by == PairedBy::kThread ? 1 : 0;
  res.aligned_approximately = paired.approximate ? 1 : 0;
  if (opt.by_module) res.modules = modules_compared(ops);
  if (opt.keep_ops == KeepOps::kAll) {
    res.ops = std::move(ops);
  } else {
    const bool warned = opt.keep_ops == KeepOps::kWarned;
    for (OpCompare& o : ops)
      if (o.classification == "divergent" || (warned && o.warning)) res.ops.push_back(std::move(o));
  }
  return g;
}

GroupResult one_run_group(const GroupKey& key, const std::vector<OpRecord>& ops, const char* side) {
  GroupResult g;
  const bool in_a = side[0] == 'a';
  (in_a ? g.part.ops_a : g.part.ops_b) = static_cast<int64_t>(ops.size());
  (in_a ? g.part.only_a : g.part.only_b).push_back(key);
  for (const OpRecord& r : ops) g.part.unmatched.push_back(unmatched(r, side));
  return g;
}

CompareMerge::CompareMerge(const CompareOptions& opt) : opt_(opt) {
  res_.first_mode = opt.first;
  res_.exact_mode = opt.exact;
}

void CompareMerge::add(GroupResult&& g) {
  CompareResult& res = res_;
  CompareResult& p = g.part;
  auto append = [](auto& to, auto& from) {
    to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
  };
  append(res.ops, p.ops);
  append(res.unmatched, p.unmatched);
  append(res.only_a, p.only_a);
  append(res.only_b, p.only_b);
  append(res.sequence_diffs, p.sequence_diffs);
  append(res.divergent_places, p.divergent_places);
  for (int64_t CompareResult::*n :
       {&CompareResult::warnings, &CompareResult::groups_compared, &CompareResult::aligned_by_lcs,
        &CompareResult::aligned_by_thread, &CompareResult::aligned_approximately,
        &CompareResult::match_ops, &CompareResult::noise_ops, &CompareResult::divergent_ops,
        &CompareResult::flip_ops, &CompareResult::excused_ops, &CompareResult::ops_a,
        &CompareResult::ops_b, &CompareResult::matched})
    res.*n += p.*n;
  if (p.max_noise && (!res.max_noise || p.max_noise->ratio > res.max_noise->ratio))
    res.max_noise = std::move(p.max_noise);
  if (p.first_excused && (!res.first_excused || earlier(*p.first_excused, *res.first_excused)))
    res.first_excused = std::move(p.first_excused);
  auto keep_earliest = [](std::optional<OpCompare>& found, std::optional<OpCompare>& in) {
    if (in && (!found || earlier(*in, *found))) found = std::move(in);
  };
  keep_earliest(first_divergent_, g.first_divergent);
  keep_earliest(first_inexact_, g.first_inexact);
  for (ModuleCompare& m : p.modules) add_module(res.modules, module_index_, std::move(m));
}

CompareResult CompareMerge::finish(int64_t background_a, int64_t background_b) {
  CompareResult& res = res_;
  res.background_a = background_a;
  res.background_b = background_b;
  for (const UnmatchedOp& u : res.unmatched) {
    if (!res.first_unmatched || earlier(u, *res.first_unmatched)) res.first_unmatched = u;
  }
  for (const SequenceDiff& d : res.sequence_diffs) {
    const SequenceDiff* f = res.first_sequence_diff ? &*res.first_sequence_diff : nullptr;
    if (!f || std::tie(d.step, d.seq_a, d.rank) < std::tie(f->step, f->seq_a, f->rank))
      res.first_sequence_diff = d;
  }
  if (res.ops_a + res.ops_b > 0)
    res.aligned_fraction =
        2.0 * static_cast<double>(res.matched) / static_cast<double>(res.ops_a + res.ops_b);
  res.found = first_divergent_.has_value();
  res.identical = !first_inexact_ && res.unmatched.empty();
  res.first = opt_.exact ? std::move(first_inexact_) : std::move(first_divergent_);
  return std::move(res);
}

}  // namespace analysis_detail

bool CompareResult::differs() const noexcept {
  if (exact_mode) return !identical;
  if (first_mode) return found;
  return warnings > 0 || !unmatched.empty();
}

}  // namespace precprobe
