// analyse_precision: which ops and modules fit a low-precision format, from the range
// statistics of one run (include/precprobe/precision.h; the model is in docs/precision.md).
//
// Every output tensor with range statistics is classified twice when it is read: as it is
// and scaled by its own power of two (per-tensor scaling differs per tensor and step, so it
// cannot be applied to sums later). Each op record name also keeps the sum of its
// histograms and its largest |x|, from which any uniform scale (a loss scale: a power of two)
// is applied exactly at the end: a binade moves by whole steps under a power of two.
#include "precprobe/precision.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "json_util.h"
#include "masking.h"
#include "modules.h"
#include "precprobe/error.h"
#include "source.h"

namespace precprobe {

namespace {

constexpr double kMaxFlushShare = 0.001;  // "lose no more than 0.1 % of non-zero elements"
constexpr int kBins = kRangeMaxExponent - kRangeMinExponent + 1;
// The recommended loss scale stays this many binades below the largest that does not overflow.
constexpr int kHeadroomBinades = 3;
// Loss scales considered: 2^-64 .. 2^64.
constexpr int kMinScaleExp = -64, kMaxScaleExp = 64;

const FloatFormat kFormats[] = {
    // max + half an ulp of the top binade: 65504 + 16, (2 - 2^-7) 2^127 + 2^119, 448 + 16,
    // 57344 + 4096.
    // The largest codes: fp16 0x7bff, bf16 0x7f7f, e5m2 0x7b are odd (a tie at the threshold
    // rounds to Inf); e4m3's 0x7e is even (0x7f is NaN: a tie rounds down to 448).
    {"fp16", "IEEE binary16", 65504.0, -14, -24, 65520.0, true},
    {"bf16", "bfloat16", 0x1.fep127, -126, -133, 0x1.ffp127, true},
    {"e4m3", "OCP FP8 E4M3FN", 448.0, -6, -9, 464.0, false},
    {"e5m2", "OCP FP8 E5M2", 57344.0, -14, -16, 61440.0, true},
};

// floor(log2(x)) for a positive finite x.
int binade_of(double x) {
  int e = 0;
  std::frexp(x, &e);
  return e - 1;
}

int verdict_rank(PrecisionVerdict v) { return static_cast<int>(v); }

}  // namespace

const FloatFormat* FloatFormat::find(std::string_view name) noexcept {
  for (const FloatFormat& f : kFormats)
    if (f.name == name) return &f;
  return nullptr;
}

std::string_view to_string(PrecisionVerdict v) noexcept {
  switch (v) {
    case PrecisionVerdict::kFits:
      return "fits";
    case PrecisionVerdict::kFitsWithScaling:
      return "fits_with_scaling";
    default:
      return "keep_fp32";
  }
}

RangeCounts classify_range(const std::vector<std::pair<int32_t, int64_t>>& range, double abs_max,
                           int shift, const FloatFormat& format) noexcept {
  RangeCounts c;
  const int top = binade_of(format.overflow_threshold);  // the threshold's own binade
  // Round to nearest: |x| <= 2^(s-1) rounds to zero (the tie too), so the binades up to
  // s - 2 flush and binade s - 1 rounds up to the smallest subnormal 2^s.
  const int flush_below = format.min_subnormal_exponent - 1;
  const double scaled_max = std::ldexp(abs_max, shift);
  c.any_overflow =
      std::isfinite(scaled_max) ? format.overflows(scaled_max) : std::isinf(scaled_max);
  for (const auto& [exponent, count] : range) {
    const int e = exponent + shift;
    c.elements += count;
    if (e > top) {
      c.overflow += count;
    } else if (e < flush_below) {
      c.flush_to_zero += count;
    } else if (e < format.min_normal_exponent) {
      c.subnormal += count;
    }
  }
  // Inside the threshold's own binade only |max| is known: at least it overflows.
  if (c.any_overflow && c.overflow == 0) c.overflow = 1;
  return c;
}

int tensor_scale_shift(double abs_max, const FloatFormat& format) noexcept {
  if (!(abs_max > 0) || !std::isfinite(abs_max)) return 0;
  int k = binade_of(format.max) - binade_of(abs_max);
  if (std::ldexp(abs_max, k) > format.max) --k;
  return k;
}

namespace {

struct Tally {
  int64_t elements = 0, overflow = 0, subnormal = 0, flush = 0;
  void add(const RangeCounts& c) {
    elements += c.elements;
    overflow += c.overflow;
    subnormal += c.subnormal;
    flush += c.flush_to_zero;
  }
  void add(const Tally& t) {
    elements += t.elements;
    overflow += t.overflow;
    subnormal += t.subnormal;
    flush += t.flush;
  }
  bool fits() const { return overflow == 0 && flush <= kMaxFlushShare * double(elements); }
  PrecisionShares shares() const {
    if (elements == 0) return {};
    const double n = static_cast<double>(elements);
    return {overflow / n, subnormal / n, flush / n};
  }
};

// Sum of histograms over all steps, and the largest |x|.
struct Histogram {
  std::vector<int64_t> bins;  // bin i: exponent kRangeMinExponent + i; allocated on first use
  double abs_max = 0;
  void add(const std::vector<std::pair<int32_t, int64_t>>& range, double amax) {
    if (bins.empty()) bins.assign(kBins, 0);
    for (const auto& [e, count] : range) bins[static_cast<size_t>(e - kRangeMinExponent)] += count;
    if (std::isfinite(amax)) abs_max = std::max(abs_max, amax);
  }
  RangeCounts at_shift(int shift, const FloatFormat& f) const {
    std::vector<std::pair<int32_t, int64_t>> sparse;
    for (size_t i = 0; i < bins.size(); ++i)
      if (bins[i] != 0) sparse.emplace_back(static_cast<int32_t>(i) + kRangeMinExponent, bins[i]);
    return classify_range(sparse, abs_max, shift, f);
  }
};

struct OpAccumulator {
  OpPrecision op;
  bool in_graph = false;  // a backward op, or a forward op with an output requiring grad
  bool has_module = false;
  Tally unscaled, scaled;
  Histogram hist;
};

class PrecisionBuilder {
 public:
  PrecisionBuilder(const PrecisionOptions& options, PrecisionResult& out,
                   std::map<int, analysis_detail::ModuleOrder> orders)
      : format_(*options.format), out_(out), orders_(std::move(orders)) {}

