// compare_dumps: reads the two runs and hands compare.cpp their (step, rank) groups.
//
// Dumps whose op frames all have digests (docs/dump-format.md, "Frame digests") are read side
// by side, a frame at a time from whichever run is behind: the digests say how many records
// each (rank, step) holds, so a group is judged, and its records let go, as soon as both runs'
// records of it are read. Memory then holds the groups in flight, not the runs; a step whose
// frames are the same bytes in both runs is not read at all (StreamedCompare). Otherwise
// (no digests, DumpData, digests off, or a count the records contradict) both runs are held
// in memory, as before. Every way gives the same result (test_compare_stream.cpp).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <type_traits>

#include "compare_group.h"
#include "compare_judges.h"
#include "loss_scale.h"
#include "modules.h"
#include "op_cursor.h"
#include "source.h"

namespace precprobe {
namespace {

std::atomic<uint64_t> streamed_calls{0};
std::atomic<uint64_t> last_peak{0};  // groups in memory at once, in the last streamed compare

using analysis_detail::CompareMerge;
using analysis_detail::GroupKey;
using analysis_detail::GroupResult;
using analysis_detail::ProgramConstants;
using Groups = std::map<GroupKey, std::vector<OpRecord>>;

// Where one run's records go: which are compared, under which group key.
struct Selection {
  Selection(const CompareOptions& options, int side) : opt(options) {
    rank = opt.rank;
    if (opt.ranks) rank = side == 0 ? opt.ranks->first : opt.ranks->second;
  }
  // The (step, rank) group of a record, or nullopt for one not compared. With opt.ranks
  // each side keeps its own rank, and B's records are relabelled as A's rank so the two
  // ranks' ops pair up.
  std::optional<GroupKey> group(int64_t step, int r) const {
    if ((opt.step && step != *opt.step) || (rank && r != *rank)) return std::nullopt;
    return GroupKey{step, opt.ranks ? opt.ranks->first : r};
  }
  // The rank of this run's records of a group: the key's, or with opt.ranks this run's own.
  int own_rank(const GroupKey& key) const { return opt.ranks ? *rank : key.second; }
  const CompareOptions& opt;
  std::optional<int> rank;
};

// One run's records to compare: its op records per (step, rank), and its loss scales.
struct Side {
  Side(const CompareOptions& opt, int side) : select(opt, side) {}
  Selection select;
  Groups groups;
  analysis_detail::LossScales scales;
  /// Ops of threads outside the training step (OpRecord::background): which step they fall
  /// into, and on which of the program's threads, is up to the scheduler, so they are not
  /// paired; their data reaches the step's ops, which are.
  int64_t background = 0;
  std::map<int, analysis_detail::ModuleOrder> orders;  ///< by the rank of the groups' keys
  std::vector<std::vector<OpRecord>> spare;            ///< empty, for groups to come

