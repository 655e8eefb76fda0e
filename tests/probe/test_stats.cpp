// Single-pass tensor statistics (src/probe/stats.*) against hand-computed answers and
// against an independent float64 recomputation.
#include <torch/torch.h>
#include <xxhash.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "precprobe/hash.h"
#include "precprobe_catch.h"
#include "stats/stats.h"

// Exact float comparisons are intended: the answers are exact.
#pragma GCC diagnostic ignored "-Wfloat-equal"

using precprobe::TensorStats;
using precprobe::detail::summarize;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::nan("");

TensorStats stats_of(const at::Tensor& t, bool with_hash = false) {
  TensorStats s;
  summarize(t, s, with_hash);
  return s;
}

// Independent reference: a scalar loop over the values converted to float64 (complex as
// their components), sums in long double, then ATen's own float64 sum as a second opinion.
TensorStats reference_stats(const at::Tensor& t) {
  at::Tensor x = t.is_complex() ? at::view_as_real(t.resolve_conj()) : t;
  x = x.to(at::kDouble).contiguous().reshape({-1});
  const double* p = x.data_ptr<double>();
  TensorStats r;
  long double sum = 0, sumsq = 0;
  double lo = kInf, hi = -kInf;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = p[i];
    if (std::isnan(v)) {
      ++r.nan;
    } else if (v == kInf) {
      ++r.pinf;
    } else if (v == -kInf) {
      ++r.ninf;
    } else {
      r.zero += v == 0;
      r.neg += v < 0;
      r.pos += v > 0;
      sum += v;
      sumsq += static_cast<long double>(v) * v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  const int64_t finite = r.zero + r.neg + r.pos;
  r.min = finite ? lo : kNaN;
  r.max = finite ? hi : kNaN;
  r.mean = finite ? static_cast<double>(sum / finite) : kNaN;
  r.norm = finite ? static_cast<double>(std::sqrt(sumsq)) : kNaN;
  return r;
}

bool same_or_both_nan(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

bool close(double a, double b, double rel) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b));
}

// Counts and extremes exactly; mean and norm within `rel`.
void check_against(const TensorStats& s, const TensorStats& ref, double rel) {
  CHECK(s.nan == ref.nan);
  CHECK(s.pinf == ref.pinf);
  CHECK(s.ninf == ref.ninf);
  CHECK(s.zero == ref.zero);
  CHECK(s.neg == ref.neg);
  CHECK(s.pos == ref.pos);
  CHECK(same_or_both_nan(s.min, ref.min));
  CHECK(same_or_both_nan(s.max, ref.max));
  CHECK(close(s.mean, ref.mean, rel));
  CHECK(close(s.norm, ref.norm, rel));
}

void check_no_values(const TensorStats& s) {
  CHECK(s.nan + s.pinf + s.ninf + s.zero + s.neg + s.pos == 0);
  CHECK(std::isnan(s.min));
  CHECK(std::isnan(s.max));
  CHECK(std::isnan(s.mean));
  CHECK(std::isnan(s.norm));
}

}  // namespace

TEST_CASE("fixed float vector with NaN, +-Inf, -0.0 and denormals", "[stats]") {
  const float den = std::numeric_limits<float>::denorm_min();
  const float den2 = -1e-40f;  // also denormal
  REQUIRE(std::fpclassify(den2) == FP_SUBNORMAL);
  auto t = torch::tensor({1.0f, -2.0f, 0.0f, -0.0f, 3.5f, NAN, INFINITY, -INFINITY, den, den2});
  auto s = stats_of(t);
  CHECK(s.dtype == "Float");
  CHECK(s.shape == std::vector<int64_t>{10});
  CHECK(s.device == "cpu");
  CHECK(s.numel == 10);
  CHECK(s.nan == 1);
  CHECK(s.pinf == 1);
  CHECK(s.ninf == 1);
  CHECK(s.zero == 2);  // 0.0 and -0.0
  CHECK(s.neg == 2);   // -2 and the negative denormal
  CHECK(s.pos == 3);   // 1, 3.5 and the positive denormal
  CHECK(s.min == -2.0);
  CHECK(s.max == 3.5);
  const double sum = 1.0 - 2.0 + 3.5 + double(den) + double(den2);
  CHECK(s.mean == Approx(sum / 7).epsilon(1e-15));
  CHECK(s.norm == Approx(std::sqrt(17.25)).epsilon(1e-15));
  CHECK_FALSE(s.hash.has_value());
  CHECK_FALSE(s.all_finite());
}

