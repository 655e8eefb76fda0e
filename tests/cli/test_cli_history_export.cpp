// End to end: `precprobe scale`, `grads` and `export` on the golden dumps of tests/data/cli/
// (see test_cli.cpp for how they were written and what is checked).
#include "cli/cli_test_util.h"

using namespace precprobe::cli_test;  // NOLINT(google-build-using-namespace): test helpers

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

  // sn links each forward addmm to the backward ops of its AddmmBackward0 node (fc1's is
  // created first); bg, opt and mod are off and empty in this single-threaded statistics run.
  std::map<std::string, std::set<std::string>> node_sns;
  std::string fc1_sn, fc2_sn;
  for (const auto& r : rows) {
    if (r.at("step") != "0") continue;
    CHECK(r.at("bg") == "false");
    CHECK(r.at("opt") == "false");
    CHECK(r.at("mod").empty());
    if (r.at("name") == "aten::addmm.0.forward") fc1_sn = r.at("sn");
    if (r.at("name") == "aten::addmm.1.forward") fc2_sn = r.at("sn");
    if (!r.at("node").empty()) node_sns[r.at("node")].insert(r.at("sn"));
  }
  REQUIRE(std::regex_match(fc1_sn, std::regex("[0-9]+")));
  REQUIRE(std::regex_match(fc2_sn, std::regex("[0-9]+")));
  CHECK(std::stoll(fc1_sn) < std::stoll(fc2_sn));
  CHECK(node_sns["AddmmBackward0"] == std::set<std::string>{fc1_sn, fc2_sn});

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
