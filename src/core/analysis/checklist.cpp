// The accuracy checklist (precprobe/checklist.h). Rules and thresholds: docs/checklist.md.
#include "precprobe/checklist.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "checklist_observed.h"
#include "checklist_records.h"
#include "json_util.h"

namespace precprobe {
namespace {

using analysis_detail::Batch;
using analysis_detail::collect;
using analysis_detail::Observed;
using analysis_detail::RecordsCollector;
using analysis_detail::RecordsView;

// Thresholds, documented in docs/checklist.md.
constexpr double kMaxClassRatio = 10.0;         // max/min label count
constexpr double kMaxAbsMean = 0.25;            // normalised channel mean
constexpr double kMinStd = 0.5, kMaxStd = 2.0;  // normalised channel std
constexpr double kSingleLabelShare = 0.5;       // batches holding one label: sorted data
constexpr int64_t kMinSortedBatch = 8;          // batches smaller than this are not judged
constexpr size_t kEpochPrefix = 3;              // first batches compared across epochs
constexpr double kMaxIgnoredShare = 0.9;
constexpr size_t kMinLossPoints = 10;
constexpr double kDivergeFactor = 1.5;  // last-window mean / first-window mean
constexpr double kMinRelDecrease = 0.01;

CheckItem item(std::string id, std::string group, std::string title) {
  CheckItem c;
  c.id = std::move(id);
  c.group = std::move(group);
  c.title = std::move(title);
  return c;
}

void set(CheckItem& c, Verdict v, std::string evidence) {
  c.verdict = v;
  c.evidence = std::move(evidence);
}

const char* kNoBatches = "no batch observed (call dbg.observe_batch(inputs, targets))";
const char* kNoInput =
    "no batch observed and no op reading a parameter was recorded, so the model's input is "
    "unknown (call dbg.observe_batch(inputs, targets), or record ops: data_mode)";

// Where the records-based verdicts take the model's input from.
std::string input_source(const RecordsView& rv) {
  return fmt::format(
      "the model's input (the non-parameter input of {}, the first op reading a "
      "parameter) in {} steps",
      rv.inputs.front().op, rv.inputs.size());
}

// The steps' inputs the data items judge: those of training steps, else all.
std::vector<RecordsView::Input> judged_inputs(const RecordsView& rv) {
  std::vector<RecordsView::Input> train;
  for (const auto& in : rv.inputs)
    if (in.train) train.push_back(in);
  return train.empty() ? rv.inputs : train;
}

std::string join_first(const std::vector<std::string>& names, size_t n = 5) {
  std::vector<std::string> head(names.begin(), names.begin() + std::min(n, names.size()));
  std::string s = fmt::format("{}", fmt::join(head, ", "));
  if (names.size() > n) s += fmt::format(", ... ({} in all)", names.size());
  return s;
}

// ------------------------------------------------------------------------------- data

// NaN/Inf counts over the model's inputs, step by step (from observe_batch or the records).
struct MissingTally {
  size_t batches = 0;
  int64_t numel = 0, nan = 0, inf = 0, bad = 0;
  std::optional<int64_t> first;

