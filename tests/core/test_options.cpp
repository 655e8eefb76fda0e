// DebuggerOptions, IntSet, NameMatcher and the "did you mean" helper.
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "precprobe/error.h"
#include "precprobe/options.h"
#include "precprobe_catch.h"
#include "suggest.h"

using precprobe::DebuggerOptions;
using precprobe::Error;
using precprobe::IntSet;
using precprobe::Level;
using precprobe::NameMatcher;
using precprobe::OverflowPolicy;
using precprobe::SummaryMode;
using precprobe::Task;

namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no precprobe::Error thrown>";
}

std::string parse_error(const std::string& text) {
  return error_of([&] { DebuggerOptions::from_json(text); });
}

std::string temp_dir() {
  const std::string dir = std::string(PRECPROBE_BINARY_DIR) + "/test_options_tmp";
  std::system(("mkdir -p '" + dir + "'").c_str());
  return dir;
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = temp_dir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// The statistics example of msprobe's documentation, plus the other sections its shipped
// config.json carries (ignored because they belong to other tasks).
const char* kMsprobeConfig = R"({
    "task": "statistics",
    "dump_path": "/home/data_dump",
    "rank": [],
    "step": [],
    "level": "L1",
    "async_dump": false,
    "extra_info": true,

    "statistics": {
        "scope": [],
        "list": [],
        "tensor_list": [],
        "data_mode": ["all"],
        "summary_mode": "statistics"
    },
    "tensor": {
        "scope": [],
        "list": [],
        "data_mode": ["all"],
        "file_format": "npy"
    },
    "overflow_check": {
        "overflow_nums": 1
    },
    "run_ut": {
        "white_list": [],
        "black_list": [],
        "error_data_path": "./"
    },
    "grad_probe": {
        "grad_level": "L1",
        "param_list": [],
        "bounds": [-1, 0, 1]
    },
    "free_benchmark": {
        "scope": [],
        "list": [],
        "fuzz_device": "npu",
        "pert_mode": "improve_precision",
        "handler_type": "check",
        "fuzz_level": "L1",
        "fuzz_stage": "forward",
        "if_preheat": false,
        "preheat_step": 15,
        "max_sample": 20
    }
})";

struct BadCase {
  const char* json;
  std::vector<const char*> expected;  // substrings of the message
};

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
  CHECK_THAT(m,
             Catch::Matchers::ContainsSubstring(
                 "Valid keys in 'statistics': scope, list, data_mode, summary_mode, tensor_list"));

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

TEST_CASE("an empty config gives the documented defaults", "[options]") {
  const DebuggerOptions o = DebuggerOptions::from_json("{}");
  CHECK(o.task == Task::kStatistics);
  CHECK(o.dump_path == "./precprobe_dump");
  CHECK(o.rank.empty());
  CHECK(o.step.empty());
  CHECK(o.rank.contains(7));
  CHECK(o.step.contains(123456));
  CHECK(o.level == Level::kL1);
  CHECK_FALSE(o.seed.has_value());
  CHECK_FALSE(o.is_deterministic);
  CHECK(o.scope.empty());
  CHECK(o.list.empty());
  CHECK(o.dump_forward);
  CHECK(o.dump_backward);
  CHECK(o.dump_inputs);
  CHECK(o.dump_outputs);
  CHECK(o.summary_mode == SummaryMode::kStatistics);
  CHECK(o.overflow_nums == 1);
  CHECK_FALSE(o.keep_dropout);
  CHECK_FALSE(o.overwrite);
  CHECK(o.async_stats);
  CHECK(o.grad_monitor);
  CHECK(o.queue_capacity == 65536);
  CHECK(o.overflow_policy == OverflowPolicy::kBlock);
  CHECK(o.flush_every_records == 4096);
  CHECK(o.flush_interval_ms == 1000);
  CHECK(o.zstd_level == 3);
  CHECK_FALSE(o.fsync);
  CHECK(o.max_tensor_bytes == 256 * 1024 * 1024);
  CHECK(o.signal_flush);
  CHECK(o.replica_check_every == 0);
  CHECK_NOTHROW(DebuggerOptions{}.validate());
}

