// The device statistics path, run on the host: the per-element rules and decoders of
// stats_reduce.h (shared with the CUDA kernel) against c10's conversions, exact tables and a
// float64 recomputation; descriptors of strided CPU tensors and the deferred completion of
// DeferredStats through HostReduceBackend (the kernel's partition, any combine order)
// against summarize(), the CPU single-pass path.
// Exact float comparisons are the point here.
#pragma GCC diagnostic ignored "-Wfloat-equal"
#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "precprobe_catch.h"
#include "stats/stats.h"
#include "stats/stats_batch.h"
#include "stats/stats_reduce.h"
#include "support/torch_compat.h"
#if PRECPROBE_TORCH_AT_LEAST(2, 1)
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>
#endif

using namespace precprobe;
using namespace precprobe::detail;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Same value, NaN matching NaN, and the same sign (so -0 != +0).
bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

ReduceStats stats_of(const std::vector<double>& v) {
  ReduceStats s;
  reduce_init(s);
  for (double x : v) reduce_add(s, x);
  return s;
}

// Neumaier-compensated float64 sums of the finite values: the reference.
void reference_sums(const std::vector<double>& v, double& sum, double& sumsq, double& abs) {
  double s = 0, c = 0, q = 0, qc = 0;
  abs = 0;
  auto add = [](double& acc, double& comp, double x) {
    const double t = acc + x;
    comp += std::abs(acc) >= std::abs(x) ? (acc - t) + x : (x - t) + acc;
    acc = t;
  };
  for (double x : v) {
    if (!std::isfinite(x)) continue;
    add(s, c, x);
    add(q, qc, x * x);
    abs += std::abs(x);
  }
  sum = s + c;
  sumsq = q + qc;
}

}  // namespace

TEST_CASE("decode_f16 and decode_bf16 agree with c10 on every bit pattern", "[stats_reduce]") {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const double f16 = static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
    const double bf16 = static_cast<float>(c10::BFloat16(bits, c10::BFloat16::from_bits()));
    INFO("bits " << b);
    REQUIRE(same(decode_f16(bits), f16));
    REQUIRE(same(decode_bf16(bits), bf16));
  }
  // Spot values, independent of c10.
  CHECK(decode_f16(0x0001) == std::ldexp(1.0, -24));  // smallest denormal
  CHECK(decode_f16(0x03ff) == 1023 * std::ldexp(1.0, -24));
  CHECK(decode_f16(0x7bff) == 65504.0);
  CHECK(decode_f16(0x7c00) == kInf);
  CHECK(decode_f16(0xfc00) == -kInf);
  CHECK(std::isnan(decode_f16(0x7e00)));
  CHECK(same(decode_f16(0x8000), -0.0));
  CHECK(decode_bf16(0x3f80) == 1.0);
  CHECK(decode_bf16(0x0001) == std::ldexp(1.0, -133));  // bfloat16 denormal
  CHECK(decode_bf16(0xff80) == -kInf);
}

