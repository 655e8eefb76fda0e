// A crash is never a clean run: the training child (precprobe_reliability_child) crashes at
// step 3 (a write through a null pointer, a custom op that does so, abort(), with the
// program's own SIGSEGV handler, with the writer held so the flush cannot finish), is
// killed with SIGKILL, or is still running; the dump is read back with DumpReader and the
// CLI. See docs/reliability.md, "Crashes".
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/temp_dir.h"
#include "precprobe/analysis.h"
#include "precprobe/reader.h"
#include "precprobe_catch.h"
#include "reliability/reliability_dump.h"
#include "support/cli_run.h"

namespace fs = std::filesystem;
using precprobe::test::ChildSetup;
using precprobe::test::read_bytes;
using precprobe::test::TempDir;
using namespace precprobe::test::reliability;  // NOLINT(google-build-using-namespace)

namespace {

constexpr int64_t kCrashStep = 3;

// Under AddressSanitizer the child's fatal signals must reach our handler and then the
// default action, not ASan's own report (which exits 1): its handlers off for the child.
ChildSetup crash_setup(const std::string& stderr_path) {
  ChildSetup s;
  s.stderr_path = stderr_path;
  const char* asan = std::getenv("ASAN_OPTIONS");
  s.env.push_back(std::string("ASAN_OPTIONS=") + (asan ? std::string(asan) + ":" : "") +
                  "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:handle_abort=0");
  return s;
}

precprobe::RunState state_of(const std::string& dir) {
  precprobe::DumpReader reader(dir);
  return precprobe::run_state(reader);
}

nlohmann::json crash_file(const std::string& dump) {
  const std::string text = read_bytes(dump + "/rank0/crash.json");
  INFO("crash.json: " << text);
  return nlohmann::json::parse(text);
}

struct Crashed {
  int status = 0;
  Dump dump;
  std::string stderr_text;
};

Crashed run_crash(const TempDir& dir, const std::string& how, const std::string& mode = "") {
  std::vector<std::string> args = {"crash", dir / "dump", how, std::to_string(kCrashStep)};
  if (!mode.empty()) args.push_back(mode);
  Child c(args, crash_setup(dir / "stderr.txt"));
  c.drain();
  Crashed r;
  r.status = c.wait();
  r.stderr_text = read_bytes(dir / "stderr.txt");
  INFO("child stderr: " << r.stderr_text);
  r.dump = read_dump(dir / "dump");
  return r;
}

}  // namespace

TEST_CASE("a segfault at step 3: steps 0-2 complete, crash record, exit status SIGSEGV",
          "[reliability][crash]") {
  // Asynchronous statistics (the default): steps 0-2's records are still with the worker
  // when the program faults; the crash flush emits them.
  for (const char* mode : {"", "sync"}) {
    INFO("mode " << (*mode ? mode : "async"));
    TempDir dir("rel_segv");
    const Crashed r = run_crash(dir, "segv", mode);
    INFO("child stderr: " << r.stderr_text);
    REQUIRE(WIFSIGNALED(r.status));
    CHECK(WTERMSIG(r.status) == SIGSEGV);
    check_steps_complete(r.dump, kCrashStep - 1);
    CHECK(r.dump.ops_per_step.count(kCrashStep) == 0);  // it faulted before step 3's first op
    CHECK(r.dump.meta.value("state", "") == "crashed");
    CHECK(r.dump.meta.value("signal", 0) == SIGSEGV);
    const nlohmann::json c = crash_file(dir / "dump");
    CHECK(c["signal"] == SIGSEGV);
    CHECK(c["signal_name"] == "SIGSEGV");
    CHECK(c["step"] == kCrashStep);
    CHECK(c["op"] == "");  // the program's own fault, outside any op
    CHECK(c["address"] == "0x0");
    CHECK(c["code"].get<int>() > 0);  // raised by the kernel for the faulting instruction
    const precprobe::RunState s = state_of(dir / "dump");
    CHECK(s.crashed());
    CHECK(s.ranks.at(0).crash_flushed);
    CHECK(s.complete_through() == kCrashStep - 1);
    CHECK(s.describe() ==
          "the run crashed: SIGSEGV at step 3 outside any observed op (thread 0); complete "
          "through step 2");
    CHECK_THAT(r.stderr_text, Catch::Matchers::ContainsSubstring(
                                  "precprobe: SIGSEGV at step 3 outside any observed op: the dump "
                                  "holds what was complete"));
  }
}

