// Comparison metrics of one tensor pair: msprobe's tensor-mode metrics (compare_tensors),
// its statistics-mode columns and warning rule (compare_stats), and the --first error.
// The msprobe definitions are reproduced literally; docs/cli.md states each of them.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "json_util.h"

namespace precprobe {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
// msprobe: Const.FLOAT_EPSILON and np.finfo(float64).eps.
constexpr double kEps = DBL_EPSILON;

// msprobe handle_inf_nan: NaN and Inf at the same positions on both sides are set to 0;
// anywhere else the pair cannot be compared.
bool zero_matching_non_finite(std::vector<double>& n, std::vector<double>& b) {
  for (size_t i = 0; i < n.size(); ++i) {
    const bool n_inf = std::isinf(n[i]), b_inf = std::isinf(b[i]);
    const bool n_nan = std::isnan(n[i]), b_nan = std::isnan(b[i]);
    if (n_inf != b_inf || n_nan != b_nan) return false;
  }
  for (size_t i = 0; i < n.size(); ++i) {
    if (!std::isfinite(n[i])) n[i] = b[i] = 0;
  }
  return true;
}

// msprobe check_accuracy. A NaN cosine compares false against every threshold there too.
std::string accuracy(double cosine, double max_abs_err) {
  if (cosine < 0.99 && max_abs_err > 0.001) return "No";
  if (cosine < 0.9 || max_abs_err > 1) return "No";
  return "Yes";
}

}  // namespace

TensorMetrics compare_tensors(const double* n_in, const double* b_in, size_t count) {
  TensorMetrics m;
  if (count == 0) {
    m.comparable = false;
    m.cosine = kNaN;
    m.max_rel_err = m.one_thousandth = m.five_thousandth = kNaN;
    m.message = "This is empty data, can not compare.";
    return m;
  }
  std::vector<double> n(n_in, n_in + count), b(b_in, b_in + count);
  if (!zero_matching_non_finite(n, b)) {
    m.comparable = false;
    m.cosine = m.euclidean = m.max_abs_err = m.max_rel_err = kNaN;
    m.one_thousandth = m.five_thousandth = kNaN;
    m.accuracy = "No";  // msprobe: "N/A" metrics -> accuracy "No"
    m.message = "The position of inf or nan in NPU and bench Tensor do not match.";
    return m;
  }
  double dot = 0, nn = 0, bb = 0, sq = 0;
  size_t below_1e3 = 0, below_5e3 = 0;
  for (size_t i = 0; i < count; ++i) {
    dot += n[i] * b[i];
    nn += n[i] * n[i];
    bb += b[i] * b[i];
    const double d = n[i] - b[i];
    sq += d * d;
    m.max_abs_err = std::max(m.max_abs_err, std::fabs(d));
    // get_relative_err: where B == 0 both sides are shifted by eps before dividing.
    double nv = n[i], bv = b[i];
    if (std::fpclassify(bv) == FP_ZERO) {
      nv += kEps;
      bv += kEps;
    }
    const double re = std::fabs((nv - bv) / bv);
    m.max_rel_err = std::max(m.max_rel_err, re);
    below_1e3 += re < 0.001 ? 1 : 0;
    below_5e3 += re < 0.005 ? 1 : 0;
  }
  m.euclidean = std::sqrt(sq);
  m.one_thousandth = static_cast<double>(below_1e3) / static_cast<double>(count);
  m.five_thousandth = static_cast<double>(below_5e3) / static_cast<double>(count);
  const double n_norm = std::sqrt(nn), b_norm = std::sqrt(bb);
  if (count == 1) {
    m.cosine = kNaN;
    m.message = "This tensor is scalar.";
    m.accuracy = "None";  // msprobe: cosine "unsupported" is not a number
    return m;
  }
  if (n_norm <= kEps && b_norm <= kEps) {
    m.cosine = 1.0;
  } else if (n_norm <= kEps || b_norm <= kEps) {
    m.cosine = kNaN;
    m.message =
        n_norm <= kEps
            ? "Cannot compare by Cosine Similarity, All the data is Zero in npu dump data."
            : "Cannot compare by Cosine Similarity, All the data is Zero in Bench dump data.";
  } else {
    m.cosine = dot / (n_norm * b_norm);
  }
  m.accuracy = accuracy(m.cosine, m.max_abs_err);
  return m;
}

nlohmann::json TensorMetrics::to_json() const {
  using analysis_detail::number;
  return nlohmann::json{{"cosine", number(cosine)},
                        {"euclidean", number(euclidean)},
                        {"max_abs_err", number(max_abs_err)},
                        {"max_rel_err", number(max_rel_err)},
                        {"one_thousandth", number(one_thousandth)},
                        {"five_thousandth", number(five_thousandth)},
                        {"accuracy", accuracy},
                        {"comparable", comparable},
                        {"message", message}};
}

