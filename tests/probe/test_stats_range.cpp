// Range statistics (TensorStats::range: the binary exponents of the finite non-zero values)
// against hand-computed answers and against an independent reference: std::frexp on every
// value widened to float64.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "precprobe_catch.h"
#include "stats/stats.h"

// Exact comparisons with zero are intended.
#pragma GCC diagnostic ignored "-Wfloat-equal"

using precprobe::TensorStats;
using precprobe::detail::summarize;
using Range = std::vector<std::pair<int32_t, int64_t>>;

namespace {

TensorStats range_of(const at::Tensor& t, bool with_hash = false) {
  TensorStats s;
  summarize(t, s, with_hash, /*with_range=*/true);
  return s;
}

// frexp gives |x| = m * 2^k with m in [0.5, 1): the binade is k - 1.
Range reference_range(const at::Tensor& t) {
  at::Tensor x = t.is_complex() ? at::view_as_real(t.resolve_conj()) : t;
  x = x.to(at::kDouble).contiguous().reshape({-1});
  const double* p = x.data_ptr<double>();
  std::map<int32_t, int64_t> bins;
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (!std::isfinite(p[i]) || p[i] == 0.0) continue;
    int k = 0;
    std::frexp(p[i], &k);
    ++bins[k - 1];
  }
  return Range(bins.begin(), bins.end());
}

int64_t total(const Range& r) {
  int64_t n = 0;
  for (const auto& bin : r) n += bin.second;
  return n;
}

// Random magnitudes over many binades, both signs, with zeros, NaN and +-Inf sprinkled in.
at::Tensor wide_values(int64_t n, double lo_exp, double hi_exp, at::ScalarType dtype) {
  at::manual_seed(7);
  at::Tensor e = at::rand({n}, at::kDouble) * (hi_exp - lo_exp) + lo_exp;
  at::Tensor sign = at::randint(0, 2, {n}, at::kDouble) * 2 - 1;
  at::Tensor x = sign * at::pow(2.0, e);
  x.index_put_({at::randint(0, n, {n / 50})}, 0.0);
  x.index_put_({at::randint(0, n, {n / 200})}, std::numeric_limits<double>::quiet_NaN());
  x.index_put_({at::randint(0, n, {n / 300})}, std::numeric_limits<double>::infinity());
  x.index_put_({at::randint(0, n, {n / 300})}, -std::numeric_limits<double>::infinity());
  return x.to(dtype);
}

}  // namespace

TEST_CASE("range of a fixed float vector: zeros, NaN and Inf left out, denormals counted",
          "[stats][range]") {
  const float denormal = 1e-40f;                                   // 2^-132.9: binade -133
  const float tiniest = std::numeric_limits<float>::denorm_min();  // 2^-149
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  const float kInf = std::numeric_limits<float>::infinity();
  const at::Tensor t =
      torch::tensor({0.0f, -0.0f, 1.0f, -1.0f, 1.5f, 3.0f, 0.25f, -0.2f, kNaN, kInf, -kInf,
                     denormal, tiniest, 65504.0f, 65520.0f, std::numeric_limits<float>::max()});
  const TensorStats s = range_of(t);
  CHECK(s.has_range);
  const Range expected = {{-149, 1}, {-133, 1}, {-3, 1}, {-2, 1},
                          {0, 3},    {1, 1},    {15, 2}, {127, 1}};
  CHECK(s.range == expected);
  CHECK(total(s.range) == s.neg + s.pos);
}

TEST_CASE("range is off unless asked for, and only floating tensors get one", "[stats][range]") {
  TensorStats s;
  summarize(torch::tensor({1.0f, 2.0f}), s, false);
  CHECK_FALSE(s.has_range);
  CHECK(s.range.empty());
  s = range_of(torch::tensor({int64_t(1), int64_t(300)}));
  CHECK_FALSE(s.has_range);
  s = range_of(torch::tensor({true, false}));
  CHECK_FALSE(s.has_range);
  s = range_of(torch::zeros({0}));  // recorded, and empty: nothing finite and non-zero
  CHECK(s.has_range);
  CHECK(s.range.empty());
  s = range_of(torch::zeros({5}));
  CHECK(s.has_range);
  CHECK(s.range.empty());
  s = range_of(torch::full({3}, std::numeric_limits<float>::quiet_NaN()));
  CHECK(s.has_range);
  CHECK(s.range.empty());
  // A summary reused for another tensor forgets the old range.
  s = range_of(torch::tensor({4.0f}));
  summarize(torch::tensor({4.0f}), s, false);
  CHECK_FALSE(s.has_range);
  CHECK(s.range.empty());
}

TEST_CASE("range matches frexp for every floating dtype, across blocks and subnormals",
          "[stats][range]") {
  const int64_t n = 3 * 4096 + 17;
  struct Case {
    at::ScalarType dtype;
    double lo, hi;  // binades spanned, subnormals of the dtype included
  };
  for (const Case& c : {Case{at::kFloat, -152, 128}, Case{at::kDouble, -1078, 1023},
                        Case{at::kHalf, -26, 15.9}, Case{at::kBFloat16, -136, 127}}) {
    CAPTURE(c10::toString(c.dtype));
    const at::Tensor x = wide_values(n, c.lo, c.hi, c.dtype);
    const TensorStats s = range_of(x);
    const Range ref = reference_range(x);
    CHECK(s.range == ref);
    CHECK(total(s.range) == s.neg + s.pos);
    CHECK(static_cast<double>(ref.size()) > 0.9 * (c.hi - c.lo));  // every binade is there
  }
}