  // Takes one op record: into its group, counted as background, or left out.
  void add(OpRecord&& r) {
    if (r.background) {
      if (select.group(r.step, r.rank)) ++background;
      return;
    }
    if (auto key = select.group(r.step, r.rank)) {
      auto [it, fresh] = groups.try_emplace(*key);
      auto& ops = it->second;
      if (fresh && !spare.empty()) {  // a judged group's vector, its capacity kept
        ops.swap(spare.back());
        spare.pop_back();
      }
      ops.push_back(std::move(r));
      ops.back().rank = key->second;
    }
  }
};

// The ranks' module orders and the loss scales of one run.
void load_context(analysis_detail::RecordSource& src, Side& s, const CompareOptions& opt) {
  for (auto& [r, order] : analysis_detail::module_orders(src.ranks())) {
    if (opt.ranks && r != *s.select.rank) continue;
    s.orders[opt.ranks ? opt.ranks->first : r] = std::move(order);
  }
  src.scaler([&](const ScalerRecord& r) {
    if (auto key = s.select.group(r.step, r.rank))
      if (std::isfinite(r.scale_before) && r.scale_before > 0)
        s.scales.emplace(*key, r.scale_before);
    return true;
  });
}

void sort_by_seq(std::vector<OpRecord>& ops) {
  auto by_seq = [](const OpRecord& x, const OpRecord& y) { return x.seq < y.seq; };
  if (!std::is_sorted(ops.begin(), ops.end(), by_seq))  // as written, mostly
    std::stable_sort(ops.begin(), ops.end(), by_seq);
}

double loss_scale(const Side& sa, const Side& sb, const GroupKey& key) {
  return analysis_detail::loss_scale_of(sa.scales, key) /
         analysis_detail::loss_scale_of(sb.scales, key);
}

// Whether `key` is the first step of its rank among `keys` (a map or set of GroupKeys, or a
// sorted vector of them): the start of the comparison for that rank.
template <class Keys>
bool first_step_of(const Keys& keys, const GroupKey& key) {
  for (const auto& k : keys) {
    const GroupKey& g = [&]() -> const GroupKey& {
      if constexpr (std::is_same_v<std::decay_t<decltype(k)>, GroupKey>) {
        return k;
      } else {
        return k.first;
      }
    }();
    if (g.second == key.second) return g.first == key.first;
  }
  return false;
}

// Both runs in memory: every group, then compare's order.
CompareResult compare_loaded(analysis_detail::RecordSource& src_a,
                             analysis_detail::RecordSource& src_b, const CompareOptions& opt) {
  Side sa(opt, 0), sb(opt, 1);
  for (auto [src, s] : {std::pair{&src_a, &sa}, std::pair{&src_b, &sb}}) {
    src->ops([s = s](const OpRecord& r) {
      s->add(OpRecord(r));
      return true;
    });
    for (auto& [key, ops] : s->groups) sort_by_seq(ops);
    load_context(*src, *s, opt);
  }
  ProgramConstants const_a, const_b;
  for (const auto& kv : sa.groups) const_a.add(kv.second);
  for (const auto& kv : sb.groups) const_b.add(kv.second);
  CompareMerge merge(opt);
  for (const auto& [key, a] : sa.groups) {
    auto it = sb.groups.find(key);
    if (it == sb.groups.end()) {
      merge.add(analysis_detail::one_run_group(key, a, "a"));
      continue;
    }
    merge.add(analysis_detail::compare_group(key, a, it->second, opt, loss_scale(sa, sb, key),
                                             analysis_detail::order_of(sa.orders, key.second),
                                             const_a, const_b, nullptr,
                                             first_step_of(sa.groups, key)));
  }
  for (const auto& [key, b] : sb.groups) {
    if (!sa.groups.count(key)) merge.add(analysis_detail::one_run_group(key, b, "b"));
  }
  return merge.finish(sa.background, sb.background);
}

using RankStep = std::pair<int, int64_t>;

// What the digests say of one (rank, step) of a dump.
struct StepFrames {
  int64_t records = 0;  ///< over every frame that holds some
  /// Every frame that holds some holds this step only, has a content hash and no NaN/Inf.
  bool pure = true;
  std::vector<uint64_t> hashes;  ///< of those frames, in order (when pure)
  uint64_t background = 0;       ///< records of threads outside the step (when pure)
};

// Each (rank, step) of a dump, from its frame digests; nullopt when a frame has none (an
// older writer, digests off) or cannot be passed over.
std::optional<std::map<RankStep, StepFrames>> census(DumpReader& reader,
                                                     const RecordFilter& ranks) {
  std::map<RankStep, StepFrames> n;
  bool every_frame = true;
  reader.for_each_op(
      ranks,
      [&](int rank, const FrameDigest& d) {
        for (const FrameDigest::Step& s : d.steps) {
          StepFrames& f = n[{rank, s.step}];
          f.records += s.records;
          f.pure = f.pure && d.steps.size() == 1 && d.content && s.nonfinite_records == 0;
          if (!f.pure) continue;
          f.hashes.push_back(*d.content);
          f.background += d.background;
        }
        return true;
      },
      [&](const OpRecord&) { return every_frame = false; });
  if (!every_frame) return std::nullopt;
  return n;
}

// The two runs read side by side (the file comment). nullopt when a run's records
// contradict its digests (more records of a (rank, step) than the digests count): then
// nothing streamed can be trusted to be complete, and the caller reads both in memory.
//
// With `skip_identical`, a step whose frames are the same bytes in both runs (the digests'
// content hashes), holding that step only and no NaN/Inf, is not read: its ops are equal
// ops, each a match, and are counted so. Not with what needs each op (--by module, every
// op kept), nor where the loss scales differ. When a verdict then asks whether a number is
// a constant of the run (the steps passed over would tell), retry() says to run again
// without skipping.
class StreamedCompare {
 public:
  StreamedCompare(const CompareOptions& opt, const ProgressFn& progress, bool skip_identical)
      : opt_(opt),
        progress_(progress),
        sa_(opt, 0),
        sb_(opt, 1),
        skip_identical_(skip_identical && !opt.by_module && opt.keep_ops != KeepOps::kAll &&
                        !opt.step) {}