namespace {

// msprobe statistics mode, per statistic: diff = N - B, relative = |diff / B| * 100 % ("N/A"
// when B == 0); a warning when |diff| / (max(|N|, |B|) + 1e-10) > 0.5. A NaN diff has
// neither a relative error nor a warning.
bool stat_diff(double n, double b, StatDiff& d) {
  d.n = n;
  d.b = b;
  d.diff = n - b;
  if (std::isnan(d.diff)) {
    d.rel_pct = kNaN;
    return false;
  }
  d.rel_pct = std::fpclassify(b) != FP_ZERO ? std::fabs(d.diff / b * 100) : kNaN;
  return std::fabs(d.diff) / (std::max(std::fabs(n), std::fabs(b)) + 1e-10) > 0.5;
}

bool same_bits(double x, double y) { return std::memcmp(&x, &y, sizeof x) == 0; }

bool stats_bitwise_equal(const TensorStats& n, const TensorStats& b) {
  if (n.hash && b.hash) return *n.hash == *b.hash && n.dtype == b.dtype && n.shape == b.shape;
  return n.dtype == b.dtype && n.shape == b.shape && n.numel == b.numel && n.nan == b.nan &&
         n.pinf == b.pinf && n.ninf == b.ninf && n.zero == b.zero && n.neg == b.neg &&
         n.pos == b.pos && same_bits(n.min, b.min) && same_bits(n.max, b.max) &&
         same_bits(n.mean, b.mean) && same_bits(n.norm, b.norm);
}

// |x - y| relative to `scale`, 0 when both are equal (NaN == NaN: no finite values).
double rel(double x, double y, double scale) {
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y) ? 0 : kInf;
  if (!(x < y) && !(x > y)) return 0;
  return std::fabs(x - y) / std::max(scale, 1e-30);
}

}  // namespace

double stats_error(const TensorStats& n, const TensorStats& b) {
  if (n.hash && b.hash && *n.hash == *b.hash) return 0;
  if (n.shape != b.shape || n.numel != b.numel) return kInf;
  if (n.nan != b.nan || n.pinf != b.pinf || n.ninf != b.ninf) return kInf;
  // min, max and mean relative to the tensor's magnitude, so a mean near zero does not
  // turn float noise into a large relative error; the norm relative to itself.
  const double mag =
      std::max({std::fabs(n.min), std::fabs(n.max), std::fabs(b.min), std::fabs(b.max)});
  const double norm_mag = std::max(std::fabs(n.norm), std::fabs(b.norm));
  return std::max({rel(n.min, b.min, mag), rel(n.max, b.max, mag), rel(n.mean, b.mean, mag),
                   rel(n.norm, b.norm, norm_mag)});
}

namespace {

// max(|dMax|, |dMin|, |dMean|, |dNorm| / sqrt(n)): each is at most max_i |N_i - B_i|
// (|dNorm| <= ||N - B||_2 <= sqrt(n) max_i |N_i - B_i|).
double stats_abs_error(const TensorStats& n, const TensorStats& b) {
  if (n.hash && b.hash && *n.hash == *b.hash) return 0;
  if (n.shape != b.shape || n.numel != b.numel) return kInf;
  if (n.nan != b.nan || n.pinf != b.pinf || n.ninf != b.ninf) return kInf;
  const int64_t finite = n.numel - n.non_finite();
  if (finite <= 0) return 0;
  auto d = [](double x, double y) {
    if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y) ? 0.0 : kInf;
    return std::fabs(x - y);
  };
  return std::max({d(n.max, b.max), d(n.min, b.min), d(n.mean, b.mean),
                   d(n.norm, b.norm) / std::sqrt(static_cast<double>(finite))});
}

}  // namespace

void compare_stats(const TensorStats& n, const TensorStats& b, ArgCompare& out) {
  out.tensor = true;
  out.dtype_n = n.dtype;
  out.dtype_b = b.dtype;
  out.shape_n = n.shape;
  out.shape_b = b.shape;
  bool warn = false;
  warn |= stat_diff(n.max, b.max, out.max);
  warn |= stat_diff(n.min, b.min, out.min);
  warn |= stat_diff(n.mean, b.mean, out.mean);
  warn |= stat_diff(n.norm, b.norm, out.norm);
  // Our statistics cover finite values only; a different count of NaN/Inf is what
  // msprobe's max/min columns would show as inf/nan, so it warns as well.
  warn |= n.nan != b.nan || n.pinf != b.pinf || n.ninf != b.ninf;
  out.warning = warn;
  out.error = stats_error(n, b);
  out.exact = stats_bitwise_equal(n, b);
  out.abs_error = out.exact ? 0 : stats_abs_error(n, b);
  if (n.shape != b.shape) {
    out.note = "shape differs";
  } else if (n.nan != b.nan || n.pinf != b.pinf || n.ninf != b.ninf) {
    out.note = "non-finite counts differ";
  } else if (n.dtype != b.dtype) {
    out.note = "dtype differs";
  }
}

}  // namespace precprobe
