// A run that did not stop, as every command says it: dumps written here with the core's
// DumpWriter (steps 0..3, step_end events for steps 0..2) that stopped, crashed (crash.json)
// or never stopped (meta.json "running"); and the module of overflow's origin.
#include <fstream>

#include "cli/cli_test_util.h"
#include "core/temp_dir.h"
#include "precprobe/dump_format.h"

using namespace precprobe::cli_test;  // NOLINT(google-build-using-namespace): test helpers
using precprobe::test::TempDir;

namespace {

std::string q(const std::string& s) { return "'" + s + "'"; }

precprobe::TensorStats stats(double v, const std::string& param = "") {
  precprobe::TensorStats t;
  t.dtype = "Float";
  t.shape = {2};
  t.numel = 2;
  t.pos = 2;
  t.min = t.max = t.mean = t.norm = v;
  t.param = param;
  return t;
}

// Steps 0..3 of two ops each (an addmm reading fc1.weight, a relu), step_end for steps 0..2;
// with `nan_at` >= 0 the relu of that step outputs a NaN from finite inputs.
void write_dump(const std::string& dir, const std::string& state, int64_t nan_at = -1) {
  precprobe::WriterOptions o;
  o.dir = dir + "/rank0";
  precprobe::DumpWriter w(o);
  precprobe::RunMeta m;
  m.format_version = precprobe::kDumpFormatVersion;
  m.rank = 0;
  m.world_size = 1;
  m.state = state;
  m.step_end_events = true;
  w.write_meta(m);
  for (int64_t s = 0; s < 4; ++s) {
    precprobe::OpRecord a;
    a.step = s;
    a.op = "aten::addmm";
    a.inputs.push_back({stats(1, "fc1.weight"), ""});
    a.outputs.push_back({stats(2), ""});
    precprobe::OpRecord r = a;
    r.seq = 1;
    r.op = "aten::relu";
    r.inputs = {{stats(2), ""}};
    if (s == nan_at) r.outputs[0].tensor->nan = 1;
    w.submit(std::move(a));
    w.submit(std::move(r));
    if (s < 3 || state == "stopped") w.end_step(s);
  }
  w.flush(true);
}

void write_crash(const std::string& dir) {
  std::ofstream(dir + "/rank0/crash.json")
      << R"({"signal":11,"signal_name":"SIGSEGV","code":1,"address":"0x0","step":3,)"
         R"("op":"aten::mul","thr":0,"tid":7,"thread_name":"train","time":1})";
}

}  // namespace

TEST_CASE("every command says a crashed run crashed, and how far it is complete",
          "[cli][run_state]") {
  TempDir tmp("cli_crashed");
  const std::string dir = (tmp.path() / "crashed").string(), ok = (tmp.path() / "ok").string();
  write_dump(dir, "running");
  write_crash(dir);
  write_dump(ok, "stopped");
  const std::string said =
      "the run crashed: SIGSEGV at step 3 in aten::mul (thread 0); complete through step 2";

  const Run summary = run("summary " + q(dir));
  CHECK(summary.status == 0);
  CHECK_THAT(summary.out, Catch::Matchers::ContainsSubstring("run           " + said));
  CHECK_THAT(summary.out,
             Catch::Matchers::ContainsSubstring(
                 "data          partial: complete through step 2 (the run did not stop)"));
  CHECK_THAT(summary.out, !Catch::Matchers::ContainsSubstring("data          complete\n"));
  const json sj = run_json("summary " + q(dir), 0);
  CHECK(sj["run"]["crashed"] == true);
  CHECK(sj["run"]["ranks"][0]["crash"]["op"] == "aten::mul");

  const Run overflow = run("overflow " + q(dir));
  CHECK(overflow.status == 1);
  CHECK_THAT(overflow.out,
             Catch::Matchers::ContainsSubstring(
                 "No NaN/Inf in any recorded op of steps 0..3 (step 3 only in part),"));
  CHECK_THAT(overflow.out, Catch::Matchers::ContainsSubstring("but " + said));
  const json oj = run_json("overflow " + q(dir), 1);
  CHECK(oj["found"] == false);
  CHECK(oj["run"]["complete_through"] == 2);
  CHECK(oj["steps"]["max"] == 3);

  const Run check = run("check " + q(dir));
  CHECK(check.status == 1);
  CHECK_THAT(check.out, Catch::Matchers::ContainsSubstring("run.stopped: " + said));

  const Run compare = run("compare " + q(ok) + " " + q(dir) + " --exact");
  CHECK(compare.status == 1);
  CHECK_THAT(compare.out, Catch::Matchers::ContainsSubstring("B: " + said));
  const json cj = run_json("compare " + q(ok) + " " + q(dir) + " --exact", 1);
  CHECK(cj["run_a"]["stopped"] == true);
  CHECK(cj["run_b"]["stopped"] == false);

  const std::string html = (tmp.path() / "r.html").string();
  CHECK(run("report " + q(dir) + " -o " + q(html)).status == 0);
  const json data = report_data(html);
  CHECK(data["runs"][0]["summary"]["run"]["text"] == said);
  CHECK(data["overflow"]["run"]["crashed"] == true);
}

TEST_CASE("a run that never stopped, and one that did", "[cli][run_state]") {
  TempDir tmp("cli_running");
  const std::string dir = (tmp.path() / "running").string(), ok = (tmp.path() / "ok").string();
  write_dump(dir, "running");
  write_dump(ok, "stopped");
  const Run summary = run("summary " + q(dir));
  CHECK_THAT(summary.out,
             Catch::Matchers::ContainsSubstring(
                 "run           the run did not stop \u2014 crashed or still running; complete "
                 "through step 2"));
  CHECK(run("overflow " + q(dir)).status == 1);
  CHECK(run("check " + q(dir)).status == 1);

  const Run clean = run("overflow " + q(ok));
  CHECK(clean.status == 0);
  CHECK_THAT(clean.out,
             Catch::Matchers::ContainsSubstring("No NaN/Inf in any recorded op of steps 0..3."));
  const Run ok_summary = run("summary " + q(ok));
  CHECK_THAT(ok_summary.out, Catch::Matchers::ContainsSubstring("data          complete"));
  CHECK_THAT(ok_summary.out, !Catch::Matchers::ContainsSubstring("run           "));
  CHECK(run("compare " + q(ok) + " " + q(ok) + " --exact").status == 0);
}

TEST_CASE("overflow names the module of the origin", "[cli][overflow]") {
  TempDir tmp("cli_module");
  const std::string dir = (tmp.path() / "nan").string();
  write_dump(dir, "stopped", 2);
  const Run overflow = run("overflow " + q(dir));
  CHECK(overflow.status == 1);
  CHECK_THAT(overflow.out, Catch::Matchers::ContainsSubstring("  module  fc1\n"));
  const json j = run_json("overflow " + q(dir), 1);
  CHECK(j["module"] == "fc1");
  CHECK(j["step"] == 2);
  const json c = run_json("check " + q(dir), 1);
  bool said = false;
  for (const json& item : c["items"])
    if (item["id"] == "mp.overflow")
      said = item["evidence"].get<std::string>().find("in module fc1 (rank 0, step 2") !=
             std::string::npos;
  CHECK(said);
}
