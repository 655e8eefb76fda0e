// The op watchpoints' evaluator (precprobe/op_watch.h; docs/watchpoints.md): each watched op
// output against the history of the same op (its record name: op, call index, direction),
// hits per (module, watchpoint) episode. Fed live by the DumpWriter and after the fact by
// watch_dump(): one code path, so the two agree hit for hit.
#include "precprobe/op_watch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <unordered_map>
#include <utility>

#include "masking.h"
#include "modules.h"
#include "op_watch_pass.h"
#include "precprobe/dump_format.h"
#include "precprobe/error.h"
#include "precprobe/reader.h"

namespace precprobe {
namespace {

using analysis_detail::ModuleAttributor;
using analysis_detail::ModuleOrder;

bool is_floating(const std::string& dtype) {
  return dtype == "Float" || dtype == "Double" || dtype == "Half" || dtype == "BFloat16" ||
         dtype.compare(0, 6, "Float8") == 0;
}

enum class Family { kOther, kRelu, kSigmoid, kTanh };

Family family(const std::string& op) {
  if (op == "aten::relu" || op == "aten::relu_" || op == "aten::relu6" || op == "aten::threshold" ||
      op == "aten::threshold_")
    return Family::kRelu;
  if (op == "aten::sigmoid" || op == "aten::sigmoid_") return Family::kSigmoid;
  if (op == "aten::tanh" || op == "aten::tanh_") return Family::kTanh;
  return Family::kOther;
}

// The last `cap` values of one statistic of one op.
class Ring {
 public:
  void push(double x, size_t cap) {
    if (v_.size() < cap) {
      v_.push_back(x);
    } else {
      v_[next_] = x;
      next_ = (next_ + 1) % cap;
    }
  }
  size_t size() const { return v_.size(); }
  double min() const { return *std::min_element(v_.begin(), v_.end()); }
  double max() const { return *std::max_element(v_.begin(), v_.end()); }
  // The lower median (an element of the history, as the gradient watchpoints take it).
  double median() const {
    std::vector<double> c = v_;
    auto mid = c.begin() + static_cast<std::ptrdiff_t>((c.size() - 1) / 2);
    std::nth_element(c.begin(), mid, c.end());
    return *mid;
  }

 private:
  std::vector<double> v_;
  size_t next_ = 0;
};

struct Site {
  Ring max_abs, norm, fraction;
  bool had_nonzero = false;
  int64_t run = 0;  // observations in a row with the fraction at or above its threshold
};

std::string num(double v) { return fmt::format("{:.4g}", v); }

// activation_dead_fraction, activation_saturated: the share of the output still alive must
// have fallen under its median share divided by this.
constexpr double kAliveFactor = 4;

}  // namespace

std::optional<double> dtype_max(const std::string& dtype) {
  if (dtype == "float16" || dtype == "half") return 65504.0;
  if (dtype == "bfloat16") return 3.3895313892515355e38;
  if (dtype == "float8_e4m3fn") return 448.0;
  if (dtype == "float8_e5m2") return 57344.0;
  return std::nullopt;
}

struct OpWatcher::Impl {
  OpWatchOptions o;
  ModuleOrder order;
  std::optional<double> dtype_bound;
  int64_t step = std::numeric_limits<int64_t>::min();
  ModuleAttributor attribute;
  analysis_detail::MaskTracker masks;  // a mask's -inf is no tensor_overflow
  std::unordered_map<std::string, Site> sites;
  std::map<std::pair<std::string, std::string>, int64_t> held;  // (module, watch) -> last step

  struct Candidate {
    const char* watch;
    double value, threshold;
    std::string detail;
  };
  // The conditions an op met, judged when it came, held until its module is known (an op
  // that reads no parameter is placed by the next one that does: modules.h).
  struct Judged {
    uint64_t index;  // of the op among those given to `attribute` this step
    int64_t step, seq;
    int rank;
    std::string record, op;
    std::vector<Candidate> found;
  };
  std::deque<Judged> judged;
  uint64_t added = 0, placed = 0;  // ops given to `attribute` this step, and placed