  bool retry() const noexcept { return retry_; }

  std::optional<CompareResult> run(DumpReader& a, DumpReader& b, const ReadOptions& read_a,
                                   const ReadOptions& read_b) {
    RecordFilter ranks_a, ranks_b;
    ranks_a.ranks = read_a.filter.ranks;
    ranks_b.ranks = read_b.filter.ranks;
    auto na = census(a, ranks_a);
    auto nb = na ? census(b, ranks_b) : std::nullopt;
    if (!na || !nb) return std::nullopt;
    for (int side : {0, 1}) {
      for (const auto& [rs, f] : side == 0 ? *na : *nb) run_[side].expected[rs] = f.records;
      analysis_detail::ReaderSource src(side == 0 ? a : b, side == 0 ? read_a : read_b);
      load_context(src, side == 0 ? sa_ : sb_, opt_);
    }
    std::set<GroupKey> keys_a;
    for (const auto& kv : run_[0].expected)
      if (auto key = sa_.select.group(kv.first.second, kv.first.first)) keys_a.insert(*key);
    keys_a_.assign(keys_a.begin(), keys_a.end());
    if (skip_identical_ && same_grad_mode(a, b)) pass_identical(*na, *nb);
    for (int side : {0, 1}) {
      for (const auto& [rs, n] : run_[side].expected) run_[side].total += n;
    }
    auto passing = [this](int side) {
      return [this, side](int rank, const FrameDigest& d) {
        return d.steps.size() == 1 && passed_[side].count({rank, d.steps[0].step}) > 0;
      };
    };
    OpCursor ca(a, read_a.filter, passing(0)), cb(b, read_b.filter, passing(1));
    cursor_[0] = &ca;
    cursor_[1] = &cb;
    judges_.emplace(opt_.threads, opt_, const_a_, const_b_);
    bool more[2] = {true, true};
    std::vector<OpRecord> frame;
    size_t peak = 0;
    while (more[0] || more[1]) {
      const int side = !more[0] ? 1 : !more[1] ? 0 : behind();
      frame.clear();
      more[side] = cursor_[side]->next(frame);
      if (!take(side, frame)) return stopped();
      peak = std::max(peak, sa_.groups.size() + sb_.groups.size() + held_a_.size() +
                                held_b_.size() + results_.size());
      collect(/*wait=*/held_back(), /*final=*/false);
      if (retry_) return stopped();
    }
    collect(/*wait=*/true, /*final=*/false);
    last_peak = peak;
    // Groups whose records did not all arrive (a truncated stream, a bad line), then those
    // waiting for every group's constants: judged now that every group is known.
    std::set<GroupKey> rest;
    for (const auto& kv : sa_.groups) rest.insert(kv.first);
    for (const auto& kv : sb_.groups) rest.insert(kv.first);
    for (const GroupKey& key : rest) hold(key);
    std::set<GroupKey> held;
    for (const auto* m : {&held_a_, &held_b_})
      for (const auto& kv : *m) held.insert(kv.first);
    for (const GroupKey& key : held) judge(key, /*final=*/true);
    collect(/*wait=*/true, /*final=*/true);
    if (retry_) return stopped();
    // What is left is in compare's order: A's groups after the last one added, then B's only.
    for (auto& kv : results_) merge_.add(std::move(kv.second));
    return merge_.finish(sa_.background, sb_.background);
  }

