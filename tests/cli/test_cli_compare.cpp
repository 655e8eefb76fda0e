// End to end: `precprobe compare` (and `summary --by module`) on the golden dumps of
// tests/data/cli/ (see test_cli.cpp for how they were written and what is checked).
#include "cli/cli_test_util.h"
#include "core/temp_dir.h"
#include "support/op_dump.h"

using namespace precprobe::cli_test;  // NOLINT(google-build-using-namespace): test helpers

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
  // Said first: the runs ran different ops, where, and which.
  CHECK(human.out.rfind("The runs ran different ops: 0 ops only in A and 1 only in B, at 1 "
                        "place in 1 (step, rank) group; the first at step 0, rank 0, seq 0 of "
                        "A / 0 of B.\n",
                        0) == 0);
  CHECK(human.out.find("     0     0      0      0             aten::mul.0.forward\n") !=
        std::string::npos);
  CHECK(j["sequence_differs"] == true);
  CHECK(j["groups_compared"] == 3);
  json place = {{"step", 0},
                {"rank", 0},
                {"seq_a", 0},
                {"seq_b", 0},
                {"count_a", 0},
                {"count_b", 1},
                {"names_a", json::array()},
                {"names_b", {"aten::mul.0.forward"}}};
  CHECK(j["first_sequence_diff"] == place);
  CHECK(j["sequence_diffs"] == json::array({place}));

  json same = run_json("compare " + dump("clean") + " " + dump("clean"), 0);
  CHECK(same["warnings"] == 0);
  CHECK(same["unmatched_count"] == 0);
  CHECK(same["aligned_by_lcs"] == 0);
  CHECK(same["sequence_differs"] == false);
  CHECK(same["sequence_diffs"].empty());
  CHECK(same["first_sequence_diff"].is_null());

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
  // Run B multiplies by 1.0 at every step: a constant of the program, which differs.
  CHECK(j["args"][1]["note"] ==
        "value differs: 1.01 vs 1.0 (a constant of the program: every step)");
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

TEST_CASE("compare --by module: the 1 % change is in the model's own forward", "[cli][compare]") {
  // The act_scale mul runs in the model's forward between its children fc1 and fc2: their
  // common ancestor, the top module "(root)" (docs/cli.md, "Modules").
  json j = run_json(
      "compare " + dump("diverged_1pct") + " " + dump("clean") + " --first --by module", 1);
  CHECK(j["name"] == "aten::mul.0.forward");
  CHECK(j["module"] == "(root)");
  CHECK(j["first_module"] == "(root)");
  REQUIRE(j["modules"].size() == 5);
  std::vector<std::string> names;
  for (auto& m : j["modules"]) names.push_back(m["module"].get<std::string>());
  // In order of first appearance: fc1's ops, the activation, fc2's, the loss and zero_grad,
  // GradScaler's unscale between the backward and SGD.
  CHECK(names ==
        std::vector<std::string>{"fc1", "(root)", "fc2", "(top level)", "(after backward)"});
  json& root = j["modules"][1];
  CHECK(root["first_divergent"]["name"] == "aten::mul.0.forward");
  CHECK(root["first_divergent"]["step"] == 1);
  CHECK(root["ops"].get<int64_t>() == root["match"].get<int64_t>() + root["noise"].get<int64_t>() +
                                          root["divergent"].get<int64_t>());
  // fc1's first divergent op is SGD's update of fc1.weight: an optimizer op reading it.
  CHECK(j["modules"][0]["first_divergent"]["name"] == "aten::add_.0.forward");
  int64_t total = 0;
  for (auto& m : j["modules"]) total += m["ops"].get<int64_t>();
  CHECK(total == j["matched"].get<int64_t>());
  Run human =
      run("compare " + dump("diverged_1pct") + " " + dump("clean") + " --first --by module");
  CHECK(human.out.find("First divergent module: (root) (aten::mul.0.forward at step 1") !=
        std::string::npos);
  CHECK(run("compare " + dump("clean") + " " + dump("clean") + " --by layer").status == 2);
}