TEST_CASE("every key is applied", "[options]") {
  const DebuggerOptions o = DebuggerOptions::from_json(R"json({
    "task": "overflow_check", "dump_path": "/tmp/d", "rank": [0, 2], "step": ["4-6", 9],
    "level": "L2", "seed": 4294967295, "is_deterministic": true, "precision": "low",
    "async_dump": true,
    "overflow_check": {"scope": ["aten::mm.0.forward", "aten::mm.3.forward"],
                       "list": ["mm", "name-regex(^aten::add\\.)"], "data_mode": ["backward"],
                       "summary_mode": "md5", "overflow_nums": -1},
    "keep_dropout": true, "overwrite": true, "async_stats": false, "grad_monitor": false,
    "queue_capacity": 16, "overflow_policy": "drop", "flush_every_records": 1,
    "flush_interval_ms": 5, "zstd_level": 19, "fsync": true, "max_tensor_bytes": 0,
    "signal_flush": false, "replica_check_every": 25})json");
  CHECK(o.task == Task::kOverflowCheck);
  CHECK(o.dump_path == "/tmp/d");
  CHECK(o.rank.contains(2));
  CHECK_FALSE(o.rank.contains(1));
  CHECK(o.step.ranges() == std::vector<std::pair<int64_t, int64_t>>{{4, 6}, {9, 9}});
  CHECK(o.level == Level::kL2);
  CHECK(o.seed == std::optional<uint64_t>(4294967295ULL));
  CHECK(o.is_deterministic);
  CHECK(o.scope == std::vector<std::string>{"aten::mm.0.forward", "aten::mm.3.forward"});
  CHECK(o.list == std::vector<std::string>{"mm", "name-regex(^aten::add\\.)"});
  CHECK_FALSE(o.dump_forward);
  CHECK(o.dump_backward);
  CHECK(o.dump_inputs);
  CHECK(o.dump_outputs);
  CHECK(o.summary_mode == SummaryMode::kHash);
  CHECK(o.overflow_nums == -1);
  CHECK(o.keep_dropout);
  CHECK(o.overwrite);
  CHECK_FALSE(o.async_stats);
  CHECK_FALSE(o.grad_monitor);
  CHECK(o.queue_capacity == 16);
  CHECK(o.overflow_policy == OverflowPolicy::kDrop);
  CHECK(o.flush_every_records == 1);
  CHECK(o.flush_interval_ms == 5);
  CHECK(o.zstd_level == 19);
  CHECK(o.fsync);
  CHECK(o.max_tensor_bytes == 0);
  CHECK_FALSE(o.signal_flush);
  CHECK(o.replica_check_every == 25);
}

TEST_CASE("data_mode entries filter direction and side independently", "[options]") {
  struct Case {
    const char* modes;
    bool fwd, bwd, in, out;
  };
  const Case cases[] = {
      {R"(["all"])", true, true, true, true},
      {R"(["forward"])", true, false, true, true},
      {R"(["backward"])", false, true, true, true},
      {R"(["input"])", true, true, true, false},
      {R"(["output"])", true, true, false, true},
      {R"(["forward", "input"])", true, false, true, false},
      {R"(["backward", "output"])", false, true, false, true},
      {R"(["forward", "backward", "output"])", true, true, false, true},
      {R"(["all", "forward"])", true, true, true, true},
  };
  for (const Case& c : cases) {
    INFO(c.modes);
    const DebuggerOptions o = DebuggerOptions::from_json(
        std::string(R"({"statistics": {"data_mode": )") + c.modes + "}}");
    CHECK(o.dump_forward == c.fwd);
    CHECK(o.dump_backward == c.bwd);
    CHECK(o.dump_inputs == c.in);
    CHECK(o.dump_outputs == c.out);
    // to_json writes the same selection back.
    const DebuggerOptions back = DebuggerOptions::from_json(o.to_json());
    CHECK(back.dump_forward == c.fwd);
    CHECK(back.dump_backward == c.bwd);
    CHECK(back.dump_inputs == c.in);
    CHECK(back.dump_outputs == c.out);
  }
  DebuggerOptions o;
  o.dump_forward = o.dump_backward = false;
  CHECK_THAT(error_of([&] { o.validate(); }),
             Catch::Matchers::ContainsSubstring("neither forward nor backward"));
  o = DebuggerOptions{};
  o.dump_inputs = o.dump_outputs = false;
  CHECK_THAT(error_of([&] { o.validate(); }),
             Catch::Matchers::ContainsSubstring("neither inputs nor outputs"));
}