  void add(const OpRecord& r) {
    ++out_.op_records;
    if (module_step_ && (r.rank != rank_ || r.step != step_)) {
      flush_step();
      mask_fills_.clear();
    }
    module_step_ = true;
    rank_ = r.rank;
    step_ = r.step;
    out_.step_min = std::min(out_.step_min.value_or(r.step), r.step);
    out_.step_max = std::max(out_.step_max.value_or(r.step), r.step);
    pending_.push_back({r.seq, analysis_detail::module_op(r), std::string(), {}});
    if (std::optional<double> fill = analysis_detail::mask_fill_value(r)) mask_fills_.insert(*fill);
    if (r.outputs_uninitialized()) return;
    Pending& p = pending_.back();
    std::vector<const TensorStats*> judged;
    bool passes_on = true;
    for (const Arg& a : r.outputs) {
      if (!a.is_tensor() || !is_floating(a.tensor->dtype)) continue;
      const TensorStats& t = *a.tensor;
      if (!t.has_range) {
        ++out_.tensors_without_range;
        continue;
      }
      ++out_.tensors_with_range;
      judged.push_back(&t);
      passes_on = passes_on && equals_an_input(t, r);
    }
    if (judged.empty()) return;
    p.name = r.name();
    if (passes_on) {  // a view, a copy, detach: the values are judged where they were made
      passing_on_.insert(p.name);
      return;
    }
    OpAccumulator& acc = op_for(r);
    for (const Arg& a : r.outputs) acc.in_graph |= a.is_tensor() && a.tensor->requires_grad;
    acc.in_graph |= r.dir == Direction::kBackward;
    for (const TensorStats* t : judged) {
      std::vector<std::pair<int32_t, int64_t>> unmasked;
      const bool masked = without_mask(*t, unmasked);
      const std::vector<std::pair<int32_t, int64_t>>& range = masked ? unmasked : t->range;
      const double amax = masked ? unmasked_abs_max(*t, range) : t->abs_max();
      acc.unscaled.add(classify_range(range, amax, 0, format_));
      acc.scaled.add(classify_range(range, amax, tensor_scale_shift(amax, format_), format_));
      acc.op.overflows |= classify_range({}, amax, 0, format_).any_overflow;
      ++acc.op.tensors;
      acc.hist.add(range, amax);
      // The gradient of the (0-dim) loss itself is the loss scale, kept in fp32.
      if (r.dir == Direction::kBackward && !t->shape.empty())
        p.gradients.push_back({t->range, amax});
    }
  }

