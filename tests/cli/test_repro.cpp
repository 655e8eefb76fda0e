// The replayed-anomaly side of the CLI: the "anomaly" event (parse, summary, report, the
// scalar consumers that must skip it) and `precprobe repro` on a dump written by hand
// (anomaly_dump.h): which record it picks, the files it writes, the program's text, and
// the errors when the inputs were not saved. Compiling and running the program against
// LibTorch is the ctest `repro_e2e` (tests/cli/run_repro_e2e.cmake).
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "anomaly_dump.h"
#include "core/temp_dir.h"
#include "precprobe/analysis.h"
#include "precprobe/reader.h"
#include "precprobe/report.h"
#include "precprobe_catch.h"
#include "support/cli_run.h"

namespace {

using nlohmann::json;
using precprobe::test::read_bytes;
using precprobe::test::TempDir;

using Run = precprobe::test::CliRun;

Run run(const std::string& args, bool merge_stderr = false) {
  return precprobe::test::run_cli(args, merge_stderr);
}

std::string q(const std::string& s) { return "'" + s + "'"; }

const char* const kLine =
    "anomaly at step 37 (loss = nan): replayed, reproduced; origin aten::exp \u2014 range: "
    "float64 result reaches 1.2e+39, beyond float32's max";

}  // namespace

TEST_CASE("the anomaly event: written in the documented key order, read back typed") {
  std::string line;
  append_json(precprobe::test::anomaly_event(), line);
  CHECK(line ==
        "{\"step\":37,\"name\":\"anomaly\",\"value\":37,\"trigger\":\"loss_nonfinite\","
        "\"reproduced\":true,\"origin\":\"aten::exp\",\"origin_record\":\"aten::exp.0.forward\","
        "\"classification\":\"range\",\"why\":\"float64 result reaches 1.2e+39, beyond float32's "
        "max\",\"trigger_detail\":\"loss = nan\",\"replay\":1}\n");
  precprobe::AnomalyEvent a;
  REQUIRE(precprobe::parse_record(line, a));
  CHECK(a.is_anomaly());
  CHECK(a.step == 37);
  CHECK(a.trigger == "loss_nonfinite");
  CHECK(a.reproduced);
  CHECK(a.origin == "aten::exp");
  CHECK(a.origin_record == "aten::exp.0.forward");
  CHECK(a.classification == "range");
  CHECK(a.trigger_detail == "loss = nan");
  CHECK(a.replay == 1);
  // The same line is an old reader's scalar "anomaly" whose value is the step.
  precprobe::ScalarRecord s;
  REQUIRE(precprobe::parse_record(line, s));
  CHECK(s.name == "anomaly");
  CHECK(s.value == 37);
  CHECK(precprobe::is_anomaly_event(s));
  // Unknown keys are skipped; a known key of the wrong type fails the line; a user scalar
  // parses but is not an anomaly.
  REQUIRE(precprobe::parse_record(R"({"step":3,"name":"anomaly","new_key":[1,{"x":2}]})", a));
  CHECK(a.step == 3);
  CHECK_FALSE(precprobe::parse_record(R"({"step":3,"name":"anomaly","reproduced":"yes"})", a));
  // A line the scalar reader refuses is refused here too (one bad_lines count per stream).
  CHECK_FALSE(precprobe::parse_record(R"({"step":3,"name":"loss","value":"x"})", a));
  CHECK_FALSE(precprobe::parse_record(R"({"step":3,"name":"loss","value":"x"})", s));
  REQUIRE(precprobe::parse_record(
      R"({"step":3,"name":"loss","value":null,"value_nonfinite":"nan"})", a));
  CHECK_FALSE(a.is_anomaly());
}

