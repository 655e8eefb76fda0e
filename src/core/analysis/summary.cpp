// summarize_dump: what a dump holds, in one pass over each stream.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "json_util.h"
#include "masking.h"
#include "modules.h"
#include "precprobe/dump_format.h"
#include "precprobe/error.h"
#include "precprobe/op_watch.h"
#include "replicas.h"
#include "run_state.h"
#include "source.h"

namespace precprobe {
namespace {

using analysis_detail::MaskRole;
using analysis_detail::number;
using analysis_detail::RecordSource;

/// (rank, step, seq): an op record, as an op watchpoint hit names it.
using RecordKey = std::tuple<int, int64_t, int64_t>;

// Module attribution over a stream of op records (modules.h): one step of one rank at a time,
// in execution order (seq), so only that step's few numbers are held.
class ModuleCounter {
 public:
  explicit ModuleCounter(std::map<int, analysis_detail::ModuleOrder> orders)
      : orders_(std::move(orders)) {}

  /// `nonfinite`: a NaN/Inf output, a mask's -inf aside.
  void add(const OpRecord& r, bool nonfinite) {
    if (!step_.empty() && (r.rank != rank_ || r.step != step_no_)) flush();
    rank_ = r.rank;
    step_no_ = r.step;
    Op op{r.seq, analysis_detail::module_op(r), nonfinite, 0.0};
    for (const Arg& out : r.outputs) {
      if (out.is_tensor()) op.max_abs = std::max(op.max_abs, out.tensor->abs_max());
    }
    step_.push_back(std::move(op));
  }

  void finish(SummaryResult& s) {
    flush();
    s.modules = std::move(modules_);
  }

 private:
  struct Op {
    int64_t seq;
    analysis_detail::ModuleOp module;
    bool nonfinite;
    double max_abs;
  };

  void flush() {
    std::stable_sort(step_.begin(), step_.end(),
                     [](const Op& a, const Op& b) { return a.seq < b.seq; });
    std::vector<analysis_detail::ModuleOp> ops;
    ops.reserve(step_.size());
    for (Op& op : step_) ops.push_back(std::move(op.module));
    std::vector<std::string> module_of =
        analysis_detail::attribute_modules(ops, analysis_detail::order_of(orders_, rank_));
    for (size_t i = 0; i < step_.size(); ++i) {
      const Op& op = step_[i];
      const std::string& current = module_of[i];
      auto [at, added] = index_.emplace(current, modules_.size());
      if (added) modules_.push_back(ModuleSummary{current, 0, 0, std::nullopt, 0.0});
      ModuleSummary& m = modules_[at->second];
      ++m.ops;
      if (std::isfinite(op.max_abs)) m.max_abs_output = std::max(m.max_abs_output, op.max_abs);
      if (op.nonfinite) {
        ++m.nonfinite_ops;
        if (!m.first_nonfinite_step || step_no_ < *m.first_nonfinite_step)
          m.first_nonfinite_step = step_no_;
      }
    }
    step_.clear();
  }

  std::map<int, analysis_detail::ModuleOrder> orders_;
  int rank_ = 0;
  int64_t step_no_ = 0;
  std::vector<Op> step_;
  std::map<std::string, size_t> index_;
  std::vector<ModuleSummary> modules_;
};

// The module of the masking line's first writer, as every command places it (modules.h): the
// ops of each step read are held until the step ends, and a step holding a writer earlier than
// the one placed places its own. Steps after the one placed are not held.
class WriterModule {
 public:
  explicit WriterModule(std::map<int, analysis_detail::ModuleOrder> orders)
      : orders_(std::move(orders)) {}

  void add(const OpRecord& r, bool writer) {
    if (!ops_.empty() && (r.rank != rank_ || r.step != step_)) flush();
    if (best_ && r.step > std::get<0>(*best_)) return;
    rank_ = r.rank;
    step_ = r.step;
    ops_.emplace_back(r.seq, analysis_detail::module_op(r));
    if (writer && (!writer_seq_ || r.seq < *writer_seq_)) writer_seq_ = r.seq;
  }

