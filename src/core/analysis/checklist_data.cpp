// The checklist's data items (precprobe/checklist.h): missing values, class imbalance,
// normalisation, shuffling, the ignore index. Rules and thresholds: docs/checklist.md.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "checklist_items.h"

namespace precprobe::checklist_detail {

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

// Pooled over batches (or steps): mean of means; variance = mean of variances + variance of
// the means.
std::pair<double, double> pooled(const std::vector<std::pair<double, double>>& mean_std) {
  const double n = double(mean_std.size());
  double m = 0, var_in = 0;
  for (const auto& [mean, sd] : mean_std) {
    m += mean / n;
    var_in += sd * sd / n;
  }
  double var_between = 0;
  for (const auto& p : mean_std) var_between += (p.first - m) * (p.first - m) / n;
  return {m, std::sqrt(var_in + var_between)};
}

double rms_of(double mean, double sd) { return std::sqrt(mean * mean + sd * sd); }

bool standardised(double m, double sd) {
  return std::fabs(m) <= kMaxAbsMean && sd >= kMinStd && sd <= kMaxStd;
}

// Why inputs within kMaxRms train: standardised, [0, 1] values, or how far off they are.
std::string unit_scale_note(double m, double sd, bool zero_one) {
  if (standardised(m, sd)) return "standardised (mean ~0, std ~1)";
  const std::string off = sd > 0 ? fmt::format("mean {:.3g} is {:.2g} std off centre, std {:.3g}",
                                               m, std::fabs(m) / sd, sd)
                                 : fmt::format("mean {:.3g}, std 0", m);
  return fmt::format(
      "{}not standardised ({}) but on the unit scale (root mean square {:.3g} <= {}): not a "
      "problem; standardising would centre them, it rarely changes the result",
      zero_one ? "values in [0, 1], " : "", off, rms_of(m, sd), kMaxRms);
}

// Without observe_batch: the whole input tensor per step, pooled like the channels.
CheckItem check_normalised_records(CheckItem c, const RecordsView& rv) {
  if (rv.inputs.empty()) return set(c, Verdict::kNotApplicable, kNoInput), c;
  const auto v = judged_inputs(rv);
  std::vector<std::pair<double, double>> mean_std;
  double abs_max = 0, lo = INFINITY, hi = -INFINITY;
  for (const auto& in : v) {
    mean_std.emplace_back(in.mean, in.std);
    abs_max = std::max(abs_max, in.abs_max);
    lo = std::min(lo, in.min);
    hi = std::max(hi, in.max);
  }
  const auto [m, sd] = pooled(mean_std);
  const double rms = rms_of(m, sd);
  c.figures = {{"mean", m},  {"std", sd}, {"abs_max", abs_max}, {"steps", double(v.size())},
               {"rms", rms}, {"min", lo}, {"max", hi}};
  const std::string seen = fmt::format(
      "mean {:.3g}, std {:.3g}, largest |x| {:.3g}; from {} "
      "(per channel with dbg.observe_batch)",
      m, sd, abs_max, input_source(rv));
  if (rms > kMaxRms) {
    set(c, Verdict::kProblem,
        fmt::format("inputs far from the unit scale: root mean square {:.3g} > {} ({}): the "
                    "first layer's outputs and its weights' gradients grow with the inputs; "
                    "divide by the range (pixels: / 255) or standardise",
                    rms, kMaxRms, seen));
  } else {
    set(c, Verdict::kOk,
        fmt::format("inputs {}: {}", unit_scale_note(m, sd, lo >= 0 && hi <= 1), seen));
  }
  return c;
}

CheckItem check_normalised(const Observed& o, const RecordsView& rv) {
  CheckItem c = item("data.inputs_not_normalised", "data",
                     "inputs on the unit scale (not raw values, features of one magnitude)");
  if (o.batches.empty()) return check_normalised_records(std::move(c), rv);
  std::map<int64_t, std::vector<std::pair<double, double>>> per_channel;
  for (const Batch& b : o.batches)
    for (const auto& [ch, ms] : b.channels) per_channel[ch].push_back(ms);
  if (per_channel.empty()) {
    return set(c, Verdict::kNotApplicable,
               o.batches.empty() ? kNoBatches : "no floating-point input statistics observed"),
           c;
  }
  std::vector<std::pair<double, std::string>> off;  // (rms, text) beyond kMaxRms
  std::string shown;
  bool all_standardised = true;
  double rms_max = 0, rms_min = INFINITY;
  int64_t min_ch = 0, max_ch = 0;
  for (const auto& [ch, v] : per_channel) {
    const auto [m, sd] = pooled(v);
    const double rms = rms_of(m, sd);
    const std::string s = fmt::format("ch{} mean {:.3g} std {:.3g}", ch, m, sd);
    if (rms > kMaxRms) off.emplace_back(rms, s);
    all_standardised = all_standardised && standardised(m, sd);
    if (rms > rms_max) rms_max = rms, max_ch = ch;
    if (rms > 0 && rms < rms_min) rms_min = rms, min_ch = ch;  // a constant 0 carries nothing
    if (ch < 4) shown += (shown.empty() ? "" : "; ") + s;
    if (ch == per_channel.begin()->first) c.figures = {{"mean_ch0", m}, {"std_ch0", sd}};
  }
  const double spread = rms_min < INFINITY ? rms_max / rms_min : 1.0;
  // The largest first: the feature to fix first.
  std::stable_sort(off.begin(), off.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> bad;
  for (auto& entry : off) bad.push_back(std::move(entry.second));
  c.figures.emplace_back("channels", double(per_channel.size()));
  c.figures.emplace_back("channels_off", double(bad.size()));
  c.figures.emplace_back("rms_max", rms_max);
  c.figures.emplace_back("spread", spread);
  if (!bad.empty()) {
    set(c, Verdict::kProblem,
        fmt::format("{} of {} channels far from the unit scale (root mean square > {}): {}; "
                    "divide by the range (pixels: / 255) or standardise",
                    bad.size(), per_channel.size(), kMaxRms, join_first(bad, 3)));
  } else if (spread > kMaxChannelSpread) {
    set(c, Verdict::kProblem,
        fmt::format("features span orders of magnitude: ch{} is {:.3g}x the size of ch{} (root "
                    "mean square {:.3g} vs {:.3g}, more than {}x); standardise each feature",
                    max_ch, spread, min_ch, rms_max, rms_min, kMaxChannelSpread));
  } else if (per_channel.size() == 1) {
    const auto [m, sd] = pooled(per_channel.begin()->second);
    set(c, Verdict::kOk, fmt::format("inputs {}: {}", unit_scale_note(m, sd, false), shown));
  } else if (all_standardised) {
    set(c, Verdict::kOk,
        fmt::format("{} channels standardised (mean ~0, std ~1): {}", per_channel.size(), shown));
  } else {
    set(c, Verdict::kOk,
        fmt::format("{} channels not all standardised but on the unit scale (root mean square "
                    "<= {:.3g}, at most {}), within {:.3g}x of each other: not a problem "
                    "(standardising would centre them, it rarely changes the result): {}",
                    per_channel.size(), rms_max, kMaxRms, spread, shown));
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

}  // namespace precprobe::checklist_detail
