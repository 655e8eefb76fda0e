// DebuggerOptions: parsing config.json, defaults, validation, to_json round trips, the
// PRECPROBE_CONFIG override. IntSet, NameMatcher and "did you mean": test_name_matcher.cpp.
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
#include "support/error_text.h"

using precprobe::DebuggerOptions;
using precprobe::Error;
using precprobe::IntSet;
using precprobe::Level;
using precprobe::NameMatcher;
using precprobe::OverflowPolicy;
using precprobe::RangeStats;
using precprobe::SummaryMode;
using precprobe::Task;

namespace {

using precprobe::test::error_of;

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

}  // namespace

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
  CHECK(o.reuse_across_steps);
  CHECK(o.tune_malloc);
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
    "signal_flush": false, "replica_check_every": 25, "reuse_across_steps": false,
    "tune_malloc": false})json");
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
  CHECK_FALSE(o.reuse_across_steps);
  CHECK_FALSE(o.tune_malloc);
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
  // A lone range string is the list of it (the form people write for sampling).
  const DebuggerOptions lone = DebuggerOptions::from_json(R"({"step": "0-1000/100"})");
  const DebuggerOptions listed = DebuggerOptions::from_json(R"({"step": ["0-1000/100"]})");
  CHECK(lone.step.to_json() == listed.step.to_json());
  CHECK(lone.step.contains(300));
  CHECK_FALSE(lone.step.contains(301));
  CHECK_THAT(message(R"({"step": "5/2"})"), Catch::Matchers::ContainsSubstring("'step[0]'"));
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

TEST_CASE("range: false, true (training ops) or \"all\", in any task section", "[options]") {
  CHECK(DebuggerOptions::from_json("{}").range_stats == RangeStats::kOff);
  CHECK(DebuggerOptions::from_json(R"({"statistics": {"range": true}})").range_stats ==
        RangeStats::kTraining);
  CHECK(DebuggerOptions::from_json(R"({"statistics": {"range": "all"}})").range_stats ==
        RangeStats::kAll);
  CHECK(DebuggerOptions::from_json(R"({"statistics": {"range": false}})").range_stats ==
        RangeStats::kOff);
  CHECK(DebuggerOptions::from_json(R"({"task": "tensor", "tensor": {"list": ["relu"],
                                      "range": true}})")
            .range_stats == RangeStats::kTraining);
  for (RangeStats r : {RangeStats::kOff, RangeStats::kTraining, RangeStats::kAll}) {
    DebuggerOptions o;
    o.range_stats = r;
    CHECK(DebuggerOptions::from_json(o.to_json()).range_stats == r);
  }
  for (const char* bad :
       {R"({"statistics": {"range": 1}})", R"({"statistics": {"range": "on"}})"}) {
    INFO(bad);
    CHECK_THROWS_WITH(DebuggerOptions::from_json(bad),
                      Catch::Matchers::ContainsSubstring("'statistics.range'"));
  }
  CHECK_THROWS_WITH(DebuggerOptions::from_json(R"({"range": true})"),
                    Catch::Matchers::ContainsSubstring("inside the section named like the task"));
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
  o.reuse_across_steps = false;
  o.tune_malloc = false;

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
  CHECK(b.reuse_across_steps == o.reuse_across_steps);
  CHECK(b.tune_malloc == o.tune_malloc);
  CHECK(b.to_json() == text);

  // Defaults round-trip too, and an unset seed is left out rather than written as null.
  const std::string defaults = DebuggerOptions{}.to_json();
  CHECK(nlohmann::json::parse(defaults).count("seed") == 0);
  CHECK(DebuggerOptions::from_json(defaults).to_json() == defaults);
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