TEST_CASE("float8 decoders match the OCP FP8 tables", "[stats_reduce]") {
  // e4m3fn: bias 7, no Inf, S.1111.111 NaN.
  CHECK(decode_f8e4m3fn(0x00) == 0.0);
  CHECK(same(decode_f8e4m3fn(0x80), -0.0));
  CHECK(decode_f8e4m3fn(0x01) == std::ldexp(1.0, -9));
  CHECK(decode_f8e4m3fn(0x07) == 7 * std::ldexp(1.0, -9));
  CHECK(decode_f8e4m3fn(0x08) == std::ldexp(1.0, -6));
  CHECK(decode_f8e4m3fn(0x38) == 1.0);
  CHECK(decode_f8e4m3fn(0x3c) == 1.5);
  CHECK(decode_f8e4m3fn(0xb8) == -1.0);
  CHECK(decode_f8e4m3fn(0x77) == 240.0);
  CHECK(decode_f8e4m3fn(0x78) == 256.0);
  CHECK(decode_f8e4m3fn(0x7e) == 448.0);
  CHECK(decode_f8e4m3fn(0xfe) == -448.0);
  CHECK(std::isnan(decode_f8e4m3fn(0x7f)));
  CHECK(std::isnan(decode_f8e4m3fn(0xff)));
  // e5m2: bias 15, Inf and NaN as in binary16.
  CHECK(decode_f8e5m2(0x01) == std::ldexp(1.0, -16));
  CHECK(decode_f8e5m2(0x04) == std::ldexp(1.0, -14));
  CHECK(decode_f8e5m2(0x3c) == 1.0);
  CHECK(decode_f8e5m2(0x7b) == 57344.0);
  CHECK(decode_f8e5m2(0x7c) == kInf);
  CHECK(decode_f8e5m2(0xfc) == -kInf);
  for (int b : {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff}) CHECK(std::isnan(decode_f8e5m2(uint8_t(b))));
  // Positive codes are strictly increasing up to the largest finite one; negatives mirror.
  for (int b = 1; b <= 0x7e; ++b) {
    INFO("code " << b);
    REQUIRE(decode_f8e4m3fn(uint8_t(b)) > decode_f8e4m3fn(uint8_t(b - 1)));
    REQUIRE(same(decode_f8e4m3fn(uint8_t(b | 0x80)), -decode_f8e4m3fn(uint8_t(b))));
  }
  for (int b = 1; b <= 0x7c; ++b) {
    INFO("code " << b);
    REQUIRE(decode_f8e5m2(uint8_t(b)) > decode_f8e5m2(uint8_t(b - 1)));
    REQUIRE(same(decode_f8e5m2(uint8_t(b | 0x80)), -decode_f8e5m2(uint8_t(b))));
  }
#if PRECPROBE_TORCH_AT_LEAST(2, 1)
  for (int b = 0; b < 256; ++b) {
    INFO("code " << b);
    const auto bits = static_cast<uint8_t>(b);
    REQUIRE(same(decode_f8e4m3fn(bits),
                 static_cast<float>(c10::Float8_e4m3fn(bits, c10::Float8_e4m3fn::from_bits()))));
    REQUIRE(same(decode_f8e5m2(bits),
                 static_cast<float>(c10::Float8_e5m2(bits, c10::Float8_e5m2::from_bits()))));
  }
#endif
}

TEST_CASE("reduce_add classifies NaN, Inf, signed zeros and denormals", "[stats_reduce]") {
  const double denorm = std::numeric_limits<double>::denorm_min();
  const double big = std::numeric_limits<double>::max();
  const ReduceStats s = stats_of({std::nan(""), -std::nan(""), kInf, -kInf, -kInf, 0.0, -0.0,
                                  denorm, -denorm, big, -1.5, 2.0});
  CHECK(s.nan == 2);
  CHECK(s.pinf == 1);
  CHECK(s.ninf == 2);
  CHECK(s.zero == 2);
  CHECK(s.neg == 2);  // -denorm, -1.5
  CHECK(s.pos == 3);  // denorm, big, 2
  CHECK(s.min == -1.5);
  CHECK(s.max == big);
  CHECK(s.sum == big);         // big + 0.5 rounds to big
  CHECK(std::isinf(s.sumsq));  // big^2 overflows, as in the CPU kernel's float64 sum
  const ReduceStats only_bad = stats_of({std::nan(""), kInf});
  CHECK(only_bad.zero + only_bad.neg + only_bad.pos == 0);
  CHECK(only_bad.min == kInf);
  CHECK(only_bad.max == -kInf);
  CHECK(only_bad.sum == 0);
}

