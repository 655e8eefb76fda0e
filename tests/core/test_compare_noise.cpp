// compare's noise model (docs/cli.md, "Noise model"): unit roundoff, Higham's gamma_n and
// Higham and Mary's probabilistic bound, the bounds of ops by hand, the loss scale divided
// out, scalars compared with a tolerance, and numbers read from their JSON text. Expected
// values are computed by hand in the comments, in float64.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

#include "analysis_fixtures.h"
#include "core/compare_check.h"
#include "precprobe_catch.h"

using namespace precprobe;
using namespace precprobe::test;

TEST_CASE("unit roundoff and Higham's gamma_n", "[analysis][compare][noise]") {
  CHECK(unit_roundoff("Float") == std::ldexp(1.0, -24));    // 5.960464477539063e-08
  CHECK(unit_roundoff("BFloat16") == std::ldexp(1.0, -8));  // 0.00390625
  CHECK(unit_roundoff("Half") == std::ldexp(1.0, -11));     // 0.00048828125
  CHECK(unit_roundoff("Double") == std::ldexp(1.0, -53));
  CHECK(unit_roundoff("Long") == 0);
  CHECK(unit_roundoff("Bool") == 0);
  // gamma_1000 in float32: 1000 * 2^-24 / (1 - 1000 * 2^-24) = 5.9604644775390625e-05 /
  // 0.99994039535522461 = 5.9608197700840286e-05.
  CHECK(gamma_n(1000, std::ldexp(1.0, -24)) == Approx(5.9608197700840286e-05).epsilon(1e-14));
  // bf16, n = 64: 0.25 / 0.75.
  CHECK(gamma_n(64, std::ldexp(1.0, -8)) == Approx(1.0 / 3).epsilon(1e-15));
  CHECK(std::isinf(gamma_n(256, std::ldexp(1.0, -8))));  // n u = 1: no bound
}

TEST_CASE("Higham and Mary's probabilistic bound gamma_tilde", "[analysis][compare][noise]") {
  const double u = std::ldexp(1.0, -24);
  // lambda = sqrt(2 ln(2 n / 1e-9)) / (1 - u); exp(lambda sqrt(n) u + n u^2 / (1 - u)) - 1,
  // computed with mpmath at 40 digits: n = 200: lambda 7.3095463017479693,
  // 6.1615065058087644e-6; n = 1024: 7.5296597801543891, 1.4361793054762225e-5; n = 50176:
  // 8.0299077160935197, 1.0721676009430402e-4 (gamma_n: 3.0e-3, 28 times wider).
  CHECK(gamma_tilde(200, u) == Approx(6.1615065058087644e-6).epsilon(1e-12));
  CHECK(gamma_tilde(1024, u) == Approx(1.4361793054762225e-5).epsilon(1e-12));
  CHECK(gamma_tilde(50176, u) == Approx(1.0721676009430402e-4).epsilon(1e-12));
  CHECK(gamma_n(50176, u) / gamma_tilde(50176, u) > 27);
  // Few terms: lambda sqrt(n) > n, the worst case is the tighter one and is kept.
  CHECK(gamma_tilde(25, u) == gamma_n(25, u));
  CHECK(gamma_tilde(1, u) == gamma_n(1, u));
  CHECK(gamma_tilde(1, std::ldexp(1.0, -8)) == gamma_n(1, std::ldexp(1.0, -8)));
  // bf16, n = 1024: n u = 4, gamma_n has no bound; sqrt(n) u lambda = 0.94 does.
  CHECK(std::isinf(gamma_n(1024, std::ldexp(1.0, -8))));
  CHECK(std::isfinite(gamma_tilde(1024, std::ldexp(1.0, -8))));
}