  void note_scaler(const ScalerRecord& r) {
    if (std::isfinite(r.scale_before) && (r.scale_before < 1.0 || r.scale_before > 1.0))
      scaled_records_ = true;
  }

  void finish() {
    flush_step();
    out_.ops_passing_on = 0;
    for (const std::string& name : passing_on_) out_.ops_passing_on += index_.count(name) == 0;
    if (out_.tensors_with_range == 0) {
      throw Error(
          "no range statistics in " + out_.path +
          ": the dump was recorded without them (or before precprobe had them); record with "
          "\"statistics\": {\"range\": true} in the config");
    }
    if (scaled_records_)
      out_.notes.push_back(
          "this run used a loss scale: its backward values were recorded multiplied by it, and "
          "the loss scales here are relative to that one");
    drop_outside_graph();
    advise_loss_scale();
    judge_ops();
    build_modules();
  }

 private:
  struct Gradient {
    std::vector<std::pair<int32_t, int64_t>> range;
    double abs_max;
  };
  struct Pending {
    int64_t seq;
    analysis_detail::ModuleOp module;
    std::string name;                 // "" when the op has no output with range statistics
    std::vector<Gradient> gradients;  // backward outputs judged
  };

  static bool is_floating(const std::string& dtype) {
    return dtype == "Float" || dtype == "Double" || dtype == "Half" || dtype == "BFloat16" ||
           dtype.rfind("Float8", 0) == 0 || dtype.rfind("Complex", 0) == 0;
  }

  // Whether `t` has the statistics of one of r's input tensors: the op passed values on
  // (a view, a copy, detach, a relu of non-negative values) rather than making new ones.
  static bool equals_an_input(const TensorStats& t, const OpRecord& r) {
    const auto same = [](double a, double b) { return !(a < b || a > b); };
    for (const Arg& a : r.inputs) {
      if (!a.is_tensor()) continue;
      const TensorStats& i = *a.tensor;
      if (i.dtype == t.dtype && i.numel == t.numel && i.zero == t.zero && i.neg == t.neg &&
          i.pos == t.pos && i.non_finite() == t.non_finite() && same(i.min, t.min) &&
          same(i.max, t.max) && same(i.norm, t.norm))
        return true;
    }
    return false;
  }

  // Into `out`, `t`'s range without the binade of a mask fill of this step, when `t` holds
  // one (true): its smallest finite value is the fill (masked_fill(mask, finfo.min), an
  // additive mask added to scores far below its ulp). The masked elements are counted in
  // that binade; an unmasked value within a factor 2 of the fill goes out with them.
  bool without_mask(const TensorStats& t, std::vector<std::pair<int32_t, int64_t>>& out) const {
    if (mask_fills_.count(t.min) == 0) return false;
    const int e = binade_of(-t.min);
    out.clear();
    for (const auto& bin : t.range)
      if (bin.first != e) out.push_back(bin);
    return true;
  }

  // The largest |x| left once a mask's binade is out: t.max when it is not the fill's side,
  // else the top of the highest binade left.
  static double unmasked_abs_max(const TensorStats& t,
                                 const std::vector<std::pair<int32_t, int64_t>>& range) {
    double amax = std::isfinite(t.max) ? std::fabs(t.max) : 0.0;
    int top = std::numeric_limits<int>::min();
    for (const auto& bin : range) top = std::max(top, bin.first);
    if (top != std::numeric_limits<int>::min())
      amax = std::max(amax, std::min(std::ldexp(1.0, top + 1), -t.min));
    return amax;
  }

