// Record helpers and the JSON Lines encoder (the decoder is in records_parse.cpp).
//
// Key order and omitted defaults are part of docs/dump-format.md. min/max are written as
// the shortest text that round-trips the double; mean and norm as the shortest text of
// their float32 rounding: their last bits carry no information (the float64 accumulation
// already differs from any other summation order there) and the shorter text keeps a
// compressed tensor record small.
//
// format_version 2: every number is a JSON number or null. A non-finite double is null;
// where the non-finite value is itself information (everything but the undefined NaN
// statistics of a tensor without finite elements) a string field "<key>_nonfinite" follows
// it: "nan", "inf" or "-inf" (docs/dump-format.md, "Non-finite values").
#include "precprobe/records.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "json_lite.h"

namespace precprobe {

std::string_view to_string(Direction d) noexcept {
  return d == Direction::kBackward ? "backward" : "forward";
}

double TensorStats::abs_max() const noexcept {
  // min/max are NaN when no finite value exists; fmax ignores one NaN but not two.
  return std::fmax(std::fabs(min), std::fabs(max));
}

std::string OpRecord::name() const {
  std::string s;
  name_into(s);
  return s;
}

void OpRecord::name_into(std::string& s) const {
  s.clear();
  s.reserve(op.size() + 20);
  s.append(op);
  s.push_back('.');
  fmt::format_int call_text(call);
  s.append(call_text.data(), call_text.size());
  s.push_back('.');
  s.append(to_string(dir));
}

namespace {

bool any_non_finite(const std::vector<Arg>& args) noexcept {
  return std::any_of(args.begin(), args.end(),
                     [](const Arg& a) { return a.tensor.has_value() && !a.tensor->all_finite(); });
}

using json::TextOut;

// Fixed-size fields of one object: keys, numbers, booleans and brackets.
constexpr size_t kFieldBound = 16 + TextOut::kMaxNumber;

void str_field(TextOut& o, std::string_view quoted_key, std::string_view v) {
  o.reserve(quoted_key.size() + TextOut::string_bound(v.size()) + 1);
  o.raw(quoted_key);
  o.string(v);
  o.put(',');
}

void string_list(TextOut& o, std::string_view quoted_key, const std::vector<std::string>& v) {
  o.reserve(quoted_key.size() + 2);
  o.raw(quoted_key);
  o.put('[');
  for (const std::string& x : v) {
    o.reserve(TextOut::string_bound(x.size()) + 1);
    o.string(x);
    o.put(',');
  }
  if (o.last() == ',')
    o.replace_last(']');
  else
    o.put(']');
  o.reserve(1);
  o.put(',');
}

// Replaces the trailing ',' of the last field with the closing brace and the newline.
void end_line(TextOut& o) {
  o.reserve(2);
  o.replace_last('}');
  o.put('\n');
}

// "\"nan\"", "\"inf\"" or "\"-inf\"" for a non-finite `v`.
std::string_view nonfinite_text(double v) {
  if (std::isnan(v)) return "\"nan\"";
  return v > 0 ? "\"inf\"" : "\"-inf\"";
}

// `,"<key>_nonfinite":"inf"`; the caller reserved kFieldBound.
void nonfinite_sibling(TextOut& o, std::string_view key, double v) {
  o.lit(",\"");
  o.raw(key);
  o.lit("_nonfinite\":");
  o.raw(nonfinite_text(v));
}

// A tensor statistic: null when undefined (NaN: no finite element, the counts say so);
// ±Inf (only from a float64 overflow) also gets its "<key>_nonfinite" field.
void stat_field(TextOut& o, std::string_view key, double v) {
  if (std::isinf(v)) nonfinite_sibling(o, key, v);
}

// ,"range":[[e,count],...] (docs/dump-format.md): present, possibly empty, when recorded.
void append_range(const std::vector<std::pair<int32_t, int64_t>>& range, TextOut& o) {
  o.reserve(12);
  o.lit(",\"range\":[");
  for (size_t i = 0; i < range.size(); ++i) {
    o.reserve(2 * TextOut::kMaxNumber + 4);  // ",[e,count]"
    if (i > 0) o.put(',');
    o.put('[');
    o.int64(range[i].first);
    o.put(',');
    o.int64(range[i].second);
    o.put(']');
  }
  o.reserve(1);
  o.put(']');
}

void append_tensor(const TensorStats& t, TextOut& o) {
  o.reserve(40 + TextOut::string_bound(t.dtype.size()) + TextOut::string_bound(t.device.size()) +
            t.shape.size() * 21 + 16 * kFieldBound + TextOut::string_bound(t.param.size()));
  o.lit("{\"dtype\":");
  o.string(t.dtype);
  o.lit(",\"shape\":[");
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (i > 0) o.put(',');
    o.int64(t.shape[i]);
  }
  o.lit("],\"device\":");
  o.string(t.device);
  if (t.requires_grad) o.lit(",\"rg\":true");
  o.lit(",\"numel\":");
  o.int64(t.numel);
  o.lit(",\"nan\":");
  o.int64(t.nan);
  o.lit(",\"pinf\":");
  o.int64(t.pinf);
  o.lit(",\"ninf\":");
  o.int64(t.ninf);
  o.lit(",\"zero\":");
  o.int64(t.zero);
  o.lit(",\"neg\":");
  o.int64(t.neg);
  o.lit(",\"pos\":");
  o.int64(t.pos);
  o.lit(",\"min\":");
  o.number(t.min);
  stat_field(o, "min", t.min);
  o.lit(",\"max\":");
  o.number(t.max);
  stat_field(o, "max", t.max);
  o.lit(",\"mean\":");
  o.float32(t.mean);
  stat_field(o, "mean", t.mean);
  o.lit(",\"norm\":");
  o.float32(t.norm);
  stat_field(o, "norm", t.norm);
  if (t.hash) {
    o.lit(",\"hash\":");
    o.hex64(*t.hash);
  }
  if (!t.param.empty()) {
    o.lit(",\"param\":");
    o.string(t.param);
  }
  if (t.list_index >= 0) {
    o.lit(",\"li\":");
    o.int64(t.list_index);
  }
  if (!t.hist.empty()) {
    o.reserve(10);
    o.lit(",\"hist\":[");
    for (size_t i = 0; i < t.hist.size(); ++i) {
      o.reserve(2 * TextOut::kMaxNumber + 4);  // ",[value,count]"
      if (i > 0) o.put(',');
      o.put('[');
      o.int64(t.hist[i].first);
      o.put(',');
      o.int64(t.hist[i].second);
      o.put(']');
    }
    o.reserve(2);
    o.put(']');
  }
  if (t.has_range) append_range(t.range, o);
  o.reserve(1);
  o.put('}');
}

constexpr std::string_view kNonfiniteNames[] = {"\"nan\"", "\"inf\"", "\"-inf\""};

// True when the JSON text of a value holds "nan", "inf" or "-inf" (the probe's names for
// non-finite doubles, arg_json.cpp).
bool has_nonfinite_name(std::string_view text) {
  if (text.find('"') == std::string_view::npos) return false;  // numbers, lists, null
  for (std::string_view n : kNonfiniteNames) {
    if (text.find(n) != std::string_view::npos) return true;
  }
  return false;
}

// The value with each "nan", "inf", "-inf" replaced by null.
std::string names_to_null(std::string_view text) {
  std::string out(text);
  for (std::string_view n : kNonfiniteNames) {
    for (size_t at = out.find(n); at != std::string::npos; at = out.find(n, at + 4)) {
      out.replace(at, n.size(), "null");
    }
  }
  return out;
}

void append_arg(const Arg& a, TextOut& o) {
  if (a.tensor) {
    append_tensor(*a.tensor, o);
    return;
  }
  o.reserve(24 + 2 * TextOut::string_bound(a.value.size()));
  o.lit("{\"v\":");
  if (a.value.empty()) {
    o.lit("null");
  } else if (json::is_valid_value(a.value)) {
    if (!has_nonfinite_name(a.value)) {
      o.raw(a.value);
    } else {
      // The probe names non-finite doubles "nan", "inf", "-inf": they become null in "v",
      // and "v_nonfinite" keeps the value with its names (a string, or a list of them).
      std::string numbers = names_to_null(a.value);
      o.raw(json::is_valid_value(numbers) ? std::string_view(numbers) : "null");
      o.lit(",\"v_nonfinite\":");
      o.raw(a.value);
    }
  } else {
    // A producer bug must not make the whole line unreadable: keep the text as a string.
    o.string(a.value);
  }
  o.put('}');
}

void append_args(const char* quoted_key, size_t key_size, const std::vector<Arg>& args,
                 TextOut& o) {
  o.reserve(key_size + 1);
  o.raw(std::string_view(quoted_key, key_size));
  o.put('[');
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) {
      o.reserve(1);
      o.put(',');
    }
    append_arg(args[i], o);
  }
  o.reserve(2);
  o.lit("],");
}

}  // namespace