TEST_CASE("a lone denormal is positive and its own min and max", "[stats]") {
  const float den = std::numeric_limits<float>::denorm_min();
  auto s = stats_of(torch::full({3}, den));
  CHECK(s.pos == 3);
  CHECK(s.zero == 0);
  CHECK(s.min == double(den));
  CHECK(s.max == double(den));
  CHECK(s.mean == double(den));
}

TEST_CASE("all-NaN, all-Inf, empty, 0-d and undefined tensors", "[stats]") {
  auto s = stats_of(torch::full({5}, NAN));
  CHECK(s.nan == 5);
  CHECK(s.zero + s.neg + s.pos == 0);
  CHECK(std::isnan(s.min));
  CHECK(std::isnan(s.mean));
  CHECK(std::isnan(s.norm));

  s = stats_of(torch::full({2, 3}, -INFINITY, torch::kDouble));
  CHECK(s.ninf == 6);
  CHECK(std::isnan(s.max));

  s = stats_of(torch::empty({0, 3}));
  CHECK(s.numel == 0);
  CHECK(s.shape == std::vector<int64_t>{0, 3});
  check_no_values(s);

  s = stats_of(torch::tensor(2.5));
  CHECK(s.shape.empty());
  CHECK(s.numel == 1);
  CHECK(s.pos == 1);
  CHECK(s.mean == 2.5);
  CHECK(s.norm == 2.5);

  s = stats_of(at::Tensor());
  CHECK(s.dtype == "undefined");
  CHECK(s.numel == 0);
  check_no_values(s);
}

TEST_CASE("NaN and Inf in some blocks only, across block boundaries", "[stats]") {
  // 3.5 blocks; the bad values sit in blocks 0 and 2, on and next to a block boundary.
  auto t = torch::arange(14336, torch::kFloat).sub_(7000).mul_(0.25);
  auto a = t.accessor<float, 1>();
  a[0] = NAN;
  a[4095] = INFINITY;
  a[8192] = -INFINITY;
  a[8193] = NAN;
  a[14335] = NAN;
  auto s = stats_of(t);
  check_against(s, reference_stats(t), 1e-14);
  CHECK(s.nan == 3);
  CHECK(s.pinf == 1);
  CHECK(s.ninf == 1);
  CHECK(s.zero == 1);
}

TEST_CASE("float64 values whose squares overflow are still counted as finite", "[stats]") {
  auto t = torch::tensor({1e200, -1e200, 3e200}, torch::kDouble);
  auto s = stats_of(t);
  CHECK(s.nan + s.pinf + s.ninf == 0);
  CHECK(s.pos == 2);
  CHECK(s.neg == 1);
  CHECK(s.min == -1e200);
  CHECK(s.max == 3e200);
  CHECK(s.mean == Approx(1e200));
  CHECK(s.norm == kInf);  // documented: float64 sum of squares overflows
}

