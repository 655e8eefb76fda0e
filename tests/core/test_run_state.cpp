// Did the run stop? The writer's step_end events, crash.json and meta.json's state, read back
// by run_state() and by what summary, overflow and check say of a run that did not stop; and
// the module overflow names for its origin.
#include <filesystem>
#include <string>
#include <vector>

#include "core/temp_dir.h"
#include "precprobe/analysis.h"
#include "precprobe/checklist.h"
#include "precprobe/dump_format.h"
#include "precprobe/reader.h"
#include "precprobe/writer.h"
#include "precprobe_catch.h"

using namespace precprobe;
using precprobe::test::TempDir;
namespace fs = std::filesystem;

namespace {

TensorStats finite_stats(double v, std::string param = "") {
  TensorStats t;
  t.dtype = "Float";
  t.shape = {2};
  t.numel = 2;
  t.pos = 2;
  t.min = t.max = t.mean = v;
  t.norm = v;
  t.param = std::move(param);
  return t;
}

OpRecord op(int64_t step, int64_t seq, std::string name, std::string param = "") {
  OpRecord r;
  r.step = step;
  r.seq = seq;
  r.op = std::move(name);
  r.inputs.push_back(Arg{finite_stats(1.0, std::move(param)), {}});
  r.outputs.push_back(Arg{finite_stats(2.0), {}});
  return r;
}

WriterOptions writer_options(const std::string& dir) {
  WriterOptions o;
  o.dir = dir;
  o.flush_every_records = 1;  // frames close at every record: the step_end must still follow
  return o;
}

RunMeta meta(const std::string& state, int rank = 0) {
  RunMeta m;
  m.format_version = kDumpFormatVersion;
  m.rank = rank;
  m.world_size = 2;
  m.state = state;
  m.step_end_events = true;
  return m;
}

// A rank directory with `steps` steps of 3 op records, step_end after each of the first
// `ended` of them, and meta.json in `state`.
void write_run(const std::string& rank_dir, int64_t steps, int64_t ended, const std::string& state,
               bool step_end_events = true, int rank = 0) {
  DumpWriter w(writer_options(rank_dir));
  RunMeta m = meta(state, rank);
  if (!step_end_events) m.step_end_events.reset();
  w.write_meta(m);
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t i = 0; i < 3; ++i) w.submit(op(s, i, "aten::mul"));
    if (s < ended) w.end_step(s);
  }
  w.flush(true);
}

}  // namespace

TEST_CASE("end_step writes a step_end event after the step's records", "[run_state]") {
  TempDir dir("step_end");
  const std::string rank = dir / "rank0";
  {
    DumpWriter w(writer_options(rank));
    for (int i = 0; i < 4; ++i) w.submit(op(0, i, "aten::add"));
    ScalarRecord loss;
    loss.name = "loss";
    w.submit(std::move(loss));
    w.end_step(0, /*wait=*/true);
    // Not a submitted record: written + dropped still counts the submits only.
    CHECK(w.counters().records_written == 5);
    CHECK(w.counters().records_dropped == 0);
    w.submit(op(1, 0, "aten::add"));
    w.end_step(1);
  }
  DumpReader reader(rank);
  const std::vector<ScalarRecord> events = reader.scalars();
  REQUIRE(events.size() == 3);
  CHECK(events[0].name == "loss");
  CHECK(events[1].name == kStepEndEventName);
  CHECK(events[1].step == 0);
  CHECK(events[1].value == 0.0);
  CHECK(events[2].name == kStepEndEventName);
  CHECK(events[2].step == 1);
  CHECK(reader.ops().size() == 5);
  CHECK_FALSE(is_loss_scalar(kStepEndEventName));
  CHECK(is_debugger_event(kStepEndEventName));
}

TEST_CASE("overwrite also removes an earlier run's crash.json", "[run_state]") {
  TempDir dir("crash_overwrite");
  const std::string rank = dir / "rank0";
  write_run(rank, 1, 1, "running");
  test::write_bytes(rank + "/crash.json", R"({"signal":11})");
  WriterOptions o = writer_options(rank);
  o.overwrite = true;
  { DumpWriter w(o); }
  CHECK_FALSE(fs::exists(rank + "/crash.json"));
}

