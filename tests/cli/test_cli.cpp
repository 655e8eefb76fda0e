// End to end: runs the built `precprobe` on the dumps in tests/data/cli/ and checks exit
// statuses, every --json key docs/cli.md names, and error messages.
//
// The dumps were written by the real probe (tests/cli/make_golden_dumps.cpp): a 3-step MLP
// with fixed weights and batches. The expected values below are worked out from that model
// (weights, batches, learning rate, GradScaler settings, where the variants differ), not
// copied from the tool's output; where a count depends on ATen internals (how many ops a
// step runs), the tests check relations between dumps and commands instead.
#include <sys/wait.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "frame_stream.h"
#include "precprobe/reader.h"
#include "precprobe/writer.h"
#include "precprobe_catch.h"

namespace {

using nlohmann::json;

const std::string kData = std::string(PRECPROBE_TEST_DATA_DIR) + "/cli/";

struct Run {
  int status = -1;
  std::string out;
  json parse() const { return json::parse(out); }
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

std::string dump(const std::string& name) { return "'" + kData + name + "'"; }

// `precprobe <args> --json`, requiring exit status `status`.
json run_json(const std::string& args, int status) {
  Run r = run(args + " --json");
  INFO(args << "\n" << r.out.substr(0, 2000));
  REQUIRE(r.status == status);
  return r.parse();
}

// RFC 4180 CSV: quoted fields may hold commas, quotes ("") and newlines.
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      row.push_back(field);
      field.clear();
    } else if (c == '\n') {
      row.push_back(field);
      field.clear();
      rows.push_back(row);
      row.clear();
    } else {
      field += c;
    }
  }
  if (!field.empty() || !row.empty()) {
    row.push_back(field);
    rows.push_back(row);
  }
  return rows;
}

