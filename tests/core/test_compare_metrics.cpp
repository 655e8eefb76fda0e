// msprobe's comparison metrics: tensor mode (compare_tensors) and the statistics-mode
// columns and warning rule (compare_stats); the pairing of two LibTorch versions' ops, near-tie
// flips, and a comparison reset into kept storage. Expected values are computed by hand in the
// comments, in float64 (the noise model: test_compare_noise.cpp).
#include <cmath>

#include "analysis/compare_parts.h"
#include "analysis_fixtures.h"
#include "core/compare_check.h"
#include "precprobe_catch.h"

using namespace precprobe;
using namespace precprobe::test;

// ------------------------------------------------------------------ compare_tensors

TEST_CASE("compare_tensors matches a hand computation", "[analysis][metrics]") {
  const double n[] = {1, 2, 3}, b[] = {1, 2, 4};
  const TensorMetrics m = compare_tensors(n, b, 3);
  // N.B = 1 + 4 + 12 = 17; |N| = sqrt(14); |B| = sqrt(21); 17 / sqrt(294).
  CHECK(m.cosine == Approx(0.9914601339836673).epsilon(1e-15));
  CHECK(m.euclidean == Approx(1.0));           // sqrt(0 + 0 + 1)
  CHECK(m.max_abs_err == Approx(1.0));         // |3 - 4|
  CHECK(m.max_rel_err == Approx(0.25));        // |3 - 4| / 4
  CHECK(m.one_thousandth == Approx(2.0 / 3));  // relative errors {0, 0, 0.25}
  CHECK(m.five_thousandth == Approx(2.0 / 3));
  CHECK(m.accuracy == "Yes");  // cosine >= 0.99 and MaxAbsErr <= 1
  CHECK(m.comparable);
}

TEST_CASE("compare_tensors: accuracy rule thresholds", "[analysis][metrics]") {
  // cos < 0.99 and MaxAbsErr > 0.001 -> No. N = {1, 0}, B = {1, 0.2}: cos = 1 / sqrt(1.04)
  // = 0.98058; MaxAbsErr 0.2.
  const double n1[] = {1, 0}, b1[] = {1, 0.2};
  TensorMetrics m = compare_tensors(n1, b1, 2);
  CHECK(m.cosine == Approx(1 / std::sqrt(1.04)));
  CHECK(m.accuracy == "No");
  // MaxAbsErr > 1 alone -> No: N = {1000, 2}, B = {1002, 2}: cos ~ 1, MaxAbsErr 2.
  const double n2[] = {1000, 2}, b2[] = {1002, 2};
  m = compare_tensors(n2, b2, 2);
  CHECK(m.cosine > 0.99999);
  CHECK(m.max_abs_err == Approx(2));
  CHECK(m.accuracy == "No");
}

TEST_CASE("compare_tensors: B == 0 counts as machine epsilon", "[analysis][metrics]") {
  const double eps = 2.220446049250313e-16;
  const double n[] = {0, 1e-3}, b[] = {0, 0};
  const TensorMetrics m = compare_tensors(n, b, 2);
  // Element 0: (0 + eps - (0 + eps)) / eps = 0. Element 1: (1e-3 + eps - eps) / eps.
  CHECK(m.max_rel_err == Approx(1e-3 / eps).epsilon(1e-9));
  CHECK(m.one_thousandth == Approx(0.5));
  // |B| = 0 <= eps while |N| = 1e-3: cosine is not defined.
  CHECK(std::isnan(m.cosine));
  CHECK(m.message.find("Bench") != std::string::npos);
  // msprobe's check_accuracy compares the NaN cosine (false both times): MaxAbsErr decides.
  CHECK(m.accuracy == "Yes");
}

TEST_CASE("compare_tensors: both all-zero gives cosine 1", "[analysis][metrics]") {
  const double z[] = {0, 0, 0};
  const TensorMetrics m = compare_tensors(z, z, 3);
  CHECK(m.cosine == Approx(1.0).margin(0));
  CHECK(m.max_rel_err == Approx(0.0).margin(0));
  CHECK(m.one_thousandth == Approx(1.0).margin(0));
}

