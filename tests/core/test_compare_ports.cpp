// compare across a port: arguments a port spells differently (a default on one side, a list
// against its broadcast, 1 against 1.0), a constant of the program that differs, and ops of one run
// only compared by their results (src/core/analysis/arg_rules.cpp, compare.cpp's places).
#include <cmath>

#include "analysis_fixtures.h"
#include "core/compare_check.h"
#include "precprobe_catch.h"

using namespace precprobe;
using namespace precprobe::test;

TEST_CASE("compare: arguments a port spells differently are the same argument",
          "[analysis][compare]") {
  CompareOptions first;
  first.first = true;
  const Arg h = hashed(targ({1, 2, 3, 4}), 5), out = hashed(targ({4}), 6);
  // Python's parser expands kernel_size=2 to [2, 2]; LibTorch's C++ API passes {2}, which
  // ATen expands: the same int[2].
  auto [a, b] = one_op("aten::max_pool2d", {h, varg("[2,2]"), varg("[]"), varg("[0,0]")}, {out},
                       {h, varg("[2]"), varg("[]"), varg("[0]")}, {out});
  const CompareResult r = test::compare_checked(a, b, first);
  REQUIRE(r.ops.size() == 1);
  CHECK(r.ops[0].classification == "match");
  CHECK_FALSE(r.found);
  // Python passes device="cpu" and pin_memory=False, C++ leaves them None: noted, and the
  // outputs decide.
  const Arg perm = hashed(targ({0, 1, 2}), 7);
  auto [c, e] =
      one_op("aten::randperm", {varg("3"), varg("4"), varg("null"), varg("\"cpu\""), varg("false")},
             {perm}, {varg("3"), varg("4"), varg("null"), varg("null"), varg("null")}, {perm});
  const CompareResult k = test::compare_checked(c, e, first);
  REQUIRE(k.ops.size() == 1);
  CHECK_FALSE(k.found);
  CHECK(k.ops[0].classification == "noise");
  CHECK(k.ops[0].args[3].note == "default on one side: \"cpu\" vs null");
  CHECK(k.ops[0].args[4].note == "default on one side: false vs null");
  // SGD's momentum buffer: Python's buf.add_(grad, alpha=1) passes an int, LibTorch's
  // add_(grad, 1 - dampening) a double: the same number, the same argument, and the op a match.
  const Arg buf = hashed(targ({1, 2}), 11), g = hashed(targ({0.5, 0.25}), 12);
  const Arg sum = hashed(targ({1.5, 2.25}), 13);
  auto [c4, e4] = one_op("aten::add_", {buf, g, varg("1")}, {sum}, {buf, g, varg("1.0")}, {sum});
  const CompareResult k4 = test::compare_checked(c4, e4, first);
  REQUIRE(k4.ops.size() == 1);
  CHECK(k4.ops[0].classification == "match");
  CHECK(k4.ops[0].args[2].note == "the same number spelled otherwise: 1 vs 1.0");
  // Another number is another argument, even where the outputs happen to agree.
  auto [c5, e5] = one_op("aten::add_", {buf, g, varg("1")}, {sum}, {buf, g, varg("2.0")}, {sum});
  const CompareResult k5 = test::compare_checked(c5, e5, first);
  CHECK(k5.ops[0].classification != "match");
  CHECK(k5.ops[0].args[2].note.rfind("value differs: 1 vs 2.0", 0) == 0);
  // Backward's seed: Python's ones_like(loss, memory_format=preserve) against C++'s
  // ones_like(loss, contiguous), the losses one ulp apart: the same ones come out.
  const Arg ones = hashed(targ({1}), 10);
  auto [c3, e3] = one_op("aten::ones_like", {targ({1.9343910217285156}), varg("1")}, {ones},
                         {targ({1.9343911409378052}), varg("0")}, {ones});
  const CompareResult k3 = test::compare_checked(c3, e3, first);
  CHECK_FALSE(k3.found);
  CHECK(k3.ops[0].classification == "noise");
  CHECK(k3.ops[0].args[1].note == "value differs: 1 vs 0");
  // Two different values are never the same: [2, 3] against [2], found where the outputs
  // differ.
  auto [c2, e2] = one_op("aten::max_pool2d", {h, varg("[2,3]")}, {out}, {h, varg("[2]")},
                         {hashed(targ({3}), 9)});
  const CompareResult k2 = test::compare_checked(c2, e2, first);
  CHECK(k2.found);
  CHECK(k2.ops[0].args[1].note == "value differs: [2,3] vs [2]");
}

