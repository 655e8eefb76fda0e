// The op watchpoints' evaluator on synthetic records (precprobe/op_watch.h): each condition
// against values computed here, what is watched and what is not, one hit per episode, the
// module as summary attributes it (the op between mlp's children in mlp), the options' errors, the
// hit's event line read back, and check's item.
#include <cmath>
#include <string>
#include <vector>

#include "analysis_fixtures.h"
#include "precprobe/checklist.h"
#include "precprobe/dump_format.h"
#include "precprobe/error.h"
#include "precprobe/op_watch.h"
#include "precprobe_catch.h"

using namespace precprobe;
using namespace precprobe::test;

namespace {

// One step of the model's forward: mlp.fc1's linear (reads mlp.fc1.weight), then `op` on its
// output, then mlp.fc2's linear (its output the same each step): `op` runs in mlp's forward,
// between its children (module mlp). `y`: the values of op's output (requires grad).
std::vector<OpRecord> forward_step(int64_t step, const std::vector<double>& y,
                                   const std::string& op = "aten::mul", bool requires_grad = true) {
  Arg w = targ({0.5, -0.5});
  w.tensor->param = "mlp.fc1.weight";
  Arg w2 = w;
  w2.tensor->param = "mlp.fc2.weight";
  Arg h = targ({1, 2});
  h.tensor->requires_grad = true;
  Arg out = targ(y);
  out.tensor->requires_grad = requires_grad;
  OpRecord lin = make_op(step, 0, {"aten::linear", 0, {targ({1, 1}), w}, {h}});
  OpRecord act = make_op(step, 0, {op, 1, {h}, {out}});
  OpRecord lin2 = make_op(step, 0, {"aten::linear", 2, {out, w2}, {h}});
  return {lin, act, lin2};
}

std::vector<OpWatchHit> run(OpWatcher& w, const std::vector<std::vector<double>>& per_step,
                            const std::string& op = "aten::mul") {
  std::vector<OpWatchHit> hits;
  for (size_t s = 0; s < per_step.size(); ++s)
    for (const OpRecord& r : forward_step(static_cast<int64_t>(s), per_step[s], op))
      w.observe(r, hits);
  w.end_step(hits);
  return hits;
}

}  // namespace

TEST_CASE("op watch: tensor_too_large against the op's own median, after the warm-up",
          "[op_watch]") {
  OpWatcher w;
  // max |x| 1, 1.2, 0.9, 1.1, 1.0 (the warm-up of 5), then 9.9 (< 10 x median 1.0), then 10.5.
  std::vector<std::vector<double>> steps = {{1, -0.5}, {1.2, 0}, {-0.9, 0.1}, {1.1, 0.2},
                                            {1.0, 0},  {9.9, 1}, {10.5, 1}};
  const auto hits = run(w, steps);
  REQUIRE(hits.size() == 1);
  CHECK(hits[0].watch == "tensor_too_large");
  CHECK(hits[0].step == 6);
  CHECK(hits[0].module == "mlp");
  CHECK(hits[0].op == "aten::mul");
  CHECK(hits[0].record == "aten::mul.0.forward");
  CHECK(hits[0].value == Approx(10.5));
  // The lower median of {1, 1.2, 0.9, 1.1, 1.0, 9.9}: 1.0.
  CHECK(hits[0].threshold == Approx(10.0));
}

TEST_CASE("op watch: one hit per episode, again after a step without it", "[op_watch]") {
  OpWatcher w;
  std::vector<std::vector<double>> steps(5, {1.0, 0.5});
  steps.push_back({100, 1});   // 5: starts
  steps.push_back({200, 1});   // 6: goes on (median still 1): no new hit
  steps.push_back({1, 1});     // 7: over
  steps.push_back({1000, 1});  // 8: starts again
  const auto hits = run(w, steps);
  REQUIRE(hits.size() == 2);
  CHECK(hits[0].step == 5);
  CHECK(hits[1].step == 8);
}

TEST_CASE("op watch: NaN/Inf at once, an all-zero output only after non-zero ones", "[op_watch]") {
  OpWatcher w;
  const double nan = std::nan("");
  const auto hits = run(w, {{0, 0}, {1, 2}, {0, 0}, {1, INFINITY}, {nan, 1}});
  // Step 0's zeros have no history: no hit. Step 4's NaN goes on from step 3's Inf: the
  // same episode.
  REQUIRE(hits.size() == 2);
  CHECK(hits[0].watch == "tensor_all_zero");
  CHECK(hits[0].step == 2);
  CHECK(hits[1].watch == "tensor_overflow");
  CHECK(hits[1].step == 3);
  CHECK(hits[1].value == 1);
  CHECK(hits[1].detail == "0 NaN, 1 +Inf, 0 -Inf of 2 elements");
}

