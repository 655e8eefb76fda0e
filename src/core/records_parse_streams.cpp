// The JSON Lines decoders for the scaler, grads and events streams' records (op records:
// records_parse.cpp). Same rules: strings and vectors of `out` reused, unknown keys
// skipped, a known key of the wrong type fails the line; input is untrusted.
#include <limits>
#include <string>

#include "precprobe/records.h"
#include "records_parse_util.h"

namespace precprobe {

using records_parse_detail::Cursor;
using records_parse_detail::ends_nonfinite;
using records_parse_detail::missing;
using records_parse_detail::Named;
using records_parse_detail::parse_line;
using records_parse_detail::parse_string_list;

bool parse_record(std::string_view line, ScalerRecord& out, std::string* error) {
  out = ScalerRecord{};
  Named named;
  bool ok = parse_line(line, error, [&](Cursor& c, std::string_view k) {
    if (ends_nonfinite(k)) {
      if (k == "gn_scaled_nonfinite") return named.read(c, out.grad_norm_scaled);
      if (k == "gn_nonfinite") return named.read(c, out.grad_norm);
      if (k == "scale_nonfinite") return named.read(c, out.scale_before);
      if (k == "scale_next_nonfinite") return named.read(c, out.scale_after);
    }
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
  named.apply();
  return ok;
}

bool parse_record(std::string_view line, GradRecord& out, std::string* error) {
  out = GradRecord{};
  bool has_param = false, has_wn = false, has_ur = false;
  Named named;
  bool ok = parse_line(line, error, [&](Cursor& c, std::string_view k) {
    if (ends_nonfinite(k)) {
      if (k == "gn_nonfinite") return named.read(c, out.grad_norm);
      if (k == "gmax_nonfinite") return named.read(c, out.grad_abs_max);
      if (k == "gmean_nonfinite") return named.read(c, out.grad_abs_mean);
      if (k == "wn_nonfinite") {
        has_wn = true;
        return named.read(c, out.weight_norm);
      }
      if (k == "ur_nonfinite") {
        has_ur = true;
        return named.read(c, out.update_ratio);
      }
    }
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
    if (k == "wn") {
      has_wn = true;
      return c.number(out.weight_norm);
    }
    if (k == "ur") {
      has_ur = true;
      return c.number(out.update_ratio);
    }
    if (k == "watch") return parse_string_list(c, out.watch);
    return c.skip_value(1);
  });
  named.apply();
  // No "wn": the weights were not read (the on_anomaly watch's records); an absent "ur" alone
  // is unknown too. Not 0: absent.
  constexpr double kAbsent = std::numeric_limits<double>::quiet_NaN();
  out.has_weight = has_wn;
  if (!has_wn) out.weight_norm = kAbsent;
  if (!has_ur) out.update_ratio = kAbsent;
  if (ok && !has_param) return missing(error, "grad record without \"param\"");
  return ok;
}

bool parse_record(std::string_view line, ScalarRecord& out, std::string* error) {
  out = ScalarRecord{};
  bool has_name = false;
  Named named;
  bool ok = parse_line(line, error, [&](Cursor& c, std::string_view k) {
    if (k == "value_nonfinite") return named.read(c, out.value);
    if (k == "step") return c.int64(out.step);
    if (k == "name") {
      has_name = true;
      return c.string(out.name);
    }
    if (k == "value") return c.number(out.value);
    return c.skip_value(1);
  });
  named.apply();
  if (ok && !has_name) return missing(error, "scalar record without \"name\"");
  return ok;
}

}  // namespace precprobe
