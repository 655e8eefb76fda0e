// The decoders of the debugger's "anomaly" and "watch" events (events.jsonl.zst;
// docs/dump-format.md). Its encoder is in records.cpp. Any events line parses (name required);
// unknown keys are skipped, a known key of the wrong type fails the line. Input is untrusted: see
// json_lite.h.
#include "json_lite.h"
#include "precprobe/records.h"

namespace precprobe {

bool parse_record(std::string_view line, AnomalyEvent& out, std::string* error) {
  out = AnomalyEvent{};
  bool has_name = false;
  double ignored = 0;
  json::Cursor c(line);
  bool ok = c.object([&](std::string_view k) {
    if (k == "step") return c.int64(out.step);
    if (k == "name") {
      has_name = true;
      return c.string(out.name);
    }
    if (k == "trigger") return c.string(out.trigger);
    if (k == "reproduced") return c.boolean(out.reproduced);
    if (k == "origin") return c.string(out.origin);
    if (k == "origin_record") return c.string(out.origin_record);
    if (k == "classification") return c.string(out.classification);
    if (k == "why") return c.string(out.why);
    if (k == "trigger_detail") return c.string(out.trigger_detail);
    if (k == "replay") return c.int64(out.replay);
    // "value" (the step again) is checked as the scalar reader checks it, so that a line
    // is bad for both readers or for neither (the stream's bad_lines agree).
    if (k == "value") return c.number(ignored);
    if (k == "value_nonfinite") return c.nonfinite_name(ignored);
    return c.skip_value(1);  // keys of newer writers
  }) && (c.at_end() || c.fail("text after the record"));
  if (!ok) {
    if (error != nullptr) *error = c.error_message();
    return false;
  }
  if (!has_name) {
    if (error != nullptr) *error = "event without \"name\"";
    return false;
  }
  return true;
}

bool parse_record(std::string_view line, OpWatchHit& out, std::string* error) {
  out = OpWatchHit{};
  bool has_name = false;
  json::Cursor c(line);
  bool ok = c.object([&](std::string_view k) {
    if (k == "step") return c.int64(out.step);
    if (k == "name") {
      has_name = true;
      return c.string(out.name);
    }
    if (k == "value") return c.number(out.value);
    if (k == "value_nonfinite") return c.nonfinite_name(out.value);
    if (k == "watch") return c.string(out.watch);
    if (k == "module") return c.string(out.module);
    if (k == "record") return c.string(out.record);
    if (k == "op") return c.string(out.op);
    if (k == "seq") return c.int64(out.seq);
    if (k == "threshold") return c.number(out.threshold);
    if (k == "threshold_nonfinite") return c.nonfinite_name(out.threshold);
    if (k == "detail") return c.string(out.detail);
    return c.skip_value(1);  // keys of newer writers
  }) && (c.at_end() || c.fail("text after the record"));
  if (!ok) {
    if (error != nullptr) *error = c.error_message();
    return false;
  }
  if (!has_name) {
    if (error != nullptr) *error = "event without \"name\"";
    return false;
  }
  return true;
}

}  // namespace precprobe
