// find_overflow: the op that produced the first NaN/Inf, per rank, and how far it spread.
//
// Within one (rank, step) the candidates (finite inputs, non-finite outputs) are ranked by
// start order, and a candidate nested inside the earliest one replaces it (nesting.h): at
// L2 the innermost op that produced the value is blamed, not the op that wraps it. A mask's
// -inf (masking.h) is no NaN/Inf: its writers and carriers are neither candidates nor bad
// inputs, and the op that turns it into NaN is a candidate, with the reason and the mask.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "json_util.h"
#include "masking.h"
#include "modules.h"
#include "nesting.h"
#include "source.h"

namespace precprobe {
namespace {

using analysis_detail::MaskRole;
using analysis_detail::RecordSource;

constexpr size_t kFirstStepsShown = 10;

// A non-finite input, a mask's -inf aside (carried on, turned into NaN, or extended by a
// writer: a key padding mask filled into a causal one).
bool inputs_bad(const OpRecord& r, MaskRole role) {
  if (role != MaskRole::kNone) return false;
  if (!analysis_detail::overwrites_self(r)) return r.inputs_non_finite();
  for (size_t i = 1; i < r.inputs.size(); ++i)
    if (r.inputs[i].tensor && !r.inputs[i].tensor->all_finite()) return true;
  return false;
}

// A non-finite output, a mask's -inf aside. outputs_non_finite() already ignores the garbage
// of aten::empty* (OpRecord's rule).
bool outputs_bad(const OpRecord& r, MaskRole role) {
  return !analysis_detail::is_masking(role) && r.outputs_non_finite();
}

/// What one step of one rank contributes.
struct StepState {
  int64_t nonfinite_ops = 0;
  bool any_bad = false;  ///< a non-finite output or a bad input (masks aside)
  std::optional<OpBrief> origin;
  std::optional<std::string> origin_module;
  std::optional<std::string> reason;
  std::optional<MaskedBy> masked_by;
  int64_t after_origin = 0;  ///< non-finite outputs after the origin (or around it)
  std::optional<OpBrief> first_bad_input;
  analysis_detail::MaskingCounter masking;
};

// The module of g[c] as every command places ops (modules.h); nullopt when no op of the step
// reads a named parameter (no model given to start()).
std::optional<std::string> module_of(const std::vector<OpRecord>& g, size_t c,
                                     const analysis_detail::ModuleOrder* modules) {
  std::vector<size_t> order(g.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return g[a].seq < g[b].seq; });
  std::vector<analysis_detail::ModuleOp> ops;
  ops.reserve(g.size());
  size_t at = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    if (order[k] == c) at = k;
    ops.push_back(analysis_detail::module_op(g[order[k]]));
  }
  return analysis_detail::module_at(ops, at, modules);
}

StepState analyse_group(const std::vector<OpRecord>& g, const analysis_detail::ModuleOrder* order) {
  StepState s;
  std::vector<std::optional<size_t>> writer_of;
  const std::vector<MaskRole> roles = analysis_detail::mask_roles(g, &writer_of);
  std::vector<size_t> cands;
  std::vector<bool> bad_out(g.size());
  std::optional<size_t> bad_in;
  std::vector<analysis_detail::OpPlace> places;
  for (size_t i = 0; i < g.size(); ++i) {
    places.push_back({g[i].seq, g[i].thread, g[i].depth});
    s.masking.add(g[i], roles[i]);
    bad_out[i] = outputs_bad(g[i], roles[i]);
    const bool in = inputs_bad(g[i], roles[i]);
    s.any_bad = s.any_bad || bad_out[i] || in;
    if (bad_out[i]) ++s.nonfinite_ops;
    if (bad_out[i] && !in) cands.push_back(i);
    if (in && (!bad_in || g[i].seq < g[*bad_in].seq)) bad_in = i;
  }
  if (bad_in) s.first_bad_input = OpBrief::from(g[*bad_in]);
  if (cands.empty()) return s;
  const analysis_detail::CallTree tree(places);
  const size_t c = tree.innermost_earliest(cands);
  s.origin = OpBrief::from(g[c]);
  s.origin_module = module_of(g, c, order);
  if (roles[c] == MaskRole::kBorn) {
    s.reason = analysis_detail::born_reason(g[c]);
    if (writer_of[c]) {  // none when an attention op's mask came from no recorded op
      const OpRecord& w = g[*writer_of[c]];
      s.masked_by =
          MaskedBy{w.op, w.name(), w.step, w.seq, w.rank, module_of(g, *writer_of[c], order)};
    }
  }
  // Spread: ops that started after the origin, and the ops around it (they end after it).
  for (size_t i = 0; i < g.size(); ++i) {
    if (i == c || !bad_out[i]) continue;
    if (g[i].seq > g[c].seq || tree.nested(c, i)) ++s.after_origin;
  }
  return s;
}

