// The probe in a real training process (precprobe_reliability_child) that is killed with
// SIGKILL, sent SIGTERM, throws, runs out of file size, records from several threads and
// runs 10 000 steps. The dumps are read back with DumpReader. See docs/reliability.md.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/temp_dir.h"
#include "precprobe/analysis.h"
#include "precprobe/reader.h"
#include "precprobe_catch.h"
#include "reliability/reliability_dump.h"

namespace fs = std::filesystem;
using precprobe::test::TempDir;
using namespace precprobe::test::reliability;  // NOLINT(google-build-using-namespace)

TEST_CASE("clean training run: every step has the same records", "[reliability]") {
  const auto& clean = clean_counts();
  // Step 0 has fewer ops (no gradients to zero yet); every later step has the same.
  const int64_t later = clean.at(1);
  CHECK(later > 10);  // forward, loss, backward and optimizer ops
  CHECK(clean.at(0) < later);
  for (const auto& [step, n] : clean)
    if (step > 0) CHECK(n == later);
}

TEST_CASE("SIGKILL at random points: flushed steps complete, tail reported", "[reliability]") {
  for (uint32_t seed : {1u, 2u, 3u, 4u, 5u}) {
    std::mt19937 rng(seed);
    const int64_t after = std::uniform_int_distribution<int64_t>(0, 8)(rng);
    const int delay_us = std::uniform_int_distribution<int>(0, 20000)(rng);
    INFO("seed " << seed << ": kill " << delay_us << " us after step " << after);
    TempDir dir("rel_kill");
    Child c({"train", dir / "dump", "1000"});
    REQUIRE(c.wait_for_step(after));
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    c.signal(SIGKILL);
    const int st = c.wait();
    REQUIRE(WIFSIGNALED(st));
    CHECK(WTERMSIG(st) == SIGKILL);
    Dump d = read_dump(dir / "dump");
    check_steps_complete(d, after);
    CHECK(d.meta.value("state", "") == "running");
  }
}

TEST_CASE("SIGTERM flushes the dump and keeps the exit status", "[reliability][signal]") {
  // By default (the "signal_flush" key) and with the key off and install_signal_flush().
  for (const char* how : {"auto", "explicit"}) {
    INFO(how);
    TempDir dir(std::string("rel_term_") + how);
    Child c({"sigterm", dir / "dump", "-", how});
    REQUIRE(c.wait_for_step(3));
    c.signal(SIGTERM);
    const int st = c.wait();
    REQUIRE(WIFSIGNALED(st));
    CHECK(WTERMSIG(st) == SIGTERM);  // re-raised with the default disposition
    Dump d = read_dump(dir / "dump");
    CHECK_FALSE(any_truncated(d));
    CHECK(d.meta.value("state", "") == "signalled");
    CHECK(d.meta.value("signal", 0) == SIGTERM);
    check_steps_complete(d, 3);
  }
}

TEST_CASE("with \"signal_flush\": false no handler is installed", "[reliability][signal]") {
  TempDir dir("rel_term_off");
  Child c({"sigterm", dir / "dump", "-", "off"});
  REQUIRE(c.wait_for_step(2));
  c.signal(SIGTERM);
  const int st = c.wait();
  REQUIRE(WIFSIGNALED(st));
  CHECK(WTERMSIG(st) == SIGTERM);
  // Killed by the default action at once: meta.json still says "running" (the frames
  // flushed at each step still read back, as after SIGKILL).
  Dump d = read_dump(dir / "dump");
  CHECK(d.meta.value("state", "") == "running");
  check_steps_complete(d, 2);
}

TEST_CASE("SIGTERM flushes, then calls the program's own handler", "[reliability][signal]") {
  TempDir dir("rel_term_user");
  const std::string marker = dir / "marker";
  Child c({"sigterm", dir / "dump", marker});
  REQUIRE(c.wait_for_step(2));
  c.signal(SIGTERM);
  const int st = c.wait();
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 7);  // the user handler's _exit(7)
  CHECK(precprobe::test::read_bytes(marker) == "user handler\n");
  Dump d = read_dump(dir / "dump");
  CHECK_FALSE(any_truncated(d));
  CHECK(d.meta.value("state", "") == "signalled");
  check_steps_complete(d, 2);
}

TEST_CASE("SIGINT is flushed like SIGTERM", "[reliability][signal]") {
  TempDir dir("rel_int");
  Child c({"sigterm", dir / "dump"});
  REQUIRE(c.wait_for_step(1));
  c.signal(SIGINT);
  const int st = c.wait();
  REQUIRE(WIFSIGNALED(st));
  CHECK(WTERMSIG(st) == SIGINT);
  Dump d = read_dump(dir / "dump");
  CHECK_FALSE(any_truncated(d));
  CHECK(d.meta.value("signal", 0) == SIGINT);
}