 private:
  // Whether both runs' readers fill OpRecord::grad alike (meta.json's ops_grad_mode): the
  // same bytes are the same records only then.
  static bool same_grad_mode(const DumpReader& a, const DumpReader& b) {
    std::set<bool> modes;
    for (const DumpReader* r : {&a, &b})
      for (const RankInfo& info : r->ranks())
        modes.insert(info.meta && info.meta->ops_grad_mode.value_or(false));
    return modes.size() <= 1;
  }

  // Passes over the steps whose frames are the same bytes in both runs (the class comment),
  // counting their ops as matches.
  void pass_identical(const std::map<RankStep, StepFrames>& na,
                      const std::map<RankStep, StepFrames>& nb) {
    for (const auto& [rs, fa] : na) {
      const std::optional<GroupKey> key = sa_.select.group(rs.second, rs.first);
      if (!key || !fa.pure || fa.hashes.empty()) continue;
      const RankStep other{sb_.select.own_rank(*key), key->first};
      auto it = nb.find(other);
      if (it == nb.end() || !sb_.select.group(other.second, other.first)) continue;
      const StepFrames& fb = it->second;
      if (!fb.pure || fb.hashes != fa.hashes || fb.records != fa.records ||
          fb.background != fa.background || std::fabs(loss_scale(sa_, sb_, *key) - 1) > 0)
        continue;
      passed_[0].insert(rs);
      passed_[1].insert(other);
      run_[0].expected.erase(rs);
      run_[1].expected.erase(other);
      sa_.background += static_cast<int64_t>(fa.background);
      sb_.background += static_cast<int64_t>(fb.background);
      const int64_t n = fa.records - static_cast<int64_t>(fa.background);
      if (n > 0) {
        GroupResult g;
        g.part.ops_a = g.part.ops_b = g.part.matched = g.part.match_ops = n;
        g.part.groups_compared = 1;
        results_[{0, *key}] = std::move(g);
      }
      settle(*key);
    }
  }

  struct Run {
    std::map<RankStep, int64_t> expected, read;
    int64_t total = 0, records = 0;
  };

  // The run that has read the smaller share of its records.
  int behind() const {
    const double fa = static_cast<double>(run_[0].records) * static_cast<double>(run_[1].total);
    const double fb = static_cast<double>(run_[1].records) * static_cast<double>(run_[0].total);
    return fa <= fb ? 0 : 1;
  }

  int64_t count(int side, const RankStep& rs, bool read) const {
    const auto& m = read ? run_[side].read : run_[side].expected;
    auto it = m.find(rs);
    return it == m.end() ? 0 : it->second;
  }