TEST_CASE("combining partial results in any order gives the same statistics", "[stats_reduce]") {
  std::mt19937_64 rng(42);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::uniform_int_distribution<int> kind(0, 99);
  std::vector<double> v(20000);
  for (double& x : v) {
    const int k = kind(rng);
    x = k == 0 ? std::nan("") : k == 1 ? kInf : k == 2 ? -kInf : k == 3 ? 0.0 : normal(rng);
  }
  double ref_sum, ref_sumsq, abs_sum;
  reference_sums(v, ref_sum, ref_sumsq, abs_sum);
  const ReduceStats serial = stats_of(v);
  for (int trial = 0; trial < 20; ++trial) {
    // Random contiguous or strided partitions, combined in random order.
    const int parts = 1 + static_cast<int>(rng() % 300);
    std::vector<ReduceStats> p(static_cast<size_t>(parts));
    for (auto& s : p) reduce_init(s);
    const bool strided = trial % 2 == 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const size_t k = strided ? i % static_cast<size_t>(parts) : i * parts / v.size();
      reduce_add(p[k], v[i]);
    }
    std::shuffle(p.begin(), p.end(), rng);
    // A random binary tree of combines, like the warp/block/grid levels of the kernel.
    while (p.size() > 1) {
      const size_t a = rng() % p.size();
      size_t b = rng() % (p.size() - 1);
      if (b >= a) ++b;
      reduce_combine(p[a], p[b]);
      p.erase(p.begin() + static_cast<std::ptrdiff_t>(b));
    }
    const ReduceStats& s = p[0];
    INFO("trial " << trial << ", parts " << parts);
    CHECK(s.nan == serial.nan);
    CHECK(s.pinf == serial.pinf);
    CHECK(s.ninf == serial.ninf);
    CHECK(s.zero == serial.zero);
    CHECK(s.neg == serial.neg);
    CHECK(s.pos == serial.pos);
    CHECK(s.min == serial.min);
    CHECK(s.max == serial.max);
    // Recursive summation: |error| <= (n-1) * eps * sum|x| (Higham); far below, in practice.
    const double eps = std::numeric_limits<double>::epsilon();
    CHECK(std::abs(s.sum - ref_sum) <= double(v.size()) * eps * abs_sum);
    CHECK(std::abs(s.sumsq - ref_sumsq) <= double(v.size()) * eps * ref_sumsq);
  }
  CHECK(serial.nan + serial.pinf + serial.ninf + serial.zero + serial.neg + serial.pos == v.size());
  CHECK(serial.zero >= 150);  // the data really has every class
  CHECK(serial.nan >= 150);
}

namespace {

// Tensors with special values, in the given dtype.
at::Tensor special_tensor(at::ScalarType dtype, std::vector<int64_t> shape) {
  at::manual_seed(7);
  at::Tensor t = at::randn(shape, at::kDouble) * 5;
  auto flat = t.view({-1});
  const int64_t n = flat.numel();
  for (int64_t i = 0; i < n; i += 97) flat[i].fill_(std::nan(""));
  for (int64_t i = 5; i < n; i += 131) flat[i].fill_(kInf);
  for (int64_t i = 9; i < n; i += 173) flat[i].fill_(-kInf);
  for (int64_t i = 11; i < n; i += 41) flat[i].fill_(0.0);
  for (int64_t i = 13; i < n; i += 59) flat[i].fill_(-0.0);
  return t.to(dtype);
}

TensorStats deferred_stats(const at::Tensor& t) {
  TensorStats out;
  out.nan = -1;  // must be overwritten
  auto backend = std::make_unique<HostReduceBackend>();
  DeferredStats d(std::move(backend));
  std::vector<DeferredStats::Item> items(1);
  items[0].tensor = t;
  items[0].out = &out;
  d.submit(std::move(items), c10::nullopt);
  REQUIRE(d.wait_all() == 1);
  return out;
}

void require_same_record(const at::Tensor& t) {
  TensorStats cpu;
  summarize(t, cpu, /*with_hash=*/false);
  REQUIRE(DeferredStats::supported(t));
  const TensorStats dev = deferred_stats(t);
  CHECK(dev.dtype == cpu.dtype);
  CHECK(dev.shape == cpu.shape);
  CHECK(dev.device == cpu.device);
  CHECK(dev.requires_grad == cpu.requires_grad);
  CHECK(dev.numel == cpu.numel);
  CHECK(dev.nan == cpu.nan);
  CHECK(dev.pinf == cpu.pinf);
  CHECK(dev.ninf == cpu.ninf);
  CHECK(dev.zero == cpu.zero);
  CHECK(dev.neg == cpu.neg);
  CHECK(dev.pos == cpu.pos);
  CHECK(same(dev.min, cpu.min));
  CHECK(same(dev.max, cpu.max));
  if (std::isnan(cpu.mean)) {
    CHECK(std::isnan(dev.mean));
    CHECK(std::isnan(dev.norm));
  } else {
    CHECK(dev.mean == Approx(cpu.mean).epsilon(1e-12).margin(1e-14));
    CHECK(dev.norm == Approx(cpu.norm).epsilon(1e-12));
  }
  CHECK(!dev.hash.has_value());
  CHECK(dev.hist.empty());
}

}  // namespace

