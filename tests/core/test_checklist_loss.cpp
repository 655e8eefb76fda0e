// hp.loss_trend from what the user logged: every scalar named "*loss*" is a loss
// judged on its own; the losses of a game (a GAN: two optimizers, a discriminator's and a
// generator's loss, losses moving against each other) are judged for divergence only. The
// runs carry the loss op's records as well, the output of the first binary_cross_entropy of
// each step, which the check judged before (and called a healthy GAN "not decreasing").
#include <cmath>
#include <string>
#include <vector>

#include "precprobe/checklist.h"
#include "precprobe/reader.h"
#include "precprobe_catch.h"

using namespace precprobe;

namespace {

void scalar(DumpData& d, int64_t step, const std::string& name, double v) {
  ScalarRecord r;
  r.step = step;
  r.name = name;
  r.value = v;
  d.scalars.push_back(r);
}

// Deterministic noise in [-1, 1].
double noise(int64_t s, int64_t salt) {
  uint64_t x = uint64_t(s) * 6364136223846793005ull + uint64_t(salt) * 1442695040888963407ull;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 32;
  return double(x % 20001) / 10000.0 - 1.0;
}

// One step as the op observer records a GAN's: the discriminator's binary_cross_entropy on
// real images (its output: the loss op the records fallback takes), then a backward op.
void bce_step(DumpData& d, int64_t step, double bce) {
  OpRecord r;
  r.step = step;
  r.op = "aten::binary_cross_entropy";
  TensorStats out;
  out.dtype = "Float";
  out.numel = 1;
  out.mean = out.min = out.max = out.norm = bce;
  out.requires_grad = true;
  Arg a;
  a.tensor = out;
  r.outputs = {a};
  d.ops.push_back(r);
  OpRecord b = r;
  b.op = "aten::mul";
  b.seq = 1;
  b.dir = Direction::kBackward;
  d.ops.push_back(b);
}

// A healthy DCGAN over 60 steps: D's loss falls from ln 4 as it learns, G's rises from ln 2,
// each step's noise pulling them apart; the discriminator's BCE on real images, 0.69 and
// rising as G improves, is what the records fallback judged ("not decreasing").
DumpData gan(const std::string& d_name = "d_loss", const std::string& g_name = "g_loss") {
  DumpData d;
  for (int64_t s = 0; s < 60; ++s) {
    const double learnt = 1 - std::exp(-double(s) / 20);
    const double n = noise(s, 1);
    scalar(d, s, d_name, 1.386 - 0.6 * learnt + 0.12 * n);
    scalar(d, s, g_name, 0.693 + 1.4 * learnt - 0.3 * n + 0.1 * noise(s, 2));
    bce_step(d, s, 0.69 + 0.002 * double(s) + 0.02 * noise(s, 3));
  }
  return d;
}

// The item, by value: the result it comes from is a temporary.
CheckItem loss_item(const ChecklistResult& r) {
  const CheckItem* c = r.find("hp.loss_trend");
  REQUIRE(c != nullptr);
  return *c;
}

double figure(const CheckItem& c, std::string_view key) {
  for (const auto& [k, v] : c.figures)
    if (k == key) return v;
  FAIL("no figure " << key);
  return 0;
}

}  // namespace

TEST_CASE("loss trend: a healthy GAN's d_loss and g_loss are not a problem", "[checklist][loss]") {
  const CheckItem c = loss_item(run_checklist(gan()));
  INFO(c.evidence);
  CHECK(c.verdict == Verdict::kOk);
  CHECK_THAT(c.evidence, Catch::Matchers::ContainsSubstring(
                             "d_loss and g_loss are a discriminator's and a generator's losses"));
  CHECK_THAT(c.evidence, Catch::Matchers::ContainsSubstring("judged for divergence only"));
  CHECK(c.evidence.find("binary_cross_entropy") == std::string::npos);  // the logged losses
  CHECK(figure(c, "losses") == 2);
  CHECK(figure(c, "game_losses") == 2);
  CHECK(figure(c, "first_value") == Approx(1.386 + 0.12 * noise(0, 1)));  // d_loss: first one
  // Other spellings of the two players.
  for (auto [dn, gn] :
       {std::pair{"loss_D", "loss_G"}, std::pair{"lossD", "lossG"},
        std::pair{"Discriminator Loss", "Generator Loss"}, std::pair{"critic_loss", "gen_loss"}}) {
    INFO(dn << " / " << gn);
    CHECK(loss_item(run_checklist(gan(dn, gn))).verdict == Verdict::kOk);
  }
}