TEST_CASE("summary --by module: the overflow is in fc2 from step 1", "[cli][summary]") {
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
  // The planted fault: rank 0 scales fc1's activation by 1e38 at step 1 in the model's own
  // forward (finite: "(root)", between fc1 and fc2, holds the largest finite output, ~2.1e38),
  // and fc2's addmm overflows it: fc2's first NaN/Inf is at step 1. fc1's own outputs stay
  // small; its backward ops (placed with their forward ops) get the NaN gradients.
  REQUIRE(by_name.count("fc1") == 1);
  REQUIRE(by_name.count("fc2") == 1);
  REQUIRE(by_name.count("(root)") == 1);
  CHECK(by_name["(root)"]["max_abs_output"].get<double>() > 1e38);
  CHECK(by_name["fc1"]["max_abs_output"].get<double>() < 1e6);
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

// Two runs of one ResNet block whose AccumulateGrad copied another parameter's gradient
// (support/op_dump.h): the same number of ops, in another order.
TEST_CASE("compare --exact: the runs ran different ops is said first, and where",
          "[cli][compare]") {
  precprobe::test::TempDir dir("cli_compare_ops");
  precprobe::test::write_op_dump(dir / "a",
                                 {{0, precprobe::test::block_backward({"conv2.weight"})}});
  precprobe::test::write_op_dump(dir / "b", {{0, precprobe::test::block_backward({"bn1.weight"})}});
  const std::string ab = "compare '" + dir / "a" + "' '" + dir / "b" + "'";
  Run exact = run(ab + " --exact");
  INFO(exact.out);
  CHECK(exact.status == 1);
  CHECK(exact.out.rfind("Not identical: the runs ran different ops: 3 ops only in A and 3 only "
                        "in B, at 2 places in 1 (step, rank) group; the first at step 0, rank 0, "
                        "seq 5 of A / 5 of B.\n",
                        0) == 0);
  CHECK(exact.out.find("     0     0      5      5  aten::new_empty_strided.0.backward, "
                       "aten::copy_.0.backward  aten::detach.2.backward") != std::string::npos);
  CHECK(exact.out.find("     0     0      8      7  aten::detach.2.backward") != std::string::npos);
  CHECK(exact.out.find("Every paired op is bitwise equal.") != std::string::npos);
  CHECK(exact.out.find("shape differs") == std::string::npos);
  json j = run_json(ab + " --exact", 1);
  CHECK(j["identical"] == false);
  CHECK(j["sequence_differs"] == true);
  CHECK(j["first_sequence_diff"]["seq_a"] == 5);
  CHECK(j["sequence_diffs"].size() == 2);
  CHECK(j["matched"] == 9);
  CHECK(j["unmatched_count"] == 6);
  // Statistics and --first modes say it first too.
  for (const char* mode : {"", " --first"}) {
    Run r = run(ab + mode);
    CHECK(r.out.rfind("The runs ran different ops: 3 ops only in A", 0) == 0);
  }
}

TEST_CASE("compare with nothing to compare exits 2 saying why", "[cli][compare]") {
  precprobe::test::TempDir dir("cli_compare_nothing");
  precprobe::test::write_op_dump(dir / "empty_a", {});
  precprobe::test::write_op_dump(dir / "empty_b", {});
  precprobe::test::write_op_dump(dir / "step0", {{0, precprobe::test::block_backward({})}});
  precprobe::test::write_op_dump(dir / "step1", {{1, precprobe::test::block_backward({})}});
  auto nothing = [&](const std::string& args, const std::string& why) {
    for (const char* json_flag : {"", " --json"}) {
      Run r = run("compare " + args + json_flag, /*merge_stderr=*/true);
      INFO(args << json_flag << "\n" << r.out);
      CHECK(r.status == 2);
      CHECK(r.out.find("precprobe: error: nothing to compare: " + why) != std::string::npos);
      CHECK(r.out.find("Identical") == std::string::npos);
    }
  };
  const std::string a = "'" + dir / "empty_a" + "'", b = "'" + dir / "empty_b" + "'";
  nothing(a + " " + b,
          "neither dump holds op records. Check what was recorded with "
          "`precprobe summary DIR`");
  nothing(a + " " + b + " --exact", "neither dump holds op records");
  nothing(a + " " + dump("clean"), "A (" + dir / "empty_a" + ") holds no op records");
  nothing("'" + dir / "step0" + "' '" + dir / "step1" + "' --exact",
          "the dumps hold no (step, rank) in common: A has step 0 rank 0; B has step 1 rank 0. "
          "Record the same steps in both runs, or compare two ranks with --ranks R1 R2.");
  nothing(dump("clean") + " " + dump("clean") + " --exact --step 7",
          "neither dump holds op records at step 7");
}
