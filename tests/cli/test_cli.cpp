// End to end: runs the built `precprobe` on the dumps in tests/data/cli/ and checks exit
// statuses, every --json key docs/cli.md names, and error messages.
//
// The dumps were written by the real probe (tests/cli/make_golden_dumps.cpp): a 3-step MLP
// with fixed weights and batches. The expected values below are worked out from that model
// (weights, batches, learning rate, GradScaler settings, where the variants differ), not
// copied from the tool's output; where a count depends on ATen internals (how many ops a
// step runs), the tests check relations between dumps and commands instead.
//
// Split by topic: test_cli.cpp (tool, errors, summary, overflow), test_cli_compare.cpp,
// test_cli_history_export.cpp (scale, grads, export), test_cli_report_check.cpp (report,
// check, format versions), test_cli_summary_verdict.cpp (summary's verdict lines on dumps
// written here); shared helpers in cli_test_util.h.
#include "cli/cli_test_util.h"

using namespace precprobe::cli_test;  // NOLINT(google-build-using-namespace): test helpers

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
