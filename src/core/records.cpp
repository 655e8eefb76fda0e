// Record helpers and the JSON Lines encoder (the decoder is in records_parse.cpp).
//
// Key order and omitted defaults are part of docs/dump-format.md. min/max are written as
// the shortest text that round-trips the double; mean and norm as the shortest text of
// their float32 rounding: their last bits carry no information (the float64 accumulation
// already differs from any other summation order there) and the shorter text keeps a
// compressed tensor record small.
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
  s.reserve(op.size() + 20);
  s.append(op);
  s.push_back('.');
  fmt::format_int call_text(call);
  s.append(call_text.data(), call_text.size());
  s.push_back('.');
  s.append(to_string(dir));
  return s;
}

namespace {

bool any_non_finite(const std::vector<Arg>& args) noexcept {
  return std::any_of(args.begin(), args.end(),
                     [](const Arg& a) { return a.tensor.has_value() && !a.tensor->all_finite(); });
}

// `"key":` — keys are literals without characters that need escaping.
void key(std::string& out, std::string_view k) {
  out.push_back('"');
  out.append(k);
  out.append("\":");
}

void int_field(std::string& out, std::string_view k, int64_t v) {
  key(out, k);
  json::append_int(out, v);
  out.push_back(',');
}

void str_field(std::string& out, std::string_view k, std::string_view v) {
  key(out, k);
  json::append_string(out, v);
  out.push_back(',');
}

void double_field(std::string& out, std::string_view k, double v) {
  key(out, k);
  json::append_double(out, v);
  out.push_back(',');
}

void bool_field(std::string& out, std::string_view k, bool v) {
  key(out, k);
  out.append(v ? "true," : "false,");
}

void string_list_field(std::string& out, std::string_view k, const std::vector<std::string>& v) {
  key(out, k);
  out.push_back('[');
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out.push_back(',');
    json::append_string(out, v[i]);
  }
  out.append("],");
}

// Replaces the trailing ',' of the last field with the closing brace and the newline.
void end_object_line(std::string& out) {
  out.back() = '}';
  out.push_back('\n');
}

void append_tensor(const TensorStats& t, std::string& out) {
  out.push_back('{');
  str_field(out, "dtype", t.dtype);
  key(out, "shape");
  out.push_back('[');
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (i > 0) out.push_back(',');
    json::append_int(out, t.shape[i]);
  }
  out.append("],");
  str_field(out, "device", t.device);
  if (t.requires_grad) out.append("\"rg\":true,");
  int_field(out, "numel", t.numel);
  int_field(out, "nan", t.nan);
  int_field(out, "pinf", t.pinf);
  int_field(out, "ninf", t.ninf);
  int_field(out, "zero", t.zero);
  int_field(out, "neg", t.neg);
  int_field(out, "pos", t.pos);
  double_field(out, "min", t.min);
  double_field(out, "max", t.max);
  key(out, "mean");
  json::append_float32(out, t.mean);
  out.push_back(',');
  key(out, "norm");
  json::append_float32(out, t.norm);
  out.push_back(',');
  if (t.hash) {
    key(out, "hash");
    json::append_hex64(out, *t.hash);
    out.push_back(',');
  }
  if (!t.param.empty()) str_field(out, "param", t.param);
  if (t.list_index >= 0) int_field(out, "li", t.list_index);
  out.back() = '}';
}

void append_arg(const Arg& a, std::string& out) {
  if (a.tensor) {
    append_tensor(*a.tensor, out);
    return;
  }
  out.append("{\"v\":");
  if (a.value.empty()) {
    out.append("null");
  } else if (json::is_valid_value(a.value)) {
    out.append(a.value);
  } else {
    // A producer bug must not make the whole line unreadable: keep the text as a string.
    json::append_string(out, a.value);
  }
  out.push_back('}');
}

void append_args(std::string_view k, const std::vector<Arg>& args, std::string& out) {
  key(out, k);
  out.push_back('[');
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) out.push_back(',');
    append_arg(args[i], out);
  }
  out.append("],");
}

}  // namespace

bool OpRecord::outputs_non_finite() const noexcept { return any_non_finite(outputs); }
bool OpRecord::inputs_non_finite() const noexcept { return any_non_finite(inputs); }

void append_json(const OpRecord& r, std::string& out) {
  out.push_back('{');
  int_field(out, "step", r.step);
  int_field(out, "seq", r.seq);
  str_field(out, "op", r.op);
  if (!r.overload.empty()) str_field(out, "ovl", r.overload);
  int_field(out, "call", r.call);
  key(out, "dir");
  out.append(r.dir == Direction::kBackward ? "\"backward\"," : "\"forward\",");
  int_field(out, "thr", r.thread);
  int_field(out, "depth", r.depth);
  int_field(out, "sn", r.seqnr);
  if (!r.scope.empty()) str_field(out, "scope", r.scope);
  if (!r.node.empty()) str_field(out, "node", r.node);
  append_args("in", r.inputs, out);
  append_args("out", r.outputs, out);
  end_object_line(out);
}

void append_json(const ScalerRecord& r, std::string& out) {
  out.push_back('{');
  int_field(out, "step", r.step);
  int_field(out, "opt", r.optimizer);
  int_field(out, "group", r.group);
  bool_field(out, "found_inf", r.found_inf);
  int_field(out, "n_bad", r.nonfinite_params);
  string_list_field(out, "bad", r.bad_params);
  double_field(out, "gn_scaled", r.grad_norm_scaled);
  double_field(out, "gn", r.grad_norm);
  double_field(out, "scale", r.scale_before);
  double_field(out, "scale_next", r.scale_after);
  int_field(out, "tracker", r.growth_tracker);
  bool_field(out, "skipped", r.skipped);
  str_field(out, "event", r.event);
  end_object_line(out);
}

void append_json(const GradRecord& r, std::string& out) {
  out.push_back('{');
  int_field(out, "step", r.step);
  str_field(out, "param", r.param);
  double_field(out, "gn", r.grad_norm);
  double_field(out, "gmax", r.grad_abs_max);
  double_field(out, "gmean", r.grad_abs_mean);
  int_field(out, "gnan", r.grad_nan);
  int_field(out, "ginf", r.grad_inf);
  bool_field(out, "has_grad", r.has_grad);
  double_field(out, "wn", r.weight_norm);
  double_field(out, "ur", r.update_ratio);
  string_list_field(out, "watch", r.watch);
  end_object_line(out);
}

void append_json(const ScalarRecord& r, std::string& out) {
  out.push_back('{');
  int_field(out, "step", r.step);
  str_field(out, "name", r.name);
  double_field(out, "value", r.value);
  end_object_line(out);
}

}  // namespace precprobe