  // A frame's records of run `side`; false when they contradict the digests.
  bool take(int side, std::vector<OpRecord>& frame) {
    Side& s = side == 0 ? sa_ : sb_;
    std::set<RankStep> touched;
    for (OpRecord& r : frame) {
      const RankStep rs{r.rank, r.step};
      if (++run_[side].read[rs] > count(side, rs, false)) return false;
      touched.insert(rs);
      s.add(std::move(r));
      if (progress_ && (++progressed_ & 4095u) == 0) progress_(progressed_);
    }
    run_[side].records += static_cast<int64_t>(frame.size());
    for (const RankStep& rs : touched) {
      if (count(side, rs, true) != count(side, rs, false)) continue;
      const std::optional<GroupKey> key = s.select.group(rs.second, rs.first);
      if (!key) continue;
      // The other run's records of the group.
      const int other = 1 - side;
      const RankStep ors{(other == 0 ? sa_ : sb_).select.own_rank(*key), key->first};
      if (count(other, ors, true) != count(other, ors, false)) continue;
      hold(*key);
      judge(*key, /*final=*/false);
    }
    return true;
  }

  // Takes the group's records of both runs out of reading, into the constants.
  void hold(const GroupKey& key) {
    for (auto [s, consts] : {std::pair{&sa_, &const_a_}, std::pair{&sb_, &const_b_}}) {
      auto it = s->groups.find(key);
      if (it == s->groups.end()) continue;
      sort_by_seq(it->second);
      consts->add(it->second);
      (s == &sa_ ? held_a_ : held_b_)[key] = std::move(it->second);
      s->groups.erase(it);
    }
  }

  // Judges a held group: one of both runs goes to the judges (collect() takes its result),
  // one of one run is judged here. Not final: a verdict that more groups' constants could
  // change is left for the end (the group stays held).
  void judge(const GroupKey& key, bool final) {
    auto ia = held_a_.find(key), ib = held_b_.find(key);
    const bool in_a = ia != held_a_.end(), in_b = ib != held_b_.end();
    if (in_a && in_b) {
      judging_.insert(key);
      judges_->submit({key, &ia->second, &ib->second, loss_scale(sa_, sb_, key),
                       analysis_detail::order_of(sa_.orders, key.second),
                       first_step_of(keys_a_, key)});
      return;
    }
    if (in_a) {
      results_[{0, key}] = analysis_detail::one_run_group(key, ia->second, "a");
    } else if (in_b) {
      results_[{1, key}] = analysis_detail::one_run_group(key, ib->second, "b");
    }
    if (in_a) let_go(0, ia);
    if (in_b) let_go(1, ib);
    settle(key);
  }

  // Whether reading waits for the judges: the next group of A to add up is being judged
  // (its thread descheduled, say) and holds back the results judged after it, past four
  // groups in flight a judging thread. Results waiting for a group left for the end, or B's
  // groups of one run only, are not held back by a judge: reading goes on.
  bool held_back() const {
    return next_a_ < keys_a_.size() && judging_.count(keys_a_[next_a_]) > 0 &&
           judging_.size() + results_.size() > 4 * judges_->threads();
  }

  // Nothing streamed is the result: the judges stop (a second StreamedCompare may follow).
  std::nullopt_t stopped() {
    judges_.reset();
    return std::nullopt;
  }

  // Takes the judges' verdicts on groups of both runs (`wait`: on every group submitted).
  void collect(bool wait, bool final) {
    for (analysis_detail::JudgedGroup& d : judges_->take(wait)) {
      judging_.erase(d.key);
      if (d.error) std::rethrow_exception(d.error);
      if (d.use.asked && !passed_[0].empty()) retry_ = true;  // the steps passed over would
      if (retry_ || (d.use.unsettled && !final)) continue;    // have answered too
      results_[{0, d.key}] = std::move(d.result);
      let_go(0, held_a_.find(d.key));
      let_go(1, held_b_.find(d.key));
      settle(d.key);
    }
  }

  // A judged group's records go back to their run's cursor to be decoded into again, and its
  // vector to the run's spares: streaming allocates nothing per record once the groups in
  // flight are as many as they will be.
  void let_go(int side, std::map<GroupKey, std::vector<OpRecord>>::iterator it) {
    cursor_[side]->recycle(it->second);
    Side& s = side == 0 ? sa_ : sb_;
    if (s.spare.size() < kMaxSpareGroups) s.spare.push_back(std::move(it->second));
    (side == 0 ? held_a_ : held_b_).erase(it);
  }
  static constexpr size_t kMaxSpareGroups = 64;

