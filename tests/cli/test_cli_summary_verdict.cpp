// `precprobe summary`'s verdict lines on dumps written here with the core's DumpWriter:
// "anomalies" counts replayed bad steps only, watchpoint hits have their own line naming the
// earliest (step order, then record order), and each logged loss is shown by name.
#include "cli/cli_test_util.h"
#include "core/temp_dir.h"

using namespace precprobe::cli_test;  // NOLINT(google-build-using-namespace): test helpers
using precprobe::test::TempDir;

namespace {

std::string q(const std::string& s) { return "'" + s + "'"; }

precprobe::GradRecord grad(int64_t step, const char* param, std::vector<std::string> watch) {
  precprobe::GradRecord g;
  g.step = step;
  g.param = param;
  g.grad_norm = 1;
  g.weight_norm = 1;
  g.update_ratio = 1e-3;
  g.watch = std::move(watch);
  return g;
}

// Steps 0..11: gradient records (with the watchpoint hits below) and two GAN losses.
void write_dump(const std::string& dir) {
  precprobe::WriterOptions o;
  o.dir = dir + "/rank0";
  precprobe::DumpWriter w(o);
  w.write_meta(R"({"format_version":2,"rank":0,"world_size":1})");
  for (int64_t s = 0; s < 12; ++s) {
    // Record order within a step: fc5 before fc1; by name, fc1.weight comes first.
    w.submit(
        grad(s, "fc5.weight",
             s == 0 ? std::vector<std::string>{"grad_exploding"} : std::vector<std::string>{}));
    w.submit(grad(s, "fc1.weight",
                  s == 3 || s == 4 ? std::vector<std::string>{"grad_exploding"}
                                   : std::vector<std::string>{}));
    w.submit(grad(s, "fc1.bias", {}));
    for (auto [name, v] : {std::pair{"d_loss", 1.386 - 0.05 * double(s)},
                           std::pair{"g_loss", 0.693 + 0.1 * double(s)}}) {
      precprobe::ScalarRecord r;
      r.step = s;
      r.name = name;
      r.value = v;
      w.submit(std::move(r));
    }
    w.flush();
  }
}

}  // namespace

TEST_CASE("summary: watchpoints apart from anomalies, the earliest hit named", "[cli][summary]") {
  TempDir tmp("summary_verdict");
  const std::string dir = (tmp.path() / "dump").string();
  write_dump(dir);
  const json j = run_json("summary " + q(dir), 0);
  REQUIRE(j["watch_hits"].size() == 2);
  CHECK(j["watch_hits"][0]["param"] == "fc5.weight");  // step 0, before fc1.weight's step 3
  CHECK(j["watch_hits"][0]["first_step"] == 0);
  CHECK(j["watch_hits"][1]["param"] == "fc1.weight");
  CHECK(j["watch_hits"][1]["count"] == 2);
  CHECK(j["anomalies"].empty());

  const Run r = run("summary " + q(dir));
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Matchers::ContainsSubstring("\nanomalies     none\n"));
  CHECK_THAT(r.out,
             Catch::Matchers::ContainsSubstring(
                 "\nwatchpoints   3 hits (earliest: fc5.weight grad_exploding at step 0)\n"));
  CHECK(r.out.find("watchpoint hits") == std::string::npos);
}

TEST_CASE("summary: each logged loss by name", "[cli][summary]") {
  TempDir tmp("summary_losses");
  const std::string dir = (tmp.path() / "dump").string();
  write_dump(dir);
  const json j = run_json("summary " + q(dir), 0);
  REQUIRE(j["losses"].size() == 2);
  CHECK(j["losses"][0]["name"] == "d_loss");
  CHECK(j["losses"][0]["points"] == 12);
  CHECK(j["losses"][0]["first_value"] == 1.386);
  CHECK(j["losses"][1]["last_step"] == 11);
  CHECK(j["losses"][1]["nonfinite_step"].is_null());
  const Run r = run("summary " + q(dir));
  INFO(r.out);
  CHECK_THAT(r.out, Catch::Matchers::ContainsSubstring(
                        "\nloss          d_loss 1.386 (step 0) -> 0.836 (step 11)\n"));
  CHECK_THAT(r.out, Catch::Matchers::ContainsSubstring(
                        "\nloss          g_loss 0.693 (step 0) -> 1.793 (step 11)\n"));
  // A GAN: its losses are not a "not decreasing" problem.
  CHECK_THAT(r.out, Catch::Matchers::ContainsSubstring("checklist     no problem"));
}