TEST_CASE("rank and step take lists and \"lo-hi\" ranges", "[options][intset]") {
  const DebuggerOptions o =
      DebuggerOptions::from_json(R"({"step": [1, "4-6", " 8 - 9 ", 3], "rank": ["0-0"]})");
  for (int64_t v : {1, 3, 4, 5, 6, 8, 9}) CHECK(o.step.contains(v));
  for (int64_t v : {0, 2, 7, 10, -1}) CHECK_FALSE(o.step.contains(v));
  CHECK(o.step.max() == std::optional<int64_t>(9));
  // 3 and 4-6 are adjacent: merged.
  CHECK(o.step.to_json() == R"([1, "3-6", "8-9"])");
  CHECK(o.rank.to_json() == "[0]");
  CHECK(o.rank.contains(0));
  CHECK_FALSE(o.rank.contains(1));
}

TEST_CASE("step takes \"lo-hi/N\": every N-th step of a range", "[options][intset]") {
  const DebuggerOptions o =
      DebuggerOptions::from_json(R"({"step": ["0-1000/100", 7, " 10 - 25 / 5 "]})");
  std::vector<int64_t> selected;
  for (int64_t v = -1; v <= 1200; ++v)
    if (o.step.contains(v)) selected.push_back(v);
  CHECK(selected == std::vector<int64_t>{0, 7, 10, 15, 20, 25, 100, 200, 300, 400, 500, 600, 700,
                                         800, 900, 1000});
  CHECK(o.step.max() == std::optional<int64_t>(1000));
  // The last value is put on the stride; "/1" is a plain range.
  const DebuggerOptions p = DebuggerOptions::from_json(R"({"step": ["3-20/8", "30-32/1"]})");
  CHECK(p.step.to_json() == R"(["30-32", "3-19/8"])");
  for (int64_t v : {3, 11, 19, 30, 31, 32}) CHECK(p.step.contains(v));
  for (int64_t v : {4, 20, 27, 29, 33}) CHECK_FALSE(p.step.contains(v));
  // to_json round-trips.
  const DebuggerOptions q = DebuggerOptions::from_json(o.to_json());
  for (int64_t v = 0; v <= 1200; ++v) CHECK(q.step.contains(v) == o.step.contains(v));
  // Errors name the element and the bad value.
  auto message = [](const char* json) {
    try {
      DebuggerOptions::from_json(json);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(message(R"({"step": [1, "0-100/0"]})"),
             Catch::Matchers::ContainsSubstring("'step[1]'") &&
                 Catch::Matchers::ContainsSubstring("stride 0"));
  CHECK_THAT(message(R"({"step": ["0-100/x"]})"),
             Catch::Matchers::ContainsSubstring("'step[0]'") &&
                 Catch::Matchers::ContainsSubstring("\"0-100/x\"") &&
                 Catch::Matchers::ContainsSubstring("lo-hi/N"));
  CHECK_THAT(message(R"({"step": ["5/2"]})"), Catch::Matchers::ContainsSubstring("'step[0]'") &&
                                                  Catch::Matchers::ContainsSubstring("\"5/2\""));
  CHECK_THAT(message(R"({"step": ["9-3/2"]})"), Catch::Matchers::ContainsSubstring("reversed"));
  IntSet s;
  CHECK_THROWS_AS(s.add_every(0, 10, 0), Error);
}

TEST_CASE("max_calls_per_op: -1 or >= 1", "[options]") {
  CHECK(DebuggerOptions::from_json("{}").max_calls_per_op == -1);
  const DebuggerOptions o = DebuggerOptions::from_json(R"({"max_calls_per_op": 3})");
  CHECK(o.max_calls_per_op == 3);
  CHECK(DebuggerOptions::from_json(o.to_json()).max_calls_per_op == 3);
  for (const char* bad : {R"({"max_calls_per_op": 0})", R"({"max_calls_per_op": -2})",
                          R"({"max_calls_per_op": "3"})", R"({"max_calls_per_op": 1.5})"}) {
    INFO(bad);
    CHECK_THROWS_WITH(DebuggerOptions::from_json(bad),
                      Catch::Matchers::ContainsSubstring("'max_calls_per_op'"));
  }
  DebuggerOptions c;
  c.max_calls_per_op = 0;
  CHECK_THROWS_WITH(c.validate(), Catch::Matchers::ContainsSubstring("max_calls_per_op"));
}

TEST_CASE("IntSet agrees with a brute-force set", "[intset]") {
  IntSet empty;
  CHECK(empty.contains(-5));
  CHECK(empty.contains(0));
  CHECK_FALSE(empty.max().has_value());
  CHECK(empty.to_json() == "[]");
  CHECK_THROWS_AS(empty.add(3, 2), Error);

  std::mt19937 rng(42);
  for (int trial = 0; trial < 50; ++trial) {
    IntSet set;
    std::set<int64_t> reference;
    const int n = 1 + static_cast<int>(rng() % 20);
    for (int i = 0; i < n; ++i) {
      const int64_t lo = rng() % 200;
      const int64_t hi = lo + static_cast<int64_t>(rng() % 10);
      set.add(lo, hi);
      for (int64_t v = lo; v <= hi; ++v) reference.insert(v);
    }
    for (int64_t v = -2; v < 215; ++v) {
      INFO("trial " << trial << " value " << v << " set " << set.to_json());
      CHECK(set.contains(v) == (reference.count(v) == 1));
    }
    CHECK(set.max() == std::optional<int64_t>(*reference.rbegin()));
    // Disjoint, sorted, not adjacent: the merged form is unique.
    for (size_t i = 1; i < set.ranges().size(); ++i) {
      CHECK(set.ranges()[i].first > set.ranges()[i - 1].second + 1);
    }
  }
}

TEST_CASE("msprobe's example config.json is accepted", "[options]") {
  const std::string path = write_file("msprobe_config.json", kMsprobeConfig);
  const DebuggerOptions o = DebuggerOptions::from_json_file(path);
  CHECK(o.task == Task::kStatistics);
  CHECK(o.dump_path == "/home/data_dump");
  CHECK(o.rank.empty());
  CHECK(o.step.empty());
  CHECK(o.level == Level::kL1);
  CHECK(o.summary_mode == SummaryMode::kStatistics);
  CHECK(o.list.empty());
  CHECK(o.dump_forward);
  CHECK(o.dump_outputs);
  CHECK(o.overflow_nums == 1);

  // The same file switched to the tensor task fails on msprobe's tensor-only key, clearly.
  nlohmann::json j = nlohmann::json::parse(kMsprobeConfig);
  j["task"] = "tensor";
  j["tensor"]["list"] = {"addmm"};
  CHECK_THAT(parse_error(j.dump()), Catch::Matchers::ContainsSubstring("'tensor.file_format'"));
  j["tensor"].erase("file_format");
  const DebuggerOptions t = DebuggerOptions::from_json(j.dump());
  CHECK(t.task == Task::kTensor);
  CHECK(t.list == std::vector<std::string>{"addmm"});
}

TEST_CASE("to_json round-trips through from_json", "[options]") {
  DebuggerOptions o;
  o.task = Task::kOverflowCheck;
  o.dump_path = "/data/run \"1\"";
  o.rank.add(0, 0);
  o.rank.add(4, 7);
  o.step.add(10, 12);
  o.level = Level::kL2;
  o.seed = 1234;
  o.is_deterministic = true;
  o.scope = {"encoder/block1"};
  o.list = {"aten::addmm.0.forward", "Backward", "name-regex(^aten::(add|mul)\\.)"};
  o.dump_backward = false;
  o.dump_outputs = false;
  o.summary_mode = SummaryMode::kHash;
  o.overflow_nums = 7;
  o.keep_dropout = true;
  o.overwrite = true;
  o.async_stats = false;
  o.grad_monitor = false;
  o.queue_capacity = 1024;
  o.overflow_policy = OverflowPolicy::kDrop;
  o.flush_every_records = 100;
  o.flush_interval_ms = 250;
  o.zstd_level = 7;
  o.fsync = true;
  o.max_tensor_bytes = 12345;
  o.signal_flush = false;
  o.replica_check_every = 3;

  const std::string text = o.to_json();
  const auto j = nlohmann::json::parse(text);
  CHECK(j.at("task") == "overflow_check");
  CHECK(j.at("rank") == nlohmann::json::parse(R"([0, "4-7"])"));
  CHECK(j.at("overflow_check").at("data_mode") == nlohmann::json::parse(R"(["forward", "input"])"));
  CHECK(j.at("overflow_check").at("summary_mode") == "hash");
  CHECK(j.at("overflow_check").at("overflow_nums") == 7);

  const DebuggerOptions b = DebuggerOptions::from_json(text);
  CHECK(b.task == o.task);
  CHECK(b.dump_path == o.dump_path);
  CHECK(b.rank.ranges() == o.rank.ranges());
  CHECK(b.step.ranges() == o.step.ranges());
  CHECK(b.level == o.level);
  CHECK(b.seed == o.seed);
  CHECK(b.is_deterministic == o.is_deterministic);
  CHECK(b.scope == o.scope);
  CHECK(b.list == o.list);
  CHECK(b.dump_forward == o.dump_forward);
  CHECK(b.dump_backward == o.dump_backward);
  CHECK(b.dump_inputs == o.dump_inputs);
  CHECK(b.dump_outputs == o.dump_outputs);
  CHECK(b.summary_mode == o.summary_mode);
  CHECK(b.overflow_nums == o.overflow_nums);
  CHECK(b.keep_dropout == o.keep_dropout);
  CHECK(b.overwrite == o.overwrite);
  CHECK(b.async_stats == o.async_stats);
  CHECK(b.grad_monitor == o.grad_monitor);
  CHECK(b.queue_capacity == o.queue_capacity);
  CHECK(b.overflow_policy == o.overflow_policy);
  CHECK(b.flush_every_records == o.flush_every_records);
  CHECK(b.flush_interval_ms == o.flush_interval_ms);
  CHECK(b.zstd_level == o.zstd_level);
  CHECK(b.fsync == o.fsync);
  CHECK(b.max_tensor_bytes == o.max_tensor_bytes);
  CHECK(b.signal_flush == o.signal_flush);
  CHECK(b.replica_check_every == o.replica_check_every);
  CHECK(b.to_json() == text);

  // Defaults round-trip too, and an unset seed is left out rather than written as null.
  const std::string defaults = DebuggerOptions{}.to_json();
  CHECK(nlohmann::json::parse(defaults).count("seed") == 0);
  CHECK(DebuggerOptions::from_json(defaults).to_json() == defaults);
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

TEST_CASE("invalid JSON and unreadable files are reported with the file and position",
          "[options]") {
  std::string m = parse_error("{\"task\": }");
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("not valid JSON"));
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("line 1, column 10"));
  // nlohmann reports this one as out_of_range, not parse_error (found by fuzz_options).
  m = parse_error(R"({"seed": 1e999})");
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("not valid JSON"));
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("number overflow parsing '1e999'"));

  const std::string bad =
      write_file("bad.json", "{\n  \"task\": \"tensor\",\n  \"rank\": [1,,]\n}\n");
  m = error_of([&] { DebuggerOptions::from_json_file(bad); });
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("config file '" + bad + "'"));
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("line 3, column"));

  const std::string wrong = write_file("wrong.json", R"({"zstd_level": 99})");
  m = error_of([&] { DebuggerOptions::from_json_file(wrong); });
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("config file '" + wrong + "'"));
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("'zstd_level'"));

  const std::string missing = temp_dir() + "/does_not_exist.json";
  m = error_of([&] { DebuggerOptions::from_json_file(missing); });
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("'" + missing + "'"));
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("No such file or directory"));

  m = error_of([&] { DebuggerOptions::from_json_file(temp_dir()); });
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("Is a directory"));
}

