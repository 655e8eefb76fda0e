// DebuggerOptions beyond parsing: IntSet, validate(), to_json(), loading files and
// $PRECPROBE_CONFIG. The JSON → options step is in options_parse.cpp.
#include "precprobe/options.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>

#include "options_detail.h"
#include "precprobe/error.h"

namespace precprobe {

using nlohmann::json;
using nlohmann::ordered_json;

// ---- IntSet ----

namespace {

// True when [.., a_hi] and [b_lo, ..] with a_hi's range starting first overlap or touch.
bool joins(int64_t a_hi, int64_t b_lo) {
  return b_lo <= a_hi || (a_hi < std::numeric_limits<int64_t>::max() && a_hi + 1 == b_lo);
}

}  // namespace

void IntSet::add(int64_t lo, int64_t hi) {
  if (lo > hi) {
    throw Error("IntSet::add: range " + std::to_string(lo) + "-" + std::to_string(hi) +
                " is reversed; lo must be <= hi");
  }
  // Keep ranges sorted, disjoint and not touching, so contains() can binary-search.
  // Adding in ascending order (as the parser does) appends: O(1) amortised.
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), std::make_pair(lo, hi));
  if (it != ranges_.begin() && joins(std::prev(it)->second, lo)) {
    --it;
    it->second = std::max(it->second, hi);
  } else {
    it = ranges_.insert(it, {lo, hi});
  }
  auto next = std::next(it);
  while (next != ranges_.end() && joins(it->second, next->first)) {
    it->second = std::max(it->second, next->second);
    ++next;
  }
  ranges_.erase(std::next(it), next);
}

void IntSet::add_every(int64_t lo, int64_t hi, int64_t every) {
  if (every < 1) {
    throw Error("IntSet::add_every: stride " + std::to_string(every) + " must be >= 1");
  }
  if (lo > hi) add(lo, hi);  // throws
  if (every == 1 || lo == hi) {
    add(lo, hi);
    return;
  }
  const int64_t last = lo + (hi - lo) / every * every;  // no overflow: <= hi
  if (last == lo) {
    add(lo, lo);
    return;
  }
  strided_.push_back({lo, last, every});
}

bool IntSet::contains(int64_t v) const noexcept {
  if (empty()) return true;
  for (const Strided& s : strided_) {
    if (v >= s.lo && v <= s.hi && (v - s.lo) % s.every == 0) return true;
  }
  if (ranges_.empty()) return false;
  auto it =
      std::upper_bound(ranges_.begin(), ranges_.end(), v,
                       [](int64_t x, const std::pair<int64_t, int64_t>& r) { return x < r.first; });
  if (it == ranges_.begin()) return false;
  --it;
  return v <= it->second;
}

std::optional<int64_t> IntSet::max() const noexcept {
  if (empty()) return std::nullopt;
  int64_t m = ranges_.empty() ? std::numeric_limits<int64_t>::min() : ranges_.back().second;
  for (const Strided& s : strided_) m = std::max(m, s.hi);
  return m;
}

std::string IntSet::to_json() const {
  // ", " between elements, as the msprobe examples write them.
  std::string out = "[";
  for (const auto& element : detail::int_set_json(*this)) {
    if (out.size() > 1) out += ", ";
    out += element.dump();
  }
  return out + "]";
}

// ---- helpers shared with the parser ----

std::string_view to_string(Task t) noexcept {
  switch (t) {
    case Task::kStatistics:
      return "statistics";
    case Task::kTensor:
      return "tensor";
    case Task::kOverflowCheck:
      return "overflow_check";
  }
  return "statistics";
}

std::string_view to_string(Level l) noexcept { return l == Level::kL2 ? "L2" : "L1"; }

namespace detail {

const char* task_name(Task t) { return to_string(t).data(); }

const char* level_name(Level l) { return to_string(l).data(); }

const char* summary_mode_name(SummaryMode m) {
  return m == SummaryMode::kHash ? "hash" : "statistics";
}

const char* overflow_policy_name(OverflowPolicy p) {
  return p == OverflowPolicy::kDrop ? "drop" : "block";
}

std::string describe_limits(const IntLimits& limits) {
  if (limits.hi == std::numeric_limits<int64_t>::max()) {
    return "an integer >= " + std::to_string(limits.lo);
  }
  return "an integer in " + std::to_string(limits.lo) + ".." + std::to_string(limits.hi);
}

std::string describe_value(const json& v) {
  const char* type = "value";
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      type = "boolean";
      break;
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      type = "integer";
      break;
    case json::value_t::number_float:
      type = "number";
      break;
    case json::value_t::string:
      type = "string";
      break;
    case json::value_t::array:
      type = "array";
      break;
    case json::value_t::object:
      type = "object";
      break;
    default:
      break;
  }
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  constexpr size_t kMaxText = 60;
  if (text.size() > kMaxText) text = text.substr(0, kMaxText - 3) + "...";
  return std::string(type) + " " + text;
}