TEST_CASE("loss trend: two optimizers make a game, whatever the losses' names",
          "[checklist][loss]") {
  // Names without a player's role, both flat: judged in full, neither decreases.
  DumpData flat;
  for (int64_t s = 0; s < 40; ++s) {
    scalar(flat, s, "loss_1", 0.7 + 0.05 * noise(s, 4));
    scalar(flat, s, "loss_2", 1.2 + 0.05 * noise(s, 5));
    bce_step(flat, s, 0.69);
  }
  CHECK(loss_item(run_checklist(flat)).verdict == Verdict::kProblem);
  SECTION("from the debugger's check/optimizers") {
    DumpData d = flat;
    scalar(d, 0, std::string(check_scalar::kOptimizers), 2);
    const CheckItem c = loss_item(run_checklist(d));
    INFO(c.evidence);
    CHECK(c.verdict == Verdict::kOk);
    CHECK_THAT(c.evidence, Catch::Matchers::ContainsSubstring("2 optimizers"));
  }
  SECTION("from the GradScaler's records of two optimizers") {
    DumpData d = flat;
    for (int opt : {0, 1}) {
      ScalerRecord r;
      r.optimizer = opt;
      d.scaler.push_back(r);
    }
    CHECK(loss_item(run_checklist(d)).verdict == Verdict::kOk);
  }
}

TEST_CASE("loss trend: two losses moving against each other are a game", "[checklist][loss]") {
  DumpData d = gan("loss_a", "loss_b");  // no player's name: recognised from the values
  const CheckItem c = loss_item(run_checklist(d));
  INFO(c.evidence);
  CHECK(c.verdict == Verdict::kOk);
  CHECK_THAT(c.evidence, Catch::Matchers::ContainsSubstring("losses moving against each other"));
}

TEST_CASE("loss trend: divergence is a problem, in a game too", "[checklist][loss]") {
  SECTION("a single loss turning NaN at step 30") {
    DumpData d;
    for (int64_t s = 0; s < 40; ++s)
      scalar(d, s, "loss", s >= 30 ? NAN : 2.3 * std::exp(-0.05 * double(s)));
    const CheckItem c = loss_item(run_checklist(d));
    CHECK(c.verdict == Verdict::kProblem);
    CHECK(figure(c, "nonfinite_step") == 30);
    CHECK_THAT(c.evidence, Catch::Matchers::ContainsSubstring("loss is nan at step 30"));
  }
  SECTION("a GAN whose g_loss turns NaN") {
    DumpData d = gan();
    for (ScalarRecord& r : d.scalars)
      if (r.name == "g_loss" && r.step >= 45) r.value = NAN;
    const CheckItem c = loss_item(run_checklist(d));
    CHECK(c.verdict == Verdict::kProblem);
    CHECK(figure(c, "nonfinite_step") == 45);  // the figures are the problem loss's
    CHECK_THAT(c.evidence, Catch::Matchers::ContainsSubstring("g_loss: loss is nan at step 45"));
  }
  SECTION("a GAN whose d_loss explodes") {
    DumpData d = gan();
    for (ScalarRecord& r : d.scalars)
      if (r.name == "d_loss" && r.step >= 40) r.value = std::pow(10.0, double(r.step - 37));
    const CheckItem c = loss_item(run_checklist(d));
    INFO(c.evidence);
    CHECK(c.verdict == Verdict::kProblem);
    CHECK_THAT(c.evidence, Catch::Matchers::ContainsSubstring("d_loss: exploding"));
  }
}

TEST_CASE("loss trend: several losses, each judged on its own", "[checklist][loss]") {
  DumpData d;
  for (int64_t s = 0; s < 30; ++s) {
    scalar(d, s, "loss", 2.0 * std::exp(-0.05 * double(s)));
    scalar(d, s, "Reconstruction Loss", 120.0 - 2.0 * double(s));  // any case
    scalar(d, s, "aux_loss", 0.5);                                 // stuck
    scalar(d, s, "check/lr_range/loss", 9.0);                      // the checklist's own: not one
  }
  const CheckItem c = loss_item(run_checklist(d));
  INFO(c.evidence);
  CHECK(c.verdict == Verdict::kProblem);
  CHECK_THAT(c.evidence, Catch::Matchers::ContainsSubstring("aux_loss: not decreasing"));
  CHECK_THAT(c.evidence, Catch::Matchers::ContainsSubstring("Reconstruction Loss: mean of"));
  CHECK(c.evidence.find("check/") == std::string::npos);
  CHECK(figure(c, "losses") == 3);
  CHECK(figure(c, "first_value") == 0.5);  // the figures are the problem loss's
  // Without aux_loss: ok, with the figures of the one named "loss".
  DumpData good;
  for (const ScalarRecord& r : d.scalars)
    if (r.name != "aux_loss") good.scalars.push_back(r);
  const CheckItem g = loss_item(run_checklist(good));
  CHECK(g.verdict == Verdict::kOk);
  CHECK(figure(g, "first_value") == 2.0);
}

TEST_CASE("loss trend: without a logged loss, the loss op's output", "[checklist][loss]") {
  DumpData d;
  for (int64_t s = 0; s < 20; ++s) bce_step(d, s, 0.69 + 0.01 * noise(s, 6));
  const CheckItem c = loss_item(run_checklist(d));
  CHECK(c.verdict == Verdict::kProblem);  // flat: not decreasing
  CHECK_THAT(c.evidence,
             Catch::Matchers::ContainsSubstring("not decreasing: mean of the first 4 values"));
  CHECK_THAT(c.evidence,
             Catch::Matchers::ContainsSubstring("from the output of aten::binary_cross_entropy"));
}