TEST_CASE("non-contiguous views are summarised without copying, like their copies", "[stats]") {
  torch::manual_seed(1);
  auto base = torch::randn({300, 257});
  base.index_put_({7, 3}, NAN);
  base.index_put_({299, 256}, -INFINITY);
  base.index_put_({100, 0}, 0.0);
  std::vector<at::Tensor> views = {
      base.t(),                                                                   // transpose
      base.index({torch::indexing::Slice(1, 300, 3)}),                            // rows with step
      base.index({torch::indexing::Slice(), torch::indexing::Slice(0, 257, 5)}),  // cols
      base.index({0}).unsqueeze(0).expand({64, 257}),                             // stride 0
      base.index({torch::indexing::Slice(0, 8), 0}).unsqueeze(1).expand({8, 1000}),
      base.reshape({300, 257, 1}).permute({2, 1, 0}),
      base.reshape({3, 100, 257}).permute({1, 2, 0}).index({torch::indexing::Slice(0, 99, 2)}),
  };
  for (const auto& v : views) {
    INFO("sizes " << v.sizes() << " strides " << v.strides());
    REQUIRE_FALSE(v.is_contiguous());
    auto s = stats_of(v);
    CHECK(s.numel == v.numel());
    CHECK(s.shape == v.sizes().vec());
    check_against(s, reference_stats(v), 1e-12);
    check_against(s, stats_of(v.contiguous()), 1e-12);
    // With the hash the walk is in logical order: same statistics.
    auto h = stats_of(v, /*with_hash=*/true);
    check_against(h, reference_stats(v), 1e-12);
    CHECK(h.hash == stats_of(v.contiguous(), true).hash);
    CHECK(h.hash == precprobe::tensor_hash(v));
    CHECK(h.hash == precprobe::tensor_hash(v.contiguous()));
  }
}

TEST_CASE("bfloat16 and float16 match float64 recomputation of their values", "[stats]") {
  torch::manual_seed(2);
  for (auto dtype : {torch::kBFloat16, torch::kHalf}) {
    INFO("dtype " << c10::toString(dtype));
    auto t = (torch::randn({50000}) * 300).to(dtype);  // fp16 saturates to Inf above 65504
    t.index_put_({17}, NAN);
    t.index_put_({9000}, -0.0);
    t.index_put_({9001}, 0.0);
    t.index_put_({40000}, -INFINITY);
    auto s = stats_of(t);
    CHECK(s.dtype == (dtype == torch::kHalf ? "Half" : "BFloat16"));
    check_against(s, reference_stats(t), 1e-13);
    CHECK(s.nan == 1);
    CHECK(s.zero >= 2);
    auto v = t.reshape({250, 200}).t().index({torch::indexing::Slice(0, 200, 3)});
    check_against(stats_of(v), reference_stats(v), 1e-13);
  }
  // Every float16 bit pattern: exact conversions of denormals, Inf and NaN.
  auto all = torch::arange(65536, torch::kInt).to(torch::kShort).view(torch::kHalf);
  auto s = stats_of(all);
  check_against(s, reference_stats(all), 1e-13);
  CHECK(s.nan == 2 * 1023);  // exponent all ones, mantissa nonzero, either sign
  CHECK(s.pinf == 1);
  CHECK(s.ninf == 1);
  CHECK(s.zero == 2);
  CHECK(s.max == 65504.0);
  CHECK(s.min == -65504.0);
}

TEST_CASE("integer and bool tensors", "[stats]") {
  auto s = stats_of(torch::tensor({-3, 0, 5, 7}, torch::kInt));
  CHECK(s.dtype == "Int");
  CHECK(s.zero == 1);
  CHECK(s.neg == 1);
  CHECK(s.pos == 2);
  CHECK(s.min == -3);
  CHECK(s.max == 7);
  CHECK(s.mean == 2.25);
  CHECK(s.norm == std::sqrt(83.0));
  CHECK(s.nan + s.pinf + s.ninf == 0);

  s = stats_of(torch::tensor({255, 0, 1}, torch::kByte));
  CHECK(s.dtype == "Byte");
  CHECK(s.max == 255);
  CHECK(s.min == 0);
  CHECK(s.mean == Approx(256.0 / 3).epsilon(1e-15));

  s = stats_of(torch::tensor({-128, 127}, torch::kChar));
  CHECK(s.min == -128);
  CHECK(s.max == 127);
  CHECK(s.mean == -0.5);

  s = stats_of(torch::tensor({int64_t(1) << 40, -(int64_t(1) << 41), int64_t(0)}, torch::kLong));
  CHECK(s.dtype == "Long");
  CHECK(s.min == -std::ldexp(1.0, 41));
  CHECK(s.max == std::ldexp(1.0, 40));
  CHECK(s.mean == -std::ldexp(1.0, 40) / 3);

  auto sh = torch::arange(-5000, 5000, torch::kShort).reshape({100, 100}).t();
  check_against(stats_of(sh), reference_stats(sh), 1e-14);

  s = stats_of(torch::tensor({true, false, true}));
  CHECK(s.dtype == "Bool");
  CHECK(s.zero == 1);
  CHECK(s.pos == 2);
  CHECK(s.neg == 0);
  CHECK(s.min == 0);
  CHECK(s.max == 1);
  CHECK(s.mean == Approx(2.0 / 3).epsilon(1e-15));
  CHECK(s.norm == std::sqrt(2.0));
  s = stats_of(torch::ones({3}, torch::kBool));
  CHECK(s.min == 1);
}