TEST_CASE("PRECPROBE_CONFIG overrides the options given in code", "[options]") {
  DebuggerOptions fallback;
  fallback.dump_path = "/from/code";
  ::unsetenv("PRECPROBE_CONFIG");
  CHECK(DebuggerOptions::from_env_or(fallback).dump_path == "/from/code");
  ::setenv("PRECPROBE_CONFIG", "", 1);
  CHECK(DebuggerOptions::from_env_or(fallback).dump_path == "/from/code");

  const std::string path =
      write_file("env_config.json", R"({"dump_path": "/from/env", "level": "L2"})");
  ::setenv("PRECPROBE_CONFIG", path.c_str(), 1);
  const DebuggerOptions o = DebuggerOptions::from_env_or(fallback);
  CHECK(o.dump_path == "/from/env");
  CHECK(o.level == Level::kL2);

  const std::string bad = write_file("env_bad.json", R"({"levle": "L2"})");
  ::setenv("PRECPROBE_CONFIG", bad.c_str(), 1);
  std::string m = error_of([&] { DebuggerOptions::from_env_or(fallback); });
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring(bad));
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("PRECPROBE_CONFIG"));
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("did you mean 'level'?"));

  ::setenv("PRECPROBE_CONFIG", "/nonexistent/precprobe.json", 1);
  m = error_of([&] { DebuggerOptions::from_env_or(fallback); });
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("/nonexistent/precprobe.json"));
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("PRECPROBE_CONFIG"));
  ::unsetenv("PRECPROBE_CONFIG");
}