TEST_CASE("range of small tensors (counted without tables) matches frexp", "[stats][range]") {
  // Sizes around the switch from direct counting to the tables (128) and to the byte
  // compares (256), a scalar and a 0-d tensor; values spanning every float32 binade,
  // subnormals, zeros, Inf and NaN.
  for (int64_t n : {1, 2, 7, 127, 128, 129, 255, 256, 300}) {
    CAPTURE(n);
    at::Tensor x = wide_values(n, -152, 128, at::kFloat);
    if (n > 4) {
      x[0] = 0.0f;
      x[1] = std::numeric_limits<float>::infinity();
      x[2] = std::numeric_limits<float>::quiet_NaN();
      x[3] = std::numeric_limits<float>::denorm_min();
    }
    const TensorStats s = range_of(x);
    CHECK(s.range == reference_range(x));
    CHECK(total(s.range) == s.neg + s.pos);
  }
  const at::Tensor scalar = torch::tensor(3.0f).reshape({});
  const TensorStats s = range_of(scalar);
  CHECK(s.range == reference_range(scalar));
  CHECK(total(s.range) == 1);
}

TEST_CASE("narrow blocks (the byte-compare window) count outliers on both sides exactly",
          "[stats][range]") {
  // Values within a few binades below the block's largest take the windowed path; values
  // below the window, zeros, subnormals, NaN and Inf are counted apart. A few large values
  // put most of a block below the window: the kernel notices and finishes it otherwise.
  // Sizes leave a partial last vector and block.
  for (int64_t n : {int64_t(300), int64_t(4096), int64_t(3 * 4096 + 45)}) {
    for (int variant = 0; variant < 6; ++variant) {
      const at::ScalarType dtype = variant % 3 == 0   ? at::kFloat
                                   : variant % 3 == 1 ? at::kHalf
                                                      : at::kBFloat16;
      const bool large = variant >= 3;
      CAPTURE(n, c10::toString(dtype), large);
      at::manual_seed(11);
      at::Tensor x = at::randn({n}, at::kDouble);
      for (int64_t i = 5; i < n; i += 97) x[i] = (i % 2 ? 1 : -1) * 3e-5;  // below the window
      if (large)
        for (int64_t i = 40; i < n; i += 131) x[i] = 5e3;
      for (int64_t i = 7; i < n; i += 53) x[i] = 0.0;
      x[n - 1] = std::numeric_limits<double>::quiet_NaN();
      x[n / 2] = std::numeric_limits<double>::infinity();
      at::Tensor t = x.to(dtype);
      if (dtype == at::kFloat) t[n / 3] = 1e-40f;  // a subnormal in a narrow block
      const TensorStats s = range_of(t);
      CHECK(s.range == reference_range(t));
      CHECK(total(s.range) == s.neg + s.pos);
    }
  }
}

TEST_CASE("range of views: strided, transposed, expanded, complex, and with the hash",
          "[stats][range]") {
  const at::Tensor x = wide_values(64 * 96, -30, 30, at::kFloat).reshape({64, 96});
  const at::Tensor views[] = {x.t(), x.slice(1, 0, 96, 3), x.slice(0, 5, 40),
                              x.t().slice(0, 1, 90, 7)};
  for (const at::Tensor& v : views) {
    CHECK(range_of(v).range == reference_range(v));
    CHECK(range_of(v, /*with_hash=*/true).range == reference_range(v));  // the logical walk
  }
  // A stride-0 dim is read once and counted `repeat` times.
  const at::Tensor expanded = x.slice(0, 0, 1).expand({50, 96});
  const TensorStats e = range_of(expanded);
  CHECK(e.range == reference_range(expanded));
  CHECK(total(e.range) == e.neg + e.pos);
  const at::Tensor half_rows = x.to(at::kHalf).slice(1, 0, 96, 2);
  CHECK(range_of(half_rows).range == reference_range(half_rows));
  const at::Tensor z = at::complex(x.slice(0, 0, 8), x.slice(0, 8, 16));
  CHECK(range_of(z).range == reference_range(z));
  CHECK(range_of(z.conj()).range == reference_range(z));
}

TEST_CASE("the ATen path (used off the CPU) gives the same range", "[stats][range]") {
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    CAPTURE(c10::toString(dtype));
    const at::Tensor x = wide_values(5000, -140, 100, at::kDouble).clamp(-6e4, 6e4).to(dtype);
    TensorStats a;
    precprobe::detail::summarize_with_aten(x.t(), a, false, true);
    CHECK(a.has_range);
    CHECK(a.range == range_of(x).range);
    TensorStats b;
    precprobe::detail::summarize_with_aten(x, b, false, false);
    CHECK_FALSE(b.has_range);
  }
}