  OpAccumulator& op_for(const OpRecord& r) {
    const std::string name = r.name();
    auto [it, added] = index_.try_emplace(name, accs_.size());
    if (added) {
      accs_.emplace_back();
      accs_.back().op.op = name;
      accs_.back().op.direction = std::string(to_string(r.dir));
    }
    return accs_[it->second];
  }

  // One step in seq order. Modules: the rule of modules.h (a forward op reading a parameter
  // belongs to its module, one between two such ops to their common ancestor; a backward op
  // where the forward op that made its autograd node is). An op's module is the one of its
  // first recorded step.
  void flush_step() {
    std::stable_sort(pending_.begin(), pending_.end(),
                     [](const Pending& a, const Pending& b) { return a.seq < b.seq; });
    std::vector<analysis_detail::ModuleOp> ops;
    ops.reserve(pending_.size());
    for (Pending& p : pending_) ops.push_back(std::move(p.module));
    std::vector<std::string> modules =
        analysis_detail::attribute_modules(ops, analysis_detail::order_of(orders_, rank_));
    for (size_t i = 0; i < pending_.size(); ++i) {
      Pending& p = pending_[i];
      for (const Gradient& g : p.gradients) {
        gradients_.add(g.range, g.abs_max);
        if (std::isfinite(g.abs_max)) step_amax_[step_] = std::max(step_amax_[step_], g.abs_max);
      }
      auto it = p.name.empty() ? index_.end() : index_.find(p.name);
      if (it == index_.end()) continue;
      OpAccumulator& acc = accs_[it->second];
      if (!acc.has_module) {
        acc.op.module = std::move(modules[i]);
        acc.has_module = true;
      }
    }
    pending_.clear();
  }

  // A training run's forward ops outside the autograd graph (zero_grad, clip_grad_norm_ on
  // .data(), data preparation) are not the model's values: autocast does not run them in
  // low precision. Without any forward op in the graph (inference), every op is judged.
  void drop_outside_graph() {
    const bool training = std::any_of(accs_.begin(), accs_.end(), [](const OpAccumulator& a) {
      return a.in_graph && a.op.direction == "forward";
    });
    if (!training) return;
    const auto outside = [](const OpAccumulator& a) { return !a.in_graph; };
    out_.ops_outside_graph = std::count_if(accs_.begin(), accs_.end(), outside);
    accs_.erase(std::remove_if(accs_.begin(), accs_.end(), outside), accs_.end());
  }

  // The largest power of two 2^k (within the considered range) with a predicate true for
  // all k' <= k, or the smallest with it true for all k' >= k.
  void advise_loss_scale() {
    LossScaleAdvice& ls = out_.loss_scale;
    if (gradients_.bins.empty()) return;
    ls.available = true;
    int low = kMaxScaleExp + 1;
    for (int k = kMinScaleExp; k <= kMaxScaleExp; ++k) {
      const RangeCounts c = gradients_.at_shift(k, format_);
      if (c.flush_to_zero <= kMaxFlushShare * double(c.elements)) {
        low = k;
        break;
      }
    }
    int high = kMinScaleExp - 1;
    for (int k = kMaxScaleExp; k >= kMinScaleExp; --k) {
      if (!classify_range({}, gradients_.abs_max, k, format_).any_overflow) {
        high = k;
        break;
      }
    }
    low = std::clamp(low, kMinScaleExp, kMaxScaleExp);
    high = std::clamp(high, kMinScaleExp, kMaxScaleExp);
    ls.low = std::ldexp(1.0, low);
    ls.high = std::ldexp(1.0, high);
    ls.feasible = low <= high;
    // 8x headroom below the overflow limit (gradients grow and shrink while training;
    // GradScaler grows the scale back), but never below the flush limit.
    recommended_shift_ = ls.feasible ? std::max(low, high - kHeadroomBinades) : high;
    ls.recommended = std::ldexp(1.0, recommended_shift_);
    const RangeCounts at = gradients_.at_shift(recommended_shift_, format_);
    ls.flush_at_recommended = at.elements ? double(at.flush_to_zero) / double(at.elements) : 0;
    ls.at_recommended = replay(ls.recommended);
    ls.default_65536 = replay(65536.0);
  }