// A CSV table as rows of column name -> text.
std::vector<std::map<std::string, std::string>> csv_table(const std::string& text,
                                                          std::vector<std::string>* header) {
  auto rows = parse_csv(text);
  REQUIRE_FALSE(rows.empty());
  *header = rows[0];
  std::vector<std::map<std::string, std::string>> out;
  for (size_t i = 1; i < rows.size(); ++i) {
    INFO("row " << i);
    REQUIRE(rows[i].size() == header->size());
    std::map<std::string, std::string> m;
    for (size_t k = 0; k < header->size(); ++k) m[(*header)[k]] = rows[i][k];
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<json> jsonl(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

// The tests read results through non-const json objects: a missing key then reads as null
// and fails the check, where a const operator[] would be undefined behaviour.

// The data block of a report page (docs/report.md).
json report_data(const std::string& file) {
  std::ifstream in(file);
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string open = "<script type=\"application/json\" id=\"precprobe-data\">";
  const size_t a = html.find(open);
  REQUIRE(a != std::string::npos);
  const size_t b = html.find("</script>", a);
  REQUIRE(b != std::string::npos);
  return json::parse(html.substr(a + open.size(), b - a - open.size()));
}

json* find_item(json& check, const std::string& id) {
  for (auto& i : check["items"])
    if (i["id"] == id) return &i;
  return nullptr;
}

// ---- the model of make_golden_dumps.cpp, computed here in double ------------------------

constexpr double kX[4][4] = {
    {1.5, -0.5, 0.5, -1.5}, {-0.5, 1.5, -1.5, 0.5}, {0.5, -1.5, 1.5, -0.5}, {-1.5, 0.5, -0.5, 1.5}};
constexpr int kY[4] = {0, 1, 2, 0};
constexpr double kW1[8][4] = {
    {0.6, -0.2, 0.2, -0.6}, {0.5, -0.3, 0.3, -0.5}, {0.4, 0.1, 0.2, -0.4}, {0.3, -0.4, 0.1, -0.3},
    {-0.3, 0.5, -0.4, 0.2}, {-0.2, 0.6, -0.5, 0.1}, {0.2, 0.3, -0.6, 0.4}, {-0.5, -0.2, 0.4, 0.3}};
constexpr double kB1[8] = {0.1, -0.1, 0.05, 0.0, 0.1, -0.05, 0.0, 0.1};
constexpr double kW2[3][8] = {{0.8, 0.7, 0.6, 0.5, 0.5, 0.4, 0.5, 0.3},
                              {-0.4, 0.3, -0.2, 0.5, -0.3, 0.4, -0.5, 0.2},
                              {0.2, -0.5, 0.4, -0.3, 0.1, -0.2, 0.3, -0.6}};
constexpr double kB2[3] = {0.0, 0.1, -0.1};

// Step 0 runs on the initial weights (every step's batch is the same 4 rows, rotated).
struct Forward {
  double pre_min = INFINITY, pre_max = -INFINITY;      // fc1's addmm output
  double act_max = 0;                                  // relu output
  double logit_min = INFINITY, logit_max = -INFINITY;  // fc2's addmm output
  double loss = 0;                                     // mean cross-entropy
  double row0_sum = 0;                                 // max over rows of fc2 row 0 (no bias)
};

Forward forward_step0() {
  Forward f;
  for (int r = 0; r < 4; ++r) {
    double h[8];
    for (int i = 0; i < 8; ++i) {
      double pre = kB1[i];
      for (int j = 0; j < 4; ++j) pre += kW1[i][j] * kX[r][j];
      f.pre_min = std::min(f.pre_min, pre);
      f.pre_max = std::max(f.pre_max, pre);
      h[i] = std::max(pre, 0.0);
      f.act_max = std::max(f.act_max, h[i]);
    }
    double z[3], zmax = -INFINITY;
    for (int k = 0; k < 3; ++k) {
      double dot = 0;
      for (int i = 0; i < 8; ++i) dot += kW2[k][i] * h[i];
      if (k == 0) f.row0_sum = std::max(f.row0_sum, dot);
      z[k] = dot + kB2[k];
      zmax = std::max(zmax, z[k]);
      f.logit_min = std::min(f.logit_min, z[k]);
      f.logit_max = std::max(f.logit_max, z[k]);
    }
    double sum = 0;
    for (double v : z) sum += std::exp(v - zmax);
    f.loss += (zmax + std::log(sum) - z[kY[r]]) / 4;
  }
  return f;
}

// Summary figures used by several tests.
json summary(const std::string& name) { return run_json("summary " + dump(name), 0); }

const std::vector<std::string> kOpsColumns = {
    "step",  "rank",   "seq",   "name", "op",   "overload", "call", "dir",
    "depth", "thread", "scope", "node", "io",   "index",    "li",   "dtype",
    "shape", "numel",  "nan",   "pinf", "ninf", "zero",     "neg",  "pos",
    "min",   "max",    "mean",  "norm", "hash", "param",    "rg",   "value"};

}  // namespace

TEST_CASE("the model's arithmetic behind the golden dumps", "[cli]") {
  // The assumptions make_golden_dumps.cpp states, checked here so the tests below can rely
  // on them: activations stay below 2.5 (x 1e38 is still finite), fc2's row 0 sums to more
  // than FLT_MAX / 1e38 for one batch row and to less for the others.
  const Forward f = forward_step0();
  CHECK(f.act_max <= 2.5);
  CHECK(f.act_max * 1e38 < FLT_MAX);
  CHECK(f.row0_sum * 1e38 > FLT_MAX);
  int rows_over = 0;
  for (int r = 0; r < 4; ++r) {
    double h[8], dot = 0;
    for (int i = 0; i < 8; ++i) {
      h[i] = kB1[i];
      for (int j = 0; j < 4; ++j) h[i] += kW1[i][j] * kX[r][j];
      h[i] = std::max(h[i], 0.0);
      dot += kW2[0][i] * h[i];
    }
    rows_over += dot * 1e38 > FLT_MAX * 1.1;  // with a margin for step 0's update
    CHECK((dot * 1e38 > FLT_MAX * 1.1 || dot * 1e38 < FLT_MAX * 0.9));
  }
  CHECK(rows_over == 1);
}

TEST_CASE("precprobe --version and --help", "[cli]") {
  Run v = run("--version");
  CHECK(v.status == 0);
  CHECK(v.out.find("0.1.0") != std::string::npos);
  for (const char* cmd :
       {"summary", "overflow", "compare", "grads", "scale", "export", "report", "check"}) {
    CAPTURE(cmd);
    Run h = run(std::string(cmd) + " --help");
    CHECK(h.status == 0);
    CHECK(h.out.find("Example") != std::string::npos);
  }
}

TEST_CASE("precprobe usage errors exit 2", "[cli]") {
  CHECK(run("").status == 2);
  CHECK(run("frobnicate").status == 2);
  CHECK(run("export " + dump("clean") + " --format xml").status == 2);
  CHECK(run("compare " + dump("clean")).status == 2);
  CHECK(run("compare " + dump("clean") + " " + dump("clean") + " --first --exact").status == 2);
  CHECK(run("check " + dump("clean") + " --module-hash xyz").status == 2);
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

TEST_CASE("summary of the clean run: every --json key", "[cli][summary]") {
  json j = summary("clean");
  // 3 steps, one frame per stream and step (the debugger flushes at every step).
  REQUIRE(j["steps"].size() == 3);
  int64_t ops = 0;
  for (int s = 0; s < 3; ++s) {
    CHECK(j["steps"][s]["step"] == s);
    ops += j["steps"][s]["ops"].get<int64_t>();
  }
  CHECK(j["op_records"] == ops);
  CHECK(j["step_min"] == 0);
  CHECK(j["step_max"] == 2);
  // One optimizer with one parameter group: a scaler record per step. Four parameters:
  // four gradient records per step. Scalars: the loss and observe_batch's 22 per step
  // (begin, training, grad, stat_modules_training, inputs_numel/nan/inf, mean and std of 4
  // features, targets_numel, ignored, distinct, label_hash, label/0..2), plus 4 once per run
  // (check/init/params, check/model/hash_hi and hash_lo; the debugger's check/params_named).
  CHECK(j["scaler_records"] == 3);
  CHECK(j["grad_records"] == 12);
  CHECK(j["scalar_records"] == 3 * (1 + 22) + 4);
  CHECK(j["nonfinite_op_records"] == 0);
  CHECK(j["nonfinite_ops"].empty());
  CHECK(j["nonfinite_grad_records"] == 0);
  CHECK(j["watch_hits"].empty());
  // GradScaler(init 65536, growth interval 2), all steps finite: the second finite step
  // doubles the scale.
  json& sc = j["scaler"];
  CHECK(sc["records"] == 3);
  CHECK(sc["found_inf"] == 0);
  CHECK(sc["skipped"] == 0);
  CHECK(sc["backoffs"] == 0);
  CHECK(sc["growths"] == 1);
  CHECK(sc["final_scale"] == 131072.0);
  CHECK(sc["first_skip_step"].is_null());
  CHECK(j["dropped"] == 0);
  CHECK(j["truncated"] == false);
  CHECK(j["bad_lines"] == 0);
  CHECK(j["path"].get<std::string>().find("clean") != std::string::npos);
  REQUIRE(j["ranks"].size() == 1);
  CHECK(j["ranks"][0]["rank"] == 0);
  CHECK(j["ranks"][0]["world_size"] == 1);

  REQUIRE(j["streams"].size() == 4);
  const std::map<std::string, int64_t> records = {{"ops.jsonl.zst", ops},
                                                  {"scaler.jsonl.zst", 3},
                                                  {"grads.jsonl.zst", 12},
                                                  {"events.jsonl.zst", 3 * 23 + 4}};
  for (auto& s : j["streams"]) {
    const std::string path = s["path"];
    INFO(path);
    const std::string file = path.substr(path.rfind('/') + 1);
    REQUIRE(records.count(file) == 1);
    CHECK(s["records"] == records.at(file));
    CHECK(s["frames"] == 3);
    CHECK(s["present"] == true);
    CHECK(s["truncated"] == false);
    CHECK(s["truncated_bytes"] == 0);
    CHECK(s["bad_lines"] == 0);
    CHECK(s["message"] == "");
  }

  // meta.json as the debugger wrote it at stop().
  json& m = j["meta"];
  CHECK(m["format_version"] == 1);
  CHECK(m["rank"] == 0);
  CHECK(m["world_size"] == 1);
  CHECK(m["level"] == "L2");
  CHECK(m["task"] == "statistics");
  CHECK(m["state"] == "stopped");
  CHECK(m["step"] == 3);
  CHECK(m["config"]["statistics"]["summary_mode"] == "hash");
  CHECK(m["seed_report"]["seed"] == 1234);
  CHECK(m["seed_report"]["deterministic"] == true);
  CHECK(m["writer"]["records_written"] == ops + 3 + 12 + 73);
  CHECK(m["writer"]["records_dropped"] == 0);
  CHECK(m["counters"]["ops_recorded"] == ops);
  CHECK(m["counters"]["errors"] == 0);
  CHECK(m["counters"]["stale"] == 0);

  Run human = run("summary " + dump("clean"));
  CHECK(human.status == 0);
  CHECK(human.out.find("ops " + std::to_string(ops) + ", scaler 3, grads 12, events 73") !=
        std::string::npos);
  CHECK(human.out.find("final 131072, skipped steps 0, backoffs 0, growths 1") !=
        std::string::npos);
  CHECK(human.out.find("\033[") == std::string::npos);  // NO_COLOR / not a terminal
}

TEST_CASE("summary: the variants hold the ops their change implies", "[cli][summary]") {
  json clean = summary("clean");
  const int64_t ops = clean["op_records"];
  // Same ops, other values.
  CHECK(summary("diverged_1pct")["op_records"] == ops);
  // One aten::mul more, at step 0.
  json extra = summary("extra_op");
  CHECK(extra["op_records"] == ops + 1);
  CHECK(extra["steps"][0]["ops"] == clean["steps"][0]["ops"].get<int64_t>() + 1);
  CHECK(extra["steps"][1]["ops"] == clean["steps"][1]["ops"]);
  // Two ranks: rank 1 is the clean run; rank 0's skipped step 1 has no SGD update (one
  // aten::add_ per parameter: 4) but sets the scaler's found_inf flag (one aten::fill_).
  json ov = summary("overflow");
  CHECK(ov["ranks"].size() == 2);
  CHECK(ov["meta"]["world_size"] == 2);
  CHECK(ov["op_records"] == 2 * ops - 4 + 1);
  CHECK(ov["scaler_records"] == 6);
  CHECK(ov["grad_records"] == 24);
  json r1 = summary("overflow/rank1");
  CHECK(r1["op_records"] == ops);
  CHECK(r1["nonfinite_op_records"] == 0);
  CHECK(r1["meta"]["rank"] == 1);
  // Rank 0: the scaler skipped step 1 and backed off; rank 1 grew at step 1.
  CHECK(ov["scaler"]["skipped"] == 1);
  CHECK(ov["scaler"]["found_inf"] == 1);
  CHECK(ov["scaler"]["backoffs"] == 1);
  CHECK(ov["scaler"]["growths"] == 1);
  CHECK(ov["scaler"]["first_skip_step"] == 1);
  // Every gradient of rank 0's step 1 is non-finite; each fires two watchpoints.
  CHECK(ov["nonfinite_grad_records"] == 4);
  CHECK(ov["watch_hits"].size() == 8);
  CHECK(ov["nonfinite_op_records"].get<int64_t>() > 1);
  std::set<std::string> names;
  for (auto& n : ov["nonfinite_ops"]) names.insert(n["op"].get<std::string>());
  for (const char* op : {"aten::addmm", "aten::linear", "aten::cross_entropy_loss",
                         "aten::_log_softmax", "aten::detach_"}) {
    CAPTURE(op);
    CHECK(names.count(op) == 1);
  }
}

TEST_CASE("summary of a dump whose writer was killed mid-frame", "[cli][summary]") {
  json clean = summary("clean");
  json t = summary("truncated");
  CHECK(t["truncated"] == true);
  // The last frame (step 2) is lost; steps 0 and 1 are read whole.
  REQUIRE(t["steps"].size() == 2);
  CHECK(t["step_max"] == 1);
  CHECK(t["op_records"] ==
        clean["steps"][0]["ops"].get<int64_t>() + clean["steps"][1]["ops"].get<int64_t>());
  bool saw_ops = false;
  for (auto& s : t["streams"]) {
    const std::string path = s["path"];
    INFO(path);
    if (path.find("ops.jsonl.zst") != std::string::npos) {
      saw_ops = true;
      CHECK(s["truncated"] == true);
      CHECK(s["frames"] == 2);
      CHECK(s["truncated_bytes"].get<int64_t>() > 0);
      CHECK(s["message"].get<std::string>().find("incomplete frame") != std::string::npos);
    } else {
      CHECK(s["truncated"] == false);  // the other streams were copied whole
      CHECK(s["frames"] == 3);
    }
  }
  CHECK(saw_ops);
  CHECK(t["scaler_records"] == 3);
  Run human = run("summary " + dump("truncated"));
  CHECK(human.status == 0);
  CHECK(human.out.find("truncated (") != std::string::npos);
}

TEST_CASE("overflow: nothing in the clean run", "[cli][overflow]") {
  json j = run_json("overflow " + dump("clean"), 0);
  CHECK(j["found"] == false);
  CHECK(j["any_nonfinite"] == false);
  for (const char* k : {"step", "rank", "seq", "name", "op", "direction"}) {
    CAPTURE(k);
    CHECK(j[k].is_null());
  }
  REQUIRE(j["ranks"].size() == 1);
  json& r = j["ranks"][0];
  CHECK(r["rank"] == 0);
  CHECK(r["found"] == false);
  CHECK(r["origin"].is_null());
  CHECK(r["first_nonfinite_input"].is_null());
  CHECK(r["nonfinite_ops"] == 0);
  CHECK(r["later_nonfinite_ops"] == 0);
  CHECK(r["steps_affected"] == 0);
  CHECK(r["first_steps_affected"].empty());
  CHECK(r["nonfinite_before_origin"] == false);
  // One rank directory of the two-rank dump: rank 1 ran clean.
  CHECK(run_json("overflow " + dump("overflow/rank1"), 0)["found"] == false);
}

TEST_CASE("overflow: the origin is fc2's addmm inside aten::linear at step 1", "[cli][overflow]") {
  json j = run_json("overflow " + dump("overflow"), 1);
  CHECK(j["found"] == true);
  CHECK(j["any_nonfinite"] == true);
  // Rank 0 scaled the activation by 1e38 at step 1: finite (relu <= 2.5), so aten::mul is
  // not the origin; fc2's row 0 then sums beyond FLT_MAX in the step's second addmm, which
  // aten::linear (depth 0) ran nested (depth 1): the inner op is reported.
  CHECK(j["name"] == "aten::addmm.1.forward");
  CHECK(j["op"] == "aten::addmm");
  CHECK(j["direction"] == "forward");
  CHECK(j["step"] == 1);
  CHECK(j["rank"] == 0);
  CHECK(j["depth"] == 1);
  CHECK(j["scope"] == "mlp/fc2");
  CHECK(j["node"] == "");
  CHECK(j["params"] == json::array({"fc2.bias", "fc2.weight"}));
  CHECK(j["nonfinite_before_origin"] == false);
  // addmm(bias, activation, weight^T, beta, alpha): all inputs finite, the scaled
  // activation near 2.1e38 (relu's largest value 2.1, times 1e38, after one SGD step).
  REQUIRE(j["inputs"].size() == 5);
  CHECK(j["inputs"][0]["param"] == "fc2.bias");
  CHECK(j["inputs"][1]["max"].get<double>() ==
        Approx(forward_step0().act_max * 1e38).epsilon(0.02));
  for (int i = 0; i < 3; ++i) {
    CHECK(j["inputs"][i]["nan"] == 0);
    CHECK(j["inputs"][i]["pinf"] == 0);
  }
  CHECK(j["inputs"][3]["value"] == "1");
  // One +Inf: batch row s0, class 0; the other 11 logits stay finite.
  REQUIRE(j["outputs"].size() == 1);
  CHECK(j["outputs"][0]["pinf"] == 1);
  CHECK(j["outputs"][0]["nan"] == 0);
  CHECK(j["outputs"][0]["ninf"] == 0);
  CHECK(j["outputs"][0]["shape"] == json::array({4, 3}));
  CHECK(j["outputs"][0]["max"].get<double>() < FLT_MAX);

  // Spread: the rest of step 1 (loss, backward), and step 2, where zero_grad's aten::detach_
  // hands back the NaN gradients the skipped step left.
  CHECK(j["steps_affected"] == 2);
  CHECK(j["first_steps_affected"] == json::array({1, 2}));
  REQUIRE(j["ranks"].size() == 2);
  json& r0 = j["ranks"][0];
  CHECK(r0["found"] == true);
  CHECK(r0["origin"]["name"] == "aten::addmm.1.forward");
  CHECK(r0["origin"]["seq"] == j["seq"]);
  CHECK(r0["later_nonfinite_ops"] == j["later_nonfinite_ops"]);
  // Every non-finite op of rank 0 but the origin is "later".
  CHECK(r0["nonfinite_ops"] == summary("overflow/rank0")["nonfinite_op_records"]);
  CHECK(r0["later_nonfinite_ops"] == r0["nonfinite_ops"].get<int64_t>() - 1);
  CHECK(r0["steps_affected"] == 2);
  CHECK(r0["first_steps_affected"] == json::array({1, 2}));
  CHECK(r0["nonfinite_before_origin"] == false);
  // The first op fed a non-finite value: the loss, which takes the logits.
  CHECK(r0["first_nonfinite_input"]["name"] == "aten::cross_entropy_loss.0.forward");
  CHECK(r0["first_nonfinite_input"]["step"] == 1);
  json& r1 = j["ranks"][1];
  CHECK(r1["rank"] == 1);
  CHECK(r1["found"] == false);
  CHECK(r1["nonfinite_ops"] == 0);

  Run human = run("overflow " + dump("overflow"));
  CHECK(human.status == 1);
  CHECK(human.out.find("First non-finite value produced by aten::addmm.1.forward") !=
        std::string::npos);
  CHECK(human.out.find("mlp/fc2") != std::string::npos);
  CHECK(human.out.find("+inf 1") != std::string::npos);
}

TEST_CASE("compare, statistics mode: one extra op is aligned away", "[cli][compare]") {
  json clean = summary("clean");
  const int64_t ops = clean["op_records"];
  json j = run_json("compare " + dump("clean") + " " + dump("extra_op"), 1);
  CHECK(j["mode"] == "statistics");
  CHECK(j["matched"] == ops);
  CHECK(j["ops"].size() == static_cast<size_t>(ops));
  CHECK(j["warnings"] == 0);        // x * ones: every value the same
  CHECK(j["aligned_by_lcs"] == 1);  // step 0 only
  CHECK(j["unmatched_count"] == 1);
  REQUIRE(j["unmatched"].size() == 1);
  json expected = {
      {"name", "aten::mul.0.forward"}, {"side", "b"}, {"step", 0}, {"rank", 0}, {"seq", 0}};
  CHECK(j["unmatched"][0] == expected);
  CHECK(j["first_unmatched"] == expected);
  CHECK(j["only_a"].empty());
  CHECK(j["only_b"].empty());
  CHECK(j["identical"] == false);
  CHECK(j["found"] == false);
  // The extra op ran first in step 0 of B: every paired op of that step sits one seq later
  // in B, with equal statistics.
  json& op0 = j["ops"][0];
  CHECK(op0["step"] == 0);
  CHECK(op0["rank"] == 0);
  CHECK(op0["name"] == "aten::t.0.forward");  // fc1's weight transposed: the first op
  CHECK(op0["name_b"] == "aten::t.0.forward");
  CHECK(op0["op"] == "aten::t");
  CHECK(op0["direction"] == "forward");
  CHECK(op0["scope"] == "mlp/fc1");
  CHECK(op0["seq"] == 0);
  CHECK(op0["seq_b"] == 1);
  CHECK(op0["exact"] == true);
  CHECK(op0["warning"] == false);
  CHECK(op0["input_error"] == 0.0);
  CHECK(op0["output_error"] == 0.0);
  CHECK(op0["score"] == 0.0);
  REQUIRE(op0["args"].size() == 2);
  CHECK(op0["args"][0]["io"] == "input");
  CHECK(op0["args"][0]["dtype_n"] == "Float");
  CHECK(op0["args"][0]["shape_n"] == json::array({8, 4}));
  CHECK(op0["args"][1]["shape_n"] == json::array({4, 8}));
  int64_t shifted = 0;
  for (auto& o : j["ops"]) {
    if (o["step"] != 0) continue;
    CHECK(o["seq_b"] == o["seq"].get<int64_t>() + 1);
    ++shifted;
  }
  CHECK(shifted == clean["steps"][0]["ops"].get<int64_t>());

  Run human = run("compare " + dump("clean") + " " + dump("extra_op"));
  CHECK(human.status == 1);
  CHECK(human.out.find("only B     0     0    0  aten::mul.0.forward") != std::string::npos);

  json same = run_json("compare " + dump("clean") + " " + dump("clean"), 0);
  CHECK(same["warnings"] == 0);
  CHECK(same["unmatched_count"] == 0);
  CHECK(same["aligned_by_lcs"] == 0);

  // The truncated copy lacks step 2: a (step, rank) present in A only.
  json cut = run_json("compare " + dump("clean") + " " + dump("truncated"), 1);
  CHECK(cut["only_a"] == json::array({json::array({2, 0})}));
  CHECK(cut["only_b"].empty());
  CHECK(cut["unmatched_count"] == clean["steps"][2]["ops"]);
  CHECK(cut["matched"] == ops - clean["steps"][2]["ops"].get<int64_t>());
}

TEST_CASE("compare --first: the 1 % change is the act_scale mul at step 1", "[cli][compare]") {
  const int64_t ops = summary("clean")["op_records"];
  json j = run_json("compare " + dump("diverged_1pct") + " " + dump("clean") + " --first", 1);
  CHECK(j["mode"] == "first");
  CHECK(j["found"] == true);
  // aten::mul.Scalar(h, 1.01) vs (h, 1.0): same tensor input, the constant differs, the
  // output is 1 % larger: error 0.01 / 1.01 relative to the larger magnitude.
  CHECK(j["name"] == "aten::mul.0.forward");
  CHECK(j["name_b"] == "aten::mul.0.forward");
  CHECK(j["op"] == "aten::mul");
  CHECK(j["direction"] == "forward");
  CHECK(j["scope"] == "mlp");
  CHECK(j["step"] == 1);
  CHECK(j["rank"] == 0);
  CHECK(j["seq"] == j["seq_b"]);
  CHECK(j["input_error"] == 0.0);
  CHECK(j["output_error"].get<double>() == Approx(0.01 / 1.01).epsilon(1e-5));
  CHECK(j["score"].get<double>() == Approx(0.01 / 1.01).epsilon(1e-5));
  REQUIRE(j["args"].size() == 3);
  CHECK(j["args"][0]["io"] == "input");
  CHECK(j["args"][0]["error"] == 0.0);
  CHECK(j["args"][1]["tensor"] == false);
  CHECK(j["args"][1]["note"] == "value differs: 1.01 vs 1.0");
  json& out = j["args"][2];
  CHECK(out["io"] == "output");
  CHECK(out["max"]["n"].get<double>() / out["max"]["b"].get<double>() ==
        Approx(1.01).epsilon(1e-6));
  CHECK(out["max"]["rel_pct"].get<double>() == Approx(1.0).epsilon(1e-4));
  CHECK(j["matched"] == ops);
  CHECK(j["unmatched"].empty());
  CHECK(j["first_unmatched"].is_null());
  CHECK(j["only_a"].empty());
  CHECK(j["only_b"].empty());
  CHECK(j["identical"] == false);
  CHECK(j["warnings"].get<int64_t>() > 0);  // steps 1 and 2 differ after the change

  // A differing constant is divergent whatever the threshold.
  CHECK(run_json("compare " + dump("diverged_1pct") + " " + dump("clean") + " --first --rtol 0.5",
                 1)["name"] == "aten::mul.0.forward");
  // Step 0 ran the same arithmetic in both runs.
  json s0 =
      run_json("compare " + dump("diverged_1pct") + " " + dump("clean") + " --first --step 0", 0);
  CHECK(s0["found"] == false);
  CHECK(s0["warnings"] == 0);
  CHECK(s0["matched"] == summary("clean")["steps"][0]["ops"]);
  CHECK(run_json("compare " + dump("clean") + " " + dump("clean") + " --first", 0)["found"] ==
        false);

  Run human = run("compare " + dump("diverged_1pct") + " " + dump("clean") + " --first");
  CHECK(human.status == 1);
  CHECK(human.out.find("First divergent op: aten::mul.0.forward") != std::string::npos);
  CHECK(human.out.find("value differs: 1.01 vs 1.0") != std::string::npos);
}

TEST_CASE("compare --by module: the 1 % change is in fc1's scope", "[cli][compare]") {
  // The act_scale mul runs after fc1's addmm and before fc2's: it inherits module fc1.
  json j = run_json(
      "compare " + dump("diverged_1pct") + " " + dump("clean") + " --first --by module", 1);
  CHECK(j["name"] == "aten::mul.0.forward");
  CHECK(j["module"] == "fc1");
  CHECK(j["first_module"] == "fc1");
  REQUIRE(j["modules"].size() == 2);
  json& fc1 = j["modules"][0];
  CHECK(fc1["module"] == "fc1");
  CHECK(fc1["first_divergent"]["name"] == "aten::mul.0.forward");
  CHECK(fc1["first_divergent"]["step"] == 1);
  CHECK(fc1["ops"].get<int64_t>() == fc1["match"].get<int64_t>() + fc1["noise"].get<int64_t>() +
                                         fc1["divergent"].get<int64_t>());
  CHECK(j["modules"][1]["module"] == "fc2");
  int64_t total = 0;
  for (auto& m : j["modules"]) total += m["ops"].get<int64_t>();
  CHECK(total == j["matched"].get<int64_t>());
  Run human =
      run("compare " + dump("diverged_1pct") + " " + dump("clean") + " --first --by module");
  CHECK(human.out.find("First divergent module: fc1 (aten::mul.0.forward at step 1") !=
        std::string::npos);
  CHECK(run("compare " + dump("clean") + " " + dump("clean") + " --by layer").status == 2);
}

TEST_CASE("summary --by module: the overflow is in fc2's scope from step 1", "[cli][summary]") {
  json j = run_json("summary " + dump("overflow") + " --by module --json", 0);
  REQUIRE(j["modules"].is_array());
  // The modules' figures against the records themselves: every op once, every NaN/Inf op
  // once, the largest finite |output| of the dump.
  precprobe::DumpReader reader(kData + "overflow");
  const std::vector<precprobe::OpRecord> ops = reader.ops();
  int64_t nonfinite = 0;
  double largest = 0;
  for (const precprobe::OpRecord& r : ops) {
    nonfinite += r.outputs_non_finite() ? 1 : 0;
    for (const precprobe::Arg& out : r.outputs)
      if (out.is_tensor() && std::isfinite(out.tensor->abs_max()))
        largest = std::max(largest, out.tensor->abs_max());
  }
  int64_t ops_sum = 0, nonfinite_sum = 0;
  double largest_of_modules = 0;
  std::map<std::string, json> by_name;
  for (const json& m : j["modules"]) {
    ops_sum += m["ops"].get<int64_t>();
    nonfinite_sum += m["nonfinite_ops"].get<int64_t>();
    largest_of_modules = std::max(largest_of_modules, m["max_abs_output"].get<double>());
    by_name[m["module"].get<std::string>()] = m;
  }
  CHECK(ops_sum == static_cast<int64_t>(ops.size()));
  CHECK(nonfinite_sum == nonfinite);
  CHECK(largest_of_modules == Approx(largest).epsilon(1e-12));
  // The planted fault: rank 0 scales fc1's activation by 1e38 at step 1 (finite: fc1's scope
  // holds the largest finite output, ~2.1e38), and fc2's addmm overflows it: the first NaN/Inf
  // belongs to fc2, at step 1; nothing in fc1's scope is non-finite.
  REQUIRE(by_name.count("fc1") == 1);
  REQUIRE(by_name.count("fc2") == 1);
  CHECK(by_name["fc1"]["nonfinite_ops"] == 0);
  CHECK(by_name["fc1"]["first_nonfinite_step"].is_null());
  CHECK(by_name["fc1"]["max_abs_output"].get<double>() > 1e38);
  CHECK(by_name["fc2"]["nonfinite_ops"].get<int64_t>() > 0);
  CHECK(by_name["fc2"]["first_nonfinite_step"] == 1);
  // Without --by module the JSON has no "modules" key (unchanged for existing readers).
  CHECK_FALSE(summary("overflow").contains("modules"));
  // The human table.
  Run r = run("summary " + dump("overflow") + " --by module");
  CHECK(r.status == 0);
  CHECK(r.out.find("first NaN/Inf step") != std::string::npos);
}

TEST_CASE("compare --ranks: rank 0's overflow run against rank 1's clean run", "[cli][compare]") {
  json j = run_json("compare " + dump("overflow") + " --ranks 0 1 --first", 1);
  CHECK(j["found"] == true);
  CHECK(j["name"] == "aten::mul.0.forward");  // act_scale 1e38 vs 1
  CHECK(j["step"] == 1);
  CHECK(j["args"][1]["note"].get<std::string>().find("vs 1.0") != std::string::npos);
  // Rank 0 skipped step 1's optimizer step: no aten::add_ for the 4 parameters; instead the
  // scaler set its found_inf flag (aten::fill_).
  int only_b_add = 0, only_a_fill = 0;
  for (auto& u : j["unmatched"]) {
    CHECK(u["step"] == 1);
    const std::string name = u["name"];
    if (u["side"] == "b" && name.rfind("aten::add_.", 0) == 0) ++only_b_add;
    if (u["side"] == "a" && name.rfind("aten::fill_.", 0) == 0) ++only_a_fill;
  }
  CHECK(only_b_add == 4);
  CHECK(only_a_fill == 1);
  CHECK(j["unmatched"].size() == 5);
  // Before step 1 the two ranks computed the same bits.
  json s0 = run_json("compare " + dump("overflow") + " --ranks 0 1 --exact --step 0", 0);
  CHECK(s0["identical"] == true);
}

TEST_CASE("compare --exact: hashes name the innermost op that differs", "[cli][compare]") {
  json same = run_json("compare " + dump("clean") + " " + dump("clean") + " --exact", 0);
  CHECK(same["mode"] == "exact");
  CHECK(same["identical"] == true);
  CHECK(same["found"] == false);
  // The first op that differs is aten::mul.Scalar at step 1; inside it, mul.Tensor takes the
  // constant as a Double tensor, aten::to converts it to float32 through _to_copy, and the
  // copy_ writing float(1.01) is the innermost op whose tensors differ.
  json j = run_json("compare " + dump("diverged_1pct") + " " + dump("clean") + " --exact", 1);
  CHECK(j["mode"] == "exact");
  CHECK(j["identical"] == false);
  CHECK(j["found"] == true);
  CHECK(j["step"] == 1);
  CHECK(j["rank"] == 0);
  CHECK(j["name"] == "aten::copy_.1.forward");
  CHECK(j["op"] == "aten::copy_");
  CHECK(j["direction"] == "forward");
  CHECK(j["scope"] == "mlp");
  // ... and comes after the outer mul (seq is taken when an op starts).
  json first = run_json("compare " + dump("diverged_1pct") + " " + dump("clean") + " --first", 1);
  CHECK(j["seq"].get<int64_t>() > first["seq"].get<int64_t>());
  CHECK(run_json("compare " + dump("diverged_1pct") + " " + dump("clean") + " --exact --step 0",
                 0)["identical"] == true);
  // Different ops: not identical, though every paired op is equal.
  json extra = run_json("compare " + dump("clean") + " " + dump("extra_op") + " --exact", 1);
  CHECK(extra["identical"] == false);
  CHECK(extra["found"] == false);
  CHECK(extra["unmatched_count"] == 1);

  Run human = run("compare " + dump("diverged_1pct") + " " + dump("clean") + " --exact");
  CHECK(human.out.find("First op that differs: aten::copy_.1.forward") != std::string::npos);
  CHECK(run("compare " + dump("clean") + " " + dump("clean") + " --exact").out.find("Identical") !=
        std::string::npos);
}

TEST_CASE("scale: GradScaler's history", "[cli][scale]") {
  json j = run_json("scale " + dump("clean"), 0);
  REQUIRE(j.is_array());
  REQUIRE(j.size() == 3);
  // init 65536, growth interval 2: finite, finite (grow to 131072), finite.
  const double scale[3] = {65536, 65536, 131072}, next[3] = {65536, 131072, 131072};
  for (int s = 0; s < 3; ++s) {
    CAPTURE(s);
    CHECK(j[s]["step"] == s);
    CHECK(j[s]["rank"] == 0);
    CHECK(j[s]["optimizer"] == 0);
    CHECK(j[s]["scale"] == scale[s]);
    CHECK(j[s]["scale_next"] == next[s]);
    CHECK(j[s]["found_inf"] == false);
    CHECK(j[s]["skipped"] == false);
    CHECK(j[s]["nonfinite_params"] == 0);
    CHECK(j[s]["event"] == (s == 1 ? "growth" : ""));
  }
  // Rank 0 of the overflow dump: NaN gradients at step 1 -> skipped, backoff to 32768.
  json o = run_json("scale " + dump("overflow"), 0);
  REQUIRE(o.size() == 6);
  std::map<std::pair<int, int>, json> by;
  for (auto& r : o) by[{r["step"].get<int>(), r["rank"].get<int>()}] = r;
  json& bad = by[{1, 0}];
  CHECK(bad["found_inf"] == true);
  CHECK(bad["skipped"] == true);
  CHECK(bad["event"] == "backoff");
  CHECK(bad["scale"] == 65536.0);
  CHECK(bad["scale_next"] == 32768.0);
  CHECK(bad["nonfinite_params"] == 4);
  CHECK(by[{2, 0}]["scale"] == 32768.0);
  CHECK(by[{2, 0}]["scale_next"] == 32768.0);
  CHECK(by[{1, 1}]["event"] == "growth");

  Run human = run("scale " + dump("clean"));
  CHECK(human.status == 0);
  CHECK(human.out.find("3 optimizer steps, 0 skipped, final scale 131072") != std::string::npos);
}

TEST_CASE("grads: the monitor's history and watchpoints", "[cli][grads]") {
  json c = run_json("grads " + dump("clean"), 0);
  REQUIRE(c["params"].size() == 4);
  CHECK(c["hits"].empty());
  std::map<std::string, std::vector<double>> norms;  // per step
  for (auto& p : c["params"]) {
    const std::string name = p["param"];
    INFO(name);
    CHECK(p["nonfinite_steps"] == 0);
    CHECK(p["watch_hits"] == 0);
    REQUIRE(p["steps"].size() == 3);
    double max_norm = 0;
    for (int s = 0; s < 3; ++s) {
      json& e = p["steps"][s];
      CHECK(e["step"] == s);
      CHECK(e["rank"] == 0);
      CHECK(e["has_grad"] == true);
      CHECK(e["grad_nan"] == 0);
      CHECK(e["grad_inf"] == 0);
      CHECK(e["grad_norm"].get<double>() > 0);
      CHECK(e["grad_abs_max"].get<double>() <= e["grad_norm"].get<double>());
      CHECK(e["grad_abs_mean"].get<double>() <= e["grad_abs_max"].get<double>());
      CHECK(e["weight_norm"].get<double>() > 0);
      CHECK(e["watch"].empty());
      // SGD(lr 0.01) moves each parameter by 0.01 * |g|: between the watchpoints' 1e-4
      // (too small) and 0.1 (too large). No ratio on the first step.
      if (s == 0) {
        CHECK(e["update_ratio"] == 0.0);
      } else {
        CHECK(e["update_ratio"].get<double>() > 1e-4);
        CHECK(e["update_ratio"].get<double>() < 0.1);
      }
      max_norm = std::max(max_norm, e["grad_norm"].get<double>());
      norms[name].push_back(e["grad_norm"]);
    }
    CHECK(p["max_grad_norm"] == max_norm);
  }
  // The scaler's group norm after unscale is the norm of the four parameter norms, and
  // before unscale that times the scale.
  json sc = jsonl(run("export " + dump("clean") + " --format jsonl --stream scaler").out);
  REQUIRE(sc.size() == 3);
  for (int s = 0; s < 3; ++s) {
    double sq = 0;
    for (auto& [name, v] : norms) sq += v[s] * v[s];
    CHECK(sc[s]["grad_norm"].get<double>() == Approx(std::sqrt(sq)).epsilon(1e-9));
    CHECK(sc[s]["grad_norm_scaled"].get<double>() ==
          Approx(sc[s]["grad_norm"].get<double>() * sc[s]["scale"].get<double>()).epsilon(1e-6));
  }

  // The overflow dump: rank 0's step 1 has NaN gradients everywhere and no update.
  json o = run_json("grads " + dump("overflow"), 0);
  REQUIRE(o["params"].size() == 4);
  CHECK(o["hits"].size() == 8);
  std::set<std::string> hits;
  for (auto& h : o["hits"]) {
    CHECK(h["step"] == 1);
    hits.insert(h["hit"].get<std::string>());
  }
  for (const char* p : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"})
    for (const char* w : {"grad_exploding", "weight_not_changed"})
      CHECK(hits.count(std::string(p) + ": " + w) == 1);
  for (auto& p : o["params"]) {
    const std::string name = p["param"];
    INFO(name);
    CHECK(p["nonfinite_steps"] == 1);
    CHECK(p["watch_hits"] == 2);
    REQUIRE(p["steps"].size() == 6);  // 3 steps x 2 ranks
    json s0, s1;
    for (auto& e : p["steps"]) {
      if (e["rank"] != 0) continue;
      if (e["step"] == 0) s0 = e;
      if (e["step"] == 1) s1 = e;
    }
    CHECK(s1["watch"] == json::array({"grad_exploding", "weight_not_changed"}));
    CHECK(s1["grad_nan"].get<int64_t>() > 0);
    CHECK(s1["update_ratio"] == 0.0);
    CHECK(s1["weight_norm"] == s0["weight_norm"]);  // the skipped step left it
  }
  // fc2's gradients sum over every batch row, and row s0's is NaN: all of them are NaN.
  json w = run_json("grads " + dump("overflow") + " --param fc2.weight", 0);
  REQUIRE(w["params"].size() == 1);
  int seen = 0;
  for (auto& e : w["params"][0]["steps"]) {
    if (e["rank"] != 0 || e["step"] != 1) continue;
    ++seen;
    CHECK(e["grad_nan"] == 3 * 8);
  }
  CHECK(seen == 1);
  CHECK(run_json("grads " + dump("overflow") + " --param fc2", 0)["params"].size() == 2);

  Run human = run("grads " + dump("overflow"));
  CHECK(human.out.find("8 watchpoint hits, first: step 1") != std::string::npos);
}

TEST_CASE("export: the four streams as CSV and JSON Lines", "[cli][export]") {
  json sum = summary("clean");
  Run csv = run("export " + dump("clean") + " --format csv");
  REQUIRE(csv.status == 0);
  std::vector<std::string> header;
  const auto rows = csv_table(csv.out, &header);
  CHECK(header == kOpsColumns);
  // One row per argument: every op record appears, in (step, seq) order.
  std::set<std::pair<int, int>> records;
  for (auto& r : rows) records.insert({std::stoi(r.at("step")), std::stoi(r.at("seq"))});
  CHECK(records.size() == sum["op_records"].get<size_t>());
  Run jl = run("export " + dump("clean") + " --format jsonl");
  REQUIRE(jl.status == 0);
  const auto lines = jsonl(jl.out);
  CHECK(lines.size() == rows.size());

  // fc1's addmm at step 0 runs on the initial weights: its output spans [-1.9, 2.1].
  const Forward f = forward_step0();
  bool saw = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (r.at("step") != "0" || r.at("name") != "aten::addmm.0.forward") continue;
    if (r.at("io") == "output") {
      saw = true;
      CHECK(std::stod(r.at("min")) == Approx(f.pre_min).epsilon(1e-6));
      CHECK(std::stod(r.at("max")) == Approx(f.pre_max).epsilon(1e-6));
      CHECK(r.at("shape") == "[4,8]");
      CHECK(r.at("scope") == "mlp/fc1");
      CHECK(std::regex_match(r.at("hash"), std::regex("[0-9a-f]{16}")));
      CHECK(lines[i]["hash"] == r.at("hash"));
      CHECK(lines[i]["max"].get<double>() == Approx(f.pre_max).epsilon(1e-6));
    }
    if (r.at("io") == "input" && r.at("index") == "0") {
      CHECK(r.at("param") == "fc1.bias");
      CHECK(r.at("rg") == "true");
    }
    if (r.at("io") == "input" && r.at("index") == "3") {
      CHECK(r.at("dtype").empty());
      CHECK(r.at("value") == "1");  // beta
    }
  }
  CHECK(saw);

  // NaN statistics are empty cells in CSV, null in JSON Lines: the overflow run's loss.
  Run ocsv = run("export " + dump("overflow") + " --format csv");
  Run ojl = run("export " + dump("overflow") + " --format jsonl");
  const auto orows = csv_table(ocsv.out, &header);
  const auto olines = jsonl(ojl.out);
  REQUIRE(orows.size() == olines.size());
  bool saw_loss = false, saw_origin = false;
  for (size_t i = 0; i < orows.size(); ++i) {
    const auto& r = orows[i];
    if (r.at("rank") != "0" || r.at("step") != "1" || r.at("io") != "output") continue;
    if (r.at("name") == "aten::cross_entropy_loss.0.forward") {
      saw_loss = true;
      CHECK(r.at("nan") == "1");
      CHECK(r.at("min").empty());
      CHECK(r.at("mean").empty());
      CHECK(olines[i]["min"].is_null());
      CHECK(olines[i]["norm"].is_null());
    }
    if (r.at("name") == "aten::addmm.1.forward") {
      saw_origin = true;
      CHECK(r.at("call") == "1");
      CHECK(olines[i]["call"] == 1);
      CHECK(r.at("pinf") == "1");
      CHECK(r.at("depth") == "1");
    }
  }
  CHECK(saw_loss);
  CHECK(saw_origin);

  Run scaler = run("export " + dump("overflow") + " --format csv --stream scaler");
  REQUIRE(scaler.status == 0);
  const auto srows = csv_table(scaler.out, &header);
  CHECK(header == std::vector<std::string>{"step", "rank", "optimizer", "group", "found_inf",
                                           "skipped", "scale", "scale_next", "tracker", "event",
                                           "nonfinite_params", "bad_params", "grad_norm_scaled",
                                           "grad_norm"});
  REQUIRE(srows.size() == 6);
  int backoffs = 0;
  for (auto& r : srows) {
    if (r.at("rank") != "0" || r.at("step") != "1") continue;
    ++backoffs;
    CHECK(r.at("event") == "backoff");
    CHECK(r.at("tracker") == "0");
    std::set<std::string> bad;
    std::istringstream names(r.at("bad_params"));
    std::string n;
    while (std::getline(names, n, ';')) bad.insert(n);
    CHECK(bad == std::set<std::string>{"fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"});
  }
  CHECK(backoffs == 1);

  const std::string file = std::string(PRECPROBE_BINARY_DIR) + "/test_cli_export.csv";
  Run to_file =
      run("export " + dump("overflow") + " --format csv --stream grads -o '" + file + "'");
  CHECK(to_file.status == 0);
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto grows = csv_table(text, &header);
  CHECK(header == std::vector<std::string>{"step", "rank", "param", "has_grad", "grad_norm",
                                           "grad_abs_max", "grad_abs_mean", "grad_nan", "grad_inf",
                                           "weight_norm", "update_ratio", "watch"});
  CHECK(grows.size() == 24);
  for (auto& r : grows)
    CHECK(r.at("watch") ==
          (r.at("rank") == "0" && r.at("step") == "1" ? "grad_exploding;weight_not_changed" : ""));

  Run events = run("export " + dump("clean") + " --format csv --stream events");
  const auto erows = csv_table(events.out, &header);
  CHECK(header == std::vector<std::string>{"step", "rank", "name", "value"});
  CHECK(erows.size() == 73);
  std::vector<double> loss;
  for (auto& r : erows)
    if (r.at("name") == "loss") loss.push_back(std::stod(r.at("value")));
  REQUIRE(loss.size() == 3);
  CHECK(loss[0] == Approx(f.loss).epsilon(1e-6));  // float32 cross-entropy of step 0
  CHECK(loss[1] < loss[0]);                        // SGD on the same 4 rows every step
  CHECK(loss[2] < loss[1]);
}

TEST_CASE("report: one HTML page carrying the analyses", "[cli][report]") {
  const std::string dir = std::string(PRECPROBE_BINARY_DIR) + "/";
  Run r = run("report " + dump("overflow") + " -o '" + dir + "test_cli_overflow.html'");
  REQUIRE(r.status == 0);
  json d = report_data(dir + "test_cli_overflow.html");
  CHECK(d["format"] == "precprobe-report");
  CHECK(d["overflow"]["name"] == "aten::addmm.1.forward");
  CHECK(d["overflow"]["step"] == 1);
  // Loss and loss scale of rank 0 (docs/report.md): its loss is NaN at step 1, when its
  // scaler skipped and backed off.
  CHECK(d["loss"]["n"] == 3);
  CHECK(d["loss"]["max"][1].is_null());
  CHECK(d["loss"]["max"][0].get<double>() == Approx(forward_step0().loss).epsilon(1e-6));
  CHECK(d["scale"]["rank"] == 0);
  CHECK(d["scale"]["backoffs"] == 1);
  CHECK(d["scale"]["growths"] == 0);
  CHECK(d["scale"]["skipped"] == json::array({0, 1, 0}));
  // Non-finite ops per step, all ranks: none at step 0, zero_grad's four aten::detach_ of
  // the NaN gradients at step 2, the rest at step 1.
  CHECK(d["nonfinite"]["ops"][0] == 0.0);
  CHECK(d["nonfinite"]["ops"][2] == 4.0);
  CHECK(d["nonfinite"]["ops"][1].get<int64_t>() + 4 ==
        summary("overflow")["nonfinite_op_records"].get<int64_t>());

  Run c = run("report " + dump("diverged_1pct") + " --compare " + dump("clean") + " -o '" + dir +
              "test_cli_compare.html'");
  REQUIRE(c.status == 0);
  json dc = report_data(dir + "test_cli_compare.html");
  CHECK(dc["runs"].size() == 2);
  CHECK(dc["compare"]["first"]["name"] == "aten::mul.0.forward");
  CHECK(dc["compare"]["first"]["step"] == 1);

  Run t = run("report " + dump("truncated") + " -o '" + dir + "test_cli_truncated.html'");
  REQUIRE(t.status == 0);
  json dt = report_data(dir + "test_cli_truncated.html");
  bool truncated = false;
  for (auto& s : dt["runs"][0]["streams"]) truncated |= s["truncated"].get<bool>();
  CHECK(truncated);
}

TEST_CASE("check: the checklist on the probe's own records", "[cli][check]") {
  json c = run_json("check " + dump("clean"), 0);
  CHECK(c["problem"] == false);
  CHECK(c["path"].get<std::string>().find("clean") != std::string::npos);
  REQUIRE(c["items"].size() == 15);
  const std::map<std::string, std::string> prefix = {
      {"data", "data."}, {"hyper-parameters", "hp."}, {"api", "api."}, {"mixed precision", "mp."}};
  for (auto& item : c["items"]) {
    const std::string id = item["id"];
    INFO(id);
    REQUIRE(prefix.count(item["group"]) == 1);
    CHECK(id.rfind(prefix.at(item["group"]), 0) == 0);
    CHECK_FALSE(item["title"].get<std::string>().empty());
    CHECK(item["figures"].is_object());
  }
  const std::map<std::string, std::string> verdicts = {
      {"data.missing_values", "ok"},
      {"data.class_imbalance", "ok"},
      {"data.inputs_not_normalised", "ok"},
      {"data.no_shuffling", "ok"},
      {"data.ignore_index", "n/a"},
      {"hp.learning_rate", "n/a"},
      {"hp.loss_trend", "n/a"},
      {"api.train_eval_mode", "ok"},
      {"api.frozen_weights", "ok"},
      {"api.init_weights", "ok"},
      {"api.module_hash", "n/a"},
      {"api.replicas", "n/a"},
      {"mp.overflow", "ok"},
      {"mp.grad_scaler", "ok"},
      {"mp.clip_before_unscale", "ok"}};  // no gradient read between scale() and unscale_
  for (auto& [id, verdict] : verdicts) {
    INFO(id);
    json* item = find_item(c, id);
    REQUIRE(item != nullptr);
    CHECK((*item)["verdict"] == verdict);
  }
  // 3 batches of 4 x 4 inputs; labels 0, 1, 2, 0 each step: 6, 3, 3.
  json& missing = *find_item(c, "data.missing_values");
  CHECK(missing["figures"]["batches"] == 3.0);
  CHECK(missing["figures"]["elements"] == 48.0);
  json& imbalance = *find_item(c, "data.class_imbalance");
  CHECK(imbalance["figures"]["classes"] == 3.0);
  CHECK(imbalance["figures"]["max"] == 6.0);
  CHECK(imbalance["figures"]["min"] == 3.0);
  CHECK(imbalance["figures"]["ratio"] == 2.0);
  // Every feature column holds -1.5, -0.5, 0.5, 1.5: mean 0, std sqrt(1.25).
  json& norm = *find_item(c, "data.inputs_not_normalised");
  CHECK(norm["figures"]["mean_ch0"] == 0.0);
  CHECK(norm["figures"]["std_ch0"].get<double>() == Approx(std::sqrt(1.25)));
  // Batches of 4 are too small to judge label mixing; the label order never repeats.
  CHECK((*find_item(c, "data.no_shuffling"))["evidence"].get<std::string>().find(
            "no batch has 8 labelled targets") != std::string::npos);
  CHECK((*find_item(c, "hp.loss_trend"))["evidence"].get<std::string>().find("3 loss values") !=
        std::string::npos);

  json o = run_json("check " + dump("overflow"), 1);
  CHECK(o["problem"] == true);
  json& ov = *find_item(o, "mp.overflow");
  CHECK(ov["verdict"] == "problem");
  CHECK(ov["evidence"].get<std::string>().find("aten::addmm.1.forward") != std::string::npos);
  for (auto& item : o["items"])
    if (item["id"] != "mp.overflow") CHECK(item["verdict"] != "problem");

  // The module hash recorded at start, from its two 32-bit halves in the events stream.
  uint64_t hi = 0, lo = 0;
  for (auto& e : jsonl(run("export " + dump("clean") + " --format jsonl --stream events").out)) {
    if (e["name"] == "check/model/hash_hi") hi = static_cast<uint64_t>(e["value"].get<double>());
    if (e["name"] == "check/model/hash_lo") lo = static_cast<uint64_t>(e["value"].get<double>());
  }
  REQUIRE(hi != 0);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>((hi << 32) | lo));
  json match = run_json("check " + dump("clean") + " --module-hash " + hex, 0);
  CHECK((*find_item(match, "api.module_hash"))["verdict"] == "ok");
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(((hi << 32) | lo) ^ 1));
  json other = run_json("check " + dump("clean") + " --module-hash " + hex, 1);
  CHECK((*find_item(other, "api.module_hash"))["verdict"] == "problem");

  Run human = run("check " + dump("overflow"));
  CHECK(human.status == 1);
  CHECK(human.out.find("1 problem(s) found.") != std::string::npos);
}

namespace {

// The golden dump `name` (written by the probe at format_version 1) written again by the
// current DumpWriter, record for record: the same run at format_version 2.
std::string rewrite_v2(const std::string& name) {
  const std::string out = std::string(PRECPROBE_BINARY_DIR) + "/test_cli_v2/" + name;
  precprobe::DumpReader reader(kData + name);
  for (const precprobe::RankInfo& rank : reader.ranks()) {
    precprobe::WriterOptions o;
    o.dir = out + "/rank" + std::to_string(rank.rank);
    o.overwrite = true;
    precprobe::DumpWriter w(o);
    json meta = json::parse(rank.meta_json);
    REQUIRE(meta["format_version"] == 1);
    meta["format_version"] = precprobe::kDumpFormatVersion;
    w.write_meta(meta.dump());
    precprobe::RecordFilter only;
    only.ranks = {rank.rank};
    reader.for_each_op(
        only, [&](const precprobe::OpRecord& r) { return w.submit(precprobe::OpRecord(r)); });
    reader.for_each_scaler(only, [&](const precprobe::ScalerRecord& r) {
      return w.submit(precprobe::ScalerRecord(r));
    });
    reader.for_each_grad(
        only, [&](const precprobe::GradRecord& r) { return w.submit(precprobe::GradRecord(r)); });
    reader.for_each_scalar(only, [&](const precprobe::ScalarRecord& r) {
      return w.submit(precprobe::ScalarRecord(r));
    });
    w.close();
  }
  return out;
}

// Output of `args` with the v2 copy's path written as the golden dump's.
std::string normalized(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

// JSON without what differs between a dump and its rewrite by construction: the version
// number itself, the frame count of each stream (the writer cuts frames by time and count)
// and the config's dump_path.
void drop_encoding_keys(json& j) {
  if (j.is_object()) {
    for (const char* k : {"format_version", "frames", "dump_path"}) j.erase(k);
    for (auto& [k, v] : j.items()) drop_encoding_keys(v);
  } else if (j.is_array()) {
    for (auto& v : j) drop_encoding_keys(v);
  }
}

}  // namespace

TEST_CASE("every command reads format_version 1 and 2 alike", "[cli][format]") {
  std::map<std::string, std::string> v2;
  for (const char* name : {"clean", "overflow", "diverged_1pct", "extra_op"}) {
    v2[name] = rewrite_v2(name);
    json meta = json::parse(std::ifstream(v2[name] + "/rank0/meta.json"));
    CHECK(meta["format_version"] == 2);
  }
  // The v2 overflow dump holds NaN statistics as null, the v1 one as "nan".
  const auto text_of = [](const std::string& file) {
    precprobe::FrameReader r;
    std::string error, frame, all;
    REQUIRE(r.open(file, &error));
    while (r.next(frame)) all += frame;
    return all;
  };
  const std::string ops_v1 = text_of(kData + "overflow/rank0/ops.jsonl.zst");
  const std::string ops_v2 = text_of(v2["overflow"] + "/rank0/ops.jsonl.zst");
  CHECK(ops_v1.find("\"max\":\"nan\"") != std::string::npos);
  CHECK(ops_v2.find("\"max\":null") != std::string::npos);
  for (const char* v1_only : {"\"min\":\"nan\"", "\"mean\":\"nan\"", "\"v\":\"nan\""})
    CHECK(ops_v2.find(v1_only) == std::string::npos);
  CHECK(ops_v2.find("\"v\":null,\"v_nonfinite\":\"nan\"") != std::string::npos);
  CHECK(std::count(ops_v1.begin(), ops_v1.end(), '\n') ==
        std::count(ops_v2.begin(), ops_v2.end(), '\n'));
  for (const auto& [name, dir] : v2) {
    CAPTURE(name);
    const std::string a = dump(name), b = "'" + dir + "'";
    std::vector<std::string> commands = {"summary", "overflow", "grads", "scale", "check"};
    for (const std::string& c : commands) {
      CAPTURE(c);
      Run x = run(c + " " + a + " --json"), y = run(c + " " + b + " --json");
      CHECK(x.status == y.status);
      json jx = json::parse(x.out), jy = json::parse(normalized(y.out, dir, kData + name));
      drop_encoding_keys(jx);
      drop_encoding_keys(jy);
      CHECK(jx == jy);
      // Human output too (it names no frame counts except in summary's stream table).
      if (c != "summary") {
        Run hx = run(c + " " + a), hy = run(c + " " + b);
        CHECK(hx.out == normalized(hy.out, dir, kData + name));
      }
    }
    for (const char* stream : {"ops", "scaler", "grads", "events"}) {
      CAPTURE(stream);
      for (const char* format : {"jsonl", "csv"}) {
        const std::string args = std::string(" --format ") + format + " --stream " + stream;
        Run x = run("export " + a + args), y = run("export " + b + args);
        CHECK(x.status == 0);
        CHECK(x.out == y.out);
      }
    }
    Run cx = run("compare " + a + " " + dump("clean") + " --json");
    Run cy = run("compare " + b + " '" + v2["clean"] + "' --json");
    CHECK(cx.status == cy.status);
    json jcx = json::parse(cx.out);
    json jcy = json::parse(
        normalized(normalized(cy.out, dir, kData + name), v2["clean"], kData + "clean"));
    drop_encoding_keys(jcx);
    drop_encoding_keys(jcy);
    CHECK(jcx == jcy);
    const std::string html = std::string(PRECPROBE_BINARY_DIR) + "/test_cli_v2/" + name;
    REQUIRE(run("report " + a + " -o '" + html + ".v1.html'").status <= 1);
    REQUIRE(run("report " + b + " -o '" + html + ".v2.html'").status <= 1);
    json rx = report_data(html + ".v1.html");
    json ry = json::parse(normalized(report_data(html + ".v2.html").dump(), dir, kData + name));
    drop_encoding_keys(rx);
    drop_encoding_keys(ry);
    CHECK(rx == ry);
  }
}