TEST_CASE("describe(): the anomaly line in its other forms; summarize_dump(DumpData)") {
  precprobe::AnomalyEvent a = precprobe::test::anomaly_event();
  a.reproduced = false;
  a.origin.clear();
  a.origin_record.clear();
  a.classification = "unknown";
  a.why.clear();
  a.trigger = "loss_spike";
  a.trigger_detail = "loss 812 = 40x the median 20.3";
  CHECK(precprobe::describe(a) ==
        "anomaly at step 37 (loss 812 = 40x the median 20.3): replayed, not reproduced; no op "
        "produced a NaN/Inf \u2014 unknown");
  a.trigger_detail.clear();
  a.classification.clear();
  CHECK(precprobe::describe(a) ==
        "anomaly at step 37 (loss_spike): replayed, not reproduced; no op produced a NaN/Inf");

  precprobe::DumpData data;
  data.anomalies = {precprobe::test::anomaly_event(), a};
  data.anomalies[1].rank = 1;
  const json s = precprobe::summarize_dump(data).to_json();
  REQUIRE(s["anomalies"].size() == 2);
  CHECK(s["anomalies"][0]["text"] == kLine);
  CHECK(s["anomalies"][1]["rank"] == 1);
  CHECK(s["anomalies"][1]["reproduced"] == false);
  CHECK(s["anomalies"][1]["origin"] == "");
}

TEST_CASE("summary, report and the scalar consumers on a dump with an anomaly event") {
  TempDir tmp("anomaly_summary");
  const std::string dir = tmp / "dump";
  precprobe::test::write_anomaly_dump(dir);

  precprobe::DumpReader reader(dir);
  const std::vector<precprobe::AnomalyEvent> events = reader.anomalies();
  REQUIRE(events.size() == 1);
  CHECK(events[0].origin_record == "aten::exp.0.forward");
  CHECK(reader.scalars().size() == 3);  // loss, loss and the event: the stream as it is

  Run r = run("summary " + q(dir) + " --json");
  REQUIRE(r.status == 0);
  const json s = json::parse(r.out);
  REQUIRE(s["anomalies"].size() == 1);
  const json& a = s["anomalies"][0];
  CHECK(a["step"] == 37);
  CHECK(a["rank"] == 0);
  CHECK(a["trigger"] == "loss_nonfinite");
  CHECK(a["reproduced"] == true);
  CHECK(a["origin"] == "aten::exp");
  CHECK(a["origin_record"] == "aten::exp.0.forward");
  CHECK(a["classification"] == "range");
  CHECK(a["why"] == "float64 result reaches 1.2e+39, beyond float32's max");
  CHECK(a["trigger_detail"] == "loss = nan");
  CHECK(a["replay"] == 1);
  CHECK(a["text"] == kLine);

  r = run("summary " + q(dir));
  REQUIRE(r.status == 0);
  INFO(r.out);
  CHECK_THAT(r.out, Catch::Matchers::ContainsSubstring(std::string("replay        ") + kLine));
  // Near the top: right after the NaN/Inf line, before the loss.
  CHECK(r.out.find("replay ") > r.out.find("NaN/Inf "));
  CHECK(r.out.find("replay ") < r.out.find("loss "));
  CHECK_THAT(r.out, Catch::Matchers::ContainsSubstring("1 replayed step(s) (above)"));

  // A dump without the event: the key is there, empty; no line.
  const std::string plain = tmp / "plain";
  precprobe::test::write_anomaly_dump(plain, false);
  r = run("summary " + q(plain) + " --json");
  REQUIRE(r.status == 0);
  CHECK(json::parse(r.out)["anomalies"] == json::array());
  CHECK(run("summary " + q(plain)).out.find("replay ") == std::string::npos);

  // The report: the summary it embeds has the anomaly; no scalar chart named "anomaly".
  precprobe::ReportOptions ro;
  ro.dump = dir;
  const json d = json::parse(precprobe::build_report_data(ro));
  CHECK(d["runs"][0]["summary"]["anomalies"][0]["text"] == kLine);
  for (const json& c : d["scalars"]) CHECK(c["name"] != "anomaly");
  CHECK(d["loss"]["name"] == "loss");
  // check: the loss is the user's scalar, no scalar "anomaly" anywhere.
  r = run("check " + q(dir) + " --json");
  CHECK(r.out.find("\"anomaly\"") == std::string::npos);
}

