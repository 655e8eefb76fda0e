// The LR range test on gradient descent of a quadratic, whose behaviour per learning rate is
// known in closed form: loss a*w^2, step w <- w (1 - 2 a lr); it falls fastest near
// lr = 1/(2a) and diverges for lr > 1/a.
#include <cmath>

#include "precprobe/error.h"
#include "precprobe/lr_range.h"
#include "precprobe_catch.h"

using namespace precprobe;

namespace {
struct Quadratic {
  double a = 2.0, w = 1.0;
  double operator()(double lr) {
    w *= 1 - 2 * a * lr;
    return a * w * w;
  }
};
}  // namespace

TEST_CASE("lr_range_test: range below the divergence threshold", "[lr_range]") {
  Quadratic q;  // diverges for lr > 1/a = 0.5
  LrRangeOptions o;
  o.lr_min = 1e-4;
  o.lr_max = 10;
  o.steps = 60;
  o.smoothing = 0;  // the quadratic's loss is exact
  const LrRangeResult r = lr_range_test(std::ref(q), o);
  REQUIRE(r.found);
  CHECK(r.diverged);  // lr reaches 10 > 0.5
  CHECK(r.lrs.size() < 60);
  CHECK(r.lr_lo < r.lr_hi);
  CHECK(r.lr_hi <= 0.5);
  CHECK(r.lr_lo <= r.lr_steepest);
  CHECK(r.lr_steepest <= r.lr_hi);
  // The schedule is exponential: lr_i = 1e-4 * 1e5^(i/59).
  CHECK(r.lrs[1] == Approx(1e-4 * std::pow(1e5, 1.0 / 59)));
  // Stopped only once the loss grows, which gradient descent does only above lr = 1/a.
  CHECK(r.lrs.back() > 0.5);
}

TEST_CASE("lr_range_test: a loss that never falls has no range", "[lr_range]") {
  const LrRangeResult r = lr_range_test([](double) { return 1.0; });
  CHECK_FALSE(r.found);
  CHECK_FALSE(r.diverged);
  CHECK(r.lrs.size() == 100);
}

TEST_CASE("lr_range_test: bad options name the option", "[lr_range]") {
  LrRangeOptions o;
  o.lr_max = o.lr_min;
  CHECK_THROWS_AS(lr_range_test([](double) { return 1.0; }, o), Error);
  o = {};
  o.steps = 2;
  CHECK_THROWS_WITH(lr_range_test([](double) { return 1.0; }, o),
                    Catch::Matchers::ContainsSubstring("steps"));
}