TEST_CASE("a segfault inside an op names the op in flight", "[reliability][crash]") {
  TempDir dir("rel_segv_op");
  const Crashed r = run_crash(dir, "op");
  REQUIRE(WIFSIGNALED(r.status));
  CHECK(WTERMSIG(r.status) == SIGSEGV);
  const nlohmann::json c = crash_file(dir / "dump");
  CHECK(c["op"] == "precprobe_test::crash");
  CHECK(c["thr"] == 0);
  CHECK(c["step"] == kCrashStep);
  check_steps_complete(r.dump, kCrashStep - 1);
  // Step 3's ops that ended before the fault (the forward's) are in the dump; the rest is not.
  REQUIRE(r.dump.ops_per_step.count(kCrashStep));
  CHECK(r.dump.ops_per_step.at(kCrashStep) > 0);
  CHECK(r.dump.ops_per_step.at(kCrashStep) < clean_counts().at(kCrashStep));
  CHECK(state_of(dir / "dump").complete_through() == kCrashStep - 1);
  CHECK_THAT(state_of(dir / "dump").describe(),
             Catch::Matchers::ContainsSubstring("SIGSEGV at step 3 in precprobe_test::crash"));
}

TEST_CASE("abort() at step 3 keeps SIGABRT", "[reliability][crash]") {
  TempDir dir("rel_abort");
  const Crashed r = run_crash(dir, "abort");
  REQUIRE(WIFSIGNALED(r.status));
  CHECK(WTERMSIG(r.status) == SIGABRT);
  CHECK(crash_file(dir / "dump")["signal"] == SIGABRT);
  CHECK_FALSE(crash_file(dir / "dump").contains("address"));  // sent by the process itself
  CHECK(r.dump.meta.value("state", "") == "crashed");
  check_steps_complete(r.dump, kCrashStep - 1);
}

TEST_CASE("the program's own SIGSEGV handler still runs, after the flush", "[reliability][crash]") {
  TempDir dir("rel_segv_user");
  const Crashed r = run_crash(dir, "user");
  REQUIRE(WIFEXITED(r.status));
  CHECK(WEXITSTATUS(r.status) == 9);  // the program's handler's _exit(9)
  CHECK(read_bytes(dir / "dump.marker") == "user segv handler\n");
  CHECK(r.dump.meta.value("state", "") == "crashed");
  CHECK(crash_file(dir / "dump")["signal"] == SIGSEGV);
  check_steps_complete(r.dump, kCrashStep - 1);
}

TEST_CASE("a flush that cannot finish: the handler's own crash record, then SIGSEGV",
          "[reliability][crash]") {
  TempDir dir("rel_segv_stuck");
  const auto t0 = std::chrono::steady_clock::now();
  const Crashed r = run_crash(dir, "stuck");
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  REQUIRE(WIFSIGNALED(r.status));
  CHECK(WTERMSIG(r.status) == SIGSEGV);
  CHECK(ms >= 300);  // the handler waited crash_flush_timeout_ms
  // The flusher never got past the held writer: meta.json still says "running", and the
  // crash record is the handler's alone.
  CHECK(r.dump.meta.value("state", "") == "running");
  const nlohmann::json c = crash_file(dir / "dump");
  CHECK(c["signal"] == SIGSEGV);
  CHECK(c["step"] == kCrashStep);
  const precprobe::RunState s = state_of(dir / "dump");
  CHECK(s.crashed());
  CHECK_FALSE(s.ranks.at(0).crash_flushed);
  REQUIRE(s.complete_through());
  CHECK(*s.complete_through() <= kCrashStep - 1);
  CHECK_THAT(r.stderr_text,
             Catch::Matchers::ContainsSubstring("the flush did not finish in 300 ms"));
}