TEST_CASE("repro: the anomaly's origin by default, written with its inputs") {
  TempDir tmp("repro_default");
  const std::string dir = tmp / "dump";
  const auto files = precprobe::test::write_anomaly_dump(dir);
  const std::string out = tmp / "out";

  Run r = run("repro " + q(dir) + " -o " + q(out + "/repro.cpp"), true);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Matchers::ContainsSubstring(
                        "aten::exp.0.forward (rank 0, step 37): the origin of the anomaly at "
                        "step 37 (loss = nan)"));
  // The input, byte for byte as saved; nothing else.
  CHECK(read_bytes(out + "/repro_in0.npy") == files.exp_in0);
  CHECK_FALSE(std::filesystem::exists(out + "/repro_in1.npy"));
  const std::string src = read_bytes(out + "/repro.cpp");
  CHECK_THAT(src, Catch::Matchers::ContainsSubstring("kOp = \"aten::exp\";"));
  CHECK_THAT(src, Catch::Matchers::ContainsSubstring("kOverload = \"\";"));
  CHECK_THAT(src, Catch::Matchers::ContainsSubstring("findSchemaOrThrow(kOp, kOverload)"));
  CHECK_THAT(src, Catch::Matchers::ContainsSubstring("callBoxed(&stack)"));
  CHECK_THAT(src, Catch::Matchers::ContainsSubstring("push(load(\"repro_in0.npy\", at::kFloat));"));
  CHECK_THAT(src, Catch::Matchers::ContainsSubstring(
                      "kDataDir = \"" + std::filesystem::path(out).lexically_normal().string()));
  // What the dump recorded of the output, printed beside the replay's.
  CHECK_THAT(src, Catch::Matchers::ContainsSubstring("out0: Float [2, 2] nan 0 +inf 1 -inf 0"));
  CHECK_THAT(src, Catch::Matchers::ContainsSubstring("#include <ATen/ATen.h>"));
  CHECK(src.find("torch/torch.h") == std::string::npos);
  const std::string cmake = read_bytes(out + "/CMakeLists.txt");
  CHECK(cmake.rfind("# Generated by precprobe repro", 0) == 0);
  CHECK_THAT(cmake, Catch::Matchers::ContainsSubstring("add_executable(repro repro.cpp)"));
  CHECK_THAT(cmake, Catch::Matchers::ContainsSubstring("find_package(Torch REQUIRED)"));

  // --step: the overflow origin of that step is the same record; written again over ours.
  r = run("repro " + q(dir) + " --step 37 -o " + q(out + "/repro.cpp"), true);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Matchers::ContainsSubstring(
                        "aten::exp.0.forward (rank 0, step 37): the origin precprobe overflow "
                        "finds in step 37"));
  CHECK(read_bytes(out + "/repro_in0.npy") == files.exp_in0);
}