  void observe(const OpRecord& r, std::vector<OpWatchHit>& hits);
  void judge(const OpRecord& r, analysis_detail::MaskRole role, std::vector<Candidate>& found);
  void judge_fraction(Site& s, double frac, double thr, int64_t steps, const char* watch,
                      const char* what, std::vector<Candidate>& out);
  // The hits of the ops whose module is now known, in op order.
  void place(std::vector<OpWatchHit>& hits);
  void end_step(std::vector<OpWatchHit>& hits);
};

void OpWatcher::Impl::judge_fraction(Site& s, double frac, double thr, int64_t steps,
                                     const char* watch, const char* what,
                                     std::vector<Candidate>& out) {
  s.run = frac >= thr ? s.run + 1 : 0;
  if (s.run >= steps && s.fraction.size() >= static_cast<size_t>(o.warmup)) {
    // Out of line with its own history: the share still alive (not at zero, not at a bound)
    // under a quarter of its median share. A ReLU that lives at 94 % zeros (a VAE's encoder
    // on a sparse input) is its own normal at 95 %; one that lived at 50 % is dying.
    const double med = s.fraction.median();
    if (med < thr && (1 - frac) * kAliveFactor <= 1 - med)
      out.push_back({watch, frac, thr,
                     fmt::format("{} {:.1f} % of the output, >= {:.1f} % on {} steps in a row; "
                                 "its median {:.1f} %",
                                 what, 100 * frac, 100 * thr, s.run, 100 * med)});
  }
  s.fraction.push(frac, static_cast<size_t>(o.median_window));
}

void OpWatcher::Impl::observe(const OpRecord& r, std::vector<OpWatchHit>& hits) {
  const analysis_detail::MaskRole role = masks.observe(r);
  if (r.background) return;
  if (r.step != step) {
    end_step(hits);
    step = r.step;
  }
  attribute.add(analysis_detail::module_op(r));
  const uint64_t index = added++;
  std::vector<Candidate> found;
  if (r.dir == Direction::kForward && r.grad != std::optional<bool>(false)) judge(r, role, found);
  if (!found.empty())
    judged.push_back({index, r.step, r.seq, r.rank, r.name(), r.op, std::move(found)});
  place(hits);
}

void OpWatcher::Impl::place(std::vector<OpWatchHit>& hits) {
  while (attribute.ready()) {
    const std::string module = attribute.take();
    const uint64_t index = placed++;
    if (judged.empty() || judged.front().index != index) continue;
    Judged& j = judged.front();
    for (Candidate& c : j.found) {
      auto [it, fresh] = held.try_emplace({module, c.watch}, j.step);
      const bool starts = fresh || it->second < j.step - 1;
      it->second = j.step;
      if (!starts) continue;
      OpWatchHit h;
      h.step = j.step;
      h.name = std::string(kWatchEventName);
      h.value = c.value;
      h.watch = c.watch;
      h.module = module;
      h.record = j.record;
      h.op = j.op;
      h.seq = j.seq;
      h.threshold = c.threshold;
      h.detail = std::move(c.detail);
      h.rank = j.rank;
      hits.push_back(std::move(h));
    }
    judged.pop_front();
  }
}

void OpWatcher::Impl::end_step(std::vector<OpWatchHit>& hits) {
  attribute.end_step();
  place(hits);
  attribute = ModuleAttributor(order.empty() ? nullptr : &order);
  judged.clear();  // (placed above: every op of an ended step is)
  added = placed = 0;
}

void OpWatcher::Impl::judge(const OpRecord& r, analysis_detail::MaskRole role,
                            std::vector<Candidate>& found) {
  if (r.outputs.empty() || !r.outputs[0].is_tensor() || r.outputs_uninitialized()) return;
  const TensorStats& t = *r.outputs[0].tensor;
  if (!t.requires_grad || !is_floating(t.dtype) || t.numel <= 0) return;

  const std::string name = r.name();
  Site& s = sites[name];
  const auto window = static_cast<size_t>(o.median_window);
  const auto warmup = static_cast<size_t>(o.warmup);
  const double amax = t.abs_max();
  const double finite_nonzero = static_cast<double>(t.pos + t.neg);

  if (o.tensor_overflow && t.non_finite() > 0 && !analysis_detail::is_masking(role))
    found.push_back(
        {"tensor_overflow", static_cast<double>(t.non_finite()), 0,
         fmt::format("{} NaN, {} +Inf, {} -Inf of {} elements", t.nan, t.pinf, t.ninf, t.numel)});
  if (o.tensor_all_zero && t.zero == t.numel && s.had_nonzero)
    found.push_back(
        {"tensor_all_zero", static_cast<double>(t.numel), 0,
         fmt::format("all {} elements are 0; this op's earlier outputs were not", t.numel)});
  if (finite_nonzero > 0) {
    if (o.tensor_too_large_factor && s.max_abs.size() >= warmup &&
        amax > *o.tensor_too_large_factor * s.max_abs.min()) {
      const double bound = *o.tensor_too_large_factor * s.max_abs.median();
      if (bound > 0 && amax > bound)
        found.push_back({"tensor_too_large", amax, bound,
                         fmt::format("max |x| {} > {} x its median {}", num(amax),
                                     num(*o.tensor_too_large_factor), num(s.max_abs.median()))});
    }
    if (o.tensor_too_large_abs && amax > *o.tensor_too_large_abs)
      found.push_back({"tensor_too_large", amax, *o.tensor_too_large_abs,
                       fmt::format("max |x| {} > {}", num(amax), num(*o.tensor_too_large_abs))});
    if (o.tensor_too_small_factor && s.norm.size() >= warmup &&
        t.norm < s.norm.max() / *o.tensor_too_small_factor) {
      const double bound = s.norm.median() / *o.tensor_too_small_factor;
      if (t.norm < bound)
        found.push_back({"tensor_too_small", t.norm, bound,
                         fmt::format("norm {} < its median {} / {}", num(t.norm),
                                     num(s.norm.median()), num(*o.tensor_too_small_factor))});
    }
    if (o.tensor_too_small_abs && t.norm < *o.tensor_too_small_abs)
      found.push_back({"tensor_too_small", t.norm, *o.tensor_too_small_abs,
                       fmt::format("norm {} < {}", num(t.norm), num(*o.tensor_too_small_abs))});
    if (o.range_max && t.max > *o.range_max)
      found.push_back({"tensor_range", t.max, *o.range_max,
                       fmt::format("max {} > range_max {}", num(t.max), num(*o.range_max))});
    if (o.range_min && t.min < *o.range_min)
      found.push_back({"tensor_range", t.min, *o.range_min,
                       fmt::format("min {} < range_min {}", num(t.min), num(*o.range_min))});
    if (dtype_bound && amax > *dtype_bound)
      found.push_back({"tensor_range", amax, *dtype_bound,
                       fmt::format("max |x| {} > {}'s largest value {}", num(amax), o.range_dtype,
                                   num(*dtype_bound))});
  }
  const Family fam = family(r.op);
  const double numel = static_cast<double>(t.numel);
  if (fam == Family::kRelu && o.activation_dead_fraction)
    judge_fraction(s, static_cast<double>(t.zero) / numel, *o.activation_dead_fraction,
                   o.activation_dead_steps, "activation_dead_fraction", "zeros:", found);
  if ((fam == Family::kSigmoid || (fam == Family::kTanh && t.has_range)) &&
      o.activation_saturated) {
    // |x| == 1 exactly is the range bin of exponent 0 (an output of sigmoid or tanh is at
    // most 1 in magnitude); a sigmoid's exact 0s are its zero count.
    double at_bounds = fam == Family::kSigmoid ? static_cast<double>(t.zero) : 0;
    for (const auto& [e, count] : t.range)
      if (e == 0) at_bounds += static_cast<double>(count);
    judge_fraction(s, at_bounds / numel, *o.activation_saturated, o.activation_saturated_steps,
                   "activation_saturated", "at its bounds:", found);
  }

  if (finite_nonzero > 0) {
    s.had_nonzero = true;
    s.max_abs.push(amax, window);
    if (t.norm > 0) s.norm.push(t.norm, window);
  }
}

OpWatcher::OpWatcher(OpWatchOptions options) : impl_(std::make_unique<Impl>()) {
  options.validate();
  impl_->o = std::move(options);
  impl_->dtype_bound = dtype_max(impl_->o.range_dtype);
}

OpWatcher::~OpWatcher() = default;

void OpWatcher::set_modules(const RunMeta& meta) { impl_->order = ModuleOrder::of(meta); }

void OpWatcher::observe(const OpRecord& r, std::vector<OpWatchHit>& hits) noexcept {
  if (!impl_->o.enable) return;
  try {
    impl_->observe(r, hits);
  } catch (...) {  // bad_alloc: this record's hits are lost, the run goes on
  }
}

void OpWatcher::end_step(std::vector<OpWatchHit>& hits) noexcept {
  if (!impl_->o.enable) return;
  try {
    impl_->end_step(hits);
    impl_->step = std::numeric_limits<int64_t>::min();
  } catch (...) {  // bad_alloc: the waiting ops' hits are lost
  }
}

const OpWatchOptions& OpWatcher::options() const noexcept { return impl_->o; }

namespace analysis_detail {

WatchReportBuilder::WatchReportBuilder(const std::vector<RankInfo>& ranks,
                                       const OpWatchOptions& options, bool live) {
  rep_.live = live;
  rep_.options = options;
  for (const RankInfo& rank : ranks) watcher(rank.rank).set_modules(rank.run_meta());
}

WatchReportBuilder WatchReportBuilder::for_dump(DumpReader& reader,
                                                const std::optional<OpWatchOptions>& options) {
  const std::optional<OpWatchOptions> used = recorded_watch_options(reader);
  OpWatchOptions o = options ? *options : used ? *used : OpWatchOptions{};
  if (!options && used && !used->enable) o.enable = true;  // judged after the fact
  return WatchReportBuilder(reader.ranks(), o, used.has_value() && used->enable);
}

OpWatcher& WatchReportBuilder::watcher(int rank) {
  auto& w = watchers_[rank];
  if (!w) w = std::make_unique<OpWatcher>(rep_.options);
  return *w;
}

void WatchReportBuilder::add(const OpRecord& r) {
  watcher(r.rank).observe(r, hits_[r.rank]);
  if (is_masking(masks_.observe(r)) || !r.outputs_non_finite()) return;
  const std::pair<int64_t, int64_t> at{r.step, r.seq};
  if (!first_bad_ || at < *first_bad_) {
    first_bad_ = at;
    rep_.first_nonfinite_op = r.name();
  }
}

WatchReport WatchReportBuilder::finish(std::vector<OpWatchHit> recorded) {
  for (auto& [rank, w] : watchers_) w->end_step(hits_[rank]);
  WatchReport rep = rep_;
  for (auto& [rank, hits] : hits_) rep.hits.insert(rep.hits.end(), hits.begin(), hits.end());
  rep.recorded = std::move(recorded);
  if (first_bad_) rep.first_nonfinite_step = first_bad_->first;
  // The early warning: the first hit other than tensor_overflow at or before the first NaN/Inf.
  for (const OpWatchHit& h : rep.hits) {
    if (h.watch == "tensor_overflow") continue;
    if (rep.first_nonfinite_step && h.step > *rep.first_nonfinite_step) continue;
    if (!rep.early || h.step < rep.early->step) rep.early = h;
  }
  return rep;
}

}  // namespace analysis_detail

namespace {

WatchReport watch_pass(DumpReader& reader, const std::optional<OpWatchOptions>& options,
                       bool with_recorded) {
  auto b = analysis_detail::WatchReportBuilder::for_dump(reader, options);
  reader.for_each_op({}, [&](const OpRecord& r) {
    b.add(r);
    return true;
  });
  return b.finish(with_recorded ? reader.watch_hits() : std::vector<OpWatchHit>{});
}

}  // namespace

std::vector<OpWatchHit> watch_dump(DumpReader& reader, const OpWatchOptions& options) {
  return watch_pass(reader, options, false).hits;
}

std::optional<OpWatchOptions> recorded_watch_options(DumpReader& reader) {
  if (reader.ranks().empty()) return std::nullopt;
  const RunMeta meta = reader.ranks().front().run_meta();
  if (!meta.config.is_object() || !meta.config.contains("watch")) return std::nullopt;
  try {
    return OpWatchOptions::from_json_value(meta.config["watch"], "meta.json config.watch");
  } catch (const Error&) {
    return std::nullopt;  // a newer writer's keys: judged with the defaults
  }
}

WatchReport watch_report(DumpReader& reader, const std::optional<OpWatchOptions>& options) {
  return watch_pass(reader, options, true);
}

int64_t WatchReport::steps_earlier() const noexcept {
  return early && first_nonfinite_step ? *first_nonfinite_step - early->step : 0;
}

bool WatchReport::same_as_live() const { return recorded == hits; }

nlohmann::json watch_hit_json(const OpWatchHit& h) {
  return {{"step", h.step},           {"rank", h.rank},    {"module", h.module}, {"watch", h.watch},
          {"record", h.record},       {"op", h.op},        {"seq", h.seq},       {"value", h.value},
          {"threshold", h.threshold}, {"detail", h.detail}};
}

nlohmann::json WatchReport::to_json() const {
  nlohmann::json j;
  j["hits"] = nlohmann::json::array();
  for (const OpWatchHit& h : hits) j["hits"].push_back(watch_hit_json(h));
  j["recorded"] = recorded.size();
  j["live"] = live;
  j["same_as_live"] = live ? nlohmann::json(same_as_live()) : nlohmann::json(nullptr);
  j["first_nonfinite_step"] =
      first_nonfinite_step ? nlohmann::json(*first_nonfinite_step) : nlohmann::json(nullptr);
  j["first_nonfinite_op"] =
      first_nonfinite_op ? nlohmann::json(*first_nonfinite_op) : nlohmann::json(nullptr);
  j["early"] = early ? watch_hit_json(*early) : nlohmann::json(nullptr);
  j["steps_earlier"] =
      early && first_nonfinite_step ? nlohmann::json(steps_earlier()) : nlohmann::json(nullptr);
  j["options"] = options.to_json_value();
  return j;
}

}  // namespace precprobe