TEST_CASE("compare_tensors: NaN/Inf at the same positions are zeroed", "[analysis][metrics]") {
  const double n[] = {kNaN, 1, kInf}, b[] = {kNaN, 2, kInf};
  const TensorMetrics m = compare_tensors(n, b, 3);
  // After zeroing: N = {0, 1, 0}, B = {0, 2, 0}: cos = 2 / (1 * 2) = 1, RE = {0, 0.5, 0}.
  CHECK(m.comparable);
  CHECK(m.cosine == Approx(1.0));
  CHECK(m.max_abs_err == Approx(1.0));
  CHECK(m.max_rel_err == Approx(0.5));
  CHECK(m.one_thousandth == Approx(2.0 / 3));
  CHECK(m.euclidean == Approx(1.0));
}

TEST_CASE("compare_tensors: NaN at different positions is not comparable", "[analysis][metrics]") {
  const double n[] = {kNaN, 1}, b[] = {1, kNaN};
  const TensorMetrics m = compare_tensors(n, b, 2);
  CHECK_FALSE(m.comparable);
  CHECK(std::isnan(m.cosine));
  CHECK(std::isnan(m.max_abs_err));
  CHECK(m.accuracy == "No");
}

TEST_CASE("compare_tensors: one element has no cosine", "[analysis][metrics]") {
  const double n[] = {2}, b[] = {4};
  const TensorMetrics m = compare_tensors(n, b, 1);
  CHECK(std::isnan(m.cosine));
  CHECK(m.max_rel_err == Approx(0.5));
  CHECK(m.accuracy == "None");
  const TensorMetrics e = compare_tensors(n, b, 0);
  CHECK_FALSE(e.comparable);
}

// ------------------------------------------------------------------ statistics rule

TEST_CASE("compare_stats: msprobe warning rule and relative errors", "[analysis][compare]") {
  TensorStats n = stats_of({1, 10}), b = stats_of({1, 4});
  ArgCompare ac;
  compare_stats(n, b, ac);
  // Max: diff 6, rel |6 / 4| * 100 = 150 %, 6 / (10 + 1e-10) = 0.6 > 0.5 -> warning.
  CHECK(ac.max.diff == Approx(6));
  CHECK(ac.max.rel_pct == Approx(150));
  CHECK(ac.warning);
  // Max 6 vs 4: 2 / 6 = 0.33; mean 3.5 vs 2.5: 1 / 3.5; norm sqrt(37) vs sqrt(17):
  // 1.96 / 6.08 = 0.32; min equal -> no warning.
  n = stats_of({1, 6});
  ArgCompare ok;
  compare_stats(n, b, ok);
  CHECK(ok.max.rel_pct == Approx(50));
  CHECK(ok.mean.diff == Approx(1.0));
  CHECK_FALSE(ok.warning);
  // Negative values: max(|N|, |B|): N min -1 vs B min -3: 2 / 3 > 0.5 -> warning.
  ArgCompare neg;
  compare_stats(stats_of({-1, 1}), stats_of({-3, 1}), neg);
  CHECK(neg.min.diff == Approx(2));
  CHECK(neg.warning);
  // B == 0: relative error is "N/A" (NaN).
  ArgCompare zero;
  compare_stats(stats_of({0.5, 1}), stats_of({0, 1}), zero);
  CHECK(std::isnan(zero.min.rel_pct));
}

TEST_CASE("compare aligns runs of two LibTorch versions on the ops both have",
          "[analysis][compare]") {
  // A (1.13): reshape through aten::_reshape_alias; zero_grad zeroes the gradient.
  // B (2.x): reshape through aten::view; no aten::zero_ (gradients set to None); an extra
  // aten::to. The ops both have pair up; the others are listed, not blamed.
  Arg x = hashed(targ({1, 2, 3, 4}), 1), y = hashed(targ({2, 4, 6, 8}), 2);
  Arg r = hashed(targ({1, 2, 3, 4}), 3);
  r.tensor->shape = {2, 2};
  DumpData a, b;
  add_step(a, 0, 0,
           {{"aten::zero_", 0, {x}, {x}},
            {"aten::mul", 1, {x, varg("2.0")}, {y}},
            {"aten::_reshape_alias", 2, {y, varg("[2,2]"), varg("[2,1]")}, {r}},
            {"aten::sum", 3, {r}, {hashed(targ({20}), 4)}}});
  add_step(b, 0, 0,
           {{"aten::mul", 0, {x, varg("2.0")}, {y}},
            {"aten::to", 1, {y, varg("6")}, {y}},
            {"aten::view", 2, {y, varg("[2,2]")}, {r}},
            {"aten::sum", 3, {r}, {hashed(targ({20}), 4)}}});
  CompareOptions first;
  first.first = true;
  const CompareResult c = test::compare_checked(a, b, first);
  REQUIRE(c.ops.size() == 3);
  CHECK(c.ops[0].op == "aten::mul");
  CHECK(c.ops[1].op == "aten::_reshape_alias");
  CHECK(c.ops[1].name_b == "aten::view.0.forward");
  CHECK(c.ops[2].op == "aten::sum");
  REQUIRE(c.unmatched.size() == 2);
  CHECK(c.unmatched[0].name == "aten::zero_.0.forward");
  CHECK(c.unmatched[0].side == "a");
  CHECK(c.unmatched[1].name == "aten::to.0.forward");
  CHECK(c.unmatched[1].side == "b");
  CHECK(c.aligned_fraction == Approx(6.0 / 8));  // 2 * 3 matched / (4 + 4)
  CHECK_FALSE(c.found);
  CHECK_FALSE(c.differs());  // --first: ops in one run only do not make the runs differ
  // _reshape_alias has a stride argument that view lacks: noted, not a divergence; the
  // tensors both have are equal, the outputs have one shape: the same reshape.
  CHECK(c.ops[1].args[2].note == "an argument of aten::_reshape_alias only");
  CHECK(c.ops[1].classification == "match");
}

