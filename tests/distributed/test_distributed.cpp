// Launches the c10d example with 2 and 4 ranks on loopback and checks what every rank
// wrote: one dump per rank, the same loss on every rank, a step skipped on every rank
// when one rank's gradient holds an inf (named in that rank's scaler log), and
// check_replicas() naming a parameter perturbed on one rank.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "precprobe/reader.h"
#include "precprobe_catch.h"

namespace fs = std::filesystem;

namespace {

struct Run {
  int status = -1;
  std::string output;
};

Run run_command(const std::string& cmd) {
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

Run launch(int ranks, const std::string& args) {
  return run_command(std::string("bash ") + PRECPROBE_LAUNCH + " " + std::to_string(ranks) +
                     " --bin " + PRECPROBE_DDP_BIN + " " + args + " 2>&1");
}

std::string fresh_dir(const std::string& name) {
  auto d = fs::path(PRECPROBE_BINARY_DIR) / "test_distributed" / name;
  fs::remove_all(d);
  fs::create_directories(d.parent_path());
  return d.string();
}

void check_run_with_planted_inf(int ranks) {
  const std::string dump = fresh_dir("inf" + std::to_string(ranks));
  const int plant_step = 5;
  auto run = launch(
      ranks, "--steps 12 --check-every 6 --plant-inf-step 5 --plant-inf-rank 1 --dump " + dump);
  INFO(run.output);
  REQUIRE(run.status == 0);

  precprobe::DumpReader reader(dump);
  REQUIRE(reader.ranks().size() == static_cast<size_t>(ranks));

  // The same loss on every rank, step by step (it is all-reduced before logging).
  std::map<int64_t, std::map<int, double>> loss;
  reader.for_each_scalar({}, [&](const precprobe::ScalarRecord& s) {
    if (s.name == "loss") loss[s.step][s.rank] = s.value;
    return true;
  });
  REQUIRE(loss.size() == 12);
  for (const auto& [step, per_rank] : loss) {
    REQUIRE(per_rank.size() == static_cast<size_t>(ranks));
    for (const auto& [r, v] : per_rank) CHECK(v == per_rank.begin()->second);
  }

  // Every rank skipped exactly the planted step; only rank 1 names the parameter.
  std::map<int, std::vector<int64_t>> skipped;
  bool named_on_rank1 = false;
  reader.for_each_scaler({}, [&](const precprobe::ScalerRecord& s) {
    if (s.skipped && s.group == 0) skipped[s.rank].push_back(s.step);
    for (const auto& b : s.bad_params) {
      if (s.rank == 1 && b == "fc1.weight") named_on_rank1 = true;
      CHECK(s.rank == 1);
    }
    return true;
  });
  for (int r = 0; r < ranks; ++r) {
    INFO("rank " << r);
    REQUIRE(skipped[r].size() == 1);
    CHECK(skipped[r][0] == plant_step);
  }
  CHECK(named_on_rank1);
  CHECK(run.output.find("replicas consistent") != std::string::npos);

  // The debugger took rank and world size from the process group, and ran its replica
  // check at steps 5 and 11 (--check-every 6) on every rank: consistent each time.
  for (const auto& info : reader.ranks()) {
    CHECK(info.world_size == ranks);
    CHECK(info.meta_json.find("\"rank_source\": \"process_group\"") != std::string::npos);
  }
  std::map<int, std::vector<int64_t>> checks;
  reader.for_each_scalar({}, [&](const precprobe::ScalarRecord& s) {
    if (s.name == "replicas/tensors") checks[s.rank].push_back(s.step);
    if (s.name == "replicas/mismatched") CHECK(s.value == 0);
    return true;
  });
  for (int r = 0; r < ranks; ++r) CHECK(checks[r] == std::vector<int64_t>{5, 11});

  // Two ranks of one run, op by op: a rank equals itself bitwise; ranks 0 and 1 see
  // different shards, so the first difference is the op that slices the batch.
  const std::string cli = std::string(PRECPROBE_CLI) + " compare " + dump + " --exact --json";
  auto same = run_command(cli + " --ranks 1 1");
  INFO(same.output);
  CHECK(same.status == 0);
  CHECK(same.output.find("\"identical\": true") != std::string::npos);
  auto other = run_command(cli + " --ranks 0 1");
  INFO(other.output);
  CHECK(other.status == 1);
  CHECK(other.output.find("\"identical\": false") != std::string::npos);
  CHECK(other.output.find("\"op\": \"aten::slice\"") != std::string::npos);
}

}  // namespace

TEST_CASE("2 ranks: per-rank dumps, same loss, a planted inf skips the step everywhere",
          "[distributed]") {
  check_run_with_planted_inf(2);
}

TEST_CASE("4 ranks: per-rank dumps, same loss, a planted inf skips the step everywhere",
          "[distributed]") {
  check_run_with_planted_inf(4);
}

// Nothing lost at stop(), nothing that depends on timing: two runs of the same seeded
// 2-rank program write the same events (the checklist's init checks included) and the
// same scaler log on every rank, record for record.
TEST_CASE("two runs of 2 ranks write identical event, scaler and grads streams", "[distributed]") {
  std::vector<std::string> dumps;
  for (const char* name : {"twice_a", "twice_b"}) {
    dumps.push_back(fresh_dir(name));
    auto run =
        launch(2, "--steps 12 --check-every 6 --plant-inf-step 5 --plant-inf-rank 1 --dump " +
                      dumps.back());
    INFO(run.output);
    REQUIRE(run.status == 0);
  }
  auto lines = [](const std::string& dump, int rank, const char* stream) {
    precprobe::DumpReader reader(dump);
    precprobe::RecordFilter only;
    only.ranks = {rank};
    std::vector<std::string> out;
    auto add = [&out](const auto& records) {
      for (const auto& r : records) {
        std::string line;
        precprobe::append_json(r, line);
        out.push_back(std::move(line));
      }
    };
    if (std::string(stream) == "events") {
      // The writer's step_end markers go out once their step's records are on disk: with
      // asynchronous statistics that is when the statistics worker has drained the step,
      // by which time the training thread may have logged the next steps' scalars, so
      // where a marker falls among later steps' records depends on timing (docs/
      // dump-format.md). They are checked on their own: one per step, after every record
      // of it. Everything the program and the debugger logged must be the same.
      std::vector<precprobe::ScalarRecord> logged;
      std::map<int64_t, size_t> end_at;   // step -> position of its step_end
      std::map<int64_t, size_t> last_at;  // step -> position of its last other record
      const auto all = reader.scalars(only);
      for (size_t i = 0; i < all.size(); ++i) {
        if (all[i].name == "step_end") {
          CHECK(end_at.count(all[i].step) == 0);
          end_at[all[i].step] = i;
        } else {
          logged.push_back(all[i]);
          last_at[all[i].step] = i;
        }
      }
      CHECK(end_at.size() == 12);
      for (const auto& [step, at] : last_at) {
        INFO("step " << step);
        REQUIRE(end_at.count(step) == 1);
        CHECK(end_at[step] > at);
      }
      add(logged);
    }
    if (std::string(stream) == "scaler") add(reader.scaler(only));
    if (std::string(stream) == "grads") add(reader.grads(only));
    return out;
  };
  for (int rank = 0; rank < 2; ++rank) {
    for (const char* stream : {"events", "scaler", "grads"}) {
      INFO("rank " << rank << ", " << stream);
      const auto a = lines(dumps[0], rank, stream), b = lines(dumps[1], rank, stream);
      CHECK_FALSE(a.empty());
      CHECK(a == b);
    }
  }
}

TEST_CASE("check_replicas names a parameter perturbed on one rank", "[distributed]") {
  const std::string dump = fresh_dir("perturb");
  auto run = launch(2, "--steps 3 --check-every 0 --perturb-rank 1 --no-debugger --dump " + dump);
  INFO(run.output);
  CHECK(run.status == 3);
  CHECK(run.output.find("replicas DIFFER in 1 of") != std::string::npos);
  CHECK(run.output.find("fc2.bias") != std::string::npos);
}

TEST_CASE("the debugger's periodic replica check records a perturbed parameter in the dump",
          "[distributed]") {
  const std::string dump = fresh_dir("perturb_dbg");
  auto run = launch(2, "--steps 4 --check-every 2 --perturb-rank 1 --dump " + dump);
  INFO(run.output);
  CHECK(run.status == 3);  // the example's own final check fails too
  // Every rank recorded both checks (steps 1 and 3), each naming fc2.bias.
  precprobe::DumpReader reader(dump);
  std::map<int, std::vector<int64_t>> named;
  reader.for_each_scalar({}, [&](const precprobe::ScalarRecord& s) {
    if (s.name == "replicas/differs/fc2.bias") named[s.rank].push_back(s.step);
    if (s.name == "replicas/mismatched") CHECK(s.value == 1);
    return true;
  });
  CHECK(named[0] == std::vector<int64_t>{1, 3});
  CHECK(named[1] == std::vector<int64_t>{1, 3});

  auto summary = run_command(std::string(PRECPROBE_CLI) + " summary " + dump + " --json");
  INFO(summary.output);
  auto j = nlohmann::json::parse(summary.output);
  CHECK(j["replicas"]["checks"] == 2);
  CHECK(j["replicas"]["failed_checks"] == 2);
  CHECK(j["replicas"]["first_failed_step"] == 1);
  CHECK(j["replicas"]["mismatched"] == nlohmann::json::array({"fc2.bias"}));
  auto human = run_command(std::string(PRECPROBE_CLI) + " summary " + dump);
  CHECK(human.output.find("2 of 2 checks found ranks out of sync (first at step 1): fc2.bias") !=
        std::string::npos);

  auto check = run_command(std::string(PRECPROBE_CLI) + " check " + dump + " --json");
  INFO(check.output);
  CHECK(check.status == 1);
  auto items = nlohmann::json::parse(check.output)["items"];
  bool found = false;
  for (const auto& it : items) {
    if (it["id"] != "api.replicas") continue;
    found = true;
    CHECK(it["verdict"] == "problem");
    CHECK(it["evidence"].get<std::string>().find("fc2.bias") != std::string::npos);
  }
  CHECK(found);
}

TEST_CASE("a rank that dies leaves every rank's dump readable", "[distributed]") {
  const std::string dump = fresh_dir("kill");
  // Rank 1 SIGKILLs itself a second after step 3's dbg.step(); rank 0 then fails
  // in its next all-reduce (peer gone) and leaves through the exception.
  auto run = launch(2, "--steps 10 --check-every 0 --kill-step 3 --kill-rank 1 --dump " + dump);
  INFO(run.output);
  CHECK(run.status != 0);
  precprobe::DumpReader reader(dump);
  REQUIRE(reader.ranks().size() == 2);
  std::map<int, std::vector<int64_t>> loss_steps;
  reader.for_each_scalar({}, [&](const precprobe::ScalarRecord& s) {
    if (s.name == "loss") loss_steps[s.rank].push_back(s.step);
    return true;
  });
  // Rank 1 dies a second after its step 3: steps 0..3 are on disk (step()'s frame flush is
  // asynchronous, so only a badly overloaded machine could leave step 3 out); never anything
  // later. Rank 0 left through its destructor, which drains: steps 0..3 at least.
  const std::vector<int64_t> upto2{0, 1, 2}, upto3{0, 1, 2, 3};
  CHECK((loss_steps[1] == upto3 || loss_steps[1] == upto2));
  REQUIRE(loss_steps[0].size() >= 4);
  CHECK(std::vector<int64_t>(loss_steps[0].begin(), loss_steps[0].begin() + 4) == upto3);
  // Every op record of both ranks parses; rank 1's meta still says "running" (killed), rank
  // 0's says its debugger was stopped by the destructor during unwinding.
  for (const auto& info : reader.ranks()) {
    const auto meta = nlohmann::json::parse(info.meta_json);
    CHECK(meta["state"] == (info.rank == 1 ? "running" : "stopped"));
  }
  size_t ops = 0;
  reader.for_each_op({}, [&](const precprobe::OpRecord&) {
    ++ops;
    return true;
  });
  CHECK(ops > 0);
  for (const auto& st : reader.statuses()) {
    INFO(st.path);
    CHECK(st.bad_lines == 0);
  }
}

// A failure inside c10d's set-up (here: rank 1 of 2 whose rank 0 never comes, so the TCPStore
// client times out) leaves as precprobe::Error with what to check — not as an abort with
// LibTorch's C++ stack trace.
TEST_CASE("a rank whose store never answers fails with a message, not an abort", "[distributed]") {
  // A port nothing listens on: bound and closed again by the kernel's choice is not
  // guaranteed free, so pick one from a range the launcher does not use either.
  const std::string port = std::to_string(45000 + (::getpid() % 5000));
  Run r = run_command("RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " " +
                      PRECPROBE_DDP_BIN + " --timeout 2 --no-debugger 2>&1");
  INFO(r.output);
  CHECK(r.status == 1);
  // LibTorch 2.x logs its own retries (with a C++ backtrace) before giving up; what matters
  // is the program's own last word: one message, no backtrace, no abort.
  const size_t at = r.output.find(
      "ddp_fashion_mnist: cannot create the Gloo process group "
      "(rank 1 of 2, TCPStore at 127.0.0.1:" +
      port + ")");
  REQUIRE(at != std::string::npos);
  const std::string last = r.output.substr(at);
  CHECK(last.find("MASTER_ADDR/MASTER_PORT") != std::string::npos);
  CHECK(last.find("Exception raised from") == std::string::npos);  // no c10 backtrace
  CHECK(last.find("frame #") == std::string::npos);
  CHECK(r.output.find("terminate called") == std::string::npos);
}