TEST_CASE("noise model: a 16-bit reduction sums in float32 and rounds once",
          "[analysis][compare][noise]") {
  // mm of [4, 400] x [400, 4] in bfloat16 against float32: n = 400 summands, accumulated in
  // float (ATen's opmath type, oneDNN), the result rounded to bfloat16 once: 2^-8 +
  // gamma_tilde(400, 2^-24) = 0.0039150760180786408 (mpmath), where gamma_n(400, 2^-8) is
  // infinite (n u = 1.56) and no error could ever be told from rounding.
  std::vector<double> ones(1600, 1.0);
  Arg x = targ(ones), w = targ(ones);
  x.tensor->shape = {4, 400};
  w.tensor->shape = {400, 4};
  Arg y = targ(std::vector<double>(16, 400.0));
  y.tensor->shape = {4, 4};
  OpRecord a = make_op(0, 0, {"aten::mm", 0, {x, w}, {y}});
  OpRecord b = a;
  for (Arg* t : {&a.inputs[0], &a.inputs[1], &a.outputs[0]}) t->tensor->dtype = "BFloat16";
  const OpNoise nz = op_noise(a, b);
  REQUIRE(nz.outputs.size() == 1);
  CHECK(nz.outputs[0].terms == 400);
  CHECK(nz.outputs[0].u == std::ldexp(1.0, -8));
  // S = max(400, 400 * 1 * 1); the statistics' storage adds 2^-23 * 400 / 400.
  CHECK(nz.outputs[0].bound == Approx(0.0039150760180786408 + std::ldexp(1.0, -23)).epsilon(1e-12));

  // Under autocast the record holds the float32 inputs the op casts inside (a float32
  // weight into a bf16 linear): each of the two is rounded to bf16, which moves a sum by at
  // most 2^-8 of S each.
  OpRecord autocast = b;
  autocast.outputs[0].tensor->dtype = "BFloat16";
  const OpNoise an = op_noise(autocast, b);
  CHECK(an.outputs[0].bound ==
        Approx(0.0039150760180786408 + 2 * std::ldexp(1.0, -8) + std::ldexp(1.0, -23))
            .epsilon(1e-12));
}

TEST_CASE("compare: gradients of a scaled loss are compared with the loss scale divided out",
          "[analysis][compare][noise]") {
  // The backward of y = x w (mm) in an AMP run whose GradScaler scaled the loss by 65536,
  // against an fp32 run without: grad_output and grad_input are 65536 times B's, the saved
  // input x is not. Step 0's scaler record says the scale.
  const Arg x = targ({0.5, -1.0, 2.0, 0.25});
  const Arg g = targ({0.1, -0.2, 0.05, 0.3});
  const Arg gi = targ({0.02, -0.04, 0.01, 0.06});
  DumpData a, b;
  add_step(
      a, 0, 0,
      {{"aten::mm", 0, {scaled(g, 65536), x}, {scaled(gi, 65536)}, 0, 0, Direction::kBackward}});
  add_step(b, 0, 0, {{"aten::mm", 0, {g, x}, {gi}, 0, 0, Direction::kBackward}});
  ScalerRecord sr;
  sr.step = 0;
  sr.scale_before = sr.scale_after = 65536;
  a.scaler.push_back(sr);
  CompareOptions first;
  first.first = true;
  const CompareResult r = test::compare_checked(a, b, first);
  REQUIRE(r.ops.size() == 1);
  CHECK(r.ops[0].loss_scale == 65536);
  CHECK(r.ops[0].classification != "divergent");
  CHECK_FALSE(r.found);
  REQUIRE(r.ops[0].args.size() == 3);
  CHECK(r.ops[0].args[0].note.find("loss scale 65536") != std::string::npos);  // the gradient
  CHECK(r.ops[0].args[1].note.find("loss scale") == std::string::npos);        // x: not scaled
  CHECK(r.ops[0].args[2].abs_error == 0);  // 65536 is a power of two: divided out exactly

  // Without the scaler record the gradients are compared as they are, 65536-fold apart
  // (the op inherits that from its input: the difference starts where the loss is scaled).
  DumpData bare = a;
  bare.scaler.clear();
  const CompareResult raw = test::compare_checked(bare, b, first);
  REQUIRE(raw.ops.size() == 1);
  CHECK(raw.ops[0].loss_scale == 1);
  CHECK(raw.ops[0].args[2].abs_error == Approx(0.06 * 65535));

  // A real error in the scaled gradient is still one: grad_input 10 % off.
  DumpData wrong = a;
  wrong.ops[0].outputs[0] = scaled(gi, 65536 * 1.1);
  const CompareResult w = test::compare_checked(wrong, b, first);
  REQUIRE(w.found);
  CHECK(w.first->op == "aten::mm");
  CHECK(w.first->loss_scale == 65536);
}