TEST_CASE("run_state: stopped, not stopped, crashed", "[run_state]") {
  TempDir dir("run_state");
  SECTION("stopped") {
    write_run(dir / "rank0", 3, 3, "stopped");
    DumpReader reader(dir.path().string());
    const RunState s = run_state(reader);
    CHECK(s.stopped());
    CHECK_FALSE(s.crashed());
    CHECK(s.describe().empty());
    CHECK(s.ranks.at(0).complete_through == 2);
  }
  SECTION("running: killed or still running, complete through the last step_end") {
    write_run(dir / "rank0", 4, 3, "running");
    DumpReader reader(dir.path().string());
    const RunState s = run_state(reader);
    CHECK_FALSE(s.stopped());
    CHECK_FALSE(s.crashed());
    CHECK(s.ranks.at(0).state == "not_stopped");
    CHECK(s.complete_through() == 2);
    CHECK(s.describe() ==
          "the run did not stop \u2014 crashed or still running; complete through step 2");
    const nlohmann::json j = s.to_json();
    CHECK(j["stopped"] == false);
    CHECK(j["complete_through"] == 2);
  }
  SECTION("no step ended yet") {
    write_run(dir / "rank0", 1, 0, "running");
    DumpReader reader(dir.path().string());
    CHECK(run_state(reader).describe() ==
          "the run did not stop \u2014 crashed or still running; no step complete");
  }
  SECTION("an older writer: which steps are complete is unknown") {
    write_run(dir / "rank0", 2, 0, "running", /*step_end_events=*/false);
    DumpReader reader(dir.path().string());
    const RunState s = run_state(reader);
    CHECK_FALSE(s.stopped());
    CHECK_THAT(s.describe(), Catch::Matchers::ContainsSubstring("is unknown"));
  }
  SECTION("crash.json written by the handler, the flush did not finish") {
    write_run(dir / "rank0", 4, 3, "running");
    test::write_bytes(dir / "rank0/crash.json",
                      R"({"signal":11,"signal_name":"SIGSEGV","code":1,"address":"0x0",)"
                      R"("step":3,"op":"aten::mul","thr":0,"tid":77,"thread_name":"train",)"
                      R"("time":1700000000})");
    DumpReader reader(dir.path().string());
    const RunState s = run_state(reader);
    CHECK(s.crashed());
    CHECK_FALSE(s.stopped());
    const RankRunState& r = s.ranks.at(0);
    CHECK(r.state == "crashed");
    CHECK_FALSE(r.crash_flushed);
    REQUIRE(r.crash);
    CHECK(r.crash->signal == 11);
    CHECK(r.crash->step == 3);
    CHECK(r.crash->op == "aten::mul");
    CHECK(r.crash->thread == 0);
    CHECK(r.crash->address == "0x0");
    CHECK(s.describe() ==
          "the run crashed: SIGSEGV at step 3 in aten::mul (thread 0); complete through step 2");
  }
  SECTION("meta.json marked crashed by the flusher, crash.json cut short") {
    write_run(dir / "rank0", 2, 2, "running");
    RunMeta m = meta("crashed");
    m.signal = 6;
    CrashRecord c;
    c.signal = 6;
    c.signal_name = "SIGABRT";
    c.step = 2;
    m.crash = c;
    test::write_bytes(dir / "rank0/meta.json", m.to_json().dump());  // the streams stay
    test::write_bytes(dir / "rank0/crash.json", R"({"signal":6,"sig)");
    DumpReader reader(dir.path().string());
    const RunState s = run_state(reader);
    const RankRunState& r = s.ranks.at(0);
    CHECK(r.state == "crashed");
    CHECK(r.crash_flushed);
    REQUIRE(r.crash);
    CHECK(r.crash->signal_name == "SIGABRT");
    CHECK(s.describe() ==
          "the run crashed: SIGABRT at step 2 outside any observed op; complete through step 1");
  }
  SECTION("several ranks, one of them killed") {
    write_run(dir / "rank0", 3, 3, "stopped");
    write_run(dir / "rank1", 3, 1, "running", true, 1);
    DumpReader reader(dir.path().string());
    const RunState s = run_state(reader);
    CHECK_FALSE(s.stopped());
    CHECK(s.complete_through() == 0);
    CHECK(s.describe() ==
          "the run did not stop \u2014 crashed or still running; complete through step 0 (rank 1)");
  }
}

TEST_CASE("RunMeta and CrashRecord round-trip", "[run_state]") {
  RunMeta m = meta("crashed");
  CrashRecord c;
  c.signal = 11;
  c.signal_name = "SIGSEGV";
  c.code = 1;
  c.address = "0x10";
  c.step = 4;
  c.op = "MulBackward0";
  c.tid = 9;
  m.crash = c;
  const RunMeta back = RunMeta::parse(m.to_json(), "meta.json");
  REQUIRE(back.crash);
  CHECK(back.crash->op == "MulBackward0");
  CHECK_FALSE(back.crash->thread);
  CHECK(back.step_end_events == true);
  CHECK(back.other.empty());
  CHECK_FALSE(CrashRecord::parse(nlohmann::json::parse(R"({"signal":"x"})")));
  CHECK(c.describe() == "SIGSEGV at step 4 in MulBackward0");
}

