// DebuggerOptions' errors: every key rejects wrong types and values naming the key and what
// is allowed, unknown keys get a suggestion, validate() checks options built in C++. The
// rest of the options: test_options.cpp.
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "precprobe/error.h"
#include "precprobe/options.h"
#include "precprobe_catch.h"
#include "support/error_text.h"

using precprobe::DebuggerOptions;
using precprobe::Error;
using precprobe::IntSet;
using precprobe::Level;
using precprobe::OverflowPolicy;
using precprobe::SummaryMode;
using precprobe::Task;
using precprobe::test::error_of;

namespace {

struct BadCase {
  const char* json;
  std::vector<const char*> expected;  // substrings of the message
};

std::string parse_error(const std::string& text) {
  return error_of([&] { DebuggerOptions::from_json(text); });
}

}  // namespace

TEST_CASE("every key rejects wrong types and values, naming the key and what is allowed",
          "[options]") {
  const std::vector<BadCase> cases = {
      // top level
      {R"([1, 2])", {"top level must be a JSON object", "array"}},
      {R"({"task": 5})",
       {"'task'", "one of \"statistics\", \"tensor\", \"overflow_check\"", "found integer 5"}},
      {R"({"task": "stats"})", {"'task'", "\"statistics\"", "found string \"stats\""}},
      {R"({"task": "grad_probe"})", {"'task'", "not supported by precprobe", "grad_monitor"}},
      {R"({"task": "free_benchmark"})", {"'task'", "not supported by precprobe"}},
      {R"({"task": "run_ut"})", {"'task'", "not supported by precprobe"}},
      {R"({"task": "structure"})", {"'task'", "not supported by precprobe"}},
      {R"({"dump_path": 3})", {"'dump_path'", "non-empty string", "found integer 3"}},
      {R"({"dump_path": ""})", {"'dump_path'", "non-empty string", "found string \"\""}},
      {R"({"rank": "0"})", {"'rank'", "list of integers", "\"4-6\"", "found string \"0\""}},
      {R"({"rank": [-1]})", {"'rank[0]'", "negative value -1", ">= 0"}},
      {R"({"rank": [0, "6-4"]})", {"'rank[1]'", "reversed", "\"4-6\""}},
      {R"({"rank": [1.5]})", {"'rank[0]'", "found number 1.5", "\"lo-hi\""}},
      {R"({"rank": [true]})", {"'rank[0]'", "found boolean true", "integer >= 0"}},
      {R"({"step": ["abc"]})", {"'step[0]'", "found string \"abc\"", "\"4-6\""}},
      {R"({"step": ["5"]})", {"'step[0]'", "found string \"5\"", "\"4-6\""}},
      {R"({"step": ["-3-4"]})", {"'step[0]'", "values are >= 0"}},
      {R"({"step": ["4-"]})", {"'step[0]'", "range string"}},
      {R"({"step": ["4-6x"]})", {"'step[0]'", "range string"}},
      {R"({"step": [null]})", {"'step[0]'", "found null"}},
      {R"({"step": [1, 2, "9-7"]})", {"'step[2]'", "reversed", "\"7-9\""}},
      {R"({"step": 3})", {"'step'", "list of integers", "found integer 3"}},
      {R"({"level": "L0"})", {"'level'", "not supported", "\"L1\"", "outermost ATen op", "L2"}},
      {R"({"level": "mix"})", {"'level'", "not supported", "every ATen op"}},
      {R"({"level": "L3"})", {"'level'", "one of \"L1\", \"L2\"", "found string \"L3\""}},
      {R"({"level": 1})", {"'level'", "found integer 1"}},
      {R"({"seed": -1})", {"'seed'", "an integer in 0..4294967295", "found integer -1"}},
      {R"({"seed": 4294967296})", {"'seed'", "0..4294967295", "found integer 4294967296"}},
      {R"({"seed": "1234"})", {"'seed'", "0..4294967295", "found string"}},
      {R"({"seed": 12.5})", {"'seed'", "found number 12.5"}},
      {R"({"is_deterministic": 1})", {"'is_deterministic'", "boolean", "found integer 1"}},
      {R"({"async_dump": "no"})", {"'async_dump'", "boolean"}},
      {R"({"extra_info": 0})", {"'extra_info'", "boolean"}},
      {R"({"precision": "medium"})", {"'precision'", "\"high\", \"low\""}},
      {R"({"enable_dataloader": true})", {"'enable_dataloader'", "step()", "false"}},
      {R"({"dump_enable": true})", {"'dump_enable'", "not supported by precprobe"}},
      {R"({"keep_dropout": "true"})", {"'keep_dropout'", "boolean", "found string \"true\""}},
      {R"({"overwrite": null})", {"'overwrite'", "boolean", "found null"}},
      {R"({"async_stats": 1})", {"'async_stats'", "boolean"}},
      {R"({"grad_monitor": []})", {"'grad_monitor'", "boolean", "found array"}},
      {R"({"fsync": {}})", {"'fsync'", "boolean", "found object"}},
      {R"({"queue_capacity": 8})",
       {"'queue_capacity'", "an integer in 16..1073741824", "found integer 8"}},
      {R"({"queue_capacity": "64"})", {"'queue_capacity'", "16..", "found string"}},
      {R"({"queue_capacity": -1})", {"'queue_capacity'", "16.."}},
      {R"({"overflow_policy": "wait"})", {"'overflow_policy'", "\"block\", \"drop\""}},
      {R"({"overflow_policy": 0})", {"'overflow_policy'", "\"block\", \"drop\"", "integer"}},
      {R"({"flush_every_records": 0})", {"'flush_every_records'", "an integer in 1.."}},
      {R"({"flush_interval_ms": 0})", {"'flush_interval_ms'", "1..2147483647"}},
      {R"({"flush_interval_ms": 2147483648})", {"'flush_interval_ms'", "1..2147483647"}},
      {R"({"zstd_level": 0})", {"'zstd_level'", "an integer in 1..19", "found integer 0"}},
      {R"({"zstd_level": 20})", {"'zstd_level'", "1..19", "found integer 20"}},
      {R"({"zstd_level": "3"})", {"'zstd_level'", "1..19", "found string"}},
      {R"({"max_tensor_bytes": -1})", {"'max_tensor_bytes'", "an integer >= 0"}},
      {R"({"max_tensor_bytes": 1e3})", {"'max_tensor_bytes'", "found number"}},
      {R"({"signal_flush": "yes"})", {"'signal_flush'", "boolean", "found string"}},
      {R"({"replica_check_every": -1})",
       {"'replica_check_every'", "an integer in 0..2147483647", "found integer -1"}},
      {R"({"replica_check_every": 2.5})", {"'replica_check_every'", "0..", "found number"}},
      {R"({"replica_check_every": 2147483648})", {"'replica_check_every'", "0..2147483647"}},
      {R"({"free_benchmark": 3})", {"'free_benchmark'", "an object"}},
      // the active task section
      {R"({"statistics": []})", {"'statistics'", "an object", "found array"}},
      {R"({"statistics": {"scope": ["a", "b", "c"]}})", {"'statistics.scope'", "at most 2"}},
      {R"({"statistics": {"scope": "a"}})", {"'statistics.scope'", "list of non-empty strings"}},
      {R"({"statistics": {"scope": [1]}})", {"'statistics.scope[0]'", "non-empty string"}},
      {R"({"statistics": {"list": "addmm"}})", {"'statistics.list'", "list of non-empty"}},
      {R"({"statistics": {"list": [""]}})", {"'statistics.list[0]'", "non-empty string"}},
      {R"j({"statistics": {"list": ["name-regex(a[)"]}})j",
       {"'statistics.list'", "name-regex(a[)", "bad regular expression"}},
      {R"({"statistics": {"list": ["name-regex(abc"]}})",
       {"'statistics.list'", "name-regex(abc", "closing ')'"}},
      {R"({"statistics": {"data_mode": "all"}})",
       {"'statistics.data_mode'", "non-empty list of \"all\", \"forward\""}},
      {R"({"statistics": {"data_mode": []}})", {"'statistics.data_mode'", "non-empty list"}},
      {R"({"statistics": {"data_mode": ["fwd"]}})",
       {"'statistics.data_mode[0]'", "\"forward\", \"backward\", \"input\", \"output\""}},
      {R"({"statistics": {"summary_mode": "xor"}})",
       {"'statistics.summary_mode'", "\"statistics\", \"hash\", \"md5\""}},
      {R"({"statistics": {"tensor_list": ["addmm"]}})",
       {"'statistics.tensor_list'", "\"task\": \"tensor\"", "[] only"}},
      {R"({"statistics": {"tensor_list": 3}})", {"'statistics.tensor_list'", "list"}},
      {R"({"task": "tensor", "tensor": {"list": ["a"], "tensor_list": ["a"]}})",
       {"'tensor.tensor_list'", "not supported by precprobe", "\"list\""}},
      {R"({"task": "overflow_check", "overflow_check": {"overflow_nums": 0}})",
       {"'overflow_check.overflow_nums'", "-1 (unlimited) or an integer >= 1", "integer 0"}},
      {R"({"task": "overflow_check", "overflow_check": {"overflow_nums": -2}})",
       {"'overflow_check.overflow_nums'", "-1 (unlimited)"}},
      {R"({"task": "overflow_check", "overflow_check": {"overflow_nums": "1"}})",
       {"'overflow_check.overflow_nums'", "found string"}},
      {R"({"task": "tensor", "tensor": {"list": ["addmm"], "file_format": "npy"}})",
       {"'tensor.file_format'", "not supported by precprobe", ".npy.zst"}},
      // validate(): the tensor task never dumps every op by default
      {R"({"task": "tensor"})",
       {"task 'tensor' saves full tensors only for ops named in "
        "'list' or 'scope'; add one"}},
      {R"({"task": "tensor", "tensor": {"list": [], "scope": []}})", {"'list' or 'scope'"}},
  };
  for (const BadCase& c : cases) {
    INFO("config: " << c.json);
    const std::string message = parse_error(c.json);
    INFO("message: " << message);
    for (const char* e : c.expected) CHECK_THAT(message, Catch::Matchers::ContainsSubstring(e));
  }
}

TEST_CASE("unknown keys get a suggestion and the list of valid keys", "[options]") {
  std::string m = parse_error(R"({"dump_pth": "/tmp/x"})");
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("unknown config key 'dump_pth'"));
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("did you mean 'dump_path'?"));
  CHECK_THAT(
      m, Catch::Matchers::ContainsSubstring("Valid keys at the top level: task, dump_path, rank"));

  m = parse_error(R"({"statistics": {"data_modes": ["all"]}})");
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("'statistics.data_modes'"));
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("did you mean 'data_mode'?"));
  CHECK_THAT(
      m,
      Catch::Matchers::ContainsSubstring(
          "Valid keys in 'statistics': scope, list, data_mode, summary_mode, range, tensor_list"));

  // Case and swapped letters count as small edits.
  CHECK_THAT(parse_error(R"({"Task": "tensor"})"),
             Catch::Matchers::ContainsSubstring("did you mean 'task'?"));
  CHECK_THAT(parse_error(R"({"zstd_lveel": 3})"),
             Catch::Matchers::ContainsSubstring("did you mean 'zstd_level'?"));
  CHECK_THAT(parse_error(R"({"statistic": {}})"),
             Catch::Matchers::ContainsSubstring("did you mean 'statistics'?"));

  // Enum values get suggestions too.
  CHECK_THAT(parse_error(R"({"task": "statistic"})"),
             Catch::Matchers::ContainsSubstring("did you mean \"statistics\"?"));
  CHECK_THAT(parse_error(R"({"overflow_policy": "Drop"})"),
             Catch::Matchers::ContainsSubstring("did you mean \"drop\"?"));

  // A key written twice is an error, not a silent "last one wins".
  m = parse_error(R"({"step": [1], "level": "L2", "step": [2]})");
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("config key 'step': written twice"));
  m = parse_error(R"({"statistics": {"list": ["a"], "scope": [], "list": ["b"]}})");
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("config key 'statistics.list': written twice"));
  m = parse_error(R"({"grad_probe": {"bounds": [{"x": 1}, {"y": 2, "y": 3}]}})");
  CHECK_THAT(m,
             Catch::Matchers::ContainsSubstring("config key 'grad_probe.bounds.y': written twice"));
  // The same key in different objects is fine.
  CHECK_NOTHROW(DebuggerOptions::from_json(
      R"({"statistics": {"list": ["a"]}, "tensor": {"list": ["b"], "x": {"list": 1}}})"));

  // Nothing close: no suggestion, still the list.
  m = parse_error(R"({"verbosity": 3})");
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("unknown config key 'verbosity'"));
  CHECK_THAT(m, !Catch::Matchers::ContainsSubstring("did you mean"));
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("max_tensor_bytes"));

  // Right key, wrong place.
  CHECK_THAT(parse_error(R"({"list": ["addmm"]})"),
             Catch::Matchers::ContainsSubstring("belongs inside the section named like the task"));
  CHECK_THAT(parse_error(R"({"statistics": {"seed": 1}})"),
             Catch::Matchers::ContainsSubstring("'statistics.seed': it is a top-level key"));
  CHECK_THAT(parse_error(R"({"statistics": {"overflow_nums": 3}})"),
             Catch::Matchers::ContainsSubstring("belongs in section 'overflow_check'"));
  m = parse_error(R"({"task": "overflow_check", "overflow_check": {"overflow_num": 3}})");
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("did you mean 'overflow_nums'?"));

  // Sections of other tasks are not read, like msprobe.
  DebuggerOptions o =
      DebuggerOptions::from_json(R"({"task": "statistics", "tensor": {"bogus": 1}})");
  CHECK(o.task == Task::kStatistics);
}