bool before(const OpBrief& a, const OpBrief& b) {
  return std::tie(a.step, a.seq, a.rank) < std::tie(b.step, b.seq, b.rank);
}

void merge(StepState& into, StepState&& s) {
  into.nonfinite_ops += s.nonfinite_ops;
  into.any_bad = into.any_bad || s.any_bad;
  into.masking.merge(s.masking);
  if (s.origin && (!into.origin || before(*s.origin, *into.origin))) {
    into.origin = std::move(s.origin);
    into.origin_module = std::move(s.origin_module);
    into.reason = std::move(s.reason);
    into.masked_by = std::move(s.masked_by);
    into.after_origin = s.after_origin;
  }
  if (s.first_bad_input &&
      (!into.first_bad_input || before(*s.first_bad_input, *into.first_bad_input)))
    into.first_bad_input = std::move(s.first_bad_input);
}

RankOverflow conclude(int rank, const std::map<int64_t, StepState>& steps) {
  RankOverflow r;
  r.rank = rank;
  std::optional<int64_t> origin_step;
  for (const auto& [step, s] : steps) {
    r.nonfinite_ops += s.nonfinite_ops;
    if (s.first_bad_input && !r.first_nonfinite_input) r.first_nonfinite_input = s.first_bad_input;
    if (!origin_step && s.origin) {
      origin_step = step;
      r.found = true;
      r.origin = *s.origin;
      r.origin_module = s.origin_module;
      r.reason = s.reason;
      r.masked_by = s.masked_by;
      r.later_nonfinite_ops = s.after_origin;
    } else if (origin_step) {
      r.later_nonfinite_ops += s.nonfinite_ops;
    }
  }
  for (const auto& [step, s] : steps) {
    if (s.nonfinite_ops == 0 || (origin_step && step < *origin_step)) continue;
    ++r.steps_affected;
    if (r.first_steps_affected.size() < kFirstStepsShown) r.first_steps_affected.push_back(step);
  }
  r.nonfinite_before_origin =
      r.first_nonfinite_input && (!r.found || before(*r.first_nonfinite_input, r.origin));
  return r;
}

using PerRank = std::map<int, std::map<int64_t, StepState>>;

// Analyses the (rank, step) groups of the records src gives: all of them, or with `decode`
// only the frames that hold a record of a step in decode[rank] (the others are passed over
// by their digests). Returns whether any record read has a non-finite output or a bad input
// (a mask's -inf aside).
bool analyse_groups(RecordSource& src, const std::map<int, analysis_detail::ModuleOrder>& orders,
                    const std::map<int, std::set<int64_t>>* decode, PerRank& per_rank,
                    OverflowResult& out) {
  std::vector<OpRecord> group;
  bool any_bad = false;
  std::set<int> writer_placed;  // the ranks whose first mask writer has its module
  auto flush = [&] {
    if (group.empty()) return;
    const int rank = group.front().rank;
    const analysis_detail::ModuleOrder* order = analysis_detail::order_of(orders, rank);
    StepState s = analyse_group(group, order);
    // The masking line's module: that of each rank's first writer (its steps come in order).
    if (s.masking.first().writers > 0 && writer_placed.insert(rank).second) {
      for (size_t i = 0; i < group.size(); ++i)
        if (group[i].seq == s.masking.first().seq) s.masking.set_module(module_of(group, i, order));
    }
    any_bad = any_bad || s.any_bad;
    merge(per_rank[rank][group.front().step], std::move(s));
    group.clear();
  };
  auto add = [&](const OpRecord& r) {
    if (!group.empty() && (r.rank != group.front().rank || r.step != group.front().step)) flush();
    out.step_min = std::min(out.step_min.value_or(r.step), r.step);
    out.step_max = std::max(out.step_max.value_or(r.step), r.step);
    group.push_back(r);
    return true;
  };
  if (decode == nullptr) {
    src.ops(add);
  } else {
    src.ops_passing(
        [&](int rank, const FrameDigest& d) {
          const auto wanted = decode->find(rank);
          if (wanted == decode->end()) return true;
          for (const FrameDigest::Step& st : d.steps) {
            if (wanted->second.count(st.step) != 0) return false;
          }
          return true;
        },
        add);
  }
  flush();
  return any_bad;
}

