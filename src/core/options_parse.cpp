// config.json → DebuggerOptions: key tables for the top level and the active task
// section, type and value checks with messages that name the key, what was found and what
// is allowed, and "did you mean" for unknown keys. validate() runs afterwards.
//
// Leniency follows msprobe: sections of tasks other than the chosen one are skipped
// unread (msprobe's shipped config.json carries them all), but every key of the top level
// and of the active section must be known.
#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "options_detail.h"
#include "precprobe/error.h"
#include "precprobe/options.h"
#include "suggest.h"

namespace precprobe {
namespace detail {
namespace {

using nlohmann::json;

[[noreturn]] void fail_expected(const std::string& key, const json& v,
                                const std::string& expected) {
  fail_key(key, "expected " + expected + ", found " + describe_value(v));
}

std::string quoted_list(const std::vector<std::string>& values) {
  std::string out;
  for (const std::string& v : values) out += (out.empty() ? "\"" : ", \"") + v + "\"";
  return out;
}

bool get_bool(const json& v, const std::string& key) {
  if (!v.is_boolean()) fail_expected(key, v, "a boolean (true or false)");
  return v.get<bool>();
}

int64_t get_int(const json& v, const std::string& key, const IntLimits& limits,
                const std::string& expected = "") {
  const std::string what = expected.empty() ? describe_limits(limits) : expected;
  if (v.is_number_unsigned()) {
    const uint64_t x = v.get<uint64_t>();
    if (x <= static_cast<uint64_t>(limits.hi) && static_cast<int64_t>(x) >= limits.lo) {
      return static_cast<int64_t>(x);
    }
  } else if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x >= limits.lo && x <= limits.hi) return x;
  }
  fail_expected(key, v, what);
}

std::string get_string(const json& v, const std::string& key, const std::string& expected) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty()) fail_expected(key, v, expected);
  return v.get<std::string>();
}

std::string get_enum(const json& v, const std::string& key,
                     const std::vector<std::string>& allowed) {
  const std::string expected = "one of " + quoted_list(allowed);
  if (!v.is_string()) fail_expected(key, v, expected);
  const std::string& s = v.get_ref<const std::string&>();
  for (const std::string& a : allowed) {
    if (s == a) return a;
  }
  const std::string suggestion = closest_match(s, allowed);
  fail_expected(key, v,
                expected + (suggestion.empty() ? "" : " (did you mean \"" + suggestion + "\"?)"));
}

std::vector<std::string> get_string_list(const json& v, const std::string& key) {
  if (!v.is_array()) fail_expected(key, v, "a list of non-empty strings");
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    out.push_back(get_string(v[i], key + "[" + std::to_string(i) + "]", "a non-empty string"));
  }
  return out;
}

struct IntSetElement {
  int64_t lo = 0, hi = 0, every = 1;
  bool operator<(const IntSetElement& o) const {
    return std::tie(lo, hi, every) < std::tie(o.lo, o.hi, o.every);
  }
};

