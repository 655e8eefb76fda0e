// compare_dumps, one (step, rank) group at a time: pairs the ops of the two runs and compares
// them (compare_read.cpp reads the runs and hands the groups over).
//
// Pairing (pairing.h): ops pair only with an op of the same content (op, direction, shapes,
// parameter). Equal sequences pair in order; differing ones are aligned by content, so an
// op inserted in one run leaves the later ops paired with their true counterparts, and the
// ops of one run only are reported (unmatched, sequence_diffs), never compared. Its parts:
// compare_args.cpp (arguments), compare_pair.cpp (one paired op), compare_place.cpp (a place
// of ops of one run only), compare_origins.h (where the tensors the paired ops read were made).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "arg_rules.h"
#include "compare_dead.h"
#include "compare_group.h"
#include "compare_order.h"
#include "compare_origins.h"
#include "compare_parts.h"
#include "flips.h"
#include "json_util.h"
#include "loss_scale.h"
#include "modules.h"
#include "nesting.h"
#include "pairing.h"
#include "provenance.h"
#include "source.h"

namespace precprobe {
namespace {

using analysis_detail::compare_pair;
using analysis_detail::compare_place;
using analysis_detail::ConstantsUse;
using analysis_detail::DeadTracker;
using analysis_detail::earlier;
using analysis_detail::equals;
using analysis_detail::InputOrigin;
using analysis_detail::Origins;
using analysis_detail::PairVerdict;
using analysis_detail::PlaceVerdict;
using analysis_detail::ProgramConstants;
using analysis_detail::Reconciler;
using analysis_detail::same_after_broadcast;
using analysis_detail::spelled_default;
using analysis_detail::Upstream;

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
  return analysis_detail::attribute_modules(m, order);
}

// An op downstream of a near-tie flip (flips.h) that the rounding model alone would call
// divergent is classified noise and counted as excused.
void excuse_after_flip(const std::optional<analysis_detail::FlipTracker::Source>& flip, int64_t seq,
                       PairVerdict& v, CompareResult& res) {
  if (!flip) return;
  v.oc.after_flip = flip->name;
  v.oc.after_flip_seq = flip->seq;
  if (flip->seq == seq) ++res.flip_ops;
  // The rounding model's verdict, or a difference traced to ops of one run only (or to the
  // start): a moved element explains both.
  const bool traced = equals(v.oc.cause, "data") || equals(v.oc.cause, "one_run_ops") ||
                      equals(v.oc.cause, "before_step");
  if (!v.divergent || !(v.beyond_rounding_only || traced)) return;
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

// Per module in order of first appearance among the first `n_ops` of `ops` (--by module),
// with the places of ops of one run only found divergent (`places`): the same verdicts as
// --first.
std::vector<ModuleCompare> modules_compared(const std::vector<PairVerdict>& ops, size_t n_ops,
                                            const std::vector<OpCompare>& places) {
  std::vector<ModuleCompare> out;
  std::map<std::string, size_t> index;
  std::vector<const OpCompare*> all;
  all.reserve(n_ops + places.size());
  for (size_t k = 0; k < n_ops; ++k) all.push_back(&ops[k].oc);
  for (const OpCompare& o : places) all.push_back(&o);
  std::stable_sort(all.begin(), all.end(),
                   [](const OpCompare* x, const OpCompare* y) { return x->seq_a < y->seq_a; });
  for (const OpCompare* op : all) {
    const OpCompare& o = *op;
    ModuleCompare m;  // the op alone
    m.module = o.module;
    m.ops = 1;
    m.match = equals(o.classification, "match");
    m.noise = equals(o.classification, "noise");
    m.divergent = equals(o.classification, "divergent");
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
                          ConstantsUse* use, bool first_step) {
  GroupResult g;
  g.key = key;
  CompareResult& res = g.part;
  res.ops_a = static_cast<int64_t>(a.size());
  res.ops_b = static_cast<int64_t>(b.size());
  res.groups_compared = 1;
  // An optimizer's op is placed with the parameter it works for by the rule itself.
  const std::vector<std::string> module_of = modules_of(a, order_a);
  const std::vector<std::string> param_of = params_of(a);
  const GroupPairing paired = pair_ops(a, b, opt.max_align_cost);
  add_sequence_diffs(a, b, paired.pairs, res.sequence_diffs);
  Origins origins(a, b, paired.pairs, first_step);
  std::vector<OpCompare> divergent;
  // The verdicts of the compared pairs, the first n_ops of `ops`: storage the thread keeps
  // from group to group (their strings, arguments and shapes), so that judging a pair
  // allocates only what outgrows the comparison it is judged into. What the result keeps is
  // moved out of it; at most kKeptComparisons are kept.
  constexpr size_t kKeptComparisons = 4096;
  thread_local std::vector<PairVerdict> ops;
  size_t n_ops = 0;
  // Inexact ops: their positions in A and in `ops` (most ops of two runs are inexact: no
  // copies of them).
  std::vector<size_t> divergent_at, inexact_at, inexact_op;
  FlipTracker flips;
  std::vector<int64_t> only_a, only_b;
  double seen_error = 0;
  // A place of ops of one run only, closed by the next compared op or the group's end.
  auto close_place = [&](size_t at) {
    const PlaceEnd end{&origins.provenance_a(), &origins.provenance_b(), &paired.pairs, at};
    for (PlaceVerdict& p : compare_place(a, b, only_a, only_b, seen_error, opt, end)) {
      // What the place's compared ops made counts as compared: a difference they pass on
      // is theirs, judged here.
      origins.compared(p.ka, p.kb);
      if (!p.v.divergent) continue;
      PairVerdict& pv = p.v;
      const int64_t ka = p.ka;
      pv.oc.module = module_of[static_cast<size_t>(ka)];
      pv.oc.param = param_of[static_cast<size_t>(ka)];
      ++res.divergent_ops;
      divergent.push_back(pv.oc);
      divergent_at.push_back(static_cast<size_t>(ka));
      res.divergent_places.push_back(std::move(pv.oc));
    }
    only_a.clear();
    only_b.clear();
  };
  Reconciler reconcile(a.size(), b.size());
  DeadTracker dead(a, b, origins.provenance_a(), origins.provenance_b(), key.first);
  // Differences made by ops of one run only, held until an op reconciles them or the step
  // ends: where their comparison is in `ops` and in `divergent`.
  struct Pending {
    size_t op, divergent;
    std::string reconciled_at;
  };
  std::vector<Pending> pending;
  for (size_t at = 0; at < paired.pairs.size(); ++at) {
    const auto [i, j] = paired.pairs[at];
    if (i < 0 || j < 0) {
      res.unmatched.push_back(i < 0 ? unmatched(b[j], "b") : unmatched(a[i], "a"));
      (i < 0 ? only_b : only_a).push_back(i < 0 ? j : i);
      if (i < 0)
        reconcile.one_run_op(false, static_cast<size_t>(j), origins.provenance_b(), b);
      else
        reconcile.one_run_op(true, static_cast<size_t>(i), origins.provenance_a(), a);
      dead.one_run_op(i < 0, static_cast<size_t>(i < 0 ? j : i));
      continue;
    }
    close_place(at);
    std::vector<InputOrigin> in_origins =
        origins.of(static_cast<size_t>(i), static_cast<size_t>(j));
    dead.before_pair(static_cast<size_t>(i), static_cast<size_t>(j), in_origins);
    if (n_ops == ops.size()) ops.emplace_back();
    PairVerdict& v = ops[n_ops];
    compare_pair(a[i], b[j], opt, loss_scale, &const_a, &const_b, use,
                 Upstream{&in_origins, seen_error}, v);
    // An accumulation that carries a gradient's difference, a view or an overwrite of one:
    // not the run's rounding (compare_dead.h); nor an op that makes no tensor (item(): the
    // number it hands the host, a loss printed, pairs with another such number as often).
    const bool carries =
        dead.after_pair(static_cast<size_t>(i), static_cast<size_t>(j), n_ops, v, seen_error, opt);
    const bool makes_tensor = std::any_of(a[i].outputs.begin(), a[i].outputs.end(),
                                          [](const Arg& o) { return o.is_tensor(); });
    if (!carries && makes_tensor && std::isfinite(v.oc.error))
      seen_error = std::max(seen_error, v.oc.error);
    v.oc.module = module_of[static_cast<size_t>(i)];
    v.oc.param = param_of[static_cast<size_t>(i)];
    excuse_after_flip(flips.observe(a[i], v.oc), a[i].seq, v, res);
    res.warnings += v.oc.warning ? 1 : 0;
    if (equals(v.oc.classification, "match")) {
      ++res.match_ops;
    } else if (equals(v.oc.classification, "noise")) {
      ++res.noise_ops;
      if (!v.oc.excused && !carries && !std::isnan(v.oc.ratio) &&
          (!res.max_noise || v.oc.ratio > res.max_noise->ratio))
        res.max_noise = v.oc;
    } else {
      ++res.divergent_ops;
    }
    const bool held =
        v.divergent && (equals(v.oc.cause, "data") || equals(v.oc.cause, "one_run_ops"));
    for (uint32_t p :
         reconcile.compared_op(static_cast<size_t>(i), static_cast<size_t>(j), a, b, origins, v.oc,
                               held ? static_cast<int64_t>(pending.size()) : -1, opt))
      if (pending[p].reconciled_at.empty()) pending[p].reconciled_at = a[i].name();
    if (held) pending.push_back({n_ops, divergent.size(), {}});
    if (v.divergent) {
      divergent.push_back(v.oc);
      divergent_at.push_back(static_cast<size_t>(i));
    }
    if (!v.oc.exact) {
      inexact_op.push_back(n_ops);
      inexact_at.push_back(static_cast<size_t>(i));
    }
    ++res.matched;
    ++n_ops;
  }
  close_place(paired.pairs.size());
  const std::vector<DeadTracker::DeadOp> dead_ops = dead.finish(ops, module_of, g);
  if (std::any_of(pending.begin(), pending.end(),
                  [](const Pending& p) { return !p.reconciled_at.empty(); })) {
    std::vector<bool> drop(divergent.size(), false);
    for (const Pending& p : pending) {
      if (p.reconciled_at.empty()) continue;
      OpCompare& o = ops[p.op].oc;
      o.classification = "noise";
      o.cause = "reconciled";
      for (ArgCompare& ac : o.args)
        if (ac.note.find("ops of one run only") != std::string::npos)
          ac.note += "; the runs agree again at " + p.reconciled_at +
                     ": the same computation in another order";
      --res.divergent_ops;
      ++res.noise_ops;
      drop[p.divergent] = true;
    }
    size_t kept = 0;
    for (size_t k = 0; k < divergent.size(); ++k) {
      if (drop[k]) continue;
      if (kept != k) divergent[kept] = std::move(divergent[k]);
      divergent_at[kept++] = divergent_at[k];
    }
    divergent.resize(kept);
    divergent_at.resize(kept);
  }
  // Divergent ops whose output both runs overwrote before any read: dead, not divergent.
  for (const DeadTracker::DeadOp& d : dead_ops) {
    OpCompare& o = ops[d.op].oc;
    if (!equals(o.classification, "divergent")) continue;  // reconciled, excused
    o.classification = "noise";
    o.cause = "dead";
    --res.divergent_ops;
    ++res.noise_ops;
    ++res.dead_ops;
    res.dead.push_back(d.dead);
    for (size_t k = 0; k < divergent_at.size(); ++k) {
      if (divergent_at[k] != d.i) continue;
      divergent.erase(divergent.begin() + static_cast<std::ptrdiff_t>(k));
      divergent_at.erase(divergent_at.begin() + static_cast<std::ptrdiff_t>(k));
      break;
    }
  }
  g.first_divergent = group_first(a, divergent_at, [&](size_t k) { return divergent[k]; });
  g.first_inexact = group_first(a, inexact_at, [&](size_t k) { return ops[inexact_op[k]].oc; });
  res.aligned_by_lcs = paired.by == PairedBy::kContent ? 1 : 0;
  res.aligned_by_thread = paired.by == PairedBy::kThread ? 1 : 0;
  res.aligned_approximately = paired.approximate ? 1 : 0;
  if (opt.by_module) res.modules = modules_compared(ops, n_ops, res.divergent_places);
  const bool all = opt.keep_ops == KeepOps::kAll, warned = opt.keep_ops == KeepOps::kWarned;
  if (all) res.ops.reserve(n_ops);
  for (size_t k = 0; k < n_ops; ++k) {
    OpCompare& o = ops[k].oc;
    if (all || equals(o.classification, "divergent") || (warned && o.warning))
      res.ops.push_back(std::move(o));
  }
  if (ops.size() > kKeptComparisons) ops.resize(kKeptComparisons);
  return g;
}

GroupResult one_run_group(const GroupKey& key, const std::vector<OpRecord>& ops, const char* side) {
  GroupResult g;
  g.key = key;
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
  append(res.dead, p.dead);
  // A rank's differences left open by its last step compared: what this step does with them.
  if (p.groups_compared > 0) {
    const auto open = open_.find(g.key.second);
    if (open != open_.end() && open->second.step < g.key.first) {
      resolve(open->second, &g.entries, g.key.first);
      open_.erase(open);
    }
    if (!g.open.empty()) open_[g.key.second] = Open{g.key.first, std::move(g.open)};
  }
  for (int64_t CompareResult::*n :
       {&CompareResult::warnings, &CompareResult::groups_compared, &CompareResult::aligned_by_lcs,
        &CompareResult::aligned_by_thread, &CompareResult::aligned_approximately,
        &CompareResult::match_ops, &CompareResult::noise_ops, &CompareResult::divergent_ops,
        &CompareResult::flip_ops, &CompareResult::excused_ops, &CompareResult::dead_ops,
        &CompareResult::ops_a, &CompareResult::ops_b, &CompareResult::matched})
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

// The open carries of `open` against what the next step compared (`next`, at `next_step`; null
// at the end of the comparison): a difference overwritten there before any read, or never
// touched (set to None, freed), in both runs, is dead; one read or carried on is not.
void CompareMerge::resolve(Open& open, const std::vector<EntryTouch>* next, int64_t next_step) {
  for (OpenCarry& c : open.carries) {
    auto fate_in_next = [&](const ValueFate& in_step, const TensorStats& stats, bool side_b) {
      if (in_step.fate != Fate::kOpen || next == nullptr) return in_step;
      for (const EntryTouch& e : *next)
        if (e.side_b == side_b && analysis_detail::same_stats(e.stats, stats)) return e.fate;
      return ValueFate{};  // not touched: set to None, or freed
    };
    const ValueFate fa = fate_in_next(c.fate_a, c.stats_a, false);
    const ValueFate fb = fate_in_next(c.fate_b, c.stats_b, true);
    auto any = [&](Fate f) { return fa.fate == f || fb.fate == f; };
    if (any(Fate::kRead) || any(Fate::kCarriedOn)) continue;
    DeadDifference& d = c.dead;
    if (fa.fate == Fate::kOverwritten) {
      d.reason = DeadTracker::overwritten_reason(fa);
    } else if (fb.fate == Fate::kOverwritten) {
      d.reason = DeadTracker::overwritten_reason(fb);
    } else if (next != nullptr) {
      d.reason = fmt::format(
          "no op of step {} reads it before the next backward replaces it (set to None, or "
          "freed)",
          next_step);
    } else {
      d.reason =
          fmt::format("no op recorded after it reads it (step {} is the last compared)", open.step);
    }
    ++res_.dead_ops;
    res_.dead.push_back(std::move(d));
  }
  open.carries.clear();
}

CompareResult CompareMerge::finish(int64_t background_a, int64_t background_b) {
  CompareResult& res = res_;
  for (auto& [rank, open] : open_) resolve(open, nullptr, 0);
  open_.clear();
  std::stable_sort(res.dead.begin(), res.dead.end(),
                   [](const DeadDifference& x, const DeadDifference& y) {
                     return std::tie(x.step, x.seq_a, x.rank) < std::tie(y.step, y.seq_a, y.rank);
                   });
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
  res.first_divergent = first_divergent_;
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