TEST_CASE("compare: a constant of the program that differs is divergent whatever its size",
          "[analysis][compare][noise]") {
  CompareOptions first;
  first.first = true;
  const Arg h = hashed(targ({1, 2}), 3);
  // 1.0000001 where the other run has 1.0, in every step: one part in 10^7, below float32's
  // rounding of the product (10 u = 6e-7), yet a different program.
  auto steps = [&](const std::vector<std::string>& ka, const std::vector<std::string>& kb) {
    DumpData a, b;
    for (size_t s = 0; s < ka.size(); ++s) {
      const double x = std::stod(ka[s]), y = std::stod(kb[s]);
      add_step(a, static_cast<int64_t>(s), 0,
               {{"aten::mul", 0, {h, varg(ka[s])}, {targ({x, 2 * x})}}});
      add_step(b, static_cast<int64_t>(s), 0,
               {{"aten::mul", 0, {h, varg(kb[s])}, {targ({y, 2 * y})}}});
    }
    return std::pair<DumpData, DumpData>{a, b};
  };
  auto [a, b] = steps({"1.0000001", "1.0000001", "1.0000001"}, {"1.0", "1.0", "1.0"});
  const CompareResult r = test::compare_checked(a, b, first);
  REQUIRE(r.found);
  CHECK(r.first->step == 0);
  CHECK(r.first->args[1].note ==
        "value differs: 1.0000001 vs 1.0 (a constant of the program: every step)");
  // One step alone cannot tell a constant from a value computed on the host: the rounding
  // rule decides, as before.
  auto [a1, b1] = one_op("aten::mul", {h, varg("1.0000001")}, {targ({1.0000001, 2.0000002})},
                         {h, varg("1.0")}, {targ({1, 2})});
  CHECK_FALSE(test::compare_checked(a1, b1, first).found);
  // A number that changes from step to step in both runs (a clipping coefficient, a learning
  // rate from an earlier item()) is data: its last-bit differences are rounding.
  auto [a2, b2] = steps({"0.50000000000000011", "0.25000000000000006"}, {"0.5", "0.25"});
  const CompareResult r2 = test::compare_checked(a2, b2, first);
  CHECK_FALSE(r2.found);
  // The same constant in one run, another in the other from step 1 on (a perturbation): found
  // at step 1, where it starts.
  auto [a3, b3] = steps({"1.0", "1.0000001", "1.0000001"}, {"1.0", "1.0", "1.0"});
  const CompareResult r3 = test::compare_checked(a3, b3, first);
  REQUIRE(r3.found);
  CHECK(r3.first->step == 1);
}

TEST_CASE("compare: ops of one run only are compared by their results", "[analysis][compare]") {
  // Python's nn.Linear is aten::linear, LibTorch 1.13's C++ nn::Linear t + addmm: the same
  // product when their outputs agree, a divergence (a port without its bias) when they do not.
  CompareOptions first;
  first.first = true;
  Arg x = hashed(targ({1, 2}), 1), w = hashed(targ({3, 4}), 2), bias = hashed(targ({1}), 3);
  w.tensor->param = "fc.weight";
  bias.tensor->param = "fc.bias";
  const Arg wt = hashed(targ({3, 4}), 4), y = hashed(targ({12}), 5), z = hashed(targ({12}), 6);
  const Arg y_off = hashed(targ({11}), 7), z_off = hashed(targ({11}), 8);
  auto run = [&](const Arg& out, const Arg& relu_out) {
    DumpData a, b;
    add_step(a, 0, 0, {{"aten::linear", 0, {x, w, bias}, {y}}, {"aten::relu", 1, {y}, {z}}});
    add_step(b, 0, 0,
             {{"aten::t", 0, {w}, {wt}},
              {"aten::addmm", 1, {bias, x, wt}, {out}},
              {"aten::relu", 2, {out}, {relu_out}}});
    return std::pair<DumpData, DumpData>{a, b};
  };
  auto [a, b] = run(y, z);
  const CompareResult same = test::compare_checked(a, b, first);
  CHECK_FALSE(same.found);
  CHECK(same.divergent_ops == 0);
  CHECK(same.unmatched.size() == 3);
  auto [a2, b2] = run(y_off, z_off);
  const CompareResult off = test::compare_checked(a2, b2, first);
  REQUIRE(off.found);
  CHECK(off.first->name == "aten::linear.0.forward");
  CHECK(off.first->name_b == "aten::addmm.0.forward");
  CHECK(off.first->classification == "divergent");
  CHECK(off.divergent_places.size() == 1);
  // relu only passes the difference on.
  REQUIRE(off.ops.size() == 1);
  CHECK(off.ops[0].classification == "noise");

  // x * 1.01 in C++ (mul.Scalar) against x * 1.0 in Python (mul.Tensor, the 1.0 a 0-d
  // tensor), then num_batches_tracked += 1 (add_.Scalar against add_.Tensor): a number
  // Python wraps pairs with the Scalar, and is compared as the number it is.
  const Arg h = hashed(targ({1, 2}), 11);
  Arg one = hashed(targ({1}), 12), n0 = hashed(targ({3}), 13), n1 = hashed(targ({4}), 14);
  one.tensor->shape = n0.tensor->shape = n1.tensor->shape = {};
  DumpData c, e;
  add_step(c, 0, 0,
           {{"aten::mul", 0, {h, varg("1.01")}, {targ({1.01, 2.02})}},
            {"aten::add_", 1, {n0, varg("1"), varg("1")}, {n1}}});
  add_step(
      e, 0, 0,
      {{"aten::mul", 0, {h, one}, {targ({1, 2})}}, {"aten::add_", 1, {n0, one, varg("1")}, {n1}}});
  const CompareResult m = test::compare_checked(c, e, first);
  REQUIRE(m.found);
  CHECK(m.first->name == "aten::mul.0.forward");
  CHECK(m.divergent_places.empty());
  CHECK(m.unmatched.empty());
  REQUIRE(m.first->args.size() == 3);  // two inputs, the output
  CHECK(m.first->args[1].note.find("1.01 vs 1") != std::string::npos);
  REQUIRE(m.ops.size() == 2);
  CHECK(m.ops[1].classification == "match");  // add_(1) against add_(tensor(1))
  // Without a parameter in common, the last ops of a place are not compared: a metric's
  // argmax + eq + sum + item() in Python against a bare item() in C++ is no divergence.
  DumpData p, q;
  add_step(p, 0, 0,
           {{"aten::argmax", 0, {h, varg("1")}, {targ({1})}},
            {"aten::eq", 1, {targ({1}), targ({1})}, {targ({1})}},
            {"aten::item", 2, {targ({1})}, {varg("1")}},
            {"aten::relu", 3, {h}, {h}}});
  add_step(q, 0, 0,
           {{"aten::item", 0, {targ({1.25})}, {varg("1.25")}}, {"aten::relu", 1, {h}, {h}}});
  const CompareResult metric = test::compare_checked(p, q, first);
  CHECK_FALSE(metric.found);
}