TEST_CASE("validate() checks options built in C++", "[options]") {
  DebuggerOptions o;
  o.dump_path = "";
  CHECK_THAT(error_of([&] { o.validate(); }),
             Catch::Matchers::ContainsSubstring("'dump_path': must not be empty"));
  o = DebuggerOptions{};
  o.zstd_level = 22;
  CHECK_THAT(error_of([&] { o.validate(); }),
             Catch::Matchers::ContainsSubstring(
                 "'zstd_level': 22 is out of range; allowed: an integer in 1..19"));
  o = DebuggerOptions{};
  o.queue_capacity = 4;
  CHECK_THAT(error_of([&] { o.validate(); }),
             Catch::Matchers::ContainsSubstring("'queue_capacity'"));
  o = DebuggerOptions{};
  o.seed = uint64_t{1} << 32;
  CHECK_THAT(error_of([&] { o.validate(); }),
             Catch::Matchers::ContainsSubstring("'seed': 4294967296"));
  o = DebuggerOptions{};
  o.step.add(-3, 2);
  CHECK_THAT(error_of([&] { o.validate(); }),
             Catch::Matchers::ContainsSubstring("'step': negative value -3"));
  o = DebuggerOptions{};
  o.scope = {"a", "b", "c"};
  CHECK_THAT(error_of([&] { o.validate(); }),
             Catch::Matchers::ContainsSubstring("'statistics.scope': has 3"));
  o = DebuggerOptions{};
  o.overflow_nums = 0;
  CHECK_THAT(error_of([&] { o.validate(); }),
             Catch::Matchers::ContainsSubstring("'overflow_check.overflow_nums'"));
  o = DebuggerOptions{};
  o.replica_check_every = -2;
  CHECK_THAT(error_of([&] { o.validate(); }),
             Catch::Matchers::ContainsSubstring("'replica_check_every': -2"));
  o = DebuggerOptions{};
  o.task = Task::kTensor;
  CHECK_THAT(error_of([&] { o.validate(); }),
             Catch::Matchers::ContainsSubstring("'list' or 'scope'; add one"));
  o.scope = {"aten::mm.0.forward", "aten::mm.2.forward"};
  CHECK_NOTHROW(o.validate());
  o.scope.clear();
  o.list = {"name-regex([)"};
  CHECK_THAT(error_of([&] { o.validate(); }),
             Catch::Matchers::ContainsSubstring("'tensor.list': list entry 'name-regex([)'"));
}
