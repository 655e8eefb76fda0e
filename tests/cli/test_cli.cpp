// End to end: runs the built `precprobe` on the dumps in tests/data/cli/ and checks exit
// statuses, --json keys and error messages.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

const std::string kData = std::string(PRECPROBE_TEST_DATA_DIR) + "/cli/";

struct Run {
  int status = -1;
  std::string out;
  nlohmann::json json() const { return nlohmann::json::parse(out); }
};

// Runs precprobe with `args`; with `merge_stderr` the output holds stderr too.
Run run(const std::string& args, bool merge_stderr = false) {
  const std::string cmd = std::string("NO_COLOR=1 '") + PRECPROBE_CLI + "' " + args +
                          (merge_stderr ? " 2>&1" : " 2>/dev/null");
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string dump(const char* name) { return "'" + kData + name + "'"; }

}  // namespace

TEST_CASE("precprobe --version and --help", "[cli]") {
  Run v = run("--version");
  CHECK(v.status == 0);
  CHECK(v.out.find("0.1.0") != std::string::npos);
  Run h = run("compare --help");
  CHECK(h.status == 0);
  CHECK(h.out.find("Example") != std::string::npos);
  for (const char* cmd : {"summary", "overflow", "grads", "scale", "export"}) {
    CAPTURE(cmd);
    CHECK(run(std::string(cmd) + " --help").out.find("Example") != std::string::npos);
  }
}

TEST_CASE("precprobe usage errors exit 2", "[cli]") {
  CHECK(run("").status == 2);
  CHECK(run("frobnicate").status == 2);
  CHECK(run("export " + dump("clean") + " --format xml").status == 2);
  CHECK(run("compare " + dump("clean")).status == 2);
  CHECK(run("compare " + dump("clean") + " " + dump("clean") + " --first --exact").status == 2);
}

TEST_CASE("precprobe input errors exit 2 naming the file", "[cli]") {
  Run missing = run("overflow /nonexistent/dump", true);
  CHECK(missing.status == 2);
  CHECK(missing.out.find("/nonexistent/dump") != std::string::npos);
  Run corrupt = run("summary " + dump("corrupt_meta"), true);
  CHECK(corrupt.status == 2);
  CHECK(corrupt.out.find("meta.json") != std::string::npos);
  Run future = run("summary " + dump("future_version"), true);
  CHECK(future.status == 2);
  CHECK(future.out.find("format_version 99") != std::string::npos);
  Run not_dump = run("summary '" + std::string(PRECPROBE_TEST_DATA_DIR) + "'", true);
  CHECK(not_dump.status == 2);
  CHECK(not_dump.out.find("precprobe: error:") != std::string::npos);
}

TEST_CASE("precprobe summary", "[cli]") {
  Run r = run("summary " + dump("clean") + " --json");
  REQUIRE(r.status == 0);
  const auto j = r.json();
  CHECK(j["op_records"] == 18);  // 3 steps x 6 ops
  CHECK(j["steps"].size() == 3);
  CHECK(j["scaler"]["skipped"] == 1);
  CHECK(j["scaler"]["final_scale"] == 32768.0);
  CHECK(j["nonfinite_op_records"] == 0);
  CHECK(j["truncated"] == false);
  CHECK(j["meta"]["format_version"] == 1);
  Run human = run("summary " + dump("clean"));
  CHECK(human.status == 0);
  CHECK(human.out.find("ops 18") != std::string::npos);
  CHECK(human.out.find("\033[") == std::string::npos);  // NO_COLOR / not a terminal

  Run t = run("summary " + dump("truncated") + " --json");
  REQUIRE(t.status == 0);
  CHECK(t.json()["truncated"] == true);
  CHECK(t.json()["op_records"].get<int>() < 18);
}

TEST_CASE("precprobe overflow", "[cli]") {
  Run clean = run("overflow " + dump("clean") + " --json");
  CHECK(clean.status == 0);
  CHECK(clean.json()["found"] == false);

  Run r = run("overflow " + dump("overflow") + " --json");
  CHECK(r.status == 1);
  const auto j = r.json();
  CHECK(j["found"] == true);
  // aten::addmm ran inside aten::linear (L2): the inner op is the origin.
  CHECK(j["name"] == "aten::addmm.0.forward");
  CHECK(j["op"] == "aten::addmm");
  CHECK(j["direction"] == "forward");
  CHECK(j["step"] == 1);
  CHECK(j["rank"] == 0);
  // Step 1 after addmm: linear, relu, sum, backward mul; step 2: all 5 of its ops.
  CHECK(j["later_nonfinite_ops"] == 9);
  CHECK(j["first_steps_affected"] == nlohmann::json::array({1, 2}));
  CHECK(j["ranks"].size() == 2);
  CHECK(j["ranks"][1]["found"] == false);

  Run human = run("overflow " + dump("overflow"));
  CHECK(human.status == 1);
  CHECK(human.out.find("aten::addmm.0.forward") != std::string::npos);
}