TEST_CASE("noise model: the bound of mm and convolution_backward by hand",
          "[analysis][compare][noise]") {
  // C = A B, A 2x3 = {1..6}, B 3x2 = {1, -1, 2, -2, 0.5, 0.5}: C = {6.5, -3.5, 16.5, -11.5}.
  Arg a = targ({1, 2, 3, 4, 5, 6}), b = targ({1, -1, 2, -2, 0.5, 0.5});
  a.tensor->shape = {2, 3};
  b.tensor->shape = {3, 2};
  Arg c = targ({6.5, -3.5, 16.5, -11.5});
  c.tensor->shape = {2, 2};
  OpRecord r = make_op(0, 0, {"aten::mm", 0, {a, b}, {c}});
  const OpNoise nz = op_noise(r, r);
  REQUIRE(nz.outputs.size() == 1);
  // n = 3 (inner dimension); S = max(|C|max, n rms(A) rms(B)) = max(16.5, 3 sqrt(91/6)
  // sqrt(10.5/6)) = max(16.5, 15.4556) = 16.5.
  CHECK(nz.outputs[0].terms == 3);
  CHECK(3 * std::sqrt(91.0 / 6) * std::sqrt(10.5 / 6) == Approx(15.45558).epsilon(1e-6));
  CHECK(nz.outputs[0].scale == Approx(16.5));
  // gamma_3 = 3 * 2^-24 / (1 - 3 * 2^-24) = 1.788139663006007e-07, plus the float32
  // storage of the statistics, 2^-23 * |C|max / S = 1.1920928955078125e-07.
  CHECK(nz.outputs[0].bound ==
        Approx(1.788139663006007e-07 + 1.1920928955078125e-07).epsilon(1e-12));
  // The inputs' errors are measured against their rms (the dot product's terms).
  CHECK(nz.input_scale[0] == Approx(std::sqrt(91.0 / 6)));
  CHECK(nz.input_scale[1] == Approx(std::sqrt(10.5 / 6)));

  // convolution_backward(grad_output [8, 4, 5, 5], input [8, 2, 7, 7], weight [4, 2, 3, 3]):
  // grad_input sums C_out * 3 * 3 = 36 products, grad_weight and grad_bias 8 * 5 * 5 = 200.
  std::vector<double> g(800), x(784), w(72);
  for (size_t i = 0; i < g.size(); ++i) g[i] = (i % 2 ? 1 : -1) * 0.5;  // rms 0.5
  for (size_t i = 0; i < x.size(); ++i) x[i] = 2;                       // rms 2
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25;                    // rms 0.25
  Arg ga = targ(g), xa = targ(x), wa = targ(w);
  ga.tensor->shape = {8, 4, 5, 5};
  xa.tensor->shape = {8, 2, 7, 7};
  wa.tensor->shape = {4, 2, 3, 3};
  Arg gi = targ({0}), gw = targ({0}), gb = targ({1e-7});
  OpRecord cb = make_op(0, 0, {"aten::convolution_backward", 0, {ga, xa, wa}, {gi, gw, gb}});
  const OpNoise bn = op_noise(cb, cb);
  REQUIRE(bn.outputs.size() == 3);
  CHECK(bn.outputs[0].terms == 36);
  CHECK(bn.outputs[0].scale == Approx(36 * 0.5 * 0.25));  // 4.5
  CHECK(bn.outputs[1].terms == 200);
  CHECK(bn.outputs[1].scale == Approx(200 * 0.5 * 2));  // 200
  CHECK(bn.outputs[2].terms == 200);
  CHECK(bn.outputs[2].scale == Approx(200 * 0.5));  // 100, not the 1e-7 it summed to
  // gamma_tilde(200, 2^-24) = 6.1615065058087644e-6 (mpmath; gamma_n would be 1.19e-5).
  CHECK(bn.outputs[2].bound ==
        Approx(6.1615065058087644e-6 + std::ldexp(1.0, -23) * 1e-7 / 100).epsilon(1e-12));
}