TEST_CASE("the deferred path gives summarize()'s record for strided tensors of every dtype",
          "[stats_reduce]") {
  std::vector<at::ScalarType> dtypes = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};
#if PRECPROBE_TORCH_AT_LEAST(2, 1)
  // summarize() has no CPU kernel for float8 (it records no values): compare with float32.
  for (auto f8 : {at::ScalarType::Float8_e4m3fn, at::ScalarType::Float8_e5m2}) {
    const at::Tensor x = special_tensor(at::kFloat, {33, 70}).clamp(-400, 400).to(f8);
    const TensorStats dev = deferred_stats(x.t());
    TensorStats ref;
    summarize(x.to(at::kFloat), ref, false);
    CHECK(dev.dtype == c10::toString(f8));
    CHECK(dev.nan == ref.nan);
    CHECK(dev.pinf == ref.pinf);
    CHECK(dev.ninf == ref.ninf);
    CHECK(dev.zero == ref.zero);
    CHECK(dev.min == ref.min);
    CHECK(dev.max == ref.max);
    CHECK(dev.norm == Approx(ref.norm).epsilon(1e-12));
  }
#endif
  for (auto dtype : dtypes) {
    INFO(c10::toString(dtype));
    const at::Tensor x = special_tensor(dtype, {6, 40, 37});
    SECTION(std::string("contiguous ") + c10::toString(dtype)) { require_same_record(x); }
    SECTION(std::string("transposed and sliced ") + c10::toString(dtype)) {
      require_same_record(x.transpose(0, 2).slice(1, 3, 31, 2));
    }
    SECTION(std::string("expanded, narrowed, requires_grad ") + c10::toString(dtype)) {
      const at::Tensor e = x.select(2, 4).unsqueeze(1).expand({6, 5, 40});
      require_same_record(e);
      if (dtype == at::kFloat) require_same_record(x.detach().clone().requires_grad_(true));
    }
    SECTION(std::string("scalar and empty ") + c10::toString(dtype)) {
      require_same_record(x[2][3][4]);
      require_same_record(x.slice(0, 0, 0));
    }
  }
}

TEST_CASE("descriptors: what the kernel cannot read is left to summarize()", "[stats_reduce]") {
  CHECK_FALSE(DeferredStats::supported(at::ones({4}, at::kInt)));
  CHECK_FALSE(DeferredStats::supported(at::ones({4}, at::kBool)));
  CHECK_FALSE(DeferredStats::supported(at::ones({4}, at::kComplexFloat)));
  CHECK_FALSE(DeferredStats::supported(at::Tensor()));
  // 9 dims that cannot merge (every dim strided by 2): more than kReduceMaxDims.
  at::Tensor x = at::zeros(std::vector<int64_t>(9, 4));
  for (int64_t d = 0; d < 9; ++d) x = x.slice(d, 0, 4, 2);
  CHECK_FALSE(DeferredStats::supported(x));
  CHECK(DeferredStats::supported(x.contiguous()));
  // 9 dims that merge into one are fine.
  CHECK(DeferredStats::supported(at::zeros(std::vector<int64_t>(9, 2))));

  ReduceDesc d;
  int64_t repeat = 0;
  const at::Tensor base = at::arange(24, at::kFloat).view({2, 3, 4});
  REQUIRE(make_reduce_desc(base.permute({2, 0, 1}), d, repeat));
  CHECK(d.ndim == 1);  // memory order: the permuted view is one contiguous run
  CHECK(d.strides[0] == 1);
  CHECK(d.numel == 24);
  CHECK(repeat == 1);
  REQUIRE(make_reduce_desc(base.select(2, 1).unsqueeze(0).expand({5, 2, 3}), d, repeat));
  CHECK(repeat == 5);
  CHECK(d.numel == 6);
  CHECK(d.ndim == 1);
  CHECK(d.strides[0] == 4);
  // reduce_offset visits exactly the view's elements.
  const at::Tensor v = base.slice(2, 1, 4, 2).transpose(0, 1);
  REQUIRE(make_reduce_desc(v, d, repeat));
  std::vector<double> seen;
  for (int64_t i = 0; i < d.numel; ++i)
    seen.push_back(static_cast<const float*>(d.data)[reduce_offset(d, i)]);
  std::sort(seen.begin(), seen.end());
  const at::Tensor expect = std::get<0>(v.reshape({-1}).sort());
  REQUIRE(static_cast<int64_t>(seen.size()) == expect.numel());
  for (size_t i = 0; i < seen.size(); ++i) CHECK(seen[i] == expect[i].item<double>());
}