TEST_CASE("integer tensors with a small value span get a histogram", "[stats]") {
  // Reference: counts taken element by element through an accessor.
  auto reference = [](const torch::Tensor& t) {
    std::map<int64_t, int64_t> m;
    const torch::Tensor l = t.to(torch::kLong).contiguous();
    for (int64_t i = 0; i < l.numel(); ++i) ++m[l.data_ptr<int64_t>()[i]];
    return std::vector<std::pair<int64_t, int64_t>>(m.begin(), m.end());
  };
  torch::manual_seed(5);
  const torch::Tensor labels = torch::randint(0, 10, {1000}, torch::kLong);
  auto s = stats_of(labels);
  CHECK(s.hist == reference(labels));
  int64_t total = 0;
  for (const auto& bin : s.hist) total += bin.second;
  CHECK(total == 1000);

  // Negative values (an ignore index), a strided view, every integer width.
  const torch::Tensor padded = torch::cat({labels, torch::full({7}, -100, torch::kLong)});
  CHECK(stats_of(padded).hist == reference(padded));
  const torch::Tensor strided = torch::randint(-3, 4, {40, 30}, torch::kInt).t().slice(0, 0, 30, 2);
  REQUIRE_FALSE(strided.is_contiguous());
  CHECK(stats_of(strided).hist == reference(strided));
  for (auto dt : {torch::kByte, torch::kChar, torch::kShort, torch::kInt, torch::kLong}) {
    const torch::Tensor t = torch::randint(0, 100, {257}, dt);
    CHECK(stats_of(t).hist == reference(t));
  }

  // int64 values beyond 2^53, where the float64 min/max round: the histogram is exact.
  // LibTorch 2.x's deterministic mode fills every new int64 tensor with INT64_MAX (fill_
  // inside randperm's empty, seen at L2): its histogram once indexed counts[-1].
  const int64_t big = std::numeric_limits<int64_t>::max();
  const int64_t small = std::numeric_limits<int64_t>::min();
  const int64_t p53 = int64_t(1) << 53;
  for (const std::vector<int64_t>& values :
       {std::vector<int64_t>{big, big, big}, std::vector<int64_t>{small, small + 2},
        std::vector<int64_t>{p53 + 1, p53 + 1, p53 + 3},
        std::vector<int64_t>{big - 5, big, big - 5}}) {
    const torch::Tensor t = torch::tensor(values, torch::kLong);
    CHECK(stats_of(t).hist == reference(t));
    CHECK_FALSE(stats_of(t).hist.empty());
  }
  // Spans too wide for a histogram, one of them hidden by rounding (INT64_MAX - kHistogramSpan
  // and INT64_MAX both round to 2^63 as float64): no histogram, no crash.
  CHECK(stats_of(torch::tensor({small, big}, torch::kLong)).hist.empty());
  CHECK(stats_of(torch::tensor({big - precprobe::kHistogramSpan, big}, torch::kLong)).hist.empty());

  // No histogram: floating and bool tensors, a span of kHistogramSpan values or more, more
  // than kHistogramBins distinct values, empty tensors.
  CHECK(stats_of(torch::tensor({0.0f, 1.0f, 1.0f})).hist.empty());
  CHECK(stats_of(torch::tensor({true, false})).hist.empty());
  CHECK(
      stats_of(torch::tensor({int64_t(0), precprobe::kHistogramSpan}, torch::kLong)).hist.empty());
  CHECK(stats_of(torch::tensor({int64_t(0), precprobe::kHistogramSpan - 1}, torch::kLong))
            .hist.size() == 2);
  CHECK(stats_of(torch::arange(0, int64_t(precprobe::kHistogramBins) + 1, torch::kLong))
            .hist.empty());
  CHECK(stats_of(torch::arange(0, int64_t(precprobe::kHistogramBins), torch::kLong)).hist.size() ==
        precprobe::kHistogramBins);
  CHECK(stats_of(torch::zeros({0}, torch::kLong)).hist.empty());
  CHECK(stats_of(torch::zeros({precprobe::kHistogramMaxNumel}, torch::kLong)).hist.size() == 1);
  CHECK(stats_of(torch::zeros({precprobe::kHistogramMaxNumel + 1}, torch::kLong)).hist.empty());
}