  // torch.amp.GradScaler's update rule (growth 2, backoff 0.5, interval 2000) over the
  // recorded steps' gradient |max|.
  ScalerReplay replay(double initial) const {
    ScalerReplay r;
    r.initial_scale = initial;
    double scale = initial;
    int64_t good = 0;
    for (const auto& [step, amax] : step_amax_) {
      if (format_.overflows(scale * amax)) {
        ++r.skipped_steps;
        if (!r.first_skipped_step) r.first_skipped_step = step;
        scale *= 0.5;
        good = 0;
      } else if (++good == 2000) {
        scale *= 2.0;
        good = 0;
      }
    }
    r.final_scale = scale;
    const RangeCounts c = gradients_.at_shift(binade_of(initial), format_);
    r.flush_to_zero = c.elements ? double(c.flush_to_zero) / double(c.elements) : 0;
    return r;
  }

  void judge_ops() {
    for (OpAccumulator& acc : accs_) {
      OpPrecision& op = acc.op;
      op.elements = acc.unscaled.elements;
      op.unscaled = acc.unscaled.shares();
      op.scaled = acc.scaled.shares();
      op.verdict = acc.unscaled.fits() ? PrecisionVerdict::kFits
                   : acc.scaled.fits() ? PrecisionVerdict::kFitsWithScaling
                                       : PrecisionVerdict::kKeepFp32;
      op.fits_at_loss_scale = acc.unscaled.fits();
      if (op.direction == "backward" && out_.loss_scale.available) {
        Tally t;
        t.add(acc.hist.at_shift(recommended_shift_, format_));
        op.fits_at_loss_scale = t.fits();
      }
    }
  }

  void build_modules() {
    std::map<std::string, size_t> index;
    std::vector<Tally> unscaled, scaled;
    const bool tensor = out_.scaling == PrecisionScaling::kTensor;
    for (const OpAccumulator& acc : accs_) {
      auto [it, added] = index.try_emplace(acc.op.module, out_.modules.size());
      if (added) {
        out_.modules.emplace_back();
        out_.modules.back().module = acc.op.module;
        unscaled.emplace_back();
        scaled.emplace_back();
      }
      ModulePrecision& m = out_.modules[it->second];
      ++m.ops;
      unscaled[it->second].add(acc.unscaled);
      scaled[it->second].add(acc.scaled);
      if (verdict_rank(acc.op.verdict) > verdict_rank(m.verdict)) m.verdict = acc.op.verdict;
      // Every op is placed (modules.h); "" (no place) is no module one can keep in fp32.
      if (!acc.op.module.empty())
        m.keep_fp32 |=
            tensor ? acc.op.verdict == PrecisionVerdict::kKeepFp32 : !acc.op.fits_at_loss_scale;
    }
    for (size_t i = 0; i < out_.modules.size(); ++i) {
      out_.modules[i].elements = unscaled[i].elements;
      out_.modules[i].unscaled = unscaled[i].shares();
      out_.modules[i].scaled = scaled[i].shares();
    }
    out_.ops.reserve(accs_.size());
    for (OpAccumulator& acc : accs_) out_.ops.push_back(std::move(acc.op));
    const auto shares = [tensor](const OpPrecision& o) { return tensor ? o.scaled : o.unscaled; };
    std::stable_sort(out_.ops.begin(), out_.ops.end(),
                     [&](const OpPrecision& a, const OpPrecision& b) {
                       if (a.verdict != b.verdict)
                         return verdict_rank(a.verdict) > verdict_rank(b.verdict);
                       const PrecisionShares x = shares(a), y = shares(b);
                       if (x.overflow > y.overflow || x.overflow < y.overflow)
                         return x.overflow > y.overflow;
                       if (x.flush_to_zero > y.flush_to_zero || x.flush_to_zero < y.flush_to_zero)
                         return x.flush_to_zero > y.flush_to_zero;
                       return x.subnormal > y.subnormal;
                     });
  }