  void add(int64_t n, int64_t n_nan, int64_t n_inf, int64_t step) {
    ++batches;
    numel += n;
    nan += n_nan;
    inf += n_inf;
    if (n_nan + n_inf > 0) {
      ++bad;
      if (!first) first = step;
    }
  }
  std::vector<std::pair<std::string, double>> figures() const {
    return {{"batches", double(batches)},
            {"elements", double(numel)},
            {"nan", double(nan)},
            {"inf", double(inf)},
            {"bad_batches", double(bad)}};
  }
};

CheckItem check_missing_records(CheckItem c, const RecordsView& rv) {
  if (rv.inputs.empty()) return set(c, Verdict::kNotApplicable, kNoInput), c;
  MissingTally t;
  for (const auto& in : rv.inputs) t.add(in.numel, in.nan, in.inf, in.step);
  c.figures = t.figures();
  if (t.bad > 0) {
    set(c, Verdict::kProblem,
        fmt::format("{} of {} steps' inputs hold NaN/Inf ({} NaN, {} Inf); first at step {}; "
                    "from {}",
                    t.bad, t.batches, t.nan, t.inf, *t.first, input_source(rv)));
  } else {
    set(c, Verdict::kOk,
        fmt::format("{} input elements, all finite; from {}", t.numel, input_source(rv)));
  }
  return c;
}

CheckItem check_missing(const Observed& o, const RecordsView& rv) {
  CheckItem c = item("data.missing_values", "data", "missing values (NaN/Inf) in input batches");
  if (o.batches.empty()) return check_missing_records(std::move(c), rv);
  MissingTally t;
  for (const Batch& b : o.batches) t.add(b.inputs_numel, b.nan, b.inf, b.step);
  c.figures = t.figures();
  if (t.bad > 0) {
    set(c, Verdict::kProblem,
        fmt::format("{} of {} batches hold NaN/Inf ({} NaN, {} Inf); first at step {}", t.bad,
                    t.batches, t.nan, t.inf, *t.first));
  } else {
    set(c, Verdict::kOk,
        fmt::format("{} batches, {} input elements, all finite", t.batches, t.numel));
  }
  return c;
}

std::map<int64_t, int64_t> label_histogram(const Observed& o, size_t& batches) {
  std::map<int64_t, int64_t> h;
  batches = 0;
  for (const Batch& b : o.batches) {
    if (!b.is_train() || b.labels.empty()) continue;
    ++batches;
    for (const auto& [label, count] : b.labels) h[label] += count;
  }
  return h;
}

// Judges a label histogram (label -> count) gathered over `batches` training batches;
// `source` says where it came from.
CheckItem judge_histogram(CheckItem c, const std::map<int64_t, int64_t>& h, size_t batches,
                          const std::string& source) {
  double total = 0, lo = INFINITY, hi = 0;
  for (const auto& kv : h) {
    total += double(kv.second);
    lo = std::min(lo, double(kv.second));
    hi = std::max(hi, double(kv.second));
  }
  const double mean = total / double(h.size());
  double var = 0;
  for (const auto& kv : h) var += (double(kv.second) - mean) * (double(kv.second) - mean);
  const double sd = std::sqrt(var / double(h.size()));
  c.figures = {{"classes", double(h.size())},
               {"labels", total},
               {"min", lo},
               {"max", hi},
               {"ratio", hi / lo},
               {"std", sd}};
  std::string hist;
  for (const auto& [label, count] : h) {
    if (hist.size() > 120) {
      hist += " ...";
      break;
    }
    hist += fmt::format("{}{}:{}", hist.empty() ? "" : " ", label, count);
  }
  if (h.size() < 2) {
    set(c, Verdict::kProblem,
        fmt::format("only one class seen in {} training batches ({}){}", batches, hist, source));
  } else if (hi / lo > kMaxClassRatio) {
    set(c, Verdict::kProblem,
        fmt::format("max/min class count {:.3g} > {} over {} classes ({}){}", hi / lo,
                    kMaxClassRatio, h.size(), hist, source));
  } else {
    set(c, Verdict::kOk,
        fmt::format("{} classes, max/min {:.3g}, std {:.3g} ({}){}", h.size(), hi / lo, sd, hist,
                    source));
  }
  return c;
}

// Without observe_batch: the loss op's integer targets, with their value histogram ("hist")
// where the probe recorded one, else only their range.
CheckItem check_imbalance_records(CheckItem c, const RecordsView& rv) {
  if (rv.targets.empty()) {
    return set(c, Verdict::kNotApplicable,
               "no batch observed and no integer target of a loss op recorded (call "
               "dbg.observe_batch(inputs, targets) for the label histogram)"),
           c;
  }
  std::map<int64_t, int64_t> h;
  size_t with_hist = 0;
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& t : rv.targets) {
    lo = std::min(lo, t.min);
    hi = std::max(hi, t.max);
    if (t.hist.empty()) continue;
    ++with_hist;
    for (const auto& [label, count] : t.hist)
      if (!rv.ignore_index || label != *rv.ignore_index) h[label] += count;
  }
  if (with_hist == rv.targets.size() && !h.empty()) {
    return judge_histogram(
        std::move(c), h, with_hist,
        fmt::format("; from the targets of {} in {} training steps", rv.loss_op, with_hist));
  }
  c.figures = {{"batches", double(rv.targets.size())}, {"min_label", lo}, {"max_label", hi}};
  if (!(lo < hi)) {
    return set(c, Verdict::kProblem,
               fmt::format("only one class ({}) in the targets of {} in {} training steps", lo,
                           rv.loss_op, rv.targets.size())),
           c;
  }
  return set(c, Verdict::kNotApplicable,
             fmt::format("the targets of {} span labels {}..{} but their counts were not "
                         "recorded (a histogram is kept for CPU targets spanning fewer than {} "
                         "values; dbg.observe_batch(inputs, targets) records it for any)",
                         rv.loss_op, lo, hi, kHistogramSpan)),
         c;
}

CheckItem check_imbalance(const Observed& o, const RecordsView& rv) {
  CheckItem c = item("data.class_imbalance", "data", "class imbalance (label histogram)");
  if (o.batches.empty()) return check_imbalance_records(std::move(c), rv);
  size_t batches = 0;
  const auto h = label_histogram(o, batches);
  if (h.empty()) {
    return set(c, Verdict::kNotApplicable,
               o.batches.empty() ? kNoBatches : "no integer class labels observed in training"),
           c;
  }
  return judge_histogram(std::move(c), h, batches, "");
}

// Without observe_batch: the whole input tensor per step, pooled like the channels.
CheckItem check_normalised_records(CheckItem c, const RecordsView& rv) {
  if (rv.inputs.empty()) return set(c, Verdict::kNotApplicable, kNoInput), c;
  const auto v = judged_inputs(rv);
  double m = 0, var_in = 0, abs_max = 0;
  for (const auto& in : v) {
    m += in.mean / double(v.size());
    var_in += in.std * in.std / double(v.size());
    abs_max = std::max(abs_max, in.abs_max);
  }
  double var_between = 0;
  for (const auto& in : v) var_between += (in.mean - m) * (in.mean - m) / double(v.size());
  const double sd = std::sqrt(var_in + var_between);
  c.figures = {{"mean", m}, {"std", sd}, {"abs_max", abs_max}, {"steps", double(v.size())}};
  const std::string seen = fmt::format(
      "mean {:.3g}, std {:.3g}, largest |x| {:.3g}; from {} "
      "(per channel with dbg.observe_batch)",
      m, sd, abs_max, input_source(rv));
  if (std::fabs(m) > kMaxAbsMean || !(sd >= kMinStd && sd <= kMaxStd)) {
    set(c, Verdict::kProblem,
        fmt::format("inputs outside |mean| <= {} and {} <= std <= {}: {}", kMaxAbsMean, kMinStd,
                    kMaxStd, seen));
  } else {
    set(c, Verdict::kOk, "inputs within range: " + seen);
  }
  return c;
}

CheckItem check_normalised(const Observed& o, const RecordsView& rv) {
  CheckItem c =
      item("data.inputs_not_normalised", "data", "inputs normalised (per-channel mean ~0, std ~1)");
  if (o.batches.empty()) return check_normalised_records(std::move(c), rv);
  // Pooled over batches: mean of means; variance = mean of variances + variance of means.
  std::map<int64_t, std::vector<std::pair<double, double>>> per_channel;
  for (const Batch& b : o.batches)
    for (const auto& [ch, ms] : b.channels) per_channel[ch].push_back(ms);
  if (per_channel.empty()) {
    return set(c, Verdict::kNotApplicable,
               o.batches.empty() ? kNoBatches : "no floating-point input statistics observed"),
           c;
  }
  std::vector<std::string> bad;
  std::string shown;
  for (const auto& [ch, v] : per_channel) {
    double m = 0, var_in = 0;
    for (const auto& p : v) {
      m += p.first;
      var_in += p.second * p.second;
    }
    m /= double(v.size());
    var_in /= double(v.size());
    double var_between = 0;
    for (const auto& p : v) var_between += (p.first - m) * (p.first - m);
    const double sd = std::sqrt(var_in + var_between / double(v.size()));
    const std::string s = fmt::format("ch{} mean {:.3g} std {:.3g}", ch, m, sd);
    if (std::fabs(m) > kMaxAbsMean || !(sd >= kMinStd && sd <= kMaxStd)) bad.push_back(s);
    if (ch < 4) shown += (shown.empty() ? "" : "; ") + s;
    if (ch == 0) c.figures = {{"mean_ch0", m}, {"std_ch0", sd}};
  }
  c.figures.emplace_back("channels", double(per_channel.size()));
  c.figures.emplace_back("channels_off", double(bad.size()));
  if (!bad.empty()) {
    set(c, Verdict::kProblem,
        fmt::format("{} of {} channels outside |mean| <= {} and {} <= std <= {}: {}", bad.size(),
                    per_channel.size(), kMaxAbsMean, kMinStd, kMaxStd, join_first(bad, 3)));
  } else {
    set(c, Verdict::kOk, fmt::format("{} channels within range: {}", per_channel.size(), shown));
  }
  return c;
}

// True when the first kEpochPrefix label hashes repeat later, in a row.
bool repeated_prefix(const std::vector<double>& hashes, size_t& at) {
  const size_t k = std::min(kEpochPrefix, hashes.size() / 2);
  if (k == 0) return false;
  for (size_t i = 1; i + k <= hashes.size(); ++i) {
    if (std::equal(hashes.begin(), hashes.begin() + long(k), hashes.begin() + long(i))) {
      at = i;
      return true;
    }
  }
  return false;
}

// Without observe_batch: the loss op's integer targets (range and hash) per training step.
CheckItem check_shuffling_records(CheckItem c, const RecordsView& rv) {
  if (rv.targets.empty()) {
    return set(c, Verdict::kNotApplicable,
               "no batch observed and no integer target of a loss op recorded (call "
               "dbg.observe_batch(inputs, targets))"),
           c;
  }
  int64_t judged = 0, single = 0;
  std::vector<double> hashes;
  for (const auto& t : rv.targets) {
    if (t.hash) hashes.push_back(double(*t.hash));
    if (t.numel < kMinSortedBatch) continue;
    ++judged;
    if (!(t.min < t.max)) ++single;
  }
  c.figures = {{"batches", double(rv.targets.size())}, {"single_label_batches", double(single)}};
  const std::string from =
      fmt::format("targets of {} in {} training steps", rv.loss_op, rv.targets.size());
  if (judged > 0 && double(single) / double(judged) >= kSingleLabelShare) {
    return set(c, Verdict::kProblem,
               fmt::format("{} of {} batches hold a single label: the data looks sorted by "
                           "label ({})",
                           single, judged, from)),
           c;
  }
  size_t at = 0;
  if (repeated_prefix(hashes, at)) {
    return set(c, Verdict::kProblem,
               fmt::format("the targets of the first batches repeat in the same order at batch "
                           "{}: the data is not reshuffled ({})",
                           at, from)),
           c;
  }
  if (judged == 0 && hashes.empty()) {
    return set(c, Verdict::kNotApplicable,
               fmt::format("no batch of {} targets and no target hash ({})", kMinSortedBatch,
                           from)),
           c;
  }
  set(c, Verdict::kOk,
      fmt::format("batches mix labels{} ({})",
                  hashes.empty() ? "" : " and their order does not repeat", from));
  return c;
}

CheckItem check_shuffling(const Observed& o, const RecordsView& rv) {
  CheckItem c = item("data.no_shuffling", "data", "training data shuffled");
  if (o.batches.empty()) return check_shuffling_records(std::move(c), rv);
  std::vector<const Batch*> train;
  for (const Batch& b : o.batches)
    if (b.is_train() && (b.label_hash || b.distinct >= 0)) train.push_back(&b);
  if (train.empty()) {
    return set(c, Verdict::kNotApplicable,
               o.batches.empty() ? kNoBatches : "no integer class labels observed in training"),
           c;
  }
  // Sorted data: most batches hold one label only.
  int64_t judged = 0, single = 0;
  double distinct_sum = 0;
  for (const Batch* b : train) {
    if (b->targets_numel - b->ignored < kMinSortedBatch || b->distinct < 0) continue;
    ++judged;
    distinct_sum += double(b->distinct);
    if (b->distinct <= 1) ++single;
  }
  c.figures = {{"batches", double(train.size())}, {"single_label_batches", double(single)}};
  if (judged > 0 && double(single) / double(judged) >= kSingleLabelShare) {
    return set(c, Verdict::kProblem,
               fmt::format("{} of {} batches hold a single label: the data looks sorted by label",
                           single, judged)),
           c;
  }
  // The same label order at the start of two epochs.
  std::map<int64_t, std::vector<double>> by_epoch;
  std::vector<double> all;
  for (const Batch* b : train) {
    if (!b->label_hash) continue;
    all.push_back(*b->label_hash);
    if (b->epoch >= 0) by_epoch[b->epoch].push_back(*b->label_hash);
  }
  std::string note;
  if (by_epoch.size() >= 2) {
    for (auto it = by_epoch.begin(); std::next(it) != by_epoch.end(); ++it) {
      const auto& a = it->second;
      const auto& b = std::next(it)->second;
      const size_t k = std::min({kEpochPrefix, a.size(), b.size()});
      if (k > 0 && std::equal(a.begin(), a.begin() + long(k), b.begin())) {
        return set(c, Verdict::kProblem,
                   fmt::format("epochs {} and {} start with the same label order ({} batches)",
                               it->first, std::next(it)->first, k)),
               c;
      }
    }
    note = fmt::format("; epochs {} differ in label order", by_epoch.size());
  } else {
    size_t at = 0;
    if (repeated_prefix(all, at)) {
      return set(c, Verdict::kProblem,
                 fmt::format("the label order of the first batches repeats at batch {}", at)),
             c;
    }
    note = "; no repeated label order (epochs not compared: fewer than two epochs known)";
  }
  set(c, Verdict::kOk,
      judged > 0 ? fmt::format("batches mix labels (mean {:.3g} distinct per batch){}",
                               distinct_sum / double(judged), note)
                 : fmt::format("no batch has {} labelled targets to judge label mixing{}",
                               kMinSortedBatch, note));
  return c;
}

// Targets, ignored targets and batches with every target ignored: from the observed
// batches, else from the histograms of the loss op's targets and its ignore_index argument.
struct IgnoredTally {
  int64_t targets = 0, ignored = 0, all_ignored = 0;
  bool known = false;
  std::string none_why;  // why nothing is known, or why nothing is ignored
};

IgnoredTally tally_ignored(const Observed& o, const RecordsView& rv) {
  IgnoredTally t;
  if (!o.batches.empty()) {
    t.known = true;
    for (const Batch& b : o.batches) {
      t.targets += b.targets_numel;
      t.ignored += b.ignored;
      if (b.targets_numel > 0 && b.ignored == b.targets_numel) ++t.all_ignored;
    }
    t.none_why = "no target equals the ignore index";
    return t;
  }
  const bool hists = !rv.targets.empty() &&
                     std::all_of(rv.targets.begin(), rv.targets.end(),
                                 [](const RecordsView::Target& x) { return !x.hist.empty(); });
  if (!hists || !rv.ignore_index) {
    t.none_why = kNoBatches;
    return t;
  }
  t.known = true;
  for (const auto& x : rv.targets) {
    int64_t ignored = 0;
    for (const auto& [label, count] : x.hist)
      if (label == *rv.ignore_index) ignored = count;
    t.targets += x.numel;
    t.ignored += ignored;
    if (x.numel > 0 && ignored == x.numel) ++t.all_ignored;
  }
  t.none_why = fmt::format("no target of {} equals its ignore index {} ({} training steps)",
                           rv.loss_op, *rv.ignore_index, rv.targets.size());
  return t;
}

CheckItem check_ignore_index(const Observed& o, const RecordsView& rv) {
  CheckItem c = item("data.ignore_index", "data", "padding/mask sanity (ignored targets)");
  const IgnoredTally t = tally_ignored(o, rv);
  if (!t.known || t.ignored == 0) return set(c, Verdict::kNotApplicable, t.none_why), c;
  const double share = double(t.ignored) / double(t.targets);
  c.figures = {{"targets", double(t.targets)},
               {"ignored", double(t.ignored)},
               {"share", share},
               {"all_ignored_batches", double(t.all_ignored)}};
  if (t.all_ignored > 0 || share > kMaxIgnoredShare) {
    set(c, Verdict::kProblem,
        fmt::format("{:.1f}% of targets ignored; {} batches entirely ignored", 100 * share,
                    t.all_ignored));
  } else {
    set(c, Verdict::kOk, fmt::format("{:.1f}% of targets ignored", 100 * share));
  }
  return c;
}

// ------------------------------------------------------------------- hyper-parameters

CheckItem check_lr(const Observed& o) {
  CheckItem c = item("hp.learning_rate", "hyper-parameters",
                     "learning rate inside the LR range test's range");
  if (!o.lr_lo || !o.lr_hi) {
    return set(c, Verdict::kNotApplicable, "no lr_range_test result in the dump"), c;
  }
  if (o.lr.empty()) {
    return set(c, Verdict::kNotApplicable,
               fmt::format("LR range test found [{:.3g}, {:.3g}] but the training learning "
                           "rate was not logged (dbg.log_scalar(\"lr\", v))",
                           *o.lr_lo, *o.lr_hi)),
           c;
  }
  const double peak = *std::max_element(o.lr.begin(), o.lr.end());
  c.figures = {{"lr", peak}, {"range_lo", *o.lr_lo}, {"range_hi", *o.lr_hi}};
  const bool inside = peak >= *o.lr_lo && peak <= *o.lr_hi;
  set(c, inside ? Verdict::kOk : Verdict::kProblem,
      fmt::format("peak training lr {:.3g} is {} the range [{:.3g}, {:.3g}] where loss fell "
                  "fastest",
                  peak, inside ? "inside" : "outside", *o.lr_lo, *o.lr_hi));
  return c;
}

CheckItem check_loss(const Observed& o, const RecordsView& rv) {
  CheckItem c = item("hp.loss_trend", "hyper-parameters", "loss decreasing, not diverging");
  // The logged `loss` scalar; without one, the output of the loss op of each training step.
  const bool logged = !o.loss.empty() || rv.loss.empty();
  const auto& l = logged ? o.loss : rv.loss;
  const std::string from =
      logged ? std::string()
             : fmt::format(" (from the output of {}; dbg.log_scalar(\"loss\", v) chooses another)",
                           rv.loss_op);
  // First and last values, for the verdict `summary` and the report open with.
  std::vector<std::pair<std::string, double>> ends;
  if (!l.empty())
    ends = {{"first_step", double(l.front().first)},
            {"first_value", l.front().second},
            {"last_step", double(l.back().first)},
            {"last_value", l.back().second}};
  c.figures = ends;
  const auto bad =
      std::find_if(l.begin(), l.end(), [](const auto& p) { return !std::isfinite(p.second); });
  if (bad != l.end()) c.figures.emplace_back("nonfinite_step", double(bad->first));
  if (l.size() < kMinLossPoints) {
    return set(c, Verdict::kNotApplicable,
               logged ? fmt::format("{} loss values logged (dbg.log_scalar(\"loss\", v)); need {}",
                                    l.size(), kMinLossPoints)
                      : fmt::format("{} loss values{}; need {}", l.size(), from, kMinLossPoints)),
           c;
  }
  if (bad != l.end()) {
    return set(c, Verdict::kProblem,
               fmt::format("loss is {} at step {}, {:.4g} at step {}{}", bad->second, bad->first,
                           l.front().second, l.front().first, from)),
           c;
  }
  const size_t w = std::max<size_t>(3, l.size() / 5);
  double first = 0, last = 0;
  for (size_t i = 0; i < w; ++i) {
    first += l[i].second / double(w);
    last += l[l.size() - w + i].second / double(w);
  }
  c.figures = {{"points", double(l.size())},
               {"window", double(w)},
               {"first_mean", first},
               {"last_mean", last}};
  c.figures.insert(c.figures.end(), ends.begin(), ends.end());
  const std::string means =
      fmt::format("mean of the first {} values {:.4g}, of the last {} {:.4g} (steps {}..{})", w,
                  first, w, last, l.front().first, l.back().first);
  if (last > first * kDivergeFactor) {
    set(c, Verdict::kProblem, "diverging: " + means + from);
  } else if (last > first * (1 - kMinRelDecrease)) {
    set(c, Verdict::kProblem, "not decreasing: " + means + from);
  } else {
    set(c, Verdict::kOk, means + from);
  }
  return c;
}

// ---------------------------------------------------------------------- API and graph

// Without observe_batch: the `training` argument of batch_norm/instance_norm/dropout ops in
// passes with gradients (training) and without (evaluation).
CheckItem check_mode_records(CheckItem c, const RecordsView& rv, int64_t op_records) {
  if (op_records == 0)
    return set(c, Verdict::kNotApplicable, "no batch observed and no op records"), c;
  if (rv.mode_ops == 0) {
    return set(c, Verdict::kOk,
               fmt::format("no BatchNorm/InstanceNorm/Dropout op in {} op records: the mode does "
                           "not change what the model computes",
                           op_records)),
           c;
  }
  c.figures = {{"train_batches", double(rv.train_passes)},
               {"eval_batches", double(rv.eval_passes)},
               {"eval_in_train_mode", double(rv.eval_in_train)},
               {"train_in_eval_mode", double(rv.train_in_eval)}};
  const std::string from = fmt::format(
      "; from the training argument of {} BatchNorm/InstanceNorm/Dropout ops", rv.mode_ops);
  if (rv.eval_in_train > 0) {
    set(c, Verdict::kProblem,
        fmt::format("{} of {} evaluation passes (gradients off) ran {} in training mode "
                    "(model.eval() missing); first at step {}{}",
                    rv.eval_in_train, rv.eval_passes, rv.first_bad_op, *rv.first_bad_step, from));
  } else if (rv.train_in_eval > 0) {
    set(c, Verdict::kProblem,
        fmt::format("{} of {} training passes (gradients on) ran {} in eval mode (model.train() "
                    "missing); first at step {}{}",
                    rv.train_in_eval, rv.train_passes, rv.first_bad_op, *rv.first_bad_step, from));
  } else {
    set(c, Verdict::kOk,
        fmt::format("{} training passes in train mode, {} evaluation passes in eval mode{}{}",
                    rv.train_passes, rv.eval_passes,
                    rv.eval_passes == 0 ? " (no evaluation pass recorded)" : "", from));
  }
  return c;
}

CheckItem check_mode(const Observed& o, const RecordsView& rv, int64_t op_records) {
  CheckItem c = item("api.train_eval_mode", "api", "train/eval mode");
  if (o.batches.empty()) return check_mode_records(std::move(c), rv, op_records);
  int64_t train = 0, eval = 0, train_in_eval = 0, eval_in_train = 0;
  std::optional<int64_t> first_bad;
  for (const Batch& b : o.batches) {
    if (!b.training || !b.grad) continue;
    const bool stat_train = *b.training || b.stat_modules_training > 0;
    if (*b.grad) {
      ++train;
      if (!*b.training) ++train_in_eval, first_bad = first_bad.value_or(b.step);
    } else {
      ++eval;
      if (stat_train) ++eval_in_train, first_bad = first_bad.value_or(b.step);
    }
  }
  if (train + eval == 0) {
    return set(c, Verdict::kNotApplicable,
               "batches observed but the model's mode not recorded: the debugger was started "
               "without the model (dbg.start(model))"),
           c;
  }
  c.figures = {{"train_batches", double(train)},
               {"eval_batches", double(eval)},
               {"eval_in_train_mode", double(eval_in_train)},
               {"train_in_eval_mode", double(train_in_eval)}};
  if (eval_in_train > 0) {
    set(c, Verdict::kProblem,
        fmt::format("{} of {} evaluation batches (gradients off) ran with the model or its "
                    "BatchNorm/Dropout in training mode; first at step {}",
                    eval_in_train, eval, *first_bad));
  } else if (train_in_eval > 0) {
    set(c, Verdict::kProblem,
        fmt::format("{} of {} training batches ran with the model in eval mode; first at step {}",
                    train_in_eval, train, *first_bad));
  } else {
    set(c, Verdict::kOk,
        fmt::format("{} training batches in train mode, {} evaluation batches in eval mode{}",
                    train, eval, eval == 0 ? " (no evaluation batch observed)" : ""));
  }
  return c;
}

CheckItem check_frozen(const std::vector<GradRecord>& grads) {
  CheckItem c = item("api.frozen_weights", "api", "frozen or unused weights");
  if (grads.empty()) {
    return set(c, Verdict::kNotApplicable, "no gradient monitor records (grads stream)"), c;
  }
  struct P {
    int64_t records = 0, with_grad = 0, moved = 0, first_step = INT64_MAX;
  };
  std::map<std::string, P> ps;
  const int rank = grads.front().rank;
  for (const GradRecord& g : grads) {
    if (g.rank != rank) continue;
    P& p = ps[g.param];
    ++p.records;
    if (g.has_grad && g.grad_norm > 0) ++p.with_grad;
    if (g.update_ratio > 0) ++p.moved;
  }
  std::vector<std::string> no_grad, unchanged;
  for (const auto& [name, p] : ps) {
    if (p.with_grad == 0)
      no_grad.push_back(name);
    else if (p.records >= 2 && p.moved == 0)
      unchanged.push_back(name);
  }
  c.figures = {{"params", double(ps.size())},
               {"no_gradient", double(no_grad.size())},
               {"never_changed", double(unchanged.size())}};
  std::string ev;
  if (!no_grad.empty())
    ev = fmt::format("{} parameters never received a non-zero gradient: {}", no_grad.size(),
                     join_first(no_grad));
  if (!unchanged.empty())
    ev += fmt::format("{}{} parameters never changed: {}", ev.empty() ? "" : "; ", unchanged.size(),
                      join_first(unchanged));
  if (!ev.empty()) {
    set(c, Verdict::kProblem, ev);
  } else {
    set(c, Verdict::kOk,
        fmt::format("all {} parameters received gradients and changed", ps.size()));
  }
  return c;
}

// Without check_initial_model: each weight's statistics and hash where it is first read.
CheckItem check_init_records(CheckItem c, const RecordsView& rv) {
  if (rv.weights == 0) {
    return set(c, Verdict::kNotApplicable,
               rv.params_named
                   ? "no weight (dim >= 2) read by a recorded op"
                   : "no parameter named in the op records (the debugger names them when "
                     "started with the model: dbg.start(model))"),
           c;
  }
  std::vector<std::string> same;
  for (const auto& g : rv.identical) same.push_back(fmt::format("{{{}}}", join_first(g, 4)));
  c.figures = {{"weights", double(rv.weights)},
               {"zero", double(rv.zero.size())},
               {"identical", double(rv.constant.size() + rv.identical.size())}};
  std::string ev;
  if (!rv.zero.empty()) ev = fmt::format("all-zero weights: {}", join_first(rv.zero));
  if (!rv.constant.empty())
    ev += fmt::format("{}weights holding one value (all units identical): {}",
                      ev.empty() ? "" : "; ", join_first(rv.constant));
  if (!same.empty())
    ev += fmt::format("{}parameters identical to each other: {}", ev.empty() ? "" : "; ",
                      join_first(same, 3));
  const std::string from =
      fmt::format(" (from the op records where each is first read, step {})", *rv.init_step);
  if (!ev.empty()) {
    set(c, Verdict::kProblem, ev + from);
  } else {
    set(c, Verdict::kOk,
        fmt::format("{} weight tensors, none zero, constant or identical to another{}", rv.weights,
                    from));
  }
  return c;
}

CheckItem check_init(const Observed& o, const RecordsView& rv) {
  CheckItem c = item("api.init_weights", "api", "weights not zero or identical at start");
  if (!o.init_params) return check_init_records(std::move(c), rv);
  c.figures = {{"weights", *o.init_params},
               {"zero", double(o.init_zero.size())},
               {"identical", double(o.init_identical.size())}};
  std::string ev;
  if (!o.init_zero.empty()) ev = fmt::format("all-zero weights: {}", join_first(o.init_zero));
  if (!o.init_identical.empty())
    ev += fmt::format("{}rows identical across the layer: {}", ev.empty() ? "" : "; ",
                      join_first(o.init_identical));
  if (!ev.empty()) {
    set(c, Verdict::kProblem, ev);
  } else {
    set(c, Verdict::kOk, fmt::format("{} weight tensors checked", *o.init_params));
  }
  return c;
}

uint64_t join_hash(double hi, double lo) {
  return (static_cast<uint64_t>(hi) << 32) | static_cast<uint64_t>(lo);
}

CheckItem check_module_hash(const Observed& o, const ChecklistOptions& options) {
  CheckItem c = item("api.module_hash", "api", "loaded checkpoint matches the expected hash");
  if (!o.hash_hi || !o.hash_lo) {
    return set(c, Verdict::kNotApplicable,
               "module hash not recorded (the first dbg.observe_batch() or "
               "precprobe::check_initial_model(dbg, model) records it)"),
           c;
  }
  const uint64_t actual = join_hash(*o.hash_hi, *o.hash_lo);
  std::optional<uint64_t> expected = options.module_hash;
  if (!expected && o.exp_hi && o.exp_lo) expected = join_hash(*o.exp_hi, *o.exp_lo);
  if (!expected) {
    return set(c, Verdict::kNotApplicable,
               fmt::format("module hash {:016x} at start; no expected hash given "
                           "(dbg.expect_module_hash or --module-hash)",
                           actual)),
           c;
  }
  set(c, actual == *expected ? Verdict::kOk : Verdict::kProblem,
      fmt::format("module hash at start {:016x}, expected {:016x}", actual, *expected));
  return c;
}

// -------------------------------------------------------------------- mixed precision

CheckItem check_overflow(const OverflowResult& r, int64_t op_records) {
  CheckItem c = item("mp.overflow", "mixed precision", "no overflow (NaN/Inf) in the ops");
  if (op_records == 0) return set(c, Verdict::kNotApplicable, "no op records in the dump"), c;
  c.figures = {{"op_records", double(op_records)}};
  if (r.found) {
    set(c, Verdict::kProblem,
        fmt::format("first NaN/Inf produced by {} (rank {}, step {}, seq {})", r.origin.name,
                    r.origin.rank, r.origin.step, r.origin.seq));
  } else if (r.any_nonfinite) {
    set(c, Verdict::kProblem, "NaN/Inf in op inputs, not produced by a recorded op");
  } else {
    set(c, Verdict::kOk, fmt::format("{} op records, all finite", op_records));
  }
  return c;
}

CheckItem check_scaler(const std::vector<ScalerRecord>& scaler, int64_t half_ops) {
  CheckItem c = item("mp.grad_scaler", "mixed precision", "fp16 with a healthy GradScaler");
  c.figures = {{"fp16_ops", double(half_ops)}, {"scaler_records", double(scaler.size())}};
  if (scaler.empty()) {
    if (half_ops > 0) {
      return set(c, Verdict::kProblem,
                 fmt::format("{} ops ran in float16 but no GradScaler records exist", half_ops)),
             c;
    }
    return set(c, Verdict::kNotApplicable, "no float16 ops and no GradScaler records"), c;
  }
  for (const ScalerRecord& r : scaler) {
    if (r.event == "collapse") {
      return set(c, Verdict::kProblem,
                 fmt::format("loss scale collapsed at step {} (scale {:.3g} -> {:.3g})", r.step,
                             r.scale_before, r.scale_after)),
             c;
    }
  }
  set(c, Verdict::kOk,
      fmt::format("{} scaler records, final scale {:.6g}", scaler.size(),
                  scaler.back().scale_after));
  return c;
}

CheckItem check_clip_order(const Observed& o, const std::vector<ScalerRecord>& scaler) {
  CheckItem c = item("mp.clip_before_unscale", "mixed precision",
                     "gradient clipping / penalties on unscaled gradients");
  if (scaler.empty()) return set(c, Verdict::kNotApplicable, "no GradScaler records"), c;
  if (!o.params_named || *o.params_named <= 0) {
    return set(c, Verdict::kNotApplicable,
               "parameters not known to the debugger (call dbg.start(model)), so reads of "
               "their gradients cannot be seen"),
           c;
  }
  c.figures = {{"scaled_reads", double(o.scaled_reads.size())},
               {"scaler_records", double(scaler.size())}};
  if (o.scaled_reads.empty()) {
    set(c, Verdict::kOk,
        fmt::format("no op read a parameter gradient between GradScaler::scale() and unscale_() "
                    "({} scaler records)",
                    scaler.size()));
    return c;
  }
  std::vector<std::string> ops;
  std::set<int64_t> steps;
  for (const auto& r : o.scaled_reads) {
    steps.insert(r.step);
    if (std::find(ops.begin(), ops.end(), r.op) == ops.end()) ops.push_back(r.op);
  }
  const auto& first = o.scaled_reads.front();
  set(c, Verdict::kProblem,
      fmt::format("{} read parameter gradients still multiplied by the loss scale ({:.6g}) in {} "
                  "step(s), first at step {}: clip_grad_norm_ or a gradient penalty before "
                  "scaler.unscale_(optimizer) works on scaled values; call unscale_ first",
                  join_first(ops), first.scale, steps.size(), first.step));
  return c;
}

CheckItem check_replicas(const Observed& o) {
  CheckItem c = item("api.replicas", "api", "replicas identical across ranks");
  const ReplicaSummary& r = o.replicas;
  if (r.checks == 0) {
    return set(c, Verdict::kNotApplicable,
               "no replica checks recorded (\"replica_check_every\" with a process group)"),
           c;
  }
  c.figures = {{"checks", double(r.checks)}, {"failed_checks", double(r.failed_checks)}};
  if (r.failed_checks == 0) {
    set(c, Verdict::kOk,
        fmt::format("{} replica checks, parameters and buffers identical", r.checks));
  } else {
    set(c, Verdict::kProblem,
        fmt::format("{} of {} replica checks found ranks out of sync, first at step {}: {}",
                    r.failed_checks, r.checks, *r.first_failed_step,
                    r.structure_differs ? std::string("ranks hold different parameter lists")
                                        : join_first(r.mismatched)));
  }
  return c;
}

ChecklistResult build(const std::string& path, const std::vector<ScalarRecord>& scalars,
                      const std::vector<GradRecord>& grads, const std::vector<ScalerRecord>& scaler,
                      const OverflowResult& overflow, int64_t op_records, int64_t half_ops,
                      const RecordsView& rv, const ChecklistOptions& options) {
  const Observed o = collect(scalars);
  ChecklistResult r;
  r.path = path;
  r.items = {check_missing(o, rv),
             check_imbalance(o, rv),
             check_normalised(o, rv),
             check_shuffling(o, rv),
             check_ignore_index(o, rv),
             check_lr(o),
             check_loss(o, rv),
             check_mode(o, rv, op_records),
             check_frozen(grads),
             check_init(o, rv),
             check_module_hash(o, options),
             check_replicas(o),
             check_overflow(overflow, op_records),
             check_scaler(scaler, half_ops),
             check_clip_order(o, scaler)};
  return r;
}

bool is_half(const std::vector<Arg>& args) {
  for (const Arg& a : args)
    if (a.tensor && a.tensor->dtype == "Half") return true;
  return false;
}

}  // namespace