TEST_CASE("4M random float32 values agree with a float64 recomputation", "[stats]") {
  torch::manual_seed(3);
  const int64_t n = int64_t(1) << 22;
  // Positive values: no cancellation, so the sum itself is well conditioned.
  auto u = torch::rand({n}).add_(0.5);
  auto s = stats_of(u);
  const auto ud = u.to(torch::kDouble);
  const double sum = ud.sum().item<double>();
  const double sumsq = ud.square().sum().item<double>();
  CHECK(s.pos == n);
  CHECK(std::abs(s.mean * n - sum) <= 1e-12 * sum);
  CHECK(std::abs(s.norm * s.norm - sumsq) <= 1e-12 * sumsq);
  CHECK(s.min == ud.min().item<double>());
  CHECK(s.max == ud.max().item<double>());

  // Normal values: the sum cancels, its error is bounded relative to sum |x|.
  auto g = torch::randn({n}).mul_(1e3);
  g.index_put_({12345}, NAN);
  s = stats_of(g);
  const auto gd = g.to(torch::kDouble).nan_to_num(0.0);
  const double gsum = gd.sum().item<double>();
  const double gabs = gd.abs().sum().item<double>();
  CHECK(s.nan == 1);
  CHECK(std::abs(s.mean * (n - 1) - gsum) <= 1e-12 * gabs);
  CHECK(s.norm == Approx(std::sqrt(gd.square().sum().item<double>())).epsilon(1e-12));
  check_against(s, reference_stats(g), 1e-12);
}

TEST_CASE("complex tensors are summarised over their components", "[stats]") {
  using c = c10::complex<float>;
  auto t = torch::tensor({1.0f, 2.0f, NAN, 0.0f, -3.0f, 4.0f}).view(torch::kComplexFloat);
  REQUIRE(t.numel() == 3);
  auto s = stats_of(t);
  CHECK(s.dtype == "ComplexFloat");
  CHECK(s.numel == 3);
  CHECK(s.nan == 1);
  CHECK(s.zero == 1);
  CHECK(s.neg == 1);
  CHECK(s.pos == 3);
  CHECK(s.min == -3);
  CHECK(s.max == 4);
  CHECK(s.norm == std::sqrt(30.0));
  // A lazily conjugated view: imaginary parts flip sign.
  auto cj = torch::tensor({c(1, 2), c(3, -4)}).conj();
  REQUIRE(cj.is_conj());
  s = stats_of(cj);
  CHECK(s.min == -2);
  CHECK(s.max == 4);
}

TEST_CASE("tensors without readable values never crash", "[stats]") {
  auto sp = torch::tensor({0.0f, 1.0f, NAN}).to_sparse();
  auto s = stats_of(sp, true);
  CHECK(s.dtype == "Float:Sparse");
  CHECK(s.numel == 3);
  check_no_values(s);
  CHECK(s.hash.has_value());

  auto meta = torch::empty({2, 3}, torch::TensorOptions().device(torch::kMeta));
  s = stats_of(meta, true);
  CHECK(s.device == "meta");
  CHECK(s.dtype == "Float");
  CHECK(s.shape == std::vector<int64_t>{2, 3});
  check_no_values(s);

  auto q = torch::quantize_per_tensor(torch::ones({4}), 0.1, 0, torch::kQInt8);
  s = stats_of(q, true);
  CHECK(s.dtype == "QInt8");
  check_no_values(s);
}