TEST_CASE("precprobe compare", "[cli]") {
  Run same = run("compare " + dump("clean") + " " + dump("clean") + " --exact --json");
  CHECK(same.status == 0);
  CHECK(same.json()["identical"] == true);

  Run first = run("compare " + dump("diverged_1pct") + " " + dump("clean") + " --first --json");
  CHECK(first.status == 1);
  auto j = first.json();
  CHECK(j["found"] == true);
  CHECK(j["name"] == "aten::addmm.0.forward");  // inside aten::linear, inputs equal
  CHECK(j["op"] == "aten::addmm");
  CHECK(j["direction"] == "forward");
  CHECK(j["step"] == 1);
  CHECK(j["rank"] == 0);

  Run exact = run("compare " + dump("diverged_1pct") + " " + dump("clean") + " --exact --json");
  CHECK(exact.status == 1);
  CHECK(exact.json()["identical"] == false);
  CHECK(exact.json()["step"] == 1);

  Run quiet = run("compare " + dump("clean") + " " + dump("clean") + " --first --json");
  CHECK(quiet.status == 0);
  CHECK(quiet.json()["found"] == false);

  Run extra = run("compare " + dump("clean") + " " + dump("extra_op") + " --json");
  CHECK(extra.status == 1);
  j = extra.json();
  REQUIRE(j["unmatched"].size() == 1);
  CHECK(j["unmatched"][0]["name"] == "aten::clone.0.forward");
  CHECK(j["unmatched"][0]["side"] == "b");
  CHECK(j["matched"] == 18);

  Run step =
      run("compare " + dump("diverged_1pct") + " " + dump("clean") + " --first --step 0 --json");
  CHECK(step.status == 0);
  CHECK(step.json()["matched"] == 6);
}

TEST_CASE("precprobe scale and grads", "[cli]") {
  Run s = run("scale " + dump("clean") + " --json");
  REQUIRE(s.status == 0);
  const auto j = s.json();
  REQUIRE(j.is_array());
  REQUIRE(j.size() == 3);
  CHECK(j[0]["step"] == 0);
  CHECK(j[0]["scale"] == 65536.0);
  CHECK(j[0]["found_inf"] == true);
  CHECK(j[0]["skipped"] == true);
  CHECK(j[1]["skipped"] == false);

  Run g = run("grads " + dump("overflow") + " --param fc1.weight --json");
  REQUIRE(g.status == 0);
  const auto gj = g.json();
  REQUIRE(gj["params"].size() == 1);  // rank 0 and rank 1 records of fc1.weight
  CHECK(gj["params"][0]["nonfinite_steps"] == 2);
  CHECK(gj["hits"].size() == 2);
}

TEST_CASE("precprobe export", "[cli]") {
  Run csv = run("export " + dump("clean") + " --format csv");
  REQUIRE(csv.status == 0);
  std::istringstream in(csv.out);
  std::string header, line;
  std::getline(in, header);
  CHECK(header.rfind("step,rank,seq,name,op,", 0) == 0);
  int rows = 0;
  while (std::getline(in, line)) ++rows;
  CHECK(rows == 51);  // per step: t 2, addmm 4, linear 4, relu 2, sum 2, backward mul 3

  Run jl = run("export " + dump("clean") + " --format jsonl --stream scaler");
  REQUIRE(jl.status == 0);
  std::istringstream lines(jl.out);
  std::getline(lines, line);
  CHECK(nlohmann::json::parse(line)["scale"] == 65536.0);

  const std::string file = std::string(PRECPROBE_BINARY_DIR) + "/test_cli_export.csv";
  Run to_file = run("export " + dump("clean") + " --format csv --stream grads -o '" + file + "'");
  CHECK(to_file.status == 0);
  std::ifstream f(file);
  std::getline(f, header);
  CHECK(header.rfind("step,rank,param,", 0) == 0);
}