// One element of "rank"/"step": 5, "4-6", or "0-1000/10" (every 10th value of the range:
// 0, 10, ... 1000). Spaces around the numbers are allowed.
IntSetElement parse_int_set_element(const json& v, const std::string& key) {
  const char* expected =
      "an integer >= 0, a range string \"lo-hi\" like \"4-6\", or \"lo-hi/N\" (every N-th "
      "value of the range) like \"0-100000/100\"";
  if (v.is_number_integer()) {
    if (!v.is_number_unsigned()) {
      fail_key(key, "negative value " + std::to_string(v.get<int64_t>()) +
                        "; allowed: integers >= 0 and ranges \"lo-hi\" of them");
    }
    if (v.get<uint64_t>() > static_cast<uint64_t>(kIndexLimits.hi)) fail_expected(key, v, expected);
    const auto x = static_cast<int64_t>(v.get<uint64_t>());
    return {x, x, 1};
  }
  if (!v.is_string()) fail_expected(key, v, expected);
  const std::string& s = v.get_ref<const std::string&>();
  size_t pos = 0;
  auto skip_spaces = [&] {
    while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos])) != 0) ++pos;
  };
  auto read_number = [&](int64_t& out) {
    skip_spaces();
    const size_t start = pos;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos])) != 0) ++pos;
    // 18 digits always fit in int64_t.
    if (pos == start || pos - start > 18) return false;
    out = std::stoll(s.substr(start, pos - start));
    skip_spaces();
    return true;
  };
  int64_t lo = 0;
  int64_t hi = 0;
  skip_spaces();
  const bool negative = pos < s.size() && s[pos] == '-';
  if (negative || !read_number(lo) || pos >= s.size() || s[pos] != '-') {
    fail_expected(key, v, std::string(expected) + (negative ? " (values are >= 0)" : ""));
  }
  ++pos;
  if (!read_number(hi)) fail_expected(key, v, expected);
  int64_t every = 1;
  if (pos < s.size() && s[pos] == '/') {
    ++pos;
    if (!read_number(every)) fail_expected(key, v, expected);
    if (every < 1) {
      fail_key(key, "stride " + std::to_string(every) + " in \"" + s +
                        "\" must be >= 1 (\"lo-hi/N\" records every N-th value)");
    }
  }
  if (pos != s.size()) fail_expected(key, v, expected);
  if (lo > hi) {
    fail_key(key, "range \"" + s + "\" is reversed; write \"" + std::to_string(hi) + "-" +
                      std::to_string(lo) + "\"");
  }
  return {lo, hi, every};
}

IntSet get_int_set(const json& v, const std::string& key) {
  if (!v.is_array()) {
    fail_expected(key, v,
                  "a list of integers >= 0 and range strings like \"4-6\" or \"0-1000/10\" "
                  "([] = all)");
  }
  std::vector<IntSetElement> ranges;
  for (size_t i = 0; i < v.size(); ++i) {
    ranges.push_back(parse_int_set_element(v[i], key + "[" + std::to_string(i) + "]"));
  }
  // Sorted first, every add() appends or merges at the end: a long list stays O(n log n).
  std::sort(ranges.begin(), ranges.end());
  IntSet set;
  for (const auto& r : ranges) set.add_every(r.lo, r.hi, r.every);
  return set;
}

// ---- values with msprobe-specific explanations ----

constexpr const char* kNoOnlineCheck =
    "precprobe has no online accuracy checker; dump two runs and compare them with the "
    "precprobe command line tool";

void parse_task(const json& v, DebuggerOptions& o) {
  struct Unsupported {
    const char* name;
    const char* hint;
  };
  static const Unsupported kUnsupported[] = {
      {"grad_probe",
       "precprobe's \"grad_monitor\", on by default, records per-parameter gradient "
       "statistics every step"},
      {"free_benchmark", kNoOnlineCheck},
      {"run_ut", kNoOnlineCheck},
      {"acc_check", kNoOnlineCheck},
      {"structure", "precprobe records no model structure; records carry their Scope path"},
      {"exception_dump", "use task \"overflow_check\""},
      {"nan_check",
       "use task \"overflow_check\", which records the calls whose outputs turn non-finite"},
  };
  if (v.is_string()) {
    for (const Unsupported& u : kUnsupported) {
      if (v.get_ref<const std::string&>() == u.name) {
        fail_key("task", std::string("\"") + u.name +
                             "\" is an msprobe task not supported by precprobe: " + u.hint +
                             ". Allowed: \"statistics\", \"tensor\", \"overflow_check\"");
      }
    }
  }
  const std::string t = get_enum(v, "task", {"statistics", "tensor", "overflow_check"});
  o.task = t == "tensor"           ? Task::kTensor
           : t == "overflow_check" ? Task::kOverflowCheck
                                   : Task::kStatistics;
}