TEST_CASE("op watch: only the model's activations are watched", "[op_watch]") {
  const double nan = std::nan("");
  std::vector<OpWatchHit> hits;
  OpWatcher w;
  auto steps = forward_step(0, {nan, 1}, "aten::mul", /*requires_grad=*/false);
  for (const OpRecord& r : steps) w.observe(r, hits);  // the data's, a metric's
  CHECK(hits.empty());
  steps = forward_step(1, {nan, 1});
  steps[1].grad = false;  // an evaluation pass, the optimizer
  for (const OpRecord& r : steps) w.observe(r, hits);
  CHECK(hits.empty());
  steps = forward_step(2, {nan, 1});
  steps[1].dir = Direction::kBackward;
  for (const OpRecord& r : steps) w.observe(r, hits);
  CHECK(hits.empty());
  steps = forward_step(3, {nan, 1});
  steps[1].background = true;  // a data-loader thread
  for (const OpRecord& r : steps) w.observe(r, hits);
  CHECK(hits.empty());
  OpWatchOptions off;
  off.enable = false;
  OpWatcher none(off);
  for (const OpRecord& r : forward_step(0, {nan, 1})) none.observe(r, hits);
  CHECK(hits.empty());
}

TEST_CASE("op watch: a ReLU's dead fraction on steps in a row, against its history", "[op_watch]") {
  OpWatcher w;
  std::vector<std::vector<double>> steps;
  for (int s = 0; s < 10; ++s) steps.push_back({0, 0, 1, 2});  // 50 % zeros
  // 95 % and more: 19 of 20 zeros, on steps 10..14: the fifth in a row fires.
  std::vector<double> dead(20, 0.0);
  dead[0] = 3;
  for (int s = 0; s < 6; ++s) steps.push_back(dead);
  const auto hits = run(w, steps, "aten::relu");
  REQUIRE(hits.size() == 1);
  CHECK(hits[0].watch == "activation_dead_fraction");
  CHECK(hits[0].step == 14);
  CHECK(hits[0].value == Approx(0.95));
  CHECK(hits[0].module == "mlp");
  // A ReLU that was always that sparse is its own normal.
  OpWatcher sparse;
  CHECK(run(sparse, std::vector<std::vector<double>>(16, dead), "aten::relu").empty());
  // bench_programs' VAE: 94 % zeros, then 95.2 % for 5 steps (its median 94 %): not out of
  // line (4.8 % alive against 6 %); 99 % (1 % alive, under a quarter of 6 %) is.
  auto with_zeros = [](int zeros, int n) {
    std::vector<double> v(static_cast<size_t>(n), 1.0);
    for (int k = 0; k < zeros; ++k) v[static_cast<size_t>(k)] = 0;
    return v;
  };
  std::vector<std::vector<double>> vae(20, with_zeros(470, 500));   // 94 %
  for (int k = 0; k < 5; ++k) vae.push_back(with_zeros(476, 500));  // 95.2 %
  OpWatcher w94;
  CHECK(run(w94, vae, "aten::relu").empty());
  for (int k = 0; k < 5; ++k) vae.push_back(with_zeros(495, 500));  // 99 %
  OpWatcher w99;
  const auto late = run(w99, vae, "aten::relu");
  REQUIRE(late.size() == 1);
  CHECK(late[0].step == 25);  // 95.2 % and 99 % in a row from step 20: judged at 24, 25
}

TEST_CASE("op watch: a sigmoid at its bounds, from the zero count and the range bins",
          "[op_watch]") {
  OpWatchOptions o;
  o.activation_saturated_steps = 2;
  OpWatcher w(o);
  std::vector<OpWatchHit> hits;
  for (int64_t s = 0; s < 9; ++s) {
    auto ops = forward_step(s, {0.5, 0.25, 0.75, 0.5}, "aten::sigmoid");
    TensorStats& t = *ops[1].outputs[0].tensor;
    t.has_range = true;
    if (s >= 7) {  // 3 of 4 exactly 1.0 (range bin 2^0), 1 exactly 0: all at the bounds
      t.zero = 1;
      t.range = {{0, 3}};
    } else {
      t.range = {{-2, 1}, {-1, 3}};
    }
    for (const OpRecord& r : ops) w.observe(r, hits);
  }
  REQUIRE(hits.size() == 1);
  CHECK(hits[0].watch == "activation_saturated");
  CHECK(hits[0].step == 8);
  CHECK(hits[0].value == Approx(1.0));
}

TEST_CASE("op watch: values beyond a configured range or a planned dtype", "[op_watch]") {
  OpWatchOptions o;
  o.range_dtype = "float16";
  o.range_max = 1e6;
  OpWatcher w(o);
  const auto hits = run(w, {{1, 2}, {70000, 1}, {2e6, 1}});
  REQUIRE(hits.size() == 1);  // one episode of tensor_range in mlp
  CHECK(hits[0].watch == "tensor_range");
  CHECK(hits[0].step == 1);
  CHECK(hits[0].threshold == 65504);
  CHECK(hits[0].detail == "max |x| 7e+04 > float16's largest value 6.55e+04");
  CHECK(dtype_max("float8_e4m3fn") == 448.0);
  CHECK(dtype_max("bfloat16").value() == Approx(3.3895313892515355e38));
  CHECK_FALSE(dtype_max("int8"));
}

