// msprobe's comparison metrics: tensor mode (compare_tensors) and the statistics-mode
// columns and warning rule (compare_stats). Expected values are computed by hand in the
// comments, in float64.
#include <cmath>

#include "analysis_fixtures.h"
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