void parse_level(const json& v, const std::string& key, DebuggerOptions& o) {
  static const char* kMeaning =
      "precprobe observes ATen ops, not modules: \"L1\" records the outermost ATen op of "
      "each call from user code (depth 0), \"L2\" every ATen op, nested ones too; name "
      "regions of a model with precprobe::Scope";
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "L0" || s == "mix") {
      fail_key(key, "\"" + s + "\" (msprobe's " + (s == "L0" ? "module level" : "modules + APIs") +
                        ") is not supported by precprobe; allowed: \"L1\", \"L2\". " + kMeaning);
    }
  }
  if (!v.is_string() || (v != "L1" && v != "L2")) {
    fail_expected(key, v, std::string("one of \"L1\", \"L2\" (") + kMeaning + ")");
  }
  o.level = v == "L2" ? Level::kL2 : Level::kL1;
}

void parse_data_mode(const json& v, const std::string& key, DebuggerOptions& o) {
  const std::vector<std::string> allowed = {"all", "forward", "backward", "input", "output"};
  const std::string expected = "a non-empty list of " + quoted_list(allowed);
  if (!v.is_array() || v.empty()) fail_expected(key, v, expected);
  bool all = false, fwd = false, bwd = false, in = false, out = false;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string m = get_enum(v[i], key + "[" + std::to_string(i) + "]", allowed);
    all |= m == "all";
    fwd |= m == "forward";
    bwd |= m == "backward";
    in |= m == "input";
    out |= m == "output";
  }
  // Directions and sides filter independently: ["forward", "input"] = forward inputs only;
  // a list naming no direction keeps both directions, and likewise for sides.
  const bool any_dir = fwd || bwd;
  const bool any_side = in || out;
  o.dump_forward = all || !any_dir || fwd;
  o.dump_backward = all || !any_dir || bwd;
  o.dump_inputs = all || !any_side || in;
  o.dump_outputs = all || !any_side || out;
}

// ---- key tables ----

using Apply = void (*)(const json& v, const std::string& key, DebuggerOptions& o);

struct KeySpec {
  const char* name;
  Apply apply;
};

// A bool key stored in a DebuggerOptions field.
template <bool DebuggerOptions::*Field>
void set_bool(const json& v, const std::string& k, DebuggerOptions& o) {
  o.*Field = get_bool(v, k);
}

// msprobe keys precprobe knows but cannot honour: rejected with the reason.
struct Rejected {
  const char* location;  // "" = top level, else the task section
  const char* name;
  const char* reason;
};

