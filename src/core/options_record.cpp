// The "record" and "on_anomaly" config keys: record op statistics always, or only for a
// step found anomalous and replayed from a snapshot (docs/config.md, docs/debugger.md).
// Parsing, validate()'s rules and to_json() for them; the rest of the options live in
// options_parse.cpp and options.cpp.
#include <cmath>
#include <limits>
#include <string>

#include "options_detail.h"
#include "precprobe/error.h"

namespace precprobe {
namespace detail {
namespace {

using nlohmann::json;

constexpr IntLimits kSpikeWindowLimits{2, 100000};
constexpr IntLimits kMaxReplaysLimits{0, std::numeric_limits<int32_t>::max()};
constexpr double kSpikeFactorMax = 1e12;

[[noreturn]] void fail_expected(const std::string& key, const json& v,
                                const std::string& expected) {
  fail_key(key, "expected " + expected + ", found " + describe_value(v));
}

bool read_bool(const json& v, const std::string& key) {
  if (!v.is_boolean()) fail_expected(key, v, "a boolean (true or false)");
  return v.get<bool>();
}

int64_t read_int(const json& v, const std::string& key, const IntLimits& limits) {
  if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(limits.hi) &&
      static_cast<int64_t>(v.get<uint64_t>()) >= limits.lo)
    return static_cast<int64_t>(v.get<uint64_t>());
  if (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() >= limits.lo &&
      v.get<int64_t>() <= limits.hi)
    return v.get<int64_t>();
  fail_expected(key, v, describe_limits(limits));
}

double read_spike_factor(const json& v, const std::string& key) {
  const char* expected = "a number > 1 (the loss must exceed k x the median of the last n)";
  if (!v.is_number()) fail_expected(key, v, expected);
  const double k = v.get<double>();
  if (!(k > 1.0) || !(k <= kSpikeFactorMax)) fail_expected(key, v, expected);
  return k;
}

void parse_spike(const json& v, const std::string& key, AnomalyTriggers& t) {
  const char* expected =
      "false (off) or an object {\"k\": 10, \"n\": 20}: the loss exceeds k x the median of "
      "the last n healthy losses";
  if (v.is_boolean() && !v.get<bool>()) {
    t.spike_k = 0;
    return;
  }
  if (!v.is_object()) fail_expected(key, v, expected);
  t.spike_k = 10;
  t.spike_n = 20;
  for (const auto& item : v.items()) {
    const std::string sub = key + "." + item.key();
    if (item.key() == "k") {
      t.spike_k = read_spike_factor(item.value(), sub);
    } else if (item.key() == "n") {
      t.spike_n = read_int(item.value(), sub, kSpikeWindowLimits);
    } else {
      throw Error("unknown config key '" + sub + "'. Valid keys in '" + key + "': k, n");
    }
  }
}

}  // namespace

const char* record_mode_name(RecordMode m) {
  return m == RecordMode::kOnAnomaly ? "on_anomaly" : "always";
}

// The statistics sections' "range": false | true | "all".
void parse_range_stats(const json& v, const std::string& k, DebuggerOptions& o) {
  if (v.is_boolean()) {
    o.range_stats = v.get<bool>() ? RangeStats::kTraining : RangeStats::kOff;
  } else if (v.is_string() && v.get<std::string>() == "all") {
    o.range_stats = RangeStats::kAll;
  } else {
    fail_expected(k, v, "true (ops under grad mode and the backward), \"all\" (every op) or false");
  }
}

void parse_record_mode(const json& v, const std::string& key, DebuggerOptions& o) {
  const char* expected =
      "one of \"always\" (every step \"step\" selects), \"on_anomaly\" (only a step found "
      "anomalous, replayed: needs start(model, optimizer) and run_step())";
  if (!v.is_string()) fail_expected(key, v, expected);
  const std::string& s = v.get_ref<const std::string&>();
  if (s == "always") {
    o.record = RecordMode::kAlways;
  } else if (s == "on_anomaly") {
    o.record = RecordMode::kOnAnomaly;
  } else {
    fail_expected(key, v, expected);
  }
}

void parse_on_anomaly(const json& v, const std::string& key, DebuggerOptions& o) {
  if (!v.is_object())
    fail_expected(key, v, "an object: the triggers of \"record\": \"on_anomaly\"");
  AnomalyTriggers& t = o.on_anomaly;
  for (const auto& item : v.items()) {
    const std::string& name = item.key();
    const std::string sub = key + "." + name;
    if (name == "loss_nonfinite") {
      t.loss_nonfinite = read_bool(item.value(), sub);
    } else if (name == "grad_nonfinite") {
      t.grad_nonfinite = read_bool(item.value(), sub);
    } else if (name == "loss_spike") {
      parse_spike(item.value(), sub, t);
    } else if (name == "max_replays") {
      t.max_replays = read_int(item.value(), sub, kMaxReplaysLimits);
    } else {
      throw Error("unknown config key '" + sub + "'. Valid keys in '" + key +
                  "': loss_nonfinite, grad_nonfinite, loss_spike, max_replays");
    }
  }
}

void validate_record(const DebuggerOptions& o) {
  const AnomalyTriggers& t = o.on_anomaly;
  if (std::fpclassify(t.spike_k) != FP_ZERO && !(t.spike_k > 1.0 && t.spike_k <= kSpikeFactorMax)) {
    fail_key("on_anomaly.loss_spike.k",
             "is " + std::to_string(t.spike_k) + "; allowed: a number > 1 (0 turns it off)");
  }
  if (t.spike_n < kSpikeWindowLimits.lo || t.spike_n > kSpikeWindowLimits.hi) {
    fail_key("on_anomaly.loss_spike.n", std::to_string(t.spike_n) + " is out of range; allowed: " +
                                            describe_limits(kSpikeWindowLimits));
  }
  if (t.max_replays < kMaxReplaysLimits.lo || t.max_replays > kMaxReplaysLimits.hi) {
    fail_key("on_anomaly.max_replays",
             std::to_string(t.max_replays) +
                 " is out of range; allowed: " + describe_limits(kMaxReplaysLimits));
  }
  const bool changed =
      !t.loss_nonfinite || !t.grad_nonfinite || t.spike_k > 0 || t.max_replays != 1;
  if (o.record == RecordMode::kAlways && changed) {
    fail_key("on_anomaly",
             "is set but \"record\" is \"always\", so it would change nothing; add \"record\": "
             "\"on_anomaly\" or remove it");
  }
  if (o.record == RecordMode::kOnAnomaly && !t.loss_nonfinite && !t.grad_nonfinite &&
      !(t.spike_k > 0)) {
    fail_key("on_anomaly",
             "turns every trigger off (loss_nonfinite, grad_nonfinite, loss_spike), so no step "
             "would ever be recorded; turn one on or use \"record\": \"always\"");
  }
}

nlohmann::ordered_json on_anomaly_json(const AnomalyTriggers& t) {
  nlohmann::ordered_json j;
  j["loss_nonfinite"] = t.loss_nonfinite;
  j["grad_nonfinite"] = t.grad_nonfinite;
  if (t.spike_k > 0) {
    j["loss_spike"] = {{"k", t.spike_k}, {"n", t.spike_n}};
  } else {
    j["loss_spike"] = false;
  }
  j["max_replays"] = t.max_replays;
  return j;
}

}  // namespace detail
}  // namespace precprobe