TEST_CASE("NameMatcher: exact names, substrings and name-regex(...)", "[namematcher]") {
  NameMatcher all;
  CHECK(all.empty());
  CHECK(all.matches("anything"));
  CHECK(NameMatcher(std::vector<std::string>{}).matches("aten::mm.0.forward"));

  NameMatcher exact({"aten::addmm.0.forward"});
  CHECK_FALSE(exact.empty());
  CHECK(exact.matches("aten::addmm.0.forward"));
  CHECK_FALSE(exact.matches("aten::addmm.1.forward"));
  CHECK_FALSE(exact.matches("aten::addmm.10.forward"));
  CHECK_FALSE(exact.matches("aten::addmm.0.backward"));

  NameMatcher sub({"addmm", "Backward"});
  CHECK(sub.matches("aten::addmm.3.backward"));
  CHECK(sub.matches("AddmmBackward0.0.backward"));
  CHECK(sub.matches("MulBackward0.2.backward"));
  CHECK_FALSE(sub.matches("aten::mul.0.forward"));
  CHECK_FALSE(sub.matches("aten::ADDMM.0.forward"));  // case-sensitive

  NameMatcher re({"name-regex(^aten::(add|mul)\\.)"});
  CHECK(re.matches("aten::add.0.forward"));
  CHECK(re.matches("aten::mul.12.forward"));
  CHECK_FALSE(re.matches("aten::addmm.0.forward"));
  CHECK_FALSE(re.matches("aten::_foreach_add.0.forward"));
  // Searched, not anchored unless the pattern anchors.
  CHECK(NameMatcher({"name-regex(\\.[0-9]+\\.backward$)"}).matches("aten::mm.7.backward"));

  // "name-regex" without the parentheses is an ordinary substring.
  CHECK(NameMatcher({"name-regex"}).matches("my-name-regex-op"));

  NameMatcher moved = std::move(re);
  CHECK(moved.matches("aten::add.0.forward"));
}