bool OpRecord::outputs_uninitialized() const noexcept {
  // Every allocation without a fill, LibTorch 1.13 to 2.x.
  static constexpr std::string_view kOps[] = {"aten::empty",
                                              "aten::empty_like",
                                              "aten::empty_strided",
                                              "aten::empty_permuted",
                                              "aten::empty_quantized",
                                              "aten::new_empty",
                                              "aten::new_empty_strided",
                                              "aten::_empty_affine_quantized",
                                              "aten::_empty_per_channel_affine_quantized"};
  for (auto k : kOps) {
    if (op == k) return true;
  }
  return false;
}

bool OpRecord::outputs_non_finite() const noexcept {
  return !outputs_uninitialized() && any_non_finite(outputs);
}
bool OpRecord::inputs_non_finite() const noexcept { return any_non_finite(inputs); }

void append_json(const OpRecord& r, std::string& out) {
  TextOut o(out);
  o.reserve(8 * kFieldBound + TextOut::string_bound(r.op.size()) +
            TextOut::string_bound(r.overload.size()));
  o.lit("{\"step\":");
  o.int64(r.step);
  o.lit(",\"seq\":");
  o.int64(r.seq);
  o.lit(",\"op\":");
  o.string(r.op);
  if (!r.overload.empty()) {
    o.lit(",\"ovl\":");
    o.string(r.overload);
  }
  o.lit(",\"call\":");
  o.int64(r.call);
  if (r.dir == Direction::kBackward) {
    o.lit(",\"dir\":\"backward\",\"thr\":");
  } else {
    o.lit(",\"dir\":\"forward\",\"thr\":");
  }
  o.int64(r.thread);
  o.lit(",\"depth\":");
  o.int64(r.depth);
  o.lit(",\"sn\":");
  o.int64(r.seqnr);
  if (r.grad == false) o.lit(",\"grad\":false");  // on (the common case) or unknown: absent
  if (r.background) o.lit(",\"bg\":true");
  if (r.optimizer) o.lit(",\"opt\":true");
  o.put(',');
  if (!r.scope.empty()) str_field(o, "\"scope\":", r.scope);
  if (!r.module.empty()) str_field(o, "\"mod\":", r.module);
  if (!r.node.empty()) str_field(o, "\"node\":", r.node);
  append_args("\"in\":", 5, r.inputs, o);
  append_args("\"out\":", 6, r.outputs, o);
  end_line(o);
}