// What the digests say of a step of a rank.
struct DigestedStep {
  int64_t nonfinite_outputs = 0;
  int64_t nonfinite_records = 0;
  /// A frame holding a record of it counts a non-finite output of an op that may write a
  /// mask: its counts may be masks', which only its records tell.
  bool masked = false;
};

// The same result from the frames' digests and a few decoded steps, when every frame of the
// op streams has a digest (nullopt otherwise). A step contributes its count of non-finite
// outputs (which the digest holds) and, only when decoded, an origin and a first bad input:
// so for each rank the steps with a NaN/Inf are decoded in step order, 1, 4, 16, ... of them,
// until the decoded ones hold both the rank's origin and its first bad input, or are all of
// them. Steps decoded are decoded whole; a clean step contributes nothing. A step that may
// hold a mask (DigestedStep::masked) is always decoded: its digest cannot tell a mask's -inf.
std::optional<PerRank> analyse_digested(RecordSource& src,
                                        const std::map<int, analysis_detail::ModuleOrder>& orders,
                                        OverflowResult& out, bool& any_bad) {
  std::map<int, std::map<int64_t, DigestedStep>> digested;
  bool all_digested = true;
  src.ops_passing(
      [&](int rank, const FrameDigest& d) {
        const bool mask = analysis_detail::may_hold_mask(d.nonfinite_ops);
        for (const FrameDigest::Step& st : d.steps) {
          DigestedStep& c = digested[rank][st.step];
          c.nonfinite_outputs += st.nonfinite_outputs;
          c.nonfinite_records += st.nonfinite_records;
          c.masked = c.masked || mask;
        }
        return true;
      },
      [&](const OpRecord&) {
        all_digested = false;  // a frame without a digest: read every record
        return false;
      });
  if (!all_digested) return std::nullopt;
  for (size_t k = 1;; k *= 4) {
    std::map<int, std::set<int64_t>> decode;
    // The rank's first step with a NaN/Inf not decoded (none: all of them are).
    std::map<int, std::optional<int64_t>> gap;
    for (const auto& [rank, steps] : digested) {
      size_t unmasked = 0;
      gap[rank];
      for (const auto& [step, c] : steps) {
        if (c.nonfinite_records == 0) continue;
        if (!c.masked && unmasked == k) {
          if (!gap[rank]) gap[rank] = step;
          continue;
        }
        unmasked += c.masked ? 0 : 1;
        decode[rank].insert(step);
      }
    }
    PerRank decoded;
    OverflowResult scratch;
    const bool bad = analyse_groups(src, orders, &decode, decoded, scratch);
    bool enough = true;
    for (const auto& [rank, first_gap] : gap) {
      if (!first_gap) continue;
      bool origin = false, bad_input = false;
      for (int64_t step : decode[rank]) {
        if (step > *first_gap) break;  // after a step not decoded: not the rank's first
        const StepState& s = decoded[rank][step];
        origin = origin || s.origin.has_value();
        bad_input = bad_input || s.first_bad_input.has_value();
      }
      enough = enough && origin && bad_input;
    }
    if (!enough) continue;
    // A frame also decoded for another step holds part of a step not in `decode`: only the
    // steps of `decode` are taken from the records, every other one from the digests.
    PerRank per_rank;
    for (const auto& [rank, steps] : digested) {
      for (const auto& [step, c] : steps) {
        StepState& s = per_rank[rank][step];
        if (decode[rank].count(step) != 0) {
          s = std::move(decoded[rank][step]);
        } else {
          s.nonfinite_ops = c.nonfinite_outputs;
        }
        out.step_min = std::min(out.step_min.value_or(step), step);
        out.step_max = std::max(out.step_max.value_or(step), step);
      }
    }
    // Every step with a NaN/Inf decoded, or an origin found (a record with a non-finite
    // output): the records' answer either way.
    any_bad = bad;
    return per_rank;
  }
}