  void finish(MaskingSummary& m) {
    flush();
    if (m.any() && best_ == std::make_tuple(m.step, m.seq, m.rank)) m.module = module_;
  }

 private:
  void flush() {
    if (writer_seq_ && (!best_ || std::make_tuple(step_, *writer_seq_, rank_) < *best_)) {
      std::stable_sort(ops_.begin(), ops_.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      std::vector<analysis_detail::ModuleOp> ops;
      ops.reserve(ops_.size());
      size_t at = 0;
      for (auto& [seq, op] : ops_) {
        if (seq == *writer_seq_) at = ops.size();
        ops.push_back(std::move(op));
      }
      best_ = std::make_tuple(step_, *writer_seq_, rank_);
      module_ = analysis_detail::module_at(ops, at, analysis_detail::order_of(orders_, rank_));
    }
    ops_.clear();
    writer_seq_.reset();
  }

  std::map<int, analysis_detail::ModuleOrder> orders_;
  int rank_ = 0;
  int64_t step_ = 0;
  std::vector<std::pair<int64_t, analysis_detail::ModuleOp>> ops_;  // (seq, op) of the step
  std::optional<int64_t> writer_seq_;                               // its first writer
  std::optional<std::tuple<int64_t, int64_t, int>> best_;           // (step, seq, rank)
  std::optional<std::string> module_;                               // of best_
};

// The op records, a mask's -inf aside (masking.h). `hits`: the live tensor_overflow hits; those
// at a mask's writer or carrier are moved to `at_masks`.
void count_ops(RecordSource& src, SummaryResult& s, const std::set<RecordKey>& hits,
               std::set<RecordKey>& at_masks) {
  std::map<int64_t, int64_t> per_step;
  std::map<std::string, int64_t> bad;
  ModuleCounter modules(analysis_detail::module_orders(s.ranks));
  analysis_detail::MaskTracker masks;
  analysis_detail::MaskingCounter masking;
  WriterModule writer_module(analysis_detail::module_orders(s.ranks));
  auto add = [&](const OpRecord& r) {
    ++s.op_records;
    ++per_step[r.step];
    const MaskRole role = masks.observe(r);
    masking.add(r, role);
    writer_module.add(r, role == MaskRole::kWriter);
    const bool nonfinite = !analysis_detail::is_masking(role) && r.outputs_non_finite();
    if (analysis_detail::is_masking(role) && hits.count({r.rank, r.step, r.seq}) != 0)
      at_masks.insert({r.rank, r.step, r.seq});
    if (nonfinite) {
      ++s.nonfinite_op_records;
      ++bad[r.op];
      if (!s.first_nonfinite_step || r.step < *s.first_nonfinite_step)
        s.first_nonfinite_step = r.step;
    }
    if (s.by_module) modules.add(r, nonfinite);
    return true;
  };
  if (s.by_module) {  // modules are attributed from every op of a step
    src.ops(add);
  } else {
    // A frame's digest holds all that is counted here, unless it may hold a mask (masking.h,
    // may_hold_mask: a non-finite output of an op that may write one, or of adds alone), or
    // a step where one did (decoded, judged record by record). The others' records are not
    // decoded.
    std::set<std::pair<int, int64_t>> masked_steps;
    src.ops_passing(
        [&](int rank, const FrameDigest& d) {
          bool mask = analysis_detail::may_hold_mask(d.nonfinite_ops);
          for (const FrameDigest::Step& st : d.steps)
            mask = mask || masked_steps.count({rank, st.step}) != 0;
          if (mask) {
            for (const FrameDigest::Step& st : d.steps) masked_steps.insert({rank, st.step});
            return false;
          }
          s.op_records += static_cast<int64_t>(d.records);
          for (const FrameDigest::Step& st : d.steps) {
            per_step[st.step] += st.records;
            s.nonfinite_op_records += st.nonfinite_outputs;
            if (st.nonfinite_outputs > 0 &&
                (!s.first_nonfinite_step || st.step < *s.first_nonfinite_step))
              s.first_nonfinite_step = st.step;
          }
          for (const auto& [op, n] : d.nonfinite_ops) bad[op] += n;
          return true;
        },
        add);
  }
  if (s.by_module) modules.finish(s);
  s.masking = masking.finish();
  writer_module.finish(s.masking);
  s.records_per_step.assign(per_step.begin(), per_step.end());
  for (const auto& [op, n] : bad) s.nonfinite_ops.push_back({op, n});
  std::stable_sort(s.nonfinite_ops.begin(), s.nonfinite_ops.end(),
                   [](const NameCount& x, const NameCount& y) { return x.count > y.count; });
}

void count_scaler(RecordSource& src, SummaryResult& s) {
  ScalerSummary& sc = s.scaler;
  src.scaler([&](const ScalerRecord& r) {
    ++sc.records;
    sc.found_inf += r.found_inf ? 1 : 0;
    if (r.skipped) {
      ++sc.skipped;
      if (!sc.first_skip_step || r.step < *sc.first_skip_step) sc.first_skip_step = r.step;
    }
    sc.backoffs += (r.event == "backoff" || r.event == "collapse") ? 1 : 0;
    sc.growths += r.event == "growth" ? 1 : 0;
    sc.final_scale = r.scale_after;
    return true;
  });
  s.scaler_records = sc.records;
}

void count_grads(RecordSource& src, SummaryResult& s) {
  // Per (parameter, watchpoint): the hits and the first one, as (step, record index).
  struct Hits {
    WatchHitCount count;
    std::pair<int64_t, int64_t> first;
  };
  std::map<std::pair<std::string, std::string>, Hits> hits;
  int64_t index = 0;
  src.grads([&](const GradRecord& r) {
    ++s.grad_records;
    s.nonfinite_grad_records += (r.grad_nan + r.grad_inf) > 0 ? 1 : 0;
    for (const std::string& w : r.watch) {
      auto [it, fresh] = hits.try_emplace(
          {r.param, w}, Hits{WatchHitCount{r.param, w, 0, r.step}, {r.step, index}});
      ++it->second.count.count;
      it->second.first = std::min(it->second.first, std::pair<int64_t, int64_t>{r.step, index});
      it->second.count.first_step = it->second.first.first;
    }
    ++index;
    return true;
  });
  // Earliest first: step order, then record order.
  std::vector<Hits> order;
  for (auto& [key, h] : hits) order.push_back(std::move(h));
  std::stable_sort(order.begin(), order.end(),
                   [](const Hits& a, const Hits& b) { return a.first < b.first; });
  for (Hits& h : order) s.watch_hits.push_back(std::move(h.count));
}

// The losses the user logged (is_loss_scalar) on the first rank that logged any scalar.
class LossCounter {
 public:
  void add(const ScalarRecord& r) {
    if (!rank_) rank_ = r.rank;
    if (r.rank != *rank_ || !is_loss_scalar(r.name)) return;
    auto it = std::find_if(losses_.begin(), losses_.end(),
                           [&](const LossSummary& l) { return l.name == r.name; });
    if (it == losses_.end()) {
      it = losses_.insert(losses_.end(), LossSummary{});
      it->name = r.name;
      it->first_step = r.step;
      it->first_value = r.value;
    }
    ++it->points;
    it->last_step = r.step;
    it->last_value = r.value;
    if (!std::isfinite(r.value) && !it->nonfinite_step) it->nonfinite_step = r.step;
  }
  std::vector<LossSummary> finish() { return std::move(losses_); }

