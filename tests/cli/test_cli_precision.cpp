// End to end: `precprobe precision` on the golden dump tests/data/cli/range (make_golden_dumps:
// the tiny MLP with act_scale 4e4 at its last step, range statistics on) and on a dump
// recorded without range statistics.
#include "cli/cli_test_util.h"
#include "precprobe/reader.h"

using namespace precprobe::cli_test;  // NOLINT(google-build-using-namespace): test helpers

namespace {

// Forward ops of the range dump whose outputs reach `threshold` in some step, from the
// records' min and max (not from the range bins), and that are part of the autograd graph.
std::set<std::string> reaching(double threshold) {
  precprobe::DumpReader reader(kData + "range");
  std::set<std::string> names;
  reader.for_each_op({}, [&](const precprobe::OpRecord& r) {
    if (r.dir != precprobe::Direction::kForward) return true;
    for (const precprobe::Arg& a : r.outputs)
      if (a.is_tensor() && a.tensor->requires_grad && a.tensor->abs_max() >= threshold)
        names.insert(r.name());
    return true;
  });
  return names;
}

}  // namespace

TEST_CASE("precision --to fp16: the ops whose values pass 65504, and the plan",
          "[cli][precision]") {
  const json j = run_json("precision " + dump("range") + " --to fp16", 1);
  CHECK(j["format"] == "fp16");
  CHECK(j["scaling"] == "none");
  std::set<std::string> overflowing;
  for (const json& op : j["ops"]) {
    std::set<std::string> keys;
    for (const auto& [k, v] : op.items()) keys.insert(k);
    CHECK(keys == std::set<std::string>{"op", "direction", "module", "overflow", "subnormal",
                                        "flush_to_zero", "verdict"});
    if (op["overflow"].get<double>() > 0) overflowing.insert(op["op"].get<std::string>());
  }
  // act_scale 4e4 times relu activations up to ~2: the aten::mul and fc2's linear after it.
  CHECK(overflowing == reaching(65520));
  CHECK(overflowing == std::set<std::string>{"aten::mul.0.forward", "aten::linear.0.forward"});
  CHECK(j["ops"][0]["op"] == "aten::mul.0.forward");  // most harmful first
  CHECK(j["ops"][0]["verdict"] == "fits_with_scaling");
  CHECK(j["ops"][0]["module"] == "(root)");  // the model's own forward, between fc1 and fc2
  std::set<std::string> keep;
  for (const json& m : j["modules"])
    if (m["keep_fp32"].get<bool>()) keep.insert(m["module"].get<std::string>());
  CHECK(keep == std::set<std::string>{"(root)", "fc2"});
  for (const char* k : {"recommended", "low", "high", "default_65536"})
    CHECK(j["loss_scale"].contains(k));

  Run text = run("precision " + dump("range") + " --to fp16");
  CHECK(text.status == 1);
  CHECK(text.out.find("plan          keep in fp32 under autocast: (root), fc2") !=
        std::string::npos);
  CHECK(text.out.find("              ((root): ops outside every child module") !=
        std::string::npos);
}

TEST_CASE("precision --to bf16: everything fits", "[cli][precision]") {
  const json j = run_json("precision " + dump("range") + " --to bf16", 0);
  for (const json& op : j["ops"]) CHECK(op["verdict"] == "fits");
  for (const json& m : j["modules"]) CHECK(m["keep_fp32"] == false);
  CHECK(run("precision " + dump("range") + " --to bf16")
            .out.find("plan          every module fits bf16") != std::string::npos);
}

TEST_CASE("precision --to e4m3 --scaling tensor: shares with per-tensor scaling",
          "[cli][precision]") {
  const json none = run_json("precision " + dump("range") + " --to e4m3", 1);
  Run t = run("precision " + dump("range") + " --to e4m3 --scaling tensor --json");
  REQUIRE((t.status == 0 || t.status == 1));
  const json tensor = t.parse();
  CHECK(tensor["scaling"] == "tensor");
  // With each tensor scaled to the format's max, nothing overflows.
  for (const json& op : tensor["ops"]) CHECK(op["overflow"] == 0.0);
  bool some_overflow = false;
  for (const json& op : none["ops"]) some_overflow |= op["overflow"].get<double>() > 0;
  CHECK(some_overflow);
  CHECK(reaching(448).size() > 2);
}

TEST_CASE("precision on a dump without range statistics says so", "[cli][precision]") {
  Run r = run("precision " + dump("clean") + " --to bf16", /*merge_stderr=*/true);
  CHECK(r.status == 2);
  CHECK(r.out.find("no range statistics") != std::string::npos);
  CHECK(run("precision " + dump("range") + " --to fp32", true).status == 2);
  CHECK(run("precision " + dump("range") + " --to fp16 --scaling block", true).status == 2);
}