  // The group is judged: its result waits in results_ until every group before is judged.
  void settle(const GroupKey& key) {
    done_.insert(key);
    // Adds the results of A's groups in key order as far as every group before is judged:
    // memory holds the groups waiting, not one result per step.
    for (; next_a_ < keys_a_.size() && done_.count(keys_a_[next_a_]); ++next_a_) {
      auto it = results_.find({0, keys_a_[next_a_]});
      if (it != results_.end()) {
        merge_.add(std::move(it->second));
        results_.erase(it);
      }
      done_.erase(keys_a_[next_a_]);
    }
  }

  const CompareOptions& opt_;
  const ProgressFn& progress_;
  Side sa_, sb_;
  Run run_[2];
  ProgramConstants const_a_, const_b_;
  // Records of groups both runs have read, out of reading, until judged (those whose
  // verdicts asked a question later groups could answer wait for the end).
  std::map<GroupKey, std::vector<OpRecord>> held_a_, held_b_;
  // Judged, not yet added to merge_, by (0: groups of A, 1: groups of B only; key): compare's
  // order (CompareMerge).
  std::map<std::pair<int, GroupKey>, GroupResult> results_;
  CompareMerge merge_{opt_};
  std::vector<GroupKey> keys_a_;  // every group key of A's records, in order
  size_t next_a_ = 0;             // keys_a_[next_a_] is the next to add to merge_
  std::set<GroupKey> done_;       // judged, from keys_a_[next_a_] on
  bool skip_identical_;
  std::set<RankStep> passed_[2];  // the steps of each run passed over as identical
  bool retry_ = false;
  uint64_t progressed_ = 0;
  OpCursor* cursor_[2] = {nullptr, nullptr};  // run()'s cursors of A and B, while it runs
  // Last: stopped before the groups and constants it reads are destroyed.
  std::optional<analysis_detail::GroupJudges> judges_;
  std::set<GroupKey> judging_;  // groups submitted to judges_, their verdicts not yet taken
};

}  // namespace

CompareResult compare_dumps(DumpReader& a, DumpReader& b, const CompareOptions& options,
                            const ProgressFn& progress) {
  ReadOptions read;
  read.progress = progress;
  if (options.step) read.filter.step_min = read.filter.step_max = options.step;
  ReadOptions read_b = read;
  if (options.ranks) {
    read.filter.ranks = {options.ranks->first};
    read_b.filter.ranks = {options.ranks->second};
  } else if (options.rank) {
    read.filter.ranks = read_b.filter.ranks = {*options.rank};
  }
  std::optional<CompareResult> r;
  if (a.digests() && b.digests()) {
    StreamedCompare first(options, progress, /*skip_identical=*/true);
    r = first.run(a, b, read, read_b);
    if (!r && first.retry())
      r = StreamedCompare(options, progress, /*skip_identical=*/false).run(a, b, read, read_b);
  }
  if (r) {
    ++streamed_calls;
  } else {
    analysis_detail::ReaderSource sa(a, read), sb(b, read_b);
    r = compare_loaded(sa, sb, options);
  }
  r->path_a = a.path();
  r->path_b = b.path();
  return std::move(*r);
}

namespace analysis_detail {
uint64_t compare_streamed() noexcept { return streamed_calls.load(); }
uint64_t compare_streamed_peak() noexcept { return last_peak.load(); }
}  // namespace analysis_detail

CompareResult compare_dumps(const DumpData& a, const DumpData& b, const CompareOptions& options) {
  analysis_detail::DataSource sa(a), sb(b);
  return compare_loaded(sa, sb, options);
}

}  // namespace precprobe
