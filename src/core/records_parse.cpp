// The JSON Lines decoder for dump records (the encoder is in records.cpp).
//
// parse_record() reuses the strings and vectors already in `out`, so a reader that parses
// line after line into one record allocates almost nothing. Unknown keys are skipped (a
// newer minor writer may add some); a known key with a value of the wrong type fails the
// line. Input is untrusted: see json_lite.h.
#include <string>

#include "json_lite.h"
#include "precprobe/records.h"

namespace precprobe {
namespace {

using json::Cursor;

void reset(TensorStats& t) {
  t.dtype.clear();
  t.shape.clear();
  t.device.assign("cpu");
  t.requires_grad = false;
  t.numel = t.nan = t.pinf = t.ninf = t.zero = t.neg = t.pos = 0;
  t.min = t.max = t.mean = t.norm = 0;
  t.hash.reset();
  t.param.clear();
  t.list_index = -1;
}

bool parse_int_list(Cursor& c, std::vector<int64_t>& v) {
  v.clear();
  return c.array([&] {
    int64_t x = 0;
    if (!c.int64(x)) return false;
    v.push_back(x);
    return true;
  });
}

bool parse_string_list(Cursor& c, std::vector<std::string>& v) {
  size_t n = 0;
  bool ok = c.array([&] {
    if (n == v.size()) v.emplace_back();
    return c.string(v[n++]);
  });
  v.resize(n);
  return ok;
}

// Members of a tensor object; false for an unknown key (the caller skips it).
bool tensor_member(Cursor& c, std::string_view k, TensorStats& t, bool& known) {
  known = true;
  switch (k.size()) {
    case 2:
      if (k == "rg") return c.boolean(t.requires_grad);
      if (k == "li") return c.int64(t.list_index);
      break;
    case 3:
      if (k == "nan") return c.int64(t.nan);
      if (k == "neg") return c.int64(t.neg);
      if (k == "pos") return c.int64(t.pos);
      if (k == "min") return c.number(t.min);
      if (k == "max") return c.number(t.max);
      break;
    case 4:
      if (k == "pinf") return c.int64(t.pinf);
      if (k == "ninf") return c.int64(t.ninf);
      if (k == "zero") return c.int64(t.zero);
      if (k == "mean") return c.number_float32(t.mean);
      if (k == "norm") return c.number_float32(t.norm);
      if (k == "hash") {
        uint64_t h = 0;
        if (!c.hex64(h)) return false;
        t.hash = h;
        return true;
      }
      break;
    case 5:
      if (k == "dtype") return c.string(t.dtype);
      if (k == "shape") return parse_int_list(c, t.shape);
      if (k == "numel") return c.int64(t.numel);
      if (k == "param") return c.string(t.param);
      break;
    case 6:
      if (k == "device") return c.string(t.device);
      break;
    default:
      break;
  }
  known = false;
  return true;
}

bool parse_arg(Cursor& c, Arg& a) {
  if (!a.tensor) a.tensor.emplace();
  TensorStats& t = *a.tensor;
  reset(t);
  a.value.clear();
  bool saw_value = false;
  bool saw_dtype = false;
  bool ok = c.object([&](std::string_view k) {
    if (k == "v") {
      saw_value = true;
      return c.raw_value(a.value);
    }
    if (k == "dtype") saw_dtype = true;
    bool known = false;
    if (!tensor_member(c, k, t, known)) return false;
    return known || c.skip_value(2);
  });
  if (!ok) return false;
  if (saw_value) {
    a.tensor.reset();
    return true;
  }
  if (!saw_dtype) return c.fail("argument has neither \"dtype\" (a tensor) nor \"v\" (a value)");
  return true;
}

bool parse_args(Cursor& c, std::vector<Arg>& args) {
  size_t n = 0;
  bool ok = c.array([&] {
    if (n == args.size()) args.emplace_back();
    return parse_arg(c, args[n++]);
  });
  args.resize(n);
  return ok;
}

bool parse_direction(Cursor& c, std::string& scratch, Direction& d) {
  if (!c.string(scratch)) return false;
  if (scratch == "forward") {
    d = Direction::kForward;
  } else if (scratch == "backward") {
    d = Direction::kBackward;
  } else {
    return c.fail("\"dir\" must be \"forward\" or \"backward\"");
  }
  return true;
}

bool op_member(Cursor& c, std::string_view k, OpRecord& r, std::string& scratch, bool& has_op) {
  switch (k.size()) {
    case 2:
      if (k == "op") {
        has_op = true;
        return c.string(r.op);
      }
      if (k == "in") return parse_args(c, r.inputs);
      if (k == "sn") return c.int64(r.seqnr);
      break;
    case 3:
      if (k == "seq") return c.int64(r.seq);
      if (k == "ovl") return c.string(r.overload);
      if (k == "dir") return parse_direction(c, scratch, r.dir);
      if (k == "thr") return c.uint32(r.thread);
      if (k == "out") return parse_args(c, r.outputs);
      break;
    case 4:
      if (k == "step") return c.int64(r.step);
      if (k == "call") return c.int64(r.call);
      if (k == "node") return c.string(r.node);
      break;
    case 5:
      if (k == "depth") return c.int32(r.depth);
      if (k == "scope") return c.string(r.scope);
      break;
    default:
      break;
  }
  return c.skip_value(1);
}

// Parses one line as an object, then checks nothing but blanks follows it.
template <class F>
bool parse_line(std::string_view line, std::string* error, F&& on_member) {
  Cursor c(line);
  bool ok = c.object([&](std::string_view k) { return on_member(c, k); }) &&
            (c.at_end() || c.fail("text after the record"));
  if (!ok && error != nullptr) *error = c.error_message();
  return ok;
}

bool missing(std::string* error, const char* what) {
  if (error != nullptr) *error = what;
  return false;
}

}  // namespace

bool parse_record(std::string_view line, OpRecord& out, std::string* error) {
  out.step = out.seq = out.call = 0;
  out.seqnr = -1;
  out.op.clear();
  out.overload.clear();
  out.scope.clear();
  out.node.clear();
  out.dir = Direction::kForward;
  out.thread = 0;
  out.depth = 0;
  out.rank = 0;
  bool has_in = false;
  bool has_out = false;
  bool has_op = false;
  std::string scratch;
  bool ok = parse_line(line, error, [&](Cursor& c, std::string_view k) {
    has_in |= k == "in";
    has_out |= k == "out";
    return op_member(c, k, out, scratch, has_op);
  });
  if (!has_in) out.inputs.clear();
  if (!has_out) out.outputs.clear();
  if (ok && !has_op) return missing(error, "op record without \"op\"");
  return ok;
}

bool parse_record(std::string_view line, ScalerRecord& out, std::string* error) {
  out = ScalerRecord{};
  return parse_line(line, error, [&](Cursor& c, std::string_view k) {
    if (k == "step") return c.int64(out.step);
    if (k == "opt") return c.int32(out.optimizer);
    if (k == "group") return c.int32(out.group);
    if (k == "found_inf") return c.boolean(out.found_inf);
    if (k == "n_bad") return c.int64(out.nonfinite_params);
    if (k == "bad") return parse_string_list(c, out.bad_params);
    if (k == "gn_scaled") return c.number(out.grad_norm_scaled);
    if (k == "gn") return c.number(out.grad_norm);
    if (k == "scale") return c.number(out.scale_before);
    if (k == "scale_next") return c.number(out.scale_after);
    if (k == "tracker") return c.int64(out.growth_tracker);
    if (k == "skipped") return c.boolean(out.skipped);
    if (k == "event") return c.string(out.event);
    return c.skip_value(1);
  });
}

bool parse_record(std::string_view line, GradRecord& out, std::string* error) {
  out = GradRecord{};
  bool has_param = false;
  bool ok = parse_line(line, error, [&](Cursor& c, std::string_view k) {
    if (k == "step") return c.int64(out.step);
    if (k == "param") {
      has_param = true;
      return c.string(out.param);
    }
    if (k == "gn") return c.number(out.grad_norm);
    if (k == "gmax") return c.number(out.grad_abs_max);
    if (k == "gmean") return c.number(out.grad_abs_mean);
    if (k == "gnan") return c.int64(out.grad_nan);
    if (k == "ginf") return c.int64(out.grad_inf);
    if (k == "has_grad") return c.boolean(out.has_grad);
    if (k == "wn") return c.number(out.weight_norm);
    if (k == "ur") return c.number(out.update_ratio);
    if (k == "watch") return parse_string_list(c, out.watch);
    return c.skip_value(1);
  });
  if (ok && !has_param) return missing(error, "grad record without \"param\"");
  return ok;
}

bool parse_record(std::string_view line, ScalarRecord& out, std::string* error) {
  out = ScalarRecord{};
  bool has_name = false;
  bool ok = parse_line(line, error, [&](Cursor& c, std::string_view k) {
    if (k == "step") return c.int64(out.step);
    if (k == "name") {
      has_name = true;
      return c.string(out.name);
    }
    if (k == "value") return c.number(out.value);
    return c.skip_value(1);
  });
  if (ok && !has_name) return missing(error, "scalar record without \"name\"");
  return ok;
}

}  // namespace precprobe