std::string_view to_string(Verdict v) noexcept {
  switch (v) {
    case Verdict::kProblem:
      return "problem";
    case Verdict::kOk:
      return "ok";
    case Verdict::kNotApplicable:
      return "n/a";
  }
  return "n/a";
}

bool ChecklistResult::problem() const noexcept {
  return std::any_of(items.begin(), items.end(),
                     [](const CheckItem& c) { return c.verdict == Verdict::kProblem; });
}

const CheckItem* ChecklistResult::find(std::string_view id) const noexcept {
  for (const CheckItem& c : items)
    if (c.id == id) return &c;
  return nullptr;
}

std::vector<const CheckItem*> ChecklistResult::problems_by_cause() const {
  // Causes before symptoms: what is wrong with the data, the model or the API use explains a
  // diverging loss or an overflow, not the other way round.
  static constexpr std::string_view kOrder[] = {"data.missing_values", "data.inputs_not_normalised",
                                                "api.init_weights",    "api.train_eval_mode",
                                                "data.no_shuffling",   "data.class_imbalance",
                                                "data.ignore_index",   "api.module_hash",
                                                "api.replicas",        "api.frozen_weights",
                                                "hp.learning_rate",    "mp.clip_before_unscale",
                                                "mp.grad_scaler",      "mp.overflow",
                                                "hp.loss_trend"};
  auto rank = [](const CheckItem* c) {
    const auto* it = std::find(std::begin(kOrder), std::end(kOrder), c->id);
    return it - std::begin(kOrder);
  };
  std::vector<const CheckItem*> out;
  for (const CheckItem& c : items)
    if (c.verdict == Verdict::kProblem) out.push_back(&c);
  std::stable_sort(out.begin(), out.end(),
                   [&](const CheckItem* a, const CheckItem* b) { return rank(a) < rank(b); });
  return out;
}