TEST_CASE("NameMatcher rejects bad regex entries, naming them", "[namematcher]") {
  std::string m = error_of([] { NameMatcher({"addmm", "name-regex([a-)"}); });
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("'name-regex([a-)'"));
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("bad regular expression"));
  m = error_of([] { NameMatcher({"name-regex()"}); });
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("non-empty"));
  m = error_of([] { NameMatcher({"name-regex(" + std::string(1025, 'a') + ")"}); });
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("1025 characters; allowed: at most 1024"));
  CHECK(
      NameMatcher({"name-regex(" + std::string(1024, 'a') + ")"}).matches(std::string(1024, 'a')));
  m = error_of([] { NameMatcher({""}); });
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("empty string"));
}

TEST_CASE("NameMatcher is shared by threads without locks", "[namematcher]") {
  const NameMatcher matcher({"addmm", "name-regex(^aten::relu\\.)"});
  const std::vector<std::string> names = {"aten::addmm.0.forward", "aten::relu.1.forward",
                                          "aten::mm.0.forward", "AddmmBackward0.0.backward",
                                          "aten::relu_.0.forward"};
  // addmm, relu. match; mm, AddmmBackward0 (capital A), relu_ do not.
  std::atomic<int> hits{0};
  std::vector<std::thread> threads;
  constexpr int kThreads = 4;
  constexpr int kRounds = 2000;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      int local = 0;
      for (int r = 0; r < kRounds; ++r) {
        for (const std::string& n : names) local += matcher.matches(n) ? 1 : 0;
      }
      hits += local;
    });
  }
  for (auto& th : threads) th.join();
  CHECK(hits == kThreads * kRounds * 2);
}