TEST_CASE("deferred results are read only after completion; tensors held until then",
          "[stats_reduce]") {
  auto backend = std::make_unique<HostReduceBackend>();
  HostReduceBackend* host = backend.get();
  DeferredStats d(std::move(backend));
  const at::Tensor a = special_tensor(at::kFloat, {100, 50});
  const at::Tensor b = special_tensor(at::kBFloat16, {7000});
  const auto a_uses = a.use_count();
  TensorStats out_a, out_b, out_c;
  out_a.nan = out_b.nan = out_c.nan = -1;
  std::vector<int> order;
  host->hold(true);
  {
    std::vector<DeferredStats::Item> batch(2);
    batch[0] = {a, &out_a, [&] { order.push_back(0); }};
    batch[1] = {b, &out_b, [&] { order.push_back(1); }};
    d.submit(std::move(batch), c10::nullopt);  // one launch, two descriptors
  }
  host->hold(false);
  {
    std::vector<DeferredStats::Item> batch(1);
    batch[0] = {a.clone().t(), &out_c, [&] { order.push_back(2); }};
    d.submit(std::move(batch), c10::nullopt);
  }
  CHECK(host->launches() == 2);
  CHECK(d.in_flight() == 2);
  // The first batch is not done: nothing completes, not even the later (ready) batch.
  CHECK(d.poll() == 0);
  CHECK(order.empty());
  CHECK(out_a.nan == -1);
  CHECK(out_c.nan == -1);
  CHECK(a.use_count() == a_uses + 1);  // the first batch holds the tensor
  host->release();
  CHECK(d.poll() == 3);
  CHECK(order == std::vector<int>{0, 1, 2});
  CHECK(d.in_flight() == 0);
  CHECK(a.use_count() == a_uses);
  TensorStats ref;
  summarize(a, ref, false);
  CHECK(out_a.nan == ref.nan);
  CHECK(out_a.pinf == ref.pinf);
  CHECK(out_c.zero == ref.zero);
  summarize(b, ref, false);
  CHECK(out_b.ninf == ref.ninf);
  CHECK(out_b.neg == ref.neg);
  CHECK(out_b.max == ref.max);
  // wait_all() completes a held batch (the blocking wait of the drain).
  host->hold(true);
  TensorStats out_d;
  out_d.nan = -1;
  {
    std::vector<DeferredStats::Item> batch(1);
    batch[0] = {b, &out_d, nullptr};
    d.submit(std::move(batch), c10::nullopt);
  }
  CHECK(d.poll() == 0);
  CHECK(d.wait_all() == 1);
  CHECK(out_d.ninf == ref.ninf);
  // An unsupported tensor throws from submit and nothing is held.
  std::vector<DeferredStats::Item> bad(1);
  bad[0] = {at::ones({3}, at::kLong), &out_d, nullptr};
  CHECK_THROWS(d.submit(std::move(bad), c10::nullopt));
  CHECK(d.in_flight() == 0);
}