const KeySpec kTopKeys[] = {
    {"dump_path",
     [](const json& v, const std::string& k, DebuggerOptions& o) {
       o.dump_path = get_string(v, k, "a non-empty string (the dump directory)");
     }},
    {"rank",
     [](const json& v, const std::string& k, DebuggerOptions& o) { o.rank = get_int_set(v, k); }},
    {"step",
     [](const json& v, const std::string& k, DebuggerOptions& o) {
       // A lone range string ("step": "0-100000/100") reads as a list of that one element.
       o.step = get_int_set(v.is_string() ? json::array({v}) : v, k);
     }},
    {"level", parse_level},
    {"seed",
     [](const json& v, const std::string& k, DebuggerOptions& o) {
       if (v.is_null()) {
         o.seed.reset();
       } else {
         o.seed = static_cast<uint64_t>(get_int(v, k, kSeedLimits));
       }
     }},
    {"is_deterministic", set_bool<&DebuggerOptions::is_deterministic>},
    // Accepted for msprobe compatibility; they change nothing (docs/config.md says why).
    {"async_dump", [](const json& v, const std::string& k, DebuggerOptions&) { get_bool(v, k); }},
    {"extra_info", [](const json& v, const std::string& k, DebuggerOptions&) { get_bool(v, k); }},
    {"precision",
     [](const json& v, const std::string& k, DebuggerOptions&) {
       get_enum(v, k, {"high", "low"});
     }},
    {"enable_dataloader",
     [](const json& v, const std::string& k, DebuggerOptions&) {
       if (get_bool(v, k)) {
         fail_key(k,
                  "true is not supported by precprobe: call PrecisionDebugger::step() at "
                  "the end of each training step; allowed: false");
       }
     }},
    // precprobe's own keys.
    {"enable", set_bool<&DebuggerOptions::enable>},
    {"keep_dropout", set_bool<&DebuggerOptions::keep_dropout>},
    {"overwrite", set_bool<&DebuggerOptions::overwrite>},
    {"async_stats", set_bool<&DebuggerOptions::async_stats>},
    {"grad_monitor", set_bool<&DebuggerOptions::grad_monitor>},
    {"queue_capacity",
     [](const json& v, const std::string& k, DebuggerOptions& o) {
       o.queue_capacity = static_cast<size_t>(get_int(v, k, kQueueCapacityLimits));
     }},
    {"overflow_policy",
     [](const json& v, const std::string& k, DebuggerOptions& o) {
       o.overflow_policy = get_enum(v, k, {"block", "drop"}) == "drop" ? OverflowPolicy::kDrop
                                                                       : OverflowPolicy::kBlock;
     }},
    {"flush_every_records",
     [](const json& v, const std::string& k, DebuggerOptions& o) {
       o.flush_every_records = static_cast<size_t>(get_int(v, k, kFlushEveryLimits));
     }},
    {"flush_interval_ms",
     [](const json& v, const std::string& k, DebuggerOptions& o) {
       o.flush_interval_ms = static_cast<int>(get_int(v, k, kFlushIntervalLimits));
     }},
    {"zstd_level",
     [](const json& v, const std::string& k, DebuggerOptions& o) {
       o.zstd_level = static_cast<int>(get_int(v, k, kZstdLevelLimits));
     }},
    {"fsync", set_bool<&DebuggerOptions::fsync>},
    {"ops_encoding",
     [](const json& v, const std::string& k, DebuggerOptions& o) {
       o.ops_encoding = get_enum(v, k, {"json", "binary"}) == "binary" ? OpsEncoding::kBinary
                                                                       : OpsEncoding::kJsonLines;
     }},
    {"max_tensor_bytes",
     [](const json& v, const std::string& k, DebuggerOptions& o) {
       o.max_tensor_bytes = get_int(v, k, kMaxTensorBytesLimits);
     }},
    {"signal_flush", set_bool<&DebuggerOptions::signal_flush>},
    {"crash_flush", set_bool<&DebuggerOptions::crash_flush>},
    {"crash_flush_timeout_ms",
     [](const json& v, const std::string& k, DebuggerOptions& o) {
       o.crash_flush_timeout_ms = static_cast<int>(get_int(v, k, kCrashFlushTimeoutLimits));
     }},
    {"replica_check_every",
     [](const json& v, const std::string& k, DebuggerOptions& o) {
       o.replica_check_every = get_int(v, k, kReplicaCheckLimits);
     }},
    {"record", parse_record_mode},
    {"on_anomaly", parse_on_anomaly},
    {"watch", parse_watch},
    {"reuse_across_steps", set_bool<&DebuggerOptions::reuse_across_steps>},
    {"tune_malloc", set_bool<&DebuggerOptions::tune_malloc>},
    {"max_calls_per_op",
     [](const json& v, const std::string& k, DebuggerOptions& o) {
       const char* allowed = "-1 (all calls) or an integer >= 1";
       o.max_calls_per_op = get_int(v, k, kMaxCallsPerOpLimits, allowed);
       if (o.max_calls_per_op == 0) fail_expected(k, v, allowed);
     }},
};

// Keys of every task section; the section-specific ones follow.
const KeySpec kSectionKeys[] = {
    {"scope",
     [](const json& v, const std::string& k, DebuggerOptions& o) {
       o.scope = get_string_list(v, k);
       if (o.scope.size() > 2) {
         fail_expected(k, v,
                       "at most 2 names: [] (no restriction), one scope path prefix, "
                       "or two op names bounding a range");
       }
     }},
    {"list", [](const json& v, const std::string& k,
                DebuggerOptions& o) { o.list = get_string_list(v, k); }},
    {"data_mode", parse_data_mode},
    {"summary_mode",
     [](const json& v, const std::string& k, DebuggerOptions& o) {
       o.summary_mode = get_enum(v, k, {"statistics", "hash", "md5"}) == "statistics"
                            ? SummaryMode::kStatistics
                            : SummaryMode::kHash;
     }},
    {"range", parse_range_stats},
};