OverflowResult find_overflow_in(RecordSource& src) {
  const std::map<int, analysis_detail::ModuleOrder> orders =
      analysis_detail::module_orders(src.ranks());
  OverflowResult out;
  bool any_bad = false;
  std::optional<PerRank> digested = analyse_digested(src, orders, out, any_bad);
  PerRank per_rank;
  if (digested) {
    per_rank = std::move(*digested);
  } else {
    any_bad = analyse_groups(src, orders, nullptr, per_rank, out);
  }
  out.any_nonfinite = any_bad;
  analysis_detail::MaskingCounter masking;
  for (const auto& [rank, steps] : per_rank) {
    for (const auto& [step, s] : steps) masking.merge(s.masking);
    out.ranks.push_back(conclude(rank, steps));
    const RankOverflow& ro = out.ranks.back();
    if (ro.found && (!out.found || before(ro.origin, out.origin))) {
      out.found = true;
      out.origin = ro.origin;
      out.origin_module = ro.origin_module;
      out.reason = ro.reason;
      out.masked_by = ro.masked_by;
    }
  }
  out.masking = masking.finish();
  return out;
}

nlohmann::json rank_json(const RankOverflow& r) {
  nlohmann::json j{{"rank", r.rank},
                   {"found", r.found},
                   {"later_nonfinite_ops", r.later_nonfinite_ops},
                   {"steps_affected", r.steps_affected},
                   {"first_steps_affected", r.first_steps_affected},
                   {"nonfinite_ops", r.nonfinite_ops},
                   {"nonfinite_before_origin", r.nonfinite_before_origin}};
  j["origin"] = r.found ? analysis_detail::to_json(r.origin) : nlohmann::json(nullptr);
  j["origin_module"] = r.origin_module ? nlohmann::json(*r.origin_module) : nlohmann::json();
  j["reason"] = r.reason ? nlohmann::json(*r.reason) : nlohmann::json();
  j["masked_by"] = r.masked_by ? r.masked_by->to_json() : nlohmann::json();
  j["first_nonfinite_input"] = r.first_nonfinite_input
                                   ? analysis_detail::to_json(*r.first_nonfinite_input)
                                   : nlohmann::json(nullptr);
  return j;
}

}  // namespace

nlohmann::json OverflowResult::to_json() const {
  nlohmann::json j{{"found", found}, {"any_nonfinite", any_nonfinite}};
  const RankOverflow* mine = nullptr;
  for (const RankOverflow& r : ranks) {
    if (found && r.rank == origin.rank) mine = &r;
  }
  if (found) {
    j.update(analysis_detail::to_json(origin));
    j["module"] = origin_module ? nlohmann::json(*origin_module) : nlohmann::json();
    j["later_nonfinite_ops"] = mine->later_nonfinite_ops;
    j["steps_affected"] = mine->steps_affected;
    j["first_steps_affected"] = mine->first_steps_affected;
    j["nonfinite_before_origin"] = mine->nonfinite_before_origin;
  } else {
    for (const char* k : {"step", "rank", "seq", "name", "op", "direction", "module"})
      j[k] = nullptr;
  }
  j["reason"] = found && reason ? nlohmann::json(*reason) : nlohmann::json();
  j["masked_by"] = found && masked_by ? masked_by->to_json() : nlohmann::json();
  j["masking"] = masking.to_json();
  j["steps"] = {{"min", step_min ? nlohmann::json(*step_min) : nlohmann::json()},
                {"max", step_max ? nlohmann::json(*step_max) : nlohmann::json()}};
  j["run"] = run.to_json();
  nlohmann::json rs = nlohmann::json::array();
  for (const RankOverflow& r : ranks) rs.push_back(rank_json(r));
  j["ranks"] = std::move(rs);
  return j;
}

OverflowResult find_overflow(DumpReader& reader, const ReadOptions& read) {
  analysis_detail::ReaderSource src(reader, read);
  OverflowResult r = find_overflow_in(src);
  r.run = run_state(reader);
  return r;
}

OverflowResult find_overflow(const DumpData& data) {
  analysis_detail::DataSource src(data);
  OverflowResult r = find_overflow_in(src);
  r.run = run_state(data);
  return r;
}

}  // namespace precprobe