TEST_CASE("op watch: a collapsing norm", "[op_watch]") {
  OpWatcher w;
  std::vector<std::vector<double>> steps(6, {3, 4});  // norm 5
  steps.push_back({6e-3, 8e-3});                      // 1e-2: above 5 / 1000
  steps.push_back({3e-4, 4e-4});                      // 5e-4
  const auto hits = run(w, steps);
  REQUIRE(hits.size() == 1);
  CHECK(hits[0].watch == "tensor_too_small");
  CHECK(hits[0].step == 7);
  CHECK(hits[0].threshold == Approx(5e-3));
}

TEST_CASE("op watch: options name the bad key", "[op_watch]") {
  auto error_of = [](const char* text) {
    try {
      OpWatchOptions::from_json_value(nlohmann::json::parse(text));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(error_of(R"({"warmup": 0})"), Catch::Matchers::ContainsSubstring("watch.warmup"));
  CHECK_THAT(error_of(R"({"median_window": 4})"),
             Catch::Matchers::ContainsSubstring("watch.warmup"));  // 5 > 4
  CHECK_THAT(error_of(R"({"range_dtype": "fp16"})"),
             Catch::Matchers::ContainsSubstring("float16, bfloat16"));
  CHECK_THAT(error_of(R"({"tensor_too_large_factor": 0.5})"),
             Catch::Matchers::ContainsSubstring("watch.tensor_too_large_factor"));
  CHECK_THAT(error_of(R"({"tensor_too_larg": 3})"),
             Catch::Matchers::ContainsSubstring("unknown config key 'watch.tensor_too_larg'"));
  CHECK_THAT(error_of(R"({"activation_dead_fraction": 1.5})"),
             Catch::Matchers::ContainsSubstring("watch.activation_dead_fraction"));
  CHECK(error_of(R"({"activation_dead_fraction": false, "tensor_too_large_abs": 1e4})").empty());
  const OpWatchOptions back = OpWatchOptions::from_json_value(
      nlohmann::json::parse(OpWatchOptions{}.to_json_value().dump()));
  CHECK(back.to_json_value() == OpWatchOptions{}.to_json_value());
  CHECK_FALSE(OpWatchOptions::from_json_value(nlohmann::json(false)).enable);
}

TEST_CASE("op watch: a hit's event line reads back as written", "[op_watch]") {
  OpWatchHit h;
  h.step = 12;
  h.name = std::string(kWatchEventName);
  h.value = 1234.5;
  h.watch = "tensor_too_large";
  h.module = "blocks.0.fc";
  h.record = "aten::mul.3.forward";
  h.op = "aten::mul";
  h.seq = 77;
  h.threshold = 98.25;
  h.detail = "max |x| 1234 > 10 x its median \"9.8\"";
  std::string line;
  append_json(h, line);
  OpWatchHit back;
  REQUIRE(parse_record(line, back));
  CHECK(back == h);
  CHECK(back.is_watch());
  ScalarRecord s = to_scalar_record(h);
  CHECK(s.name == "watch");
  CHECK(is_debugger_event(s.name));
}

TEST_CASE("op watch: check's item names the first hit and how early it came", "[op_watch]") {
  auto item = [](const DumpData& d) { return *run_checklist(d).find("num.op_watch"); };
  DumpData d;
  CHECK(item(d).verdict == Verdict::kNotApplicable);
  // max |x| 1, 1.2, 0.9, 1.1, 1.0, then 10.5 at step 5 (> 10 x median 1.0), +Inf at step 7.
  const std::vector<std::vector<double>> values = {
      {1, -0.5}, {1.2, 0}, {-0.9, 0.1}, {1.1, 0.2}, {1.0, 0}, {10.5, 1}, {1, 1}, {INFINITY, 1}};
  for (size_t s = 0; s < values.size(); ++s) {
    if (s == 5) {
      const CheckItem healthy = item(d);
      CHECK(healthy.verdict == Verdict::kOk);
      CHECK(healthy.figure("hits").value_or(-1) == 0);
    }
    for (const OpRecord& r : forward_step(static_cast<int64_t>(s), values[s])) d.ops.push_back(r);
  }
  const CheckItem c = item(d);
  CHECK(c.verdict == Verdict::kProblem);
  CHECK(c.figure("hits").value_or(-1) == 2);  // tensor_too_large at 5, tensor_overflow at 7
  CHECK(c.figure("first_step").value_or(-1) == 5);
  CHECK(c.figure("steps_before_nonfinite").value_or(-1) == 2);
  CHECK_THAT(c.evidence, Catch::Matchers::ContainsSubstring(
                             "first tensor_too_large in mlp at step 5: aten::mul.0.forward"));
  CHECK_THAT(c.evidence,
             Catch::Matchers::ContainsSubstring("2 step(s) before the first NaN/Inf at step 7"));
  // Causes before symptoms: the warning is listed before the overflow it announces.
  const ChecklistResult all = run_checklist(d);
  const auto causes = all.problems_by_cause();  // pointers into `all`
  REQUIRE(causes.size() >= 2);
  CHECK(causes[0]->id == "num.op_watch");
  CHECK(causes[1]->id == "mp.overflow");
}