const KeySpec kStatisticsKeys[] = {
    {"tensor_list",
     [](const json& v, const std::string& k, DebuggerOptions&) {
       if (!get_string_list(v, k).empty()) {
         fail_key(k,
                  "precprobe saves no full tensors in a statistics run; use \"task\": "
                  "\"tensor\" with these names in \"tensor\": {\"list\": [...]} (statistics "
                  "are recorded there too); allowed here: [] only");
       }
     }},
};

const KeySpec kOverflowCheckKeys[] = {
    {"overflow_nums",
     [](const json& v, const std::string& k, DebuggerOptions& o) {
       const int64_t n = get_int(v, k, {-1, std::numeric_limits<int64_t>::max()},
                                 "-1 (unlimited) or an integer >= 1");
       if (n == 0) fail_expected(k, v, "-1 (unlimited) or an integer >= 1");
       o.overflow_nums = n;
     }},
};

const Rejected kRejected[] = {
    {"", "dump_enable",
     "precprobe reads its configuration once; switch recording with "
     "start()/stop() and choose steps with \"step\""},
    {"tensor", "file_format",
     "precprobe always saves tensors as zstd-compressed NumPy files (.npy.zst)"},
    {"tensor", "tensor_list",
     "the tensor task saves full tensors of the ops \"list\" selects; put the names there"},
    {"tensor", "bench_path", kNoOnlineCheck},
    {"tensor", "diff_nums", kNoOnlineCheck},
    {"overflow_check", "check_mode", "a MindSpore-only msprobe key"},
};

// Sections that are never read: msprobe tasks precprobe does not run.
const char* const kForeignSections[] = {"free_benchmark", "run_ut",    "acc_check",
                                        "grad_probe",     "structure", "exception_dump",
                                        "nan_check"};
const char* const kTaskSections[] = {"statistics", "tensor", "overflow_check"};