TEST_CASE("an efficient ZeroTensor (null data pointer) reads as zeros", "[stats]") {
  auto z = at::_efficientzerotensor({2, 3});
  REQUIRE(z.data_ptr() == nullptr);
  auto s = stats_of(z, true);
  CHECK(s.zero == 6);
  CHECK(s.min == 0);
  CHECK(s.max == 0);
  CHECK(s.norm == 0);
  CHECK(s.hash == stats_of(torch::zeros({2, 3}), true).hash);
}

TEST_CASE("requires_grad and device are reported", "[stats]") {
  auto w = torch::ones({2, 2}, torch::requires_grad());
  auto s = stats_of(w);
  CHECK(s.requires_grad);
  CHECK(s.device == "cpu");
  CHECK(s.dtype == "Float");
  CHECK(s.mean == 1.0);
}

TEST_CASE("the ATen path (used on CUDA) agrees with the single-pass kernel", "[stats]") {
  torch::manual_seed(4);
  auto f = torch::randn({1000, 33});
  f.index_put_({3, 3}, NAN);
  f.index_put_({4, 4}, INFINITY);
  f.index_put_({5, 5}, 0.0);
  std::vector<at::Tensor> cases = {f,
                                   f.t(),
                                   f.to(torch::kBFloat16),
                                   f.to(torch::kHalf),
                                   f.to(torch::kDouble),
                                   torch::tensor({-3, 0, 5, 7}, torch::kInt),
                                   torch::tensor({true, false, true}),
                                   torch::full({4}, NAN),
                                   torch::empty({0})};
  for (const auto& t : cases) {
    INFO("dtype " << t.scalar_type() << " sizes " << t.sizes());
    TensorStats a;
    precprobe::detail::summarize_with_aten(t, a, true);
    auto b = stats_of(t, true);
    check_against(a, b, 1e-12);
    CHECK(a.dtype == b.dtype);
    CHECK(a.numel == b.numel);
    CHECK(a.hash == b.hash);
  }
}

TEST_CASE("tensor hash: equal values hash alike, any change shows", "[stats][hash]") {
  torch::manual_seed(5);
  auto w = torch::randn({64, 33});
  const uint64_t h = precprobe::tensor_hash(w.t());
  CHECK(h == precprobe::tensor_hash(w.t().contiguous()));
  CHECK(h == stats_of(w.t(), true).hash.value());
  CHECK(h == stats_of(w.t().contiguous(), true).hash.value());
  CHECK(h != precprobe::tensor_hash(w));  // same values, other shape and order

  auto sl = w.index({torch::indexing::Slice(0, 64, 2)});
  CHECK(precprobe::tensor_hash(sl) == precprobe::tensor_hash(sl.contiguous()));
  auto ex = w.index({0}).expand({5, 33});
  CHECK(precprobe::tensor_hash(ex) == precprobe::tensor_hash(ex.contiguous()));
  CHECK(stats_of(ex, true).hash == stats_of(ex.contiguous(), true).hash);

  auto w2 = w.clone();
  CHECK(precprobe::tensor_hash(w2) == precprobe::tensor_hash(w));
  w2.index_put_({63, 32}, w2.index({63, 32}).item<float>() * (1 + 1e-7f));
  CHECK(precprobe::tensor_hash(w2) != precprobe::tensor_hash(w));

  CHECK(precprobe::tensor_hash(w) != precprobe::tensor_hash(w.reshape({33, 64})));
  CHECK(precprobe::tensor_hash(torch::zeros({4}, torch::kInt)) !=
        precprobe::tensor_hash(torch::zeros({4}, torch::kFloat)));
  CHECK(precprobe::tensor_hash(torch::zeros({2})) != precprobe::tensor_hash(torch::zeros({1, 2})));
  CHECK(precprobe::tensor_hash(torch::zeros({0})) != precprobe::tensor_hash(torch::zeros({0, 1})));
  CHECK(precprobe::tensor_hash(torch::tensor({0.0f})) !=
        precprobe::tensor_hash(torch::tensor({-0.0f})));

  // Big enough to cross blocks and direct runs, with a hash-only and a stats+hash walk.
  auto big = torch::randn({3000, 700}).to(torch::kBFloat16);
  auto bt = big.t();
  CHECK(precprobe::tensor_hash(bt) == precprobe::tensor_hash(bt.contiguous()));
  CHECK(stats_of(bt, true).hash == stats_of(bt.contiguous(), true).hash);
  CHECK(stats_of(bt, true).hash == precprobe::tensor_hash(bt));
}