TEST_CASE("summary, overflow and check of a run that did not stop", "[run_state]") {
  TempDir dir("run_state_analyses");
  write_run(dir / "rank0", 3, 2, "running");
  DumpReader reader(dir.path().string());
  const SummaryResult s = summarize_dump(reader);
  CHECK_FALSE(s.run.stopped());
  CHECK(s.run.complete_through() == 1);
  CHECK(s.scalar_records == 0);  // step_end events are not records
  CHECK(s.to_json()["run"]["text"] ==
        "the run did not stop \u2014 crashed or still running; complete through step 1");

  DumpReader reader2(dir.path().string());
  const OverflowResult o = find_overflow(reader2);
  CHECK_FALSE(o.any_nonfinite);
  CHECK(o.step_min == 0);
  CHECK(o.step_max == 2);
  CHECK_FALSE(o.run.stopped());
  CHECK(o.to_json()["run"]["complete_through"] == 1);

  DumpReader reader3(dir.path().string());
  const ChecklistResult c = run_checklist(reader3);
  const CheckItem* run = c.find("run.stopped");
  REQUIRE(run != nullptr);
  CHECK(run->verdict == Verdict::kProblem);
  CHECK(c.problem());
  const CheckItem* ov = c.find("mp.overflow");
  REQUIRE(ov != nullptr);
  CHECK(ov->verdict == Verdict::kOk);
  CHECK_THAT(ov->evidence, Catch::Matchers::ContainsSubstring("of steps 0..2, all finite; the run "
                                                              "did not stop"));
}

TEST_CASE("check says ok for a stopped run and names the signal of a signalled one",
          "[run_state]") {
  TempDir dir("run_state_ok");
  write_run(dir / "rank0", 2, 2, "signalled");
  DumpReader reader(dir.path().string());
  const ChecklistResult c = run_checklist(reader);
  const CheckItem* run = c.find("run.stopped");
  REQUIRE(run != nullptr);
  CHECK(run->verdict == Verdict::kOk);
  CHECK_FALSE(c.problem());
}

TEST_CASE("overflow names the module of its origin", "[run_state][overflow]") {
  DumpData d;
  // Step 0: fc1's addmm, a relu, then fc2's addmm; the exp after it overflows: after the
  // forward's last parameter read, outside the modules. In backward, ExpBackward0's mul
  // belongs where the forward exp was placed (same sn).
  OpRecord a = op(0, 0, "aten::addmm", "fc1.weight");
  OpRecord relu = op(0, 1, "aten::relu");
  OpRecord b = op(0, 2, "aten::addmm", "fc2.weight");
  OpRecord e = op(0, 3, "aten::exp");
  e.seqnr = 7;
  e.outputs[0].tensor->pinf = 1;
  d.ops = {a, relu, b, e};
  OverflowResult r = find_overflow(d);
  REQUIRE(r.found);
  CHECK(r.origin.op == "aten::exp");
  CHECK(r.origin_module == "(top level)");
  CHECK(r.to_json()["module"] == "(top level)");
  // The relu between fc1 and fc2: the model's own forward.
  relu.outputs[0].tensor->pinf = 1;
  d.ops = {a, relu, b, e};
  CHECK(find_overflow(d).origin_module == "(root)");
  relu.outputs[0].tensor->pinf = 0;

  // The same overflow in backward: the mul of ExpBackward0 (sn 7) belongs where the exp is,
  // although the backward's last parameter read was fc1's.
  e.outputs[0].tensor->pinf = 0;
  OpRecord g = op(0, 4, "aten::mm", "fc1.weight");
  g.dir = Direction::kBackward;
  OpRecord m = op(0, 5, "aten::mul");
  m.dir = Direction::kBackward;
  m.seqnr = 7;
  m.outputs[0].tensor->nan = 1;
  d.ops = {a, relu, b, e, g, m};
  r = find_overflow(d);
  REQUIRE(r.found);
  CHECK(r.origin.op == "aten::mul");
  CHECK(r.origin_module == "(top level)");

  // No parameter named: no module.
  d.ops = {op(0, 0, "aten::add"), e};
  d.ops[1].outputs[0].tensor->pinf = 1;
  r = find_overflow(d);
  REQUIRE(r.found);
  CHECK_FALSE(r.origin_module);
  CHECK(r.to_json()["module"].is_null());
}