TEST_CASE("SIGKILL: not stopped, complete through the last step flushed", "[reliability][crash]") {
  TempDir dir("rel_kill_state");
  Child c({"train", dir / "dump", "1000"});
  REQUIRE(c.wait_for_step(4));
  c.signal(SIGKILL);
  const int st = c.wait();
  REQUIRE(WIFSIGNALED(st));
  const precprobe::RunState s = state_of(dir / "dump");
  CHECK_FALSE(s.stopped());
  CHECK_FALSE(s.crashed());
  CHECK(s.ranks.at(0).state == "not_stopped");
  REQUIRE(s.complete_through());
  CHECK(*s.complete_through() >= 4);  // "step 4" is printed once its step_end is on disk
  CHECK_FALSE(fs::exists(dir / "dump/rank0/crash.json"));
#ifdef PRECPROBE_CLI
  const auto summary = precprobe::test::run_cli("summary " + (dir / "dump"), false);
  CHECK(summary.status == 0);
  CHECK_THAT(summary.out, Catch::Matchers::ContainsSubstring(
                              "run           the run did not stop \u2014 crashed or still "
                              "running; complete through step"));
  CHECK_THAT(summary.out,
             Catch::Matchers::ContainsSubstring("data          partial: complete through step"));
  CHECK_THAT(summary.out, !Catch::Matchers::ContainsSubstring("data          complete\n"));
  const auto overflow = precprobe::test::run_cli("overflow " + (dir / "dump"), false);
  CHECK(overflow.status == 1);  // a run that did not stop is never clean
  CHECK_THAT(overflow.out, Catch::Matchers::ContainsSubstring("No NaN/Inf in any recorded op of "
                                                              "steps 0.."));
  const auto check = precprobe::test::run_cli("check " + (dir / "dump"), false);
  CHECK(check.status == 1);
  CHECK_THAT(check.out, Catch::Matchers::ContainsSubstring("run.stopped"));
#endif
}

TEST_CASE("a run still running reads as not stopped", "[reliability][crash]") {
  TempDir dir("rel_running");
  Child c({"slow", dir / "dump"});
  REQUIRE(c.wait_for_step(8));
  // The writer flushes on its own schedule: on a loaded machine (ASan, both cores busy) it
  // lagged the step loop by more than four steps once. Read again after each further step
  // until step 4 is on disk, up to step 200.
  precprobe::RunState s = state_of(dir / "dump");
  for (int64_t k = 9; k <= 200 && !(s.complete_through() && *s.complete_through() >= 4); ++k) {
    REQUIRE(c.wait_for_step(k));
    s = state_of(dir / "dump");
  }
  CHECK_FALSE(s.stopped());
  CHECK(s.ranks.at(0).state == "not_stopped");
  REQUIRE(s.complete_through());
  CHECK(*s.complete_through() >= 4);
#ifdef PRECPROBE_CLI
  const auto summary = precprobe::test::run_cli("summary " + (dir / "dump"), false);
  CHECK_THAT(summary.out, Catch::Matchers::ContainsSubstring("the run did not stop"));
  CHECK_THAT(summary.out, !Catch::Matchers::ContainsSubstring("data          complete\n"));
  const auto report =
      precprobe::test::run_cli("report " + (dir / "dump") + " -o " + (dir / "report.html"), false);
  CHECK(report.status == 0);
  CHECK_THAT(read_bytes(dir / "report.html"),
             Catch::Matchers::ContainsSubstring("the run did not stop"));
#endif
  // No step is complete before the child ran it: it prints "step K" right after step() of
  // step K returns (its step_end may be on disk just before), so the last line it printed
  // before the kill bounds what was read above.
  c.signal(SIGKILL);
  c.wait();
  c.drain();
  int64_t last = -1;
  for (const std::string& l : c.lines())
    if (l.rfind("step ", 0) == 0) last = std::stoll(l.substr(5));
  CHECK(last >= 8);
  CHECK(*s.complete_through() <= last + 1);
}

TEST_CASE("overflow_check: an origin whose module waits on a later op survives an abort",
          "[reliability][crash]") {
  // The loss goes NaN through a log after the model's last parameter read; the program aborts
  // on it before backward. The record's module ("(top level)") is decided by the next
  // parameter read, which never comes: the crash flush places it with what is known.
  for (const char* mode : {"", "sync"}) {
    INFO("mode " << (*mode ? mode : "async"));
    TempDir dir("rel_nan_abort");
    const Crashed r = run_crash(dir, "nan", mode);
    REQUIRE(WIFSIGNALED(r.status));
    CHECK(WTERMSIG(r.status) == SIGABRT);
    CHECK(r.dump.meta.value("state", "") == "crashed");
    std::vector<const precprobe::OpRecord*> logs;
    for (const auto& op : r.dump.ops)
      if (op.op == "aten::log") logs.push_back(&op);
    REQUIRE(logs.size() == 1);
    CHECK(logs[0]->step == kCrashStep);
    CHECK(logs[0]->module == "(top level)");
    REQUIRE(logs[0]->outputs.size() == 1);
    REQUIRE(logs[0]->outputs[0].tensor);
    CHECK(logs[0]->outputs[0].tensor->nan == 1);
    for (const auto& op : r.dump.ops) CHECK(op.step == kCrashStep);  // steps 0-2: finite
  }
}