  const FloatFormat& format_;
  PrecisionResult& out_;
  std::vector<OpAccumulator> accs_;
  std::unordered_map<std::string, size_t> index_;
  std::set<std::string> passing_on_;
  std::vector<Pending> pending_;
  bool module_step_ = false;
  std::set<double>
      mask_fills_;  // the mask fill values of the step (analysis_detail::mask_fill_value())
  std::map<int, analysis_detail::ModuleOrder> orders_;
  int rank_ = 0;
  int64_t step_ = 0;
  Histogram gradients_;                  // every backward output
  std::map<int64_t, double> step_amax_;  // per step: the largest gradient |x|
  bool scaled_records_ = false;
  int recommended_shift_ = 0;
};

PrecisionResult analyse(analysis_detail::RecordSource& src, const PrecisionOptions& options) {
  if (options.format == nullptr) throw Error("precision: no format given");
  PrecisionResult out;
  out.path = src.path();
  out.format = std::string(options.format->name);
  out.scaling = options.scaling;
  PrecisionBuilder b(options, out, analysis_detail::module_orders(src.ranks()));
  src.ops([&](const OpRecord& r) {
    b.add(r);
    return true;
  });
  src.scaler([&](const ScalerRecord& r) {
    b.note_scaler(r);
    return true;
  });
  b.finish();
  return out;
}

}  // namespace

std::vector<std::string> PrecisionResult::keep_fp32_modules() const {
  std::vector<std::string> names;
  for (const ModulePrecision& m : modules)
    if (m.keep_fp32) names.push_back(m.module);
  return names;
}

namespace {

nlohmann::json shares_json(nlohmann::json j, const PrecisionShares& s) {
  j["overflow"] = s.overflow;
  j["subnormal"] = s.subnormal;
  j["flush_to_zero"] = s.flush_to_zero;
  return j;
}

nlohmann::json replay_json(const ScalerReplay& r) {
  return {{"scale", r.initial_scale},
          {"skipped_steps", r.skipped_steps},
          {"first_skipped_step",
           r.first_skipped_step ? nlohmann::json(*r.first_skipped_step) : nlohmann::json()},
          {"final_scale", r.final_scale},
          {"flush_to_zero", r.flush_to_zero}};
}

}  // namespace

nlohmann::json PrecisionResult::to_json() const {
  const bool tensor = scaling == PrecisionScaling::kTensor;
  nlohmann::json j;
  j["format"] = format;
  j["scaling"] = tensor ? "tensor" : "none";
  nlohmann::json ops_json = nlohmann::json::array();
  for (const OpPrecision& o : ops) {
    nlohmann::json e = {{"op", o.op}, {"direction", o.direction}, {"module", o.module}};
    e = shares_json(std::move(e), tensor ? o.scaled : o.unscaled);
    e["verdict"] = to_string(o.verdict);
    ops_json.push_back(std::move(e));
  }
  j["ops"] = std::move(ops_json);
  nlohmann::json modules_json = nlohmann::json::array();
  for (const ModulePrecision& m : modules) {
    nlohmann::json e = {{"module", m.module}, {"ops", m.ops}};
    e = shares_json(std::move(e), tensor ? m.scaled : m.unscaled);
    e["verdict"] = to_string(m.verdict);
    e["keep_fp32"] = m.keep_fp32;
    modules_json.push_back(std::move(e));
  }
  j["modules"] = std::move(modules_json);
  if (!loss_scale.available) {
    j["loss_scale"] = nullptr;
  } else {
    const LossScaleAdvice& ls = loss_scale;
    j["loss_scale"] = {{"recommended", ls.recommended},
                       {"low", ls.low},
                       {"high", ls.high},
                       {"feasible", ls.feasible},
                       {"flush_to_zero_at_recommended", ls.flush_at_recommended},
                       {"at_recommended", replay_json(ls.at_recommended)},
                       {"default_65536", replay_json(ls.default_65536)}};
  }
  j["tensors_with_range"] = tensors_with_range;
  j["tensors_without_range"] = tensors_without_range;
  j["ops_outside_graph"] = ops_outside_graph;
  j["ops_passing_on"] = ops_passing_on;
  j["notes"] = notes;
  return j;
}

PrecisionResult analyse_precision(DumpReader& reader, const PrecisionOptions& options,
                                  const ReadOptions& read) {
  analysis_detail::ReaderSource src(reader, read);
  return analyse(src, options);
}

PrecisionResult analyse_precision(const DumpData& data, const PrecisionOptions& options) {
  analysis_detail::DataSource src(data);
  return analyse(src, options);
}

}  // namespace precprobe