ordered_json int_set_json(const IntSet& set) {
  ordered_json out = ordered_json::array();
  for (const auto& r : set.ranges()) {
    if (r.first == r.second) {
      out.push_back(r.first);
    } else {
      out.push_back(std::to_string(r.first) + "-" + std::to_string(r.second));
    }
  }
  for (const auto& s : set.strided()) {
    out.push_back(std::to_string(s.lo) + "-" + std::to_string(s.hi) + "/" +
                  std::to_string(s.every));
  }
  return out;
}

void fail_key(const std::string& key, const std::string& what) {
  throw Error("config key '" + key + "': " + what);
}

}  // namespace detail

// ---- validate ----

namespace {

void check_int(const std::string& key, int64_t value, const detail::IntLimits& limits) {
  if (value < limits.lo || value > limits.hi) {
    detail::fail_key(key, std::to_string(value) +
                              " is out of range; allowed: " + detail::describe_limits(limits));
  }
}

void check_int_set(const std::string& key, const IntSet& set) {
  auto negative = [&key](int64_t v) {
    detail::fail_key(key, "negative value " + std::to_string(v) +
                              "; allowed: integers >= 0 and ranges \"lo-hi\" of them");
  };
  if (!set.ranges().empty() && set.ranges().front().first < 0) negative(set.ranges().front().first);
  for (const auto& s : set.strided()) {
    if (s.lo < 0) negative(s.lo);
  }
}

void check_names(const std::string& key, const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    if (n.empty()) detail::fail_key(key, "an entry is the empty string; remove it");
  }
}

}  // namespace

void DebuggerOptions::validate() const {
  using detail::fail_key;
  const std::string section = detail::task_name(task);
  if (dump_path.empty()) {
    fail_key("dump_path", "must not be empty (the dump directory; default \"./precprobe_dump\")");
  }
  check_int_set("rank", rank);
  check_int_set("step", step);
  if (seed) {
    if (*seed > static_cast<uint64_t>(detail::kSeedLimits.hi)) {
      fail_key("seed", std::to_string(*seed) + " is out of range; allowed: " +
                           detail::describe_limits(detail::kSeedLimits));
    }
  }
  if (scope.size() > 2) {
    fail_key(section + ".scope",
             "has " + std::to_string(scope.size()) +
                 " entries; allowed: none, one scope path prefix, or two op names bounding a "
                 "range");
  }
  check_names(section + ".scope", scope);
  check_names(section + ".list", list);
  try {
    NameMatcher matcher(list);  // compiles every name-regex(...) once to report bad ones now
  } catch (const Error& e) {
    fail_key(section + ".list", e.what());
  }
  if (!dump_forward && !dump_backward) {
    fail_key(section + ".data_mode",
             "selects neither forward nor backward calls, so nothing would be recorded");
  }
  if (!dump_inputs && !dump_outputs) {
    fail_key(section + ".data_mode",
             "selects neither inputs nor outputs, so nothing would be recorded");
  }
  if (overflow_nums != -1 && overflow_nums < 1) {
    fail_key("overflow_check.overflow_nums", std::to_string(overflow_nums) +
                                                 " is out of range; allowed: -1 (unlimited) "
                                                 "or an integer >= 1");
  }
  check_int("queue_capacity", static_cast<int64_t>(std::min<size_t>(queue_capacity, INT64_MAX)),
            detail::kQueueCapacityLimits);
  check_int("flush_every_records",
            static_cast<int64_t>(std::min<size_t>(flush_every_records, INT64_MAX)),
            detail::kFlushEveryLimits);
  check_int("flush_interval_ms", flush_interval_ms, detail::kFlushIntervalLimits);
  check_int("zstd_level", zstd_level, detail::kZstdLevelLimits);
  check_int("crash_flush_timeout_ms", crash_flush_timeout_ms, detail::kCrashFlushTimeoutLimits);
  check_int("max_tensor_bytes", max_tensor_bytes, detail::kMaxTensorBytesLimits);
  check_int("replica_check_every", replica_check_every, detail::kReplicaCheckLimits);
  detail::validate_record(*this);
  watch.validate();
  check_int("max_calls_per_op", max_calls_per_op, detail::kMaxCallsPerOpLimits);
  if (max_calls_per_op == 0) {
    fail_key("max_calls_per_op", "0 would record nothing; allowed: -1 (all calls) or >= 1");
  }
  if (task == Task::kTensor && list.empty() && scope.empty()) {
    throw Error(
        "task 'tensor' saves full tensors only for ops named in 'list' or 'scope'; add one "
        "(in the \"tensor\" section, e.g. \"tensor\": {\"list\": [\"aten::addmm\"]}). Saving "
        "every tensor of every op is never done by default; use task 'statistics' to survey "
        "all ops first");
  }
}