 private:
  std::optional<int> rank_;
  std::vector<LossSummary> losses_;
};

SummaryResult summarize(RecordSource& src, bool by_module) {
  SummaryResult s;
  s.by_module = by_module;
  s.path = src.path();
  s.ranks = src.ranks();
  for (size_t i = 0; i < s.ranks.size(); ++i) {
    RunMeta meta = s.ranks[i].run_meta();
    s.dropped += meta.records_dropped();
    if (i == 0) s.meta = std::move(meta);
  }
  // The live hits first: those the run wrote at a mask (an older writer's) are left out.
  std::set<RecordKey> overflow_hits, at_masks;
  src.watch_hits([&](const OpWatchHit& h) {
    s.op_watch_hits.push_back(h);
    if (h.watch == "tensor_overflow") overflow_hits.insert({h.rank, h.step, h.seq});
    return true;
  });
  count_ops(src, s, overflow_hits, at_masks);
  const auto kept_end =
      std::remove_if(s.op_watch_hits.begin(), s.op_watch_hits.end(), [&](const OpWatchHit& h) {
        return h.watch == "tensor_overflow" && at_masks.count({h.rank, h.step, h.seq}) != 0;
      });
  s.masking.live_watch_hits = s.op_watch_hits.end() - kept_end;
  s.op_watch_hits.erase(kept_end, s.op_watch_hits.end());
  count_scaler(src, s);
  count_grads(src, s);
  analysis_detail::ReplicaCounter replicas;
  LossCounter losses;
  analysis_detail::RunStateBuilder run;
  src.scalars([&](const ScalarRecord& r) {
    run.add(r);
    if (r.name == kStepEndEventName) return true;  // the writer's, not a record submitted
    ++s.scalar_records;
    replicas.add(r, s.replicas);
    losses.add(r);
    return true;
  });
  s.run = run.finish(s.ranks);
  replicas.finish(s.replicas);
  s.losses = losses.finish();
  src.anomalies([&](const AnomalyEvent& a) {
    s.anomalies.push_back(a);
    return true;
  });
  if (!s.records_per_step.empty()) {
    s.step_min = s.records_per_step.front().first;
    s.step_max = s.records_per_step.back().first;
  }
  s.streams = src.statuses();
  for (const StreamStatus& st : s.streams) {
    s.truncated = s.truncated || st.truncated;
    s.bad_lines += st.bad_lines;
  }
  return s;
}

}  // namespace

nlohmann::json SummaryResult::to_json() const {
  nlohmann::json ranks_j = nlohmann::json::array();
  for (const RankInfo& r : ranks)
    ranks_j.push_back({{"rank", r.rank}, {"world_size", r.world_size}, {"dir", r.dir}});
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& [step, n] : records_per_step) steps.push_back({{"step", step}, {"ops", n}});
  nlohmann::json bad = nlohmann::json::array();
  for (const NameCount& c : nonfinite_ops) bad.push_back({{"op", c.name}, {"count", c.count}});
  nlohmann::json hits = nlohmann::json::array();
  nlohmann::json op_hits = nlohmann::json::array();
  for (const OpWatchHit& h : op_watch_hits) op_hits.push_back(watch_hit_json(h));
  for (const WatchHitCount& h : watch_hits)
    hits.push_back(
        {{"param", h.param}, {"watch", h.watch}, {"count", h.count}, {"first_step", h.first_step}});
  nlohmann::json streams_j = nlohmann::json::array();
  for (const StreamStatus& st : streams) streams_j.push_back(analysis_detail::to_json(st));
  nlohmann::json sc{{"records", scaler.records},
                    {"found_inf", scaler.found_inf},
                    {"skipped", scaler.skipped},
                    {"backoffs", scaler.backoffs},
                    {"growths", scaler.growths}};
  sc["final_scale"] = scaler.final_scale ? number(*scaler.final_scale) : nlohmann::json();
  sc["first_skip_step"] =
      scaler.first_skip_step ? nlohmann::json(*scaler.first_skip_step) : nlohmann::json();
  nlohmann::json rep{{"checks", replicas.checks},
                     {"failed_checks", replicas.failed_checks},
                     {"structure_differs", replicas.structure_differs},
                     {"mismatched", replicas.mismatched}};
  rep["first_failed_step"] =
      replicas.first_failed_step ? nlohmann::json(*replicas.first_failed_step) : nlohmann::json();
  nlohmann::json j{
      {"path", path},
      {"meta", meta.to_json()},
      {"ranks", std::move(ranks_j)},
      {"op_records", op_records},
      {"scaler_records", scaler_records},
      {"grad_records", grad_records},
      {"scalar_records", scalar_records},
      {"steps", std::move(steps)},
      {"nonfinite_op_records", nonfinite_op_records},
      {"nonfinite_ops", std::move(bad)},
      {"scaler", std::move(sc)},
      {"watch_hits", std::move(hits)},
      {"op_watch_hits", std::move(op_hits)},
      {"first_nonfinite_step",
       first_nonfinite_step ? nlohmann::json(*first_nonfinite_step) : nlohmann::json(nullptr)},
      {"masking", masking.to_json()},
      {"replicas", std::move(rep)},
      {"nonfinite_grad_records", nonfinite_grad_records},
      {"streams", std::move(streams_j)},
      {"dropped", dropped},
      {"truncated", truncated},
      {"bad_lines", bad_lines}};
  if (by_module) {
    nlohmann::json ms = nlohmann::json::array();
    for (const ModuleSummary& m : modules) {
      ms.push_back(
          {{"module", m.module},
           {"ops", m.ops},
           {"nonfinite_ops", m.nonfinite_ops},
           {"first_nonfinite_step",
            m.first_nonfinite_step ? nlohmann::json(*m.first_nonfinite_step) : nlohmann::json()},
           {"max_abs_output", number(m.max_abs_output)}});
    }
    j["modules"] = std::move(ms);
  }
  nlohmann::json an = nlohmann::json::array();
  for (const AnomalyEvent& a : anomalies) {
    an.push_back({{"step", a.step},
                  {"rank", a.rank},
                  {"trigger", a.trigger},
                  {"reproduced", a.reproduced},
                  {"origin", a.origin},
                  {"origin_record", a.origin_record},
                  {"classification", a.classification},
                  {"why", a.why},
                  {"trigger_detail", a.trigger_detail},
                  {"replay", a.replay},
                  {"text", describe(a)}});
  }
  j["anomalies"] = std::move(an);
  nlohmann::json ls = nlohmann::json::array();
  for (const LossSummary& l : losses) {
    ls.push_back({{"name", l.name},
                  {"points", l.points},
                  {"first_step", l.first_step},
                  {"first_value", number(l.first_value)},
                  {"last_step", l.last_step},
                  {"last_value", number(l.last_value)},
                  {"nonfinite_step",
                   l.nonfinite_step ? nlohmann::json(*l.nonfinite_step) : nlohmann::json()}});
  }
  j["losses"] = std::move(ls);
  j["run"] = run.to_json();
  j["step_min"] = step_min ? nlohmann::json(*step_min) : nlohmann::json();
  j["step_max"] = step_max ? nlohmann::json(*step_max) : nlohmann::json();
  return j;
}

std::string describe(const AnomalyEvent& a) {
  std::string s = "anomaly at step " + std::to_string(a.step);
  const std::string& trigger = a.trigger_detail.empty() ? a.trigger : a.trigger_detail;
  if (!trigger.empty()) s += " (" + trigger + ")";
  s += a.reproduced ? ": replayed, reproduced" : ": replayed, not reproduced";
  if (a.origin.empty()) {
    s += "; no op produced a NaN/Inf";
  } else {
    s += "; origin " + a.origin;
  }
  if (!a.classification.empty() || !a.why.empty()) {
    s += " \u2014 ";
    s += a.classification.empty() ? std::string("unknown") : a.classification;
    if (!a.why.empty()) s += ": " + a.why;
  }
  return s;
}

SummaryResult summarize_dump(DumpReader& reader, const ReadOptions& read, bool by_module) {
  analysis_detail::ReaderSource src(reader, read);
  return summarize(src, by_module);
}

SummaryResult summarize_dump(const DumpData& data, bool by_module) {
  analysis_detail::DataSource src(data);
  return summarize(src, by_module);
}

}  // namespace precprobe
