// The gradient monitor's loops (support/grad_loops.h): the vectorised passes the library picks
// for this machine (an AVX-512, AVX2 or baseline clone) against plain loops written here from
// the documented order (element k of a span in lane k % 16, the lanes added in lane order,
// no fused multiply-add), bit for bit; and against a long double recomputation, within a
// stated bound. The same bits on every machine is what lets two runs on different hosts
// compare their gradient norms exactly.
// Exact float comparisons are the point here.
#pragma GCC diagnostic ignored "-Wfloat-equal"
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "precprobe_catch.h"
#include "support/grad_loops.h"

using namespace precprobe::detail;

namespace {

// The order grad_loops.h documents, written out: lane sums, then the lanes in order.
struct Expected {
  double sumsq = 0, abs_sum = 0, abs_max = 0;
  int64_t nan = 0, inf = 0, zero = 0;
};

template <typename T>
Expected expected_grad(const T* p, int64_t n, int64_t stride) {
  double ss[16] = {}, as[16] = {};
  Expected e;
  for (int64_t k = 0; k < n; ++k) {
    const double xv = static_cast<double>(static_cast<typename OpMath<T>::type>(p[k * stride]));
    if (std::isnan(xv)) {
      ++e.nan;
    } else if (std::isinf(xv)) {
      ++e.inf;
    } else {
      const double a = std::fabs(xv);
      const double sq = a * a;  // rounded on its own: no fused multiply-add
      ss[k % 16] = ss[k % 16] + sq;
      as[k % 16] = as[k % 16] + a;
      if (a > e.abs_max) e.abs_max = a;
    }
    if (xv == 0) ++e.zero;
  }
  for (int l = 0; l < 16; ++l) {
    e.sumsq = e.sumsq + ss[l];
    e.abs_sum = e.abs_sum + as[l];
  }
  return e;
}

template <typename T>
std::vector<T> random_values(int64_t n, uint32_t seed, double zero_share = 0.05,
                             int max_exponent = 30) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<int> exponent(-max_exponent, max_exponent);
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& x : v)
    x = static_cast<T>(u(gen) < zero_share ? 0.0 : std::ldexp(normal(gen), exponent(gen)));
  return v;
}

template <typename T>
void check_grad(const std::vector<T>& v, int64_t stride) {
  const int64_t n = static_cast<int64_t>(v.size()) / stride;
  GradAcc acc;
  grad_stats_span<T>(v.data(), n, stride, acc);
  const Expected e = expected_grad(v.data(), n, stride);
  INFO("n " << n << ", stride " << stride);
  CHECK(acc.sumsq == e.sumsq);
  CHECK(acc.abs_sum == e.abs_sum);
  CHECK(acc.abs_max == e.abs_max);
  CHECK(acc.nan == e.nan);
  CHECK(acc.inf == e.inf);
  CHECK(acc.zero == e.zero);
  CHECK(acc.finite == n - e.nan - e.inf);
  // And the sums are the norm: against long double, to the bound of n float64 additions.
  long double ss = 0, as = 0;
  for (int64_t k = 0; k < n; ++k) {
    const long double x = static_cast<double>(static_cast<typename OpMath<T>::type>(v[k * stride]));
    if (std::isfinite(static_cast<double>(x))) {
      ss += x * x;
      as += std::fabs(x);
    }
  }
  const double bound = 2.0 * static_cast<double>(n + 16) * std::numeric_limits<double>::epsilon();
  CHECK(std::fabs(static_cast<double>((acc.sumsq - ss) / (ss > 0 ? ss : 1))) <= bound);
  CHECK(std::fabs(static_cast<double>((acc.abs_sum - as) / (as > 0 ? as : 1))) <= bound);
}

}  // namespace

TEST_CASE("grad_stats_span: every length, the documented lane order, bit for bit", "[grad_loops]") {
  for (int64_t n : {0, 1, 7, 15, 16, 17, 31, 33, 1000, 4099, 65536 + 5}) {
    check_grad(random_values<float>(n, static_cast<uint32_t>(n)), 1);
    check_grad(random_values<double>(n, static_cast<uint32_t>(n) + 1), 1);
  }
  // Strided spans (a transposed gradient's rows) take the reference loop: the same order.
  check_grad(random_values<float>(3 * 1001, 5), 3);
  check_grad(random_values<double>(2 * 777, 6), 2);
}