TEST_CASE("tensor hash is XXH3-64 of the documented byte layout", "[stats][hash]") {
  // The byte layout of hash.h, rebuilt here by hand.
  auto t = torch::tensor({1.5f, -2.0f});
  std::string bytes = "Float";
  const int64_t ndim = 1, size = 2;
  bytes.append(reinterpret_cast<const char*>(&ndim), 8);
  bytes.append(reinterpret_cast<const char*>(&size), 8);
  bytes.append(reinterpret_cast<const char*>(t.data_ptr<float>()), 8);
  CHECK(precprobe::tensor_hash(t) == XXH3_64bits(bytes.data(), bytes.size()));
}

TEST_CASE("module hash follows every parameter and buffer", "[stats][hash]") {
  torch::manual_seed(6);
  auto a = torch::nn::Sequential(torch::nn::Linear(8, 4), torch::nn::BatchNorm1d(4));
  auto b = torch::nn::Sequential(torch::nn::Linear(8, 4), torch::nn::BatchNorm1d(4));
  const uint64_t ha = precprobe::module_hash(*a);
  CHECK(ha != precprobe::module_hash(*b));  // other random init
  {
    torch::NoGradGuard no_grad;
    auto pa = a->named_parameters();
    for (auto& p : b->named_parameters()) p.value().copy_(pa[p.key()]);
  }
  CHECK(ha == precprobe::module_hash(*b));
  {
    torch::NoGradGuard no_grad;
    b->named_parameters()["0.weight"].index_put_({1, 2}, 42.0);
  }
  CHECK(ha != precprobe::module_hash(*b));
  {
    torch::NoGradGuard no_grad;
    b->named_parameters()["0.weight"].copy_(a->named_parameters()["0.weight"]);
  }
  CHECK(ha == precprobe::module_hash(*b));
  b->named_buffers()["1.running_mean"].add_(1e-3);  // a buffer only
  CHECK(ha != precprobe::module_hash(*b));
}

TEST_CASE("tensor key changes with in-place updates and geometry", "[stats][key]") {
  using precprobe::detail::make_key;
  auto t = torch::zeros({4, 5});
  const auto k0 = make_key(t);
  CHECK(k0.versioned);
  CHECK(k0 == make_key(t));
  CHECK(precprobe::detail::TensorKeyHash{}(k0) == precprobe::detail::TensorKeyHash{}(make_key(t)));
  CHECK(k0 == make_key(t.detach()));  // detach shares storage and version counter
  CHECK(k0 != make_key(t.t()));       // same storage, other geometry
  CHECK(k0 != make_key(t.index({1})));
  CHECK(k0 != make_key(t.view(torch::kInt)));

  t.index({1}).add_(1.0);  // in place through a view bumps the shared counter
  const auto k1 = make_key(t);
  CHECK(k1 != k0);
  CHECK(k1.version > k0.version);

  at::Tensor inf;
  {
    c10::InferenceMode guard;
    inf = torch::ones({3});
  }
  CHECK_FALSE(make_key(inf).versioned);
  CHECK_FALSE(make_key(at::Tensor()).versioned);
  CHECK_FALSE(make_key(torch::ones({3}).to_sparse()).versioned);
  CHECK(make_key(at::Tensor()).storage == nullptr);
}