TEST_CASE("noise model: a bias gradient that cancels to ~1e-7 is noise",
          "[analysis][compare][noise]") {
  // 1024 summands of magnitude 0.01 to 0.023 whose exact sum is 0 (each value and its negative),
  // shuffled. Run A sums them in order in float32 (one thread); run B sums each half and
  // adds the two partial sums (two threads). Both results are rounding residue.
  std::vector<float> x;
  for (int i = 0; i < 512; ++i) {
    const float v = 0.01f * (1.0f + 0.0137f * static_cast<float>(i % 97));  // a gradient
    x.push_back(v);
    x.push_back(-v);
  }
  uint32_t s = 7;
  for (size_t i = x.size() - 1; i > 0; --i) {
    s = s * 1664525u + 1013904223u;
    std::swap(x[i], x[s % (i + 1)]);
  }
  float one = 0, h1 = 0, h2 = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    one += x[i];
    (i < 512 ? h1 : h2) += x[i];
  }
  const float two = h1 + h2;
  // The two results (-4.32e-7 and -1.19e-7, emulated in Python with float32 rounding)
  // differ by more than half their own size: "100 % relative".
  const double d = std::fabs(static_cast<double>(one) - static_cast<double>(two));
  CHECK(one == Approx(-4.3213367462158203e-07).epsilon(1e-6));
  CHECK(two == Approx(-1.1920928955078125e-07).epsilon(1e-6));
  REQUIRE(d > 0.5 * std::max(std::fabs(one), std::fabs(two)));
  std::vector<double> xd(x.begin(), x.end());
  double sum_abs = 0;
  for (double v : xd) sum_abs += std::fabs(v);
  const Arg in = hashed(targ(xd), 7);  // the same gradient in both runs
  auto [a, b] = one_op("aten::sum", {in, varg("[0]")}, {targ({one})}, {in, varg("[0]")},
                       {targ({two})}, Direction::kBackward);
  const CompareResult r = test::compare_checked(a, b, {});
  REQUIRE(r.ops.size() == 1);
  const OpCompare& o = r.ops[0];
  // msprobe-style relative error of the output statistics: ~100 %.
  CHECK(o.output_error > 0.3);
  // Against the summands: n = 1024, S = n rms(x) = sqrt(1024) ||x||.
  const double norm = in.tensor->norm;
  CHECK(o.terms == 1024);
  CHECK(o.error == Approx(d / (32 * norm)).epsilon(1e-6));
  CHECK(o.inherited == 0);
  // gamma_tilde(1024, 2^-24) = 1.4361793054762225e-5 (mpmath; gamma_n: 6.10e-5).
  const double bound = 1.4361793054762225e-5 + std::ldexp(1.0, -23) *
                                                   std::max(std::fabs(one), std::fabs(two)) /
                                                   (32 * norm);
  CHECK(o.bound == Approx(bound).epsilon(1e-9));
  CHECK(o.ratio == Approx(o.error / bound).epsilon(1e-9));
  CHECK(o.ratio < 1);  // within the bound itself, not only within 10 times it
  CHECK(o.classification == "noise");
  CHECK(r.noise_ops == 1);
  CompareOptions first;
  first.first = true;
  const CompareResult f = test::compare_checked(a, b, first);
  CHECK_FALSE(f.found);
  CHECK_FALSE(f.differs());

  // The same sum off by 1e-3 of the summands' magnitude sum |x| is no rounding: with
  // n u = 6.1e-5 the allowance is ~6.1e-4 of S, and 1e-3 sum|x| ~ 1e-3 S.
  auto [a2, b2] = one_op("aten::sum", {in, varg("[0]")}, {targ({one})}, {in, varg("[0]")},
                         {targ({one + 1e-3 * sum_abs})}, Direction::kBackward);
  const CompareResult g = test::compare_checked(a2, b2, first);
  REQUIRE(g.ops.size() == 1);
  CHECK(g.ops[0].classification == "divergent");
  CHECK(g.ops[0].ratio > 10);
  CHECK(g.found);
  CHECK(g.first->op == "aten::sum");
}