TEST_CASE("an exception escaping the loop: the destructor completes the dump", "[reliability]") {
  TempDir dir("rel_throw");
  Child c({"throw", dir / "dump", "5"});
  c.drain();
  const int st = c.wait();
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(c.lines().back() == "caught 5");
  Dump d = read_dump(dir / "dump");
  CHECK_FALSE(any_truncated(d));
  CHECK(d.meta.value("state", "") == "stopped");
  check_steps_complete(d, 4);
  CHECK(d.ops_per_step.rbegin()->first == 4);
}

TEST_CASE("file size limit: reported, writing stops, training finishes", "[reliability][disk]") {
  TempDir dir("rel_fsize");
  Child c({"fsize", dir / "dump", "6000", "40"});
  c.drain();
  const int st = c.wait();
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);  // training went on to the end
  REQUIRE(c.lines().size() == 41);
  CHECK(c.lines()[39] == "step 39");
  const std::string& summary = c.lines().back();
  INFO(summary);
  CHECK(summary.rfind("errors 1 failed 1 ", 0) == 0);  // reported once
  Dump d = read_dump(dir / "dump");
  CHECK_FALSE(d.ops.empty());  // what was written before the limit reads back
  CHECK(d.ops_per_step.size() < 40);
}

TEST_CASE("an unwritable or non-empty dump path fails at start()", "[reliability][disk]") {
  TempDir dir("rel_badpath");
  precprobe::test::write_bytes(dir / "file", "x");
  {
    Child c({"badpath", dir / "file/dump"});  // a regular file as a parent directory
    const std::string out = c.line();
    CHECK(WEXITSTATUS(c.wait()) == 0);
    CHECK(out.rfind("error: ", 0) == 0);
    CHECK(out.find(dir / "file") != std::string::npos);
  }
  {
    fs::create_directories(dir / "used/rank0");
    precprobe::test::write_bytes(dir / "used/rank0/notes.txt", "someone else's\n");
    Child c({"badpath", dir / "used"});
    const std::string out = c.line();
    CHECK(WEXITSTATUS(c.wait()) == 0);
    CHECK(out.rfind("error: ", 0) == 0);
    CHECK(out.find(dir / "used") != std::string::npos);
  }
}

TEST_CASE("ops from several threads: per-thread records, none corrupt", "[reliability][threads]") {
  TempDir dir("rel_threads");
  constexpr int kThreads = 4, kIters = 300;
  Child c({"threads", dir / "dump", std::to_string(kThreads), std::to_string(kIters)});
  c.drain();
  REQUIRE(WEXITSTATUS(c.wait()) == 0);
  Dump d = read_dump(dir / "dump");
  CHECK_FALSE(any_truncated(d));
  std::map<uint32_t, std::map<std::string, int>> per_thread;
  for (const auto& r : d.ops) per_thread[r.thread][r.op]++;
  int worker_threads = 0;
  for (const auto& [thr, ops] : per_thread) {
    INFO("thread " << thr);
    if (!ops.count("aten::add")) continue;
    ++worker_threads;
    CHECK(ops.at("aten::add") == kIters);
    CHECK(ops.count("aten::mul"));
    if (ops.count("aten::mul")) CHECK(ops.at("aten::mul") == kIters);
  }
  CHECK(worker_threads == kThreads);
}

TEST_CASE("10 000 steps keep memory flat", "[reliability][long]") {
  TempDir dir("rel_long");
  Child c({"long", dir / "dump", "10000"});
  c.drain();
  REQUIRE(WEXITSTATUS(c.wait()) == 0);
  long long rss1000 = -1, rss_end = -1, recorded = -1, dropped = -1;
  for (const auto& s : c.lines()) {
    long long a = 0, b = 0;
    if (std::sscanf(s.c_str(), "rss %lld %lld", &a, &b) == 2) (a == 1000 ? rss1000 : rss_end) = b;
    std::sscanf(s.c_str(), "recorded %lld dropped %lld", &recorded, &dropped);
  }
  INFO("rss after 1000 steps " << rss1000 << " KiB, after 10000 " << rss_end << " KiB");
  REQUIRE(rss1000 > 0);
  REQUIRE(rss_end > 0);
  CHECK(rss_end - rss1000 < 64 * 1024);
  CHECK(recorded > 10000);
  CHECK(dropped == 0);
  Dump d = read_dump(dir / "dump");
  CHECK(static_cast<long long>(d.ops.size()) == recorded);
  std::printf("long run: rss %lld KiB at step 1000, %lld KiB at step 10000, %lld records\n",
              rss1000, rss_end, recorded);
}