TEST_CASE("compare: ops downstream of a near-tie flip are excused, the others are not",
          "[analysis][compare][noise]") {
  // A max-pool backward routes the gradient 0.5 of window 0 to element 0 in run A and to
  // element 1 in run B (the window's two values were tied up to rounding): its index input
  // differs, its output has the same statistics (a moved element). The convolution
  // backward that consumes that output differs by 20 % in its grad_input, with inputs
  // whose statistics are identical: the rounding model alone says divergent. A second
  // convolution backward with the same difference that does not consume it stays divergent.
  const Arg grad_out = hashed(targ({0.5, -0.25}), 11);
  const Arg x = hashed(targ({1, 3, 2, 2, 0, 1, 4, 4}), 12);
  const Arg moved_a = targ({0.5, 0, 0, 0, 0, -0.25, 0, 0});
  const Arg moved_b = targ({0, 0.5, 0, 0, 0, -0.25, 0, 0});
  REQUIRE(stats_of({0.5, 0, 0, 0, 0, -0.25, 0, 0}).norm ==
          stats_of({0, 0.5, 0, 0, 0, -0.25, 0, 0}).norm);
  const Arg w = hashed(targ({0.1, -0.2, 0.3}), 13);
  const Arg other_grad = hashed(targ({0.7, 0.1}), 14);
  auto pool = [&](std::vector<double> idx, const Arg& out) {
    return OpSpec{"aten::max_pool2d_with_indices_backward",
                  0,
                  {grad_out, x, varg("[2,2]"), Arg{stats_of(idx, "Long"), ""}},
                  {out},
                  0,
                  0,
                  Direction::kBackward};
  };
  auto conv = [&](int64_t seq, int64_t call, const Arg& go, double max) {
    return OpSpec{"aten::convolution_backward",
                  seq,
                  {go, x, w},
                  {targ({max, -0.02, 0.003}), hashed(targ({0.2, 0.1, 0.1}), 15)},
                  call,
                  0,
                  Direction::kBackward};
  };
  auto runs = [&](std::vector<double> idx_b, const Arg& moved) {
    DumpData a, b;
    add_step(a, 0, 0,
             {pool({0, 5}, moved_a), conv(1, 0, moved_a, 0.010), conv(2, 1, other_grad, 0.010)});
    add_step(b, 0, 0,
             {pool(idx_b, moved), conv(1, 0, moved, 0.012), conv(2, 1, other_grad, 0.012)});
    return std::make_pair(a, b);
  };
  CompareOptions first;
  first.first = true;

  // The indices differ: the first convolution backward is downstream of the flip.
  auto [a, b] = runs({1, 5}, moved_b);
  const CompareResult all = test::compare_checked(a, b, {});
  REQUIRE(all.ops.size() == 3);
  CHECK(all.flip_ops == 1);
  CHECK(all.ops[0].after_flip == "aten::max_pool2d_with_indices_backward.0.backward");
  const OpCompare& excused = all.ops[1];
  CHECK(excused.after_flip == "aten::max_pool2d_with_indices_backward.0.backward");
  CHECK(excused.after_flip_seq == 0);
  CHECK(excused.excused);
  CHECK(excused.classification == "noise");
  CHECK(excused.ratio > 1000);  // what the rounding model alone makes of it
  CHECK(all.ops[2].after_flip.empty());
  CHECK_FALSE(all.ops[2].excused);
  CHECK(all.ops[2].classification == "divergent");
  CHECK(all.excused_ops == 1);
  REQUIRE(all.first_excused);
  CHECK(all.first_excused->seq_a == 1);
  // The excused op is not "the largest noise".
  CHECK((!all.max_noise || !all.max_noise->excused));
  const CompareResult f = test::compare_checked(a, b, first);
  REQUIRE(f.found);
  CHECK(f.first->seq_a == 2);
  const nlohmann::json j = f.to_json();
  CHECK(j.at("excused_ops") == 1);
  CHECK(j.at("flip_ops") == 1);
  CHECK(j.at("first_excused").at("after_flip").at("seq") == 0);

  // Same indices (no flip): the same difference of the first convolution backward is
  // its own, and it is the first divergent op.
  auto [a2, b2] = runs({0, 5}, moved_a);
  const CompareResult g = test::compare_checked(a2, b2, first);
  CHECK(g.flip_ops == 0);
  CHECK(g.excused_ops == 0);
  REQUIRE(g.found);
  CHECK(g.first->seq_a == 1);
}