TEST_CASE("noise model: scalars are compared with a tolerance, never exactly",
          "[analysis][compare][noise]") {
  // aten::item of a float32 0-d tensor that differs by one ulp: 0.1f vs nextafter(0.1f).
  const float x0 = 0.1f, x1 = std::nextafter(0.1f, 1.0f);
  Arg t0 = targ({x0}), t1 = targ({x1});
  t0.tensor->shape = t1.tensor->shape = {};
  auto [a, b] = one_op("aten::item", {t0}, {varg("0.10000000149011612")}, {t1},
                       {varg("0.10000000894069672")});
  CompareOptions first;
  first.first = true;
  const CompareResult r = test::compare_checked(a, b, first);
  REQUIRE(r.ops.size() == 1);
  const OpCompare& o = r.ops[0];
  REQUIRE(o.args.size() == 2);
  // The output's relative error is finite: 7.4505806e-09 / 0.10000000894069672.
  CHECK(o.args[1].error == Approx(7.4505806e-09 / 0.10000000894069672).epsilon(1e-6));
  CHECK(std::isfinite(o.args[1].error));
  CHECK(o.classification == "noise");  // inherited from the tensor, not added
  CHECK_FALSE(r.found);

  // A constant that differs by 1 % is no rounding (the golden diverged_1pct case) ...
  const Arg h = hashed(targ({1, 2}), 3);
  auto [c, e] = one_op("aten::mul", {h, varg("1.01")}, {targ({1.01, 2.02})}, {h, varg("1.0")},
                       {targ({1, 2})});
  const CompareResult k = test::compare_checked(c, e, first);
  CHECK(k.found);
  CHECK(k.ops[0].classification == "divergent");
  CHECK(k.ops[0].args[1].error == Approx(0.01 / 1.01));
  // ... one that differs in its last float64 bits is (a host-side computation).
  auto [c2, e2] = one_op("aten::mul", {h, varg("0.30000000000000004")}, {targ({0.3, 0.6})},
                         {h, varg("0.3")}, {targ({0.3, 0.6})});
  const CompareResult k2 = test::compare_checked(c2, e2, first);
  CHECK_FALSE(k2.found);
  CHECK(k2.ops[0].classification == "noise");
  // A different integer or string is never rounding.
  auto [c3, e3] = one_op("aten::sum", {h, varg("[0]")}, {targ({3})}, {h, varg("[1]")}, {targ({7})});
  CHECK(test::compare_checked(c3, e3, first).found);
  // ... unless it changed nothing: the same tensors in and out (noted, not divergent).
  auto [c4, e4] = one_op("aten::sum", {h, varg("[0]")}, {targ({3})}, {h, varg("[1]")}, {targ({3})});
  const CompareResult k4 = test::compare_checked(c4, e4, first);
  CHECK_FALSE(k4.found);
  CHECK(k4.ops[0].classification == "noise");
  CHECK(k4.ops[0].args[1].note == "value differs: [0] vs [1]");
}