namespace {

void int_field(TextOut& o, std::string_view quoted_key, int64_t v) {
  o.reserve(kFieldBound);
  o.raw(quoted_key);
  o.int64(v);
  o.put(',');
}

// "<key>":<v>, and for a non-finite v (null) "<key>_nonfinite":"nan"|"inf"|"-inf".
void number_field(TextOut& o, std::string_view key, double v) {
  o.reserve(2 * kFieldBound + 2 * key.size());
  o.put('"');
  o.raw(key);
  o.lit("\":");
  o.number(v);
  if (!std::isfinite(v)) nonfinite_sibling(o, key, v);
  o.put(',');
}

void bool_field(TextOut& o, std::string_view quoted_key, bool v) {
  o.reserve(kFieldBound);
  o.raw(quoted_key);
  if (v) {
    o.lit("true,");
  } else {
    o.lit("false,");
  }
}

}  // namespace

void append_json(const ScalerRecord& r, std::string& out) {
  TextOut o(out);
  o.reserve(1);
  o.put('{');
  int_field(o, "\"step\":", r.step);
  int_field(o, "\"opt\":", r.optimizer);
  int_field(o, "\"group\":", r.group);
  bool_field(o, "\"found_inf\":", r.found_inf);
  int_field(o, "\"n_bad\":", r.nonfinite_params);
  string_list(o, "\"bad\":", r.bad_params);
  number_field(o, "gn_scaled", r.grad_norm_scaled);
  number_field(o, "gn", r.grad_norm);
  number_field(o, "scale", r.scale_before);
  number_field(o, "scale_next", r.scale_after);
  int_field(o, "\"tracker\":", r.growth_tracker);
  bool_field(o, "\"skipped\":", r.skipped);
  str_field(o, "\"event\":", r.event);
  end_line(o);
}