nlohmann::json ChecklistResult::to_json() const {
  using analysis_detail::number;
  nlohmann::json items_json = nlohmann::json::array();
  for (const CheckItem& c : items) {
    nlohmann::json figures = nlohmann::json::object();
    for (const auto& [k, v] : c.figures) figures[k] = number(v);
    items_json.push_back({{"id", c.id},
                          {"group", c.group},
                          {"title", c.title},
                          {"verdict", std::string(to_string(c.verdict))},
                          {"evidence", c.evidence},
                          {"figures", figures}});
  }
  nlohmann::json causes = nlohmann::json::array();
  for (const CheckItem* c : problems_by_cause()) causes.push_back(c->id);
  nlohmann::json j = {
      {"path", path}, {"problem", problem()}, {"likely_causes", causes}, {"items", items_json}};
  return j;
}

ChecklistResult run_checklist(const DumpData& data, const ChecklistOptions& options) {
  int64_t half = 0;
  RecordsCollector records;
  for (const OpRecord& op : data.ops) {
    if (is_half(op.inputs) || is_half(op.outputs)) ++half;
    records.add(op);
  }
  return build("", data.scalars, data.grads, data.scaler, find_overflow(data),
               static_cast<int64_t>(data.ops.size()), half, records.finish(), options);
}

ChecklistResult run_checklist(DumpReader& reader, const ChecklistOptions& options,
                              const ReadOptions& read) {
  const std::vector<ScalarRecord> scalars = reader.scalars(read.filter);
  const std::vector<GradRecord> grads = reader.grads(read.filter);
  const std::vector<ScalerRecord> scaler = reader.scaler(read.filter);
  int64_t ops = 0, half = 0;
  RecordsCollector records;
  reader.for_each_op(read.filter, [&](const OpRecord& op) {
    ++ops;
    if (is_half(op.inputs) || is_half(op.outputs)) ++half;
    records.add(op);
    if (read.progress && ops % 4096 == 0) read.progress(static_cast<uint64_t>(ops));
    return true;
  });
  const OverflowResult overflow = ops > 0 ? find_overflow(reader, read) : OverflowResult{};
  ChecklistResult r =
      build(reader.path(), scalars, grads, scaler, overflow, ops, half, records.finish(), options);
  return r;
}

}  // namespace precprobe