// ---- to_json ----

namespace {

ordered_json data_mode_json(const DebuggerOptions& o) {
  ordered_json modes = ordered_json::array();
  const bool all_dirs = o.dump_forward && o.dump_backward;
  const bool all_io = o.dump_inputs && o.dump_outputs;
  if (all_dirs && all_io) return ordered_json::array({"all"});
  if (!all_dirs) modes.push_back(o.dump_forward ? "forward" : "backward");
  if (!all_io) modes.push_back(o.dump_inputs ? "input" : "output");
  return modes;
}

}  // namespace

ordered_json DebuggerOptions::to_json_value() const {
  ordered_json j;
  j["task"] = detail::task_name(task);
  j["dump_path"] = dump_path;
  j["rank"] = detail::int_set_json(rank);
  j["step"] = detail::int_set_json(step);
  j["level"] = detail::level_name(level);
  if (seed) j["seed"] = *seed;
  j["is_deterministic"] = is_deterministic;
  ordered_json section;
  section["scope"] = scope;
  section["list"] = list;
  section["data_mode"] = data_mode_json(*this);
  section["summary_mode"] = detail::summary_mode_name(summary_mode);
  if (range_stats == RangeStats::kAll) {
    section["range"] = "all";
  } else {
    section["range"] = range_stats == RangeStats::kTraining;
  }
  if (task == Task::kOverflowCheck) section["overflow_nums"] = overflow_nums;
  j[detail::task_name(task)] = std::move(section);
  j["enable"] = enable;
  j["keep_dropout"] = keep_dropout;
  j["overwrite"] = overwrite;
  j["async_stats"] = async_stats;
  j["grad_monitor"] = grad_monitor;
  j["queue_capacity"] = queue_capacity;
  j["overflow_policy"] = detail::overflow_policy_name(overflow_policy);
  j["flush_every_records"] = flush_every_records;
  j["flush_interval_ms"] = flush_interval_ms;
  j["zstd_level"] = zstd_level;
  j["fsync"] = fsync;
  j["ops_encoding"] = ops_encoding == OpsEncoding::kBinary ? "binary" : "json";
  j["max_tensor_bytes"] = max_tensor_bytes;
  j["signal_flush"] = signal_flush;
  j["crash_flush"] = crash_flush;
  j["crash_flush_timeout_ms"] = crash_flush_timeout_ms;
  j["replica_check_every"] = replica_check_every;
  j["record"] = detail::record_mode_name(record);
  j["on_anomaly"] = detail::on_anomaly_json(on_anomaly);
  j["watch"] = watch.to_json_value();
  j["max_calls_per_op"] = max_calls_per_op;
  j["reuse_across_steps"] = reuse_across_steps;
  j["tune_malloc"] = tune_malloc;
  return j;
}

std::string DebuggerOptions::to_json() const {
  // Strings set from C++ may hold invalid UTF-8; replace rather than throw.
  return to_json_value().dump(2, ' ', false, json::error_handler_t::replace);
}

// ---- from text, files and the environment ----

DebuggerOptions DebuggerOptions::from_json(const std::string& json_text) {
  DebuggerOptions options = detail::parse_options(detail::parse_json(json_text));
  options.validate();
  return options;
}

namespace {

std::string read_whole_file(const std::string& path, const std::string& origin) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) {
    throw Error("cannot open config file '" + path + "'" + origin + ": " + std::strerror(errno));
  }
  std::string text;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) text.append(buf, n);
  if (std::ferror(f.get())) {
    throw Error("cannot read config file '" + path + "'" + origin + ": " + std::strerror(errno));
  }
  return text;
}

DebuggerOptions load_file(const std::string& path, const std::string& origin) {
  const std::string text = read_whole_file(path, origin);
  try {
    return DebuggerOptions::from_json(text);
  } catch (const Error& e) {
    throw Error("config file '" + path + "'" + origin + ": " + e.what());
  }
}

}  // namespace

DebuggerOptions DebuggerOptions::from_json_file(const std::string& path) {
  return load_file(path, "");
}

DebuggerOptions DebuggerOptions::from_env_or(const DebuggerOptions& fallback) {
  const char* env = std::getenv("PRECPROBE_CONFIG");
  if (env == nullptr || *env == '\0') return fallback;
  return load_file(env, " (path from PRECPROBE_CONFIG)");
}

}  // namespace precprobe