TEST_CASE("grad_stats_span: NaN and Inf are counted and left out of the sums", "[grad_loops]") {
  for (int64_t n : {1, 16, 100, 5000}) {
    auto f = random_values<float>(n, 11);
    auto d = random_values<double>(n, 12);
    const float fi = std::numeric_limits<float>::infinity();
    const double di = std::numeric_limits<double>::infinity();
    f[static_cast<size_t>(n / 2)] = std::nanf("");
    d[static_cast<size_t>(n - 1)] = -di;
    if (n > 3) {
      f[3] = -fi;
      d[0] = std::nan("");
    }
    check_grad(f, 1);
    check_grad(d, 1);
  }
  // A finite float64 whose square overflows: the sum is +Inf (the careful pass keeps it), no
  // element is counted as Inf.
  std::vector<double> huge(40, 1e200);
  GradAcc acc;
  grad_stats_span<double>(huge.data(), 40, 1, acc);
  CHECK(std::isinf(acc.sumsq));
  CHECK(acc.inf == 0);
  CHECK(acc.finite == 40);
  CHECK(acc.abs_max == 1e200);
}

TEST_CASE("grad_stats_span: bfloat16 and half take the same order", "[grad_loops]") {
  auto b = random_values<c10::BFloat16>(1003, 21);
  auto h = random_values<c10::Half>(1003, 22, 0.2);
  check_grad(b, 1);
  check_grad(h, 1);
}

namespace {

// weight_update_span on n random values against the documented order written out.
// Values within 2^±max_exponent (float16 overflows past 2^15).
template <typename T>
void check_weight(int64_t n, uint32_t seed, int max_exponent = 30) {
  auto w = random_values<T>(n, seed, 0.05, max_exponent);
  auto prev = random_values<T>(n, seed + 1, 0.05, max_exponent);
  const auto prev_before = prev;
  WeightAcc acc;
  weight_update_span<T>(w.data(), prev.data(), n, acc);
  double s[16] = {}, sp[16] = {}, sd[16] = {};
  int64_t zero = 0;
  for (int64_t k = 0; k < n; ++k) {
    const double x = static_cast<double>(w[k]), q = static_cast<double>(prev_before[k]);
    const double d = x - q;
    const double xx = x * x, qq = q * q, dd = d * d;
    s[k % 16] = s[k % 16] + xx;
    sp[k % 16] = sp[k % 16] + qq;
    sd[k % 16] = sd[k % 16] + dd;
    zero += x == 0;
  }
  double es = 0, esp = 0, esd = 0;
  for (int l = 0; l < 16; ++l) {
    es = es + s[l];
    esp = esp + sp[l];
    esd = esd + sd[l];
  }
  INFO("n " << n << ", " << sizeof(T) << "-byte elements");
  CHECK(acc.sumsq == es);
  CHECK(acc.sumsq_prev == esp);
  CHECK(acc.sumsq_delta == esd);
  CHECK(acc.zero == zero);
  for (int64_t k = 0; k < n; ++k)  // prev is now w, bit for bit
    CHECK(std::memcmp(&prev[k], &w[k], sizeof(T)) == 0);
  WeightAcc only;  // no previous copy: ||w||² and zeros alone
  weight_update_span<T>(w.data(), nullptr, n, only);
  CHECK(only.sumsq == es);
  CHECK(only.zero == zero);
  CHECK(only.sumsq_delta == 0);
}

}  // namespace

TEST_CASE("weight_update_span: norms of w, prev and w - prev in lane order; prev becomes w",
          "[grad_loops]") {
  for (int64_t n : {0, 5, 16, 17, 4099}) {
    check_weight<float>(n, 31);
    check_weight<double>(n, 41);
    check_weight<c10::BFloat16>(n, 51);
    check_weight<c10::Half>(n, 61, 10);
  }
}