void append_json(const GradRecord& r, std::string& out) {
  TextOut o(out);
  o.reserve(1);
  o.put('{');
  int_field(o, "\"step\":", r.step);
  str_field(o, "\"param\":", r.param);
  number_field(o, "gn", r.grad_norm);
  number_field(o, "gmax", r.grad_abs_max);
  number_field(o, "gmean", r.grad_abs_mean);
  int_field(o, "\"gnan\":", r.grad_nan);
  int_field(o, "\"ginf\":", r.grad_inf);
  bool_field(o, "\"has_grad\":", r.has_grad);
  if (r.has_weight) {  // else absent: never a made-up 0
    number_field(o, "wn", r.weight_norm);
    number_field(o, "ur", r.update_ratio);
  }
  string_list(o, "\"watch\":", r.watch);
  end_line(o);
}

void append_json(const ScalarRecord& r, std::string& out) {
  TextOut o(out);
  o.reserve(1);
  o.put('{');
  int_field(o, "\"step\":", r.step);
  str_field(o, "\"name\":", r.name);
  number_field(o, "value", r.value);
  if (!r.extra.empty()) {
    o.reserve(r.extra.size() + 1);
    o.raw(r.extra);
    o.put(',');
  }
  end_line(o);
}

namespace {

// The members after "value", in the documented order.
void anomaly_fields(TextOut& o, const AnomalyEvent& r) {
  str_field(o, "\"trigger\":", r.trigger);
  bool_field(o, "\"reproduced\":", r.reproduced);
  str_field(o, "\"origin\":", r.origin);
  str_field(o, "\"origin_record\":", r.origin_record);
  str_field(o, "\"classification\":", r.classification);
  str_field(o, "\"why\":", r.why);
  str_field(o, "\"trigger_detail\":", r.trigger_detail);
  int_field(o, "\"replay\":", r.replay);
}

}  // namespace

void append_json(const AnomalyEvent& r, std::string& out) {
  TextOut o(out);
  o.reserve(1);
  o.put('{');
  int_field(o, "\"step\":", r.step);
  str_field(o, "\"name\":", r.name.empty() ? kAnomalyEventName : std::string_view(r.name));
  int_field(o, "\"value\":", r.step);
  anomaly_fields(o, r);
  end_line(o);
}

namespace {

// The members after "value", in the documented order.
void watch_fields(TextOut& o, const OpWatchHit& r) {
  str_field(o, "\"watch\":", r.watch);
  str_field(o, "\"module\":", r.module);
  str_field(o, "\"record\":", r.record);
  str_field(o, "\"op\":", r.op);
  int_field(o, "\"seq\":", r.seq);
  number_field(o, "threshold", r.threshold);
  str_field(o, "\"detail\":", r.detail);
}

}  // namespace

void append_json(const OpWatchHit& r, std::string& out) {
  TextOut o(out);
  o.reserve(1);
  o.put('{');
  int_field(o, "\"step\":", r.step);
  str_field(o, "\"name\":", kWatchEventName);
  number_field(o, "value", r.value);
  watch_fields(o, r);
  end_line(o);
}

ScalarRecord to_scalar_record(const OpWatchHit& r) {
  ScalarRecord s;
  s.step = r.step;
  s.name = std::string(kWatchEventName);
  s.value = r.value;
  {
    TextOut o(s.extra);
    watch_fields(o, r);
  }
  if (!s.extra.empty() && s.extra.back() == ',') s.extra.pop_back();  // the writer adds one
  return s;
}

bool OpWatchHit::operator==(const OpWatchHit& o) const noexcept {
  auto same = [](double x, double y) {
    return (!(x < y) && !(y < x)) || (std::isnan(x) && std::isnan(y));
  };
  return step == o.step && watch == o.watch && module == o.module && record == o.record &&
         op == o.op && seq == o.seq && same(value, o.value) && same(threshold, o.threshold) &&
         detail == o.detail && rank == o.rank;
}

ScalarRecord to_scalar_record(const AnomalyEvent& r) {
  ScalarRecord s;
  s.step = r.step;
  s.name = std::string(kAnomalyEventName);
  s.value = static_cast<double>(r.step);
  {
    TextOut o(s.extra);
    anomaly_fields(o, r);
  }
  if (!s.extra.empty() && s.extra.back() == ',') s.extra.pop_back();  // the writer adds one
  return s;
}

}  // namespace precprobe