template <size_t N>
const KeySpec* find_key(const KeySpec (&table)[N], const std::string& name) {
  for (const KeySpec& s : table) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

template <size_t N>
void append_names(const KeySpec (&table)[N], std::vector<std::string>& out) {
  for (const KeySpec& s : table) out.emplace_back(s.name);
}

const KeySpec* find_section_key(const std::string& section, const std::string& name) {
  if (const KeySpec* spec = find_key(kSectionKeys, name)) return spec;
  if (section == "statistics") return find_key(kStatisticsKeys, name);
  if (section == "overflow_check") return find_key(kOverflowCheckKeys, name);
  return nullptr;
}

std::vector<std::string> section_key_names(const std::string& section) {
  std::vector<std::string> names;
  append_names(kSectionKeys, names);
  if (section == "statistics") append_names(kStatisticsKeys, names);
  if (section == "overflow_check") append_names(kOverflowCheckKeys, names);
  return names;
}

std::vector<std::string> top_key_names() {
  std::vector<std::string> names = {"task"};
  append_names(kTopKeys, names);
  for (const char* s : kTaskSections) names.emplace_back(s);
  for (const char* s : kForeignSections) names.emplace_back(s);
  return names;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// `section` is "" for the top level.
[[noreturn]] void reject_unknown(const std::string& section, const std::string& name,
                                 const std::vector<std::string>& valid) {
  const std::string key = section.empty() ? name : section + "." + name;
  for (const Rejected& r : kRejected) {
    if (section == r.location && name == r.name) {
      fail_key(key, std::string("an msprobe key not supported by precprobe: ") + r.reason);
    }
  }
  std::string message = "unknown config key '" + key + "'";
  const std::string suggestion = closest_match(name, valid);
  if (!suggestion.empty()) {
    message += ": did you mean '" + suggestion + "'?";
  } else if (section.empty() && find_key(kSectionKeys, name)) {
    message += ": it belongs inside the section named like the task, e.g. \"statistics\": {\"" +
               name + "\": ...}";
  } else if (!section.empty() && find_key(kTopKeys, name)) {
    message += ": it is a top-level key, not part of section '" + section + "'";
  } else if (name == "overflow_nums" || name == "tensor_list") {
    message += std::string(": it belongs in section '") +
               (name == "overflow_nums" ? "overflow_check" : "statistics") + "'";
  }
  message += message.back() == '?' ? " Valid keys " : ". Valid keys ";
  message += (section.empty() ? std::string("at the top level") : "in '" + section + "'") + ": " +
             join(valid);
  throw Error(message);
}

void parse_section(const json& v, const std::string& section, DebuggerOptions& o) {
  if (!v.is_object())
    fail_expected(section, v, "an object (the settings of task '" + section + "')");
  for (const auto& item : v.items()) {
    const std::string& name = item.key();
    const std::string key = section + "." + name;
    const KeySpec* spec = find_section_key(section, name);
    if (!spec) reject_unknown(section, name, section_key_names(section));
    spec->apply(item.value(), key, o);
  }
}

bool is_any_section(const std::string& name) {
  for (const char* s : kTaskSections) {
    if (name == s) return true;
  }
  for (const char* s : kForeignSections) {
    if (name == s) return true;
  }
  return false;
}

}  // namespace

json parse_json(const std::string& text) {
  // Keys seen in each open object, with the object's dotted path for messages. `name` is
  // the key holding the object, restored on close so objects in an array share it.
  struct Open {
    std::string name;
    std::string path;
    std::set<std::string> keys;
  };
  std::vector<Open> open;
  std::string last_key;
  auto check_duplicates = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      const std::string parent = open.empty() ? "" : open.back().path;
      const std::string path = parent.empty() ? last_key : parent + "." + last_key;
      open.push_back({last_key, path, {}});
    } else if (event == json::parse_event_t::object_end && !open.empty()) {
      last_key = open.back().name;
      open.pop_back();
    } else if (event == json::parse_event_t::key && !open.empty()) {
      last_key = parsed.get<std::string>();
      if (!open.back().keys.insert(last_key).second) {
        const std::string& path = open.back().path;
        fail_key(path.empty() ? last_key : path + "." + last_key,
                 "written twice in one object; JSON would keep only the last, so remove one");
      }
    }
    return true;
  };
  try {
    return json::parse(text, check_duplicates);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for numbers like 1e999. Drop nlohmann's
    // "[json.exception.parse_error.101] " tag; keep line and column.
    std::string what = e.what();
    const size_t tag_end = what.find("] ");
    if (tag_end != std::string::npos && what.rfind("[json.exception", 0) == 0) {
      what = what.substr(tag_end + 2);
    }
    throw Error("config is not valid JSON: " + what);
  }
}

DebuggerOptions parse_options(const json& root) {
  if (!root.is_object()) {
    throw Error("config: the top level must be a JSON object {...}, found " + describe_value(root));
  }
  DebuggerOptions o;
  if (auto it = root.find("task"); it != root.end()) parse_task(*it, o);
  const std::string active = task_name(o.task);
  for (const auto& item : root.items()) {
    const std::string& name = item.key();
    if (name == "task") continue;
    if (const KeySpec* spec = find_key(kTopKeys, name)) {
      spec->apply(item.value(), name, o);
    } else if (name == active) {
      parse_section(item.value(), name, o);
    } else if (is_any_section(name)) {
      // Another task's settings: ignored like msprobe does, but must still be a section.
      if (!item.value().is_object()) {
        fail_expected(name, item.value(),
                      "an object (the settings of task '" + name +
                          "', ignored unless "
                          "\"task\" is \"" +
                          name + "\")");
      }
    } else {
      reject_unknown("", name, top_key_names());
    }
  }
  return o;
}

}  // namespace detail
}  // namespace precprobe