TEST_CASE("edit distance and closest match", "[suggest]") {
  using precprobe::closest_match;
  using precprobe::edit_distance;
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("abc", "abc") == 0);
  CHECK(edit_distance("ab", "ba") == 1);   // one swap
  CHECK(edit_distance("ca", "abc") == 3);  // optimal string alignment, not full Damerau
  CHECK(edit_distance("dump_pth", "dump_path") == 1);
  const std::vector<std::string> keys = {"scope", "list", "data_mode", "summary_mode"};
  CHECK(closest_match("data_modes", keys) == "data_mode");
  CHECK(closest_match("lsit", keys) == "list");
  CHECK(closest_match("SCOPE", keys) == "scope");
  CHECK(closest_match("xyz", keys).empty());
  CHECK(closest_match("", keys).empty());
}

TEST_CASE("the complete example of docs/config.md is accepted", "[options][docs]") {
  std::ifstream in(std::string(PRECPROBE_SOURCE_DIR) + "/docs/config.md");
  REQUIRE(in);
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t section = doc.find("## A complete example");
  REQUIRE(section != std::string::npos);
  const size_t begin = doc.find("```json\n", section);
  REQUIRE(begin != std::string::npos);
  const size_t end = doc.find("```", begin + 8);
  const std::string example = doc.substr(begin + 8, end - begin - 8);

  const DebuggerOptions o = DebuggerOptions::from_json(example);
  CHECK(o.task == Task::kStatistics);
  CHECK(o.step.to_json() == R"([0, "5-7"])");
  CHECK(o.seed == std::optional<uint64_t>(1234));
  CHECK(o.list.empty());

  nlohmann::json j = nlohmann::json::parse(example);
  j["task"] = "tensor";
  const DebuggerOptions t = DebuggerOptions::from_json(j.dump());
  CHECK(t.list.size() == 2);
  CHECK(t.dump_forward);
  CHECK_FALSE(t.dump_backward);
  CHECK_FALSE(t.dump_inputs);
  CHECK(t.dump_outputs);
  const NameMatcher m(t.list);
  CHECK(m.matches("aten::addmm.0.forward"));
  CHECK(m.matches("aten::gelu.3.forward"));
  CHECK_FALSE(m.matches("aten::mm.0.forward"));
}

TEST_CASE("IntSet merges at the int64 limits without overflow", "[intset]") {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  IntSet s;
  s.add(kMax, kMax);
  s.add(kMin, kMin);
  s.add(kMin + 1, kMin + 1);  // touches kMin: merged
  s.add(kMax - 1, kMax - 1);  // touches kMax: merged
  CHECK(s.ranges() == std::vector<std::pair<int64_t, int64_t>>{{kMin, kMin + 1}, {kMax - 1, kMax}});
  CHECK(s.contains(kMax));
  CHECK(s.contains(kMin));
  CHECK_FALSE(s.contains(0));
  CHECK(s.max() == std::optional<int64_t>(kMax));
  s.add(kMin, kMax);
  CHECK(s.ranges().size() == 1);
}

TEST_CASE("a long step list parses into merged ranges", "[intset][options]") {
  // 200000 entries, every other number descending, then the odd ones: all merge into one.
  nlohmann::json steps = nlohmann::json::array();
  for (int64_t v = 199998; v >= 0; v -= 2) steps.push_back(v);
  for (int64_t v = 1; v < 200000; v += 2) steps.push_back(v);
  nlohmann::json config = {{"step", steps}};
  const DebuggerOptions o = DebuggerOptions::from_json(config.dump());
  CHECK(o.step.ranges() == std::vector<std::pair<int64_t, int64_t>>{{0, 199999}});
  CHECK(o.step.to_json() == R"(["0-199999"])");
}