TEST_CASE("repro --record: value arguments, BFloat16 and tensor lists") {
  TempDir tmp("repro_record");
  const std::string dir = tmp / "dump";
  const auto files = precprobe::test::write_anomaly_dump(dir);

  Run r = run("repro " + q(dir) + " --record aten::add.0.forward -o " + q(tmp / "add/a.cpp"), true);
  INFO(r.out);
  REQUIRE(r.status == 0);
  std::string src = read_bytes(tmp / "add/a.cpp");
  CHECK_THAT(src, Catch::Matchers::ContainsSubstring("kOp = \"aten::add\";"));
  CHECK_THAT(src, Catch::Matchers::ContainsSubstring("kOverload = \"Tensor\";"));
  // BFloat16 saved as <f4: loaded and converted back to the recorded dtype.
  CHECK_THAT(src,
             Catch::Matchers::ContainsSubstring("push(load(\"repro_in0.npy\", at::kBFloat16));"));
  CHECK_THAT(src,
             Catch::Matchers::ContainsSubstring("push(load(\"repro_in1.npy\", at::kBFloat16));"));
  CHECK_THAT(src, Catch::Matchers::ContainsSubstring("push(c10::IValue(int64_t{1}));  // in2: 1"));
  CHECK(read_bytes(tmp / "add/repro_in0.npy") == files.add_in0);
  CHECK(read_bytes(tmp / "add/repro_in1.npy") == files.add_in1);
  CHECK_THAT(read_bytes(tmp / "add/CMakeLists.txt"),
             Catch::Matchers::ContainsSubstring("add_executable(a a.cpp)"));

  r = run("repro " + q(dir) + " --record aten::cat.0.forward --step 37 -o " + q(tmp / "cat/c.cpp"),
          true);
  REQUIRE(r.status == 0);
  src = read_bytes(tmp / "cat/c.cpp");
  CHECK_THAT(src, Catch::Matchers::ContainsSubstring(
                      "push(tensor_list({load(\"repro_in0.npy\", at::kLong),\n"
                      "                          load(\"repro_in1.npy\", at::kLong)}));  // "
                      "in0..in1: a tensor list"));
  CHECK_THAT(src, Catch::Matchers::ContainsSubstring("push(c10::IValue(int64_t{0}));  // in2: 0"));
  CHECK(read_bytes(tmp / "cat/repro_in0.npy") == files.cat_in0);
  CHECK(read_bytes(tmp / "cat/repro_in1.npy") == files.cat_in1);
}

TEST_CASE("repro: clear errors, nothing written") {
  TempDir tmp("repro_errors");
  const std::string dir = tmp / "dump";
  precprobe::test::write_anomaly_dump(dir);
  const std::string out = tmp / "out/repro.cpp";

  // Inputs not saved: the file is named, and where such dumps come from.
  Run r = run("repro " + q(dir) + " --record aten::sum.0.forward -o " + q(out), true);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Matchers::ContainsSubstring(
                        "rank0/tensors/step37/aten::sum.0.forward.in0.npy.zst' is missing"));
  CHECK_THAT(r.out, Catch::Matchers::ContainsSubstring("\"record\": \"on_anomaly\""));
  CHECK_THAT(r.out, Catch::Matchers::ContainsSubstring("task \"tensor\""));
  CHECK_FALSE(std::filesystem::exists(tmp / "out"));

  r = run("repro " + q(dir) + " --record aten::nope.0.forward -o " + q(out), true);
  CHECK(r.status == 2);
  CHECK_THAT(r.out,
             Catch::Matchers::ContainsSubstring("no op record named 'aten::nope.0.forward'"));

  r = run("repro " + q(dir) + " --step 12 -o " + q(out), true);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Matchers::ContainsSubstring("--step 12: no op of rank 0 has a NaN/Inf"));

  const std::string plain = tmp / "plain";
  precprobe::test::write_anomaly_dump(plain, false);
  r = run("repro " + q(plain) + " -o " + q(out), true);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Matchers::ContainsSubstring("holds no \"anomaly\" event"));
  CHECK_THAT(r.out, Catch::Matchers::ContainsSubstring("--step N"));

  // A CMakeLists.txt that is not ours is never overwritten.
  std::filesystem::create_directories(tmp / "project");
  std::ofstream(tmp / "project/CMakeLists.txt") << "project(mine)\n";
  r = run("repro " + q(dir) + " -o " + q(tmp / "project/repro.cpp"), true);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Matchers::ContainsSubstring("was not written by precprobe repro"));
  CHECK(read_bytes(tmp / "project/CMakeLists.txt") == "project(mine)\n");
  CHECK_FALSE(std::filesystem::exists(tmp / "project/repro.cpp"));

  r = run("repro " + q(dir) + " -o " + q(tmp / "x/repro.txt"), true);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Matchers::ContainsSubstring("ending in .cpp"));
}