TEST_CASE("compare: a comparison reset into the storage of an earlier one is a default one",
          "[analysis][compare]") {
  // compare_group judges each pair into the storage of a comparison its thread judged before
  // (analysis_detail::reset_keeping_storage): every field must start as a new one's.
  OpCompare oc;
  oc.step = 3;
  oc.rank = 1;
  oc.seq_a = oc.seq_b = 7;
  oc.name = oc.name_b = oc.op = oc.direction = oc.scope = "x";
  oc.args.resize(4);
  for (ArgCompare& ac : oc.args) {
    ac.io = ac.dtype_n = ac.dtype_b = ac.note = "y";
    ac.index = 2;
    ac.tensor = ac.exact = false;
    ac.shape_n = ac.shape_b = {2, 3};
    ac.max = ac.min = ac.mean = ac.norm = StatDiff{1, 2, 3, 4};
    ac.warning = true;
    ac.error = ac.abs_error = 5;
  }
  oc.warning = oc.excused = true;
  oc.exact = false;
  oc.input_error = oc.output_error = oc.score = oc.error = oc.inherited = oc.bound = oc.ratio = 6;
  oc.terms = 9;
  oc.classification = oc.module = oc.after_flip = oc.cause = oc.param = "z";
  oc.after_flip_seq = 4;
  oc.loss_scale = 8;
  oc.made_by_a = oc.made_by_b = {"w"};
  analysis_detail::reset_keeping_storage(oc, 2);
  OpCompare fresh;
  fresh.args.resize(2);
  CHECK(oc.to_json() == fresh.to_json());
  CHECK(oc.args.size() == 2);
  for (const ArgCompare& ac : oc.args) {
    CHECK(ac.io.empty());
    CHECK(ac.index == 0);
    CHECK(ac.tensor);
    CHECK(ac.exact);
    CHECK_FALSE(ac.warning);
    CHECK(ac.dtype_n.empty());
    CHECK(ac.dtype_b.empty());
    CHECK(ac.note.empty());
    CHECK(ac.shape_n.empty());
    CHECK(ac.shape_b.empty());
    CHECK(ac.error == 0);
    CHECK(ac.abs_error == 0);
    for (const StatDiff* d : {&ac.max, &ac.min, &ac.mean, &ac.norm})
      CHECK((d->n == 0 && d->b == 0 && d->diff == 0 && d->rel_pct == 0));
  }
  CHECK(oc.step == 0);
  CHECK(oc.rank == 0);
  CHECK(oc.seq_a == 0);
  CHECK(oc.seq_b == 0);
  for (const std::string* s : {&oc.name, &oc.name_b, &oc.op, &oc.direction, &oc.scope, &oc.module,
                               &oc.after_flip, &oc.cause, &oc.param})
    CHECK(s->empty());
  CHECK(oc.classification == "match");
  CHECK_FALSE(oc.warning);
  CHECK_FALSE(oc.excused);
  CHECK(oc.exact);
  for (double x :
       {oc.input_error, oc.output_error, oc.score, oc.error, oc.inherited, oc.bound, oc.ratio})
    CHECK(x == 0);
  CHECK(oc.terms == 1);
  CHECK(oc.after_flip_seq == -1);
  CHECK(oc.loss_scale == 1);
  CHECK(oc.made_by_a.empty());
  CHECK(oc.made_by_b.empty());
}
