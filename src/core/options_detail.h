// Private to the options implementation: names of enum values as config.json spells them,
// numeric limits shared by the parser and validate(), and the message helpers both use.
// Pure functions and constants; any thread.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "precprobe/options.h"

namespace precprobe {
namespace detail {

/// Inclusive bounds of an integer key.
struct IntLimits {
  int64_t lo;
  int64_t hi;
};

constexpr IntLimits kSeedLimits{0, 4294967295LL};  // msprobe: 0 .. 2^32-1
constexpr IntLimits kQueueCapacityLimits{16, int64_t{1} << 30};
constexpr IntLimits kFlushEveryLimits{1, int64_t{1} << 30};
constexpr IntLimits kFlushIntervalLimits{1, std::numeric_limits<int>::max()};
constexpr IntLimits kZstdLevelLimits{1, 19};
constexpr IntLimits kCrashFlushTimeoutLimits{0, 60000};
constexpr IntLimits kReplicaCheckLimits{0, std::numeric_limits<int32_t>::max()};
constexpr IntLimits kMaxCallsPerOpLimits{-1, std::numeric_limits<int32_t>::max()};
constexpr IntLimits kMaxTensorBytesLimits{0, std::numeric_limits<int64_t>::max()};
constexpr IntLimits kIndexLimits{0, std::numeric_limits<int64_t>::max()};  // rank, step

const char* task_name(Task t);
const char* level_name(Level l);
const char* summary_mode_name(SummaryMode m);
const char* overflow_policy_name(OverflowPolicy p);
const char* record_mode_name(RecordMode m);

// "record" and "on_anomaly" (options_record.cpp): parsing, validate()'s rules, to_json().
void parse_record_mode(const nlohmann::json& v, const std::string& key, DebuggerOptions& o);
void parse_range_stats(const nlohmann::json& v, const std::string& key, DebuggerOptions& o);
void parse_on_anomaly(const nlohmann::json& v, const std::string& key, DebuggerOptions& o);
void validate_record(const DebuggerOptions& o);
nlohmann::ordered_json on_anomaly_json(const AnomalyTriggers& t);
// "watch" (options_watch.cpp).
void parse_watch(const nlohmann::json& v, const std::string& key, DebuggerOptions& o);

/// "an integer in 1..19", "an integer >= 0".
std::string describe_limits(const IntLimits& limits);
/// A JSON value for messages: its type and (shortened) text, e.g. `string "3"`.
std::string describe_value(const nlohmann::json& v);
/// The text of an IntSet as msprobe writes it, e.g. [1, "5-7"].
nlohmann::ordered_json int_set_json(const IntSet& set);

/// Throws Error("config key '<key>': <what>").
[[noreturn]] void fail_key(const std::string& key, const std::string& what);

/// Parses config text; throws Error for invalid JSON (with line and column) and for a key
/// written twice in one object (JSON would silently keep the last).
nlohmann::json parse_json(const std::string& text);
/// The JSON → options step of from_json, without validate().
DebuggerOptions parse_options(const nlohmann::json& root);

}  // namespace detail
}  // namespace precprobe