TEST_CASE("numeric_value reads a number as the C library's strtod does", "[analysis][noise]") {
  // Differential: every text strtod reads whole, numeric_value reads as the same double
  // (bit for bit); every other text is no number.
  auto strtod_whole = [](const std::string& s) -> std::optional<double> {
    if (s.empty() || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))) return std::nullopt;
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) return std::nullopt;
    return v;
  };
  auto same = [](std::optional<double> x, std::optional<double> y) {
    if (x.has_value() != y.has_value()) return false;
    if (!x) return true;
    if (std::isnan(*x) || std::isnan(*y)) return std::isnan(*x) && std::isnan(*y);
    return std::memcmp(&*x, &*y, sizeof(double)) == 0;
  };
  std::vector<std::string> texts{"0",
                                 "-0",
                                 "1",
                                 "1.0",
                                 "1.",
                                 "-3",
                                 "1e-7",
                                 "2.5E+3",
                                 "1e400",
                                 "-1e400",
                                 "1e-400",
                                 "4.9e-324",
                                 "2.2250738585072011e-308",
                                 "0.1",
                                 "-inf",
                                 "-nan",
                                 "1e",
                                 "1e+",
                                 "--1",
                                 "1 ",
                                 " 1",
                                 "+1",
                                 "\"1\"",
                                 "[1]",
                                 "true",
                                 "null",
                                 "",
                                 "1.5x",
                                 "123456789012345678901234567890",
                                 "9007199254740993"};
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> exponent(-300, 300), mantissa(-1, 1);
  for (int k = 0; k < 2000; ++k) {
    const double v = mantissa(gen) * std::pow(10.0, exponent(gen));
    for (int digits : {6, 9, 17}) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.*g", digits, v);
      texts.emplace_back(buf);
    }
  }
  for (const std::string& t : texts) {
    CAPTURE(t);
    CHECK(same(numeric_value(t), strtod_whole(t)));
  }
  CHECK(numeric_value("1e400") == std::numeric_limits<double>::infinity());
  CHECK(*numeric_value("0.5") == 0.5);
  CHECK_FALSE(numeric_value("+1"));
}

TEST_CASE("numbers are shown in their shortest form that reads back exactly", "[analysis][noise]") {
  CHECK(shortest_number(0.2) == "0.2");
  CHECK(shortest_number(0.02) == "0.02");
  CHECK(shortest_number(1e-7) == "1e-07");
  CHECK(shortest_number(-0.0) == "-0");
  CHECK(shortest_number(std::numeric_limits<double>::infinity()) == "inf");
  CHECK(shortest_number(-std::numeric_limits<double>::infinity()) == "-inf");
  CHECK(shortest_number(std::nan("")) == "nan");
  // Differential, against the C library: the text reads back (strtod) as the same double bit
  // for bit, and is never longer than printf's %.17g, which always reads back.
  std::mt19937_64 gen(42);
  for (int i = 0; i < 20000; ++i) {
    uint64_t bits = gen();
    double v = 0;
    std::memcpy(&v, &bits, sizeof v);
    if (!std::isfinite(v)) continue;
    if (i % 2) v = std::ldexp(static_cast<double>(bits >> 11), -53) * 10.0;  // ordinary sizes
    const std::string s = shortest_number(v);
    INFO(s);
    const double back = std::strtod(s.c_str(), nullptr);
    CHECK(std::memcmp(&back, &v, sizeof v) == 0);
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    CHECK(s.size() <= std::strlen(buf));
  }
  // As the records hold them (the probe writes %.17g): each float of a text or of a list,
  // integers and words untouched.
  CHECK(display_value("0.20000000000000001") == "0.2");
  CHECK(display_value("[0.90000000000000002,0.999]") == "[0.9,0.999]");
  CHECK(display_value("[1,2]") == "[1,2]");
  CHECK(display_value("5") == "5");
  CHECK(display_value("2.0") == "2.0");
  CHECK(display_value("1e+20") == "1e+20");
  CHECK(display_value("\"mean\"") == "\"mean\"");
  CHECK(display_value("\"-inf\"") == "\"-inf\"");
  CHECK(display_value("[]") == "[]");
  CHECK(display_value("null") == "null");
}
