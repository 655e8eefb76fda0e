// The rounding-error model of `compare` (docs/cli.md, "Noise model"): per output of an op,
// the scale S its error is measured against, the number of summands n per output element
// and the allowance gamma_n(u) (Higham, Accuracy and Stability of Numerical Algorithms, 2nd
// ed., §3.1 eq. 3.4/3.5 for dot products, §4.2 for summation); per input, the scale its own
// error is measured against and how much of it may pass into the outputs (kappa).
//
// Only the statistics of the dump are known (min, max, norm, numel): magnitudes are estimated
// from them. rms = norm / sqrt(finite elements) stands for a row's typical |x|, so that
// sum_k |x_k| <= sqrt(n) * ||x_row||_2 ~= n * rms (Cauchy-Schwarz) and
// sum_k |a_k||b_k| <= ||a_row|| ||b_col|| ~= n * rms(a) * rms(b).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string_view>
#include <unordered_map>

#include "precprobe/analysis.h"

namespace precprobe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kFloatU = std::ldexp(1.0, -24);

// Magnitudes of one argument over both runs.
struct Mag {
  bool tensor = false;
  double mag = 0;  // largest |x|
  double rms = 0;  // norm / sqrt(finite elements)
  // smallest |x| when no element is zero or changes sign (min and max of one sign), else 0:
  // what a divisor's relative error is measured against element by element
  double min_abs = 0;
  double u = 0;  // unit roundoff of its dtype (0: integral or not a float)
  const std::vector<int64_t>* shape = &kNoShape;  // the first run's with any: the record's
  int64_t numel = 0;
  static const std::vector<int64_t> kNoShape;
};
const std::vector<int64_t> Mag::kNoShape;

double finite_or_zero(double v) { return std::isfinite(v) ? v : 0; }

Mag mag_of(const Arg* a, const Arg* b) {
  Mag m;
  for (const Arg* x : {a, b}) {
    if (x == nullptr) continue;
    if (x->is_tensor()) {
      const TensorStats& t = *x->tensor;
      m.tensor = true;
      m.mag = std::max(m.mag, finite_or_zero(t.abs_max()));
      const int64_t finite = t.numel - t.non_finite();
      if (finite > 0)
        m.rms = std::max(m.rms, finite_or_zero(t.norm) / std::sqrt(static_cast<double>(finite)));
      m.u = std::max(m.u, unit_roundoff(t.dtype));
      const bool one_sign = t.zero == 0 && ((t.min > 0 && t.max > 0) || (t.min < 0 && t.max < 0));
      const double lo = one_sign ? std::min(std::fabs(t.min), std::fabs(t.max)) : 0;
      m.min_abs = x == a ? lo : std::min(m.min_abs, lo);
      if (m.shape->empty()) m.shape = &t.shape;
      m.numel = std::max(m.numel, t.numel);
    } else if (auto v = numeric_value(x->value)) {
      m.mag = std::max(m.mag, std::fabs(*v));
      m.rms = m.mag;
    }
  }
  return m;
}

int64_t dim_size(const Mag& m, int64_t d) {
  const auto r = static_cast<int64_t>(m.shape->size());
  if (r == 0) return 1;
  if (d < 0) d += r;
  if (d < 0 || d >= r) return 1;
  return std::max<int64_t>(1, (*m.shape)[static_cast<size_t>(d)]);
}

int64_t last_dim(const Mag& m) { return dim_size(m, -1); }

// Names as string_views: their lengths are known where they are written, and most names
// differ from the op's in length (no byte compared).
bool one_of(const std::string& op, std::initializer_list<std::string_view> names) {
  const std::string_view o(op);
  for (std::string_view n : names) {
    if (o == n) return true;
  }
  return false;
}

enum class NoiseRule {
  kNone,
  kDot,
  kAddDot,
  kLinear,
  kConv,
  kConvBackward,
  kSum,
  kNorm,
  kSoftmax,
  kSoftmaxBackward,
  kNllLoss,
  kNormalization,
  kProduct,
  kSmooth
};

// Which of op_noise's rules an op follows, by one look-up of its name.
NoiseRule noise_rule(std::string_view op) {
  static const std::unordered_map<std::string_view, NoiseRule> kRules = [] {
    std::unordered_map<std::string_view, NoiseRule> m;
    auto add = [&m](NoiseRule r, std::initializer_list<std::string_view> names) {
      for (std::string_view n : names) m.emplace(n, r);  // the first rule naming an op wins
    };
    add(NoiseRule::kDot,
        {"aten::mm", "aten::bmm", "aten::matmul", "aten::dot", "aten::vdot", "aten::mv"});
    add(NoiseRule::kAddDot, {"aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::addmv"});
    add(NoiseRule::kLinear, {"aten::linear"});
    add(NoiseRule::kConv,
        {"aten::convolution", "aten::_convolution", "aten::conv1d", "aten::conv2d", "aten::conv3d",
         "aten::mkldnn_convolution", "aten::_slow_conv2d_forward", "aten::thnn_conv2d",
         "aten::cudnn_convolution"});
    add(NoiseRule::kConvBackward,
        {"aten::convolution_backward", "aten::mkldnn_convolution_backward",
         "aten::_slow_conv2d_backward", "aten::cudnn_convolution_backward"});
    add(NoiseRule::kSum, {"aten::sum", "aten::nansum", "aten::mean", "aten::sum_to_size"});
    add(NoiseRule::kNorm, {"aten::norm", "aten::linalg_vector_norm", "aten::frobenius_norm"});
    add(NoiseRule::kSoftmax, {"aten::_softmax", "aten::softmax", "aten::_log_softmax",
                              "aten::log_softmax", "aten::logsumexp"});
    add(NoiseRule::kSoftmaxBackward,
        {"aten::_softmax_backward_data", "aten::_log_softmax_backward_data"});
    add(NoiseRule::kNllLoss,
        {"aten::nll_loss", "aten::nll_loss_forward", "aten::nll_loss2d_forward",
         "aten::cross_entropy_loss", "aten::nll_loss_nd", "aten::nll_loss2d"});
    add(NoiseRule::kNormalization,
        {"aten::native_batch_norm", "aten::batch_norm", "aten::_batch_norm_impl_index",
         "aten::native_layer_norm", "aten::layer_norm", "aten::group_norm",
         "aten::native_group_norm", "aten::_native_batch_norm_legit",
         "aten::_native_batch_norm_legit_no_training", "aten::native_batch_norm_backward",
         "aten::native_layer_norm_backward", "aten::batch_norm_backward",
         "aten::native_group_norm_backward", "aten::cudnn_batch_norm",
         "aten::cudnn_batch_norm_backward", "aten::miopen_batch_norm"});
    add(NoiseRule::kProduct, {"aten::mul", "aten::mul_", "aten::addcmul", "aten::addcmul_",
                              "aten::div", "aten::div_", "aten::addcdiv", "aten::addcdiv_"});
    add(NoiseRule::kSmooth,
        {"aten::exp", "aten::exp_", "aten::pow", "aten::pow_", "aten::sigmoid", "aten::tanh",
         "aten::gelu", "aten::silu", "aten::elu", "aten::softplus", "aten::expm1", "aten::exp2"});
    return m;
  }();
  auto it = kRules.find(op);
  return it == kRules.end() ? NoiseRule::kNone : it->second;
}

}  // namespace

double unit_roundoff(std::string_view dtype) noexcept {
  if (dtype == "Float" || dtype == "ComplexFloat") return std::ldexp(1.0, -24);
  if (dtype == "Double" || dtype == "ComplexDouble") return std::ldexp(1.0, -53);
  if (dtype == "Half") return std::ldexp(1.0, -11);
  if (dtype == "BFloat16") return std::ldexp(1.0, -8);
  return 0;
}

double gamma_n(double n, double u) noexcept {
  const double nu = n * u;
  return nu >= 1 ? kInf : nu / (1 - nu);
}

double gamma_tilde(double n, double u) noexcept {
  const double worst = gamma_n(n, u);
  if (!(n > 1) || !(u > 0)) return worst;
  // Higham & Mary, "A new approach to probabilistic rounding error analysis", SIAM J. Sci.
  // Comput. 41(5), 2019: with rounding errors independent and of mean zero, Theorem 2.4's
  // |theta_n| <= exp(lambda sqrt(n) u + n u^2 / (1 - u)) - 1 holds with probability at
  // least 1 - 2 exp(-lambda^2 (1 - u)^2 / 2), and an inner product of n terms (Theorem 3.1)
  // with probability at least 1 - n times the complement. lambda is chosen so that the
  // latter fails with probability kRoundingFailure.
  const double lambda = std::sqrt(2 * std::log(2 * n / kRoundingFailure)) / (1 - u);
  const double likely = std::expm1(lambda * std::sqrt(n) * u + n * u * u / (1 - u));
  return std::min(worst, likely);
}

std::optional<double> numeric_value(const std::string& json) {
  if (json.empty()) return std::nullopt;
  const char c = json[0];
  if (!(c == '-' || (c >= '0' && c <= '9'))) return std::nullopt;
  // from_chars: strtod's correctly rounded value, without its locale (compare reads about one
  // a pair). Out of range (1e400, 1e-400) it leaves v alone: strtod says what such a
  // number reads as (±inf, or the nearest subnormal or 0), as before.
  const char* const last = json.data() + json.size();
  double v = 0;
  const auto [end, ec] = std::from_chars(json.data(), last, v);
  if (end != last) return std::nullopt;
  if (ec == std::errc::result_out_of_range) return std::strtod(json.c_str(), nullptr);
  if (ec != std::errc()) return std::nullopt;
  return v;
}

std::string shortest_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::string();
}

std::string display_value(const std::string& json) {
  const auto one = [](std::string_view text) {
    const std::string t(text);
    if (t.find_first_of(".eE") == std::string::npos) return t;  // an integer, a word
    const std::optional<double> v = numeric_value(t);
    if (!v) return t;
    std::string out = shortest_number(*v);
    // Still a floating-point number to the reader ("2.0", as written, not "2").
    if (out.find_first_of(".eEn") == std::string::npos) out += ".0";
    return out;
  };
  if (json.size() < 2 || json.front() != '[' || json.back() != ']') return one(json);
  std::string out = "[";
  size_t from = 1;
  while (from < json.size() - 1) {
    size_t comma = json.find(',', from);
    if (comma == std::string::npos || comma > json.size() - 1) comma = json.size() - 1;
    if (from > 1) out += ',';
    out += one(std::string_view(json).substr(from, comma - from));
    from = comma + 1;
  }
  return out + "]";
}

OpNoise op_noise(const OpRecord& a, const OpRecord& b) {
  OpNoise nz;
  op_noise(a, b, nz);
  return nz;
}

void op_noise(const OpRecord& a, const OpRecord& b, OpNoise& nz) {
  const std::string& op = a.op;
  const size_t n_in = std::max(a.inputs.size(), b.inputs.size());
  const size_t n_out = std::max(a.outputs.size(), b.outputs.size());
  // The magnitudes of this call only (op_noise is not re-entered): storage kept per thread,
  // as `nz`'s is by a caller that passes the same one again (compare judges every pair).
  thread_local std::vector<Mag> in, out;
  in.assign(n_in, Mag{});
  out.assign(n_out, Mag{});
  for (size_t i = 0; i < n_in; ++i)
    in[i] = mag_of(i < a.inputs.size() ? &a.inputs[i] : nullptr,
                   i < b.inputs.size() ? &b.inputs[i] : nullptr);
  for (size_t k = 0; k < n_out; ++k)
    out[k] = mag_of(k < a.outputs.size() ? &a.outputs[k] : nullptr,
                    k < b.outputs.size() ? &b.outputs[k] : nullptr);
  auto input = [&](size_t i) -> const Mag& {
    static const Mag kNone;
    return i < in.size() ? in[i] : kNone;
  };
  // The unit roundoff of an output: its dtype's, or (a scalar such as aten::item's) the
  // widest of the op's floating tensor inputs; a Python-side number is float64.
  double u_inputs = 0;
  for (const Mag& m : in) u_inputs = std::max(u_inputs, m.u);
  // Storage of the statistics: mean and norm are written as float32 (one rounding each).
  const double u_stats = std::ldexp(1.0, -23);

  nz.outputs.assign(n_out, OutputBound{});
  for (size_t k = 0; k < n_out; ++k) {
    OutputBound& ob = nz.outputs[k];
    ob.u = out[k].tensor ? out[k].u : (u_inputs > 0 ? u_inputs : std::ldexp(1.0, -53));
    ob.scale = out[k].mag;
  }
  nz.input_scale.assign(n_in, 0.0);
  nz.input_kappa.assign(n_in, 1.0);
  // Default (element-wise and data movement): each error is measured against the largest
  // |x| of its tensor; an input's error passes into the output through a function whose
  // slope is at most about 1, so measured against the output's scale it counts
  // mag_in / mag_out times (a subtraction that cancels turns a small relative error of its
  // inputs into a large one of its output, and that is inherited, not added).
  const double out_mag = n_out > 0 ? out[0].mag : 0;
  for (size_t i = 0; i < n_in; ++i) {
    nz.input_scale[i] = in[i].mag;
    if (out_mag > 0) nz.input_kappa[i] = std::max(1.0, in[i].mag / out_mag);
  }

  auto dot = [&](size_t k, double terms, const Mag& x, const Mag& y, double added) {
    if (k >= n_out) return;
    nz.outputs[k].terms = terms;
    nz.outputs[k].scale = std::max(out[k].mag, terms * x.rms * y.rms + added);
  };
  auto rms_inputs = [&](std::initializer_list<size_t> idx) {
    for (size_t i : idx) {
      if (i < n_in) {
        nz.input_scale[i] = in[i].rms;
        nz.input_kappa[i] = 1;
      }
    }
  };

  const NoiseRule rule = noise_rule(op);
  if (rule == NoiseRule::kDot) {
    dot(0, static_cast<double>(last_dim(input(0))), input(0), input(1), 0);
    rms_inputs({0, 1});
  } else if (rule == NoiseRule::kAddDot) {
    dot(0, static_cast<double>(last_dim(input(1))), input(1), input(2), input(0).mag);
    rms_inputs({1, 2});
  } else if (rule == NoiseRule::kLinear) {
    dot(0, static_cast<double>(last_dim(input(0))), input(0), input(1), input(2).mag);
    rms_inputs({0, 1});
  } else if (rule == NoiseRule::kConv) {
    const Mag& w = input(1);
    const double terms =
        w.shape->empty() ? 1.0 : static_cast<double>(w.numel) / static_cast<double>(dim_size(w, 0));
    dot(0, terms, input(0), w, input(2).tensor ? input(2).mag : 0);
    rms_inputs({0, 1});
  } else if (rule == NoiseRule::kConvBackward) {
    // (grad_output, input, weight, ...) -> (grad_input, grad_weight, grad_bias)
    const Mag &go = input(0), &x = input(1), &w = input(2);
    const double per_channel =
        static_cast<double>(go.numel) / static_cast<double>(std::max<int64_t>(1, dim_size(go, 1)));
    const double kernel =
        w.shape->size() > 2
            ? static_cast<double>(w.numel) / static_cast<double>(dim_size(w, 0) * dim_size(w, 1))
            : 1.0;
    dot(0, static_cast<double>(dim_size(go, 1)) * kernel, go, w, 0);
    dot(1, per_channel, go, x, 0);
    if (n_out > 2) {
      nz.outputs[2].terms = per_channel;
      nz.outputs[2].scale = std::max(out[2].mag, per_channel * go.rms);
    }
    rms_inputs({0, 1, 2});
  } else if (rule == NoiseRule::kSum) {
    const Mag& x = input(0);
    const double terms = n_out > 0 && out[0].numel > 0
                             ? static_cast<double>(x.numel) / static_cast<double>(out[0].numel)
                             : static_cast<double>(x.numel);
    if (n_out > 0) {
      nz.outputs[0].terms = std::max(1.0, terms);
      nz.outputs[0].scale = std::max(out[0].mag, (op == "aten::mean" ? 1.0 : terms) * x.rms);
    }
    rms_inputs({0});
  } else if (rule == NoiseRule::kNorm) {
    const Mag& x = input(0);
    if (n_out > 0 && out[0].numel > 0)
      nz.outputs[0].terms =
          std::max(1.0, static_cast<double>(x.numel) / static_cast<double>(out[0].numel));
    rms_inputs({0});
    if (n_out > 0 && x.rms > 0) nz.input_kappa[0] = 1;
  } else if (rule == NoiseRule::kSoftmax) {
    // Reduction over `dim` (argument 1) of exp(x - max): |d softmax| <= 2 softmax |dx|, and
    // |d log_softmax| <= 2 |dx|: the input's absolute error passes twice.
    const Mag& x = input(0);
    int64_t d = -1;
    if (a.inputs.size() > 1 && !a.inputs[1].is_tensor())
      if (auto v = numeric_value(a.inputs[1].value)) d = static_cast<int64_t>(*v);
    for (OutputBound& ob : nz.outputs) ob.terms = static_cast<double>(dim_size(x, d));
    const bool log = op.find("log") != std::string::npos;
    if (n_in > 0)
      nz.input_kappa[0] =
          log ? 2 * std::max(1.0, x.mag / std::max(out_mag, 1e-300)) : 2 * std::max(1.0, x.mag);
  } else if (rule == NoiseRule::kSoftmaxBackward) {
    // (grad_output, output, dim, ...): grad_output minus softmax times its row sum.
    const Mag &go = input(0), &y = input(1);
    int64_t d = -1;
    if (a.inputs.size() > 2 && !a.inputs[2].is_tensor())
      if (auto v = numeric_value(a.inputs[2].value)) d = static_cast<int64_t>(*v);
    const double terms = static_cast<double>(dim_size(go, d));
    if (n_out > 0) {
      nz.outputs[0].terms = terms;
      nz.outputs[0].scale = std::max(out[0].mag, go.mag);
    }
    if (n_in > 1) {
      nz.input_kappa[0] = 2;
      nz.input_kappa[1] = 2 * std::max(1.0, y.mag);
    }
  } else if (rule == NoiseRule::kNllLoss) {
    // A mean over the batch of picked log-probabilities.
    const Mag& x = input(0);
    const double terms = static_cast<double>(dim_size(x, 0));
    for (OutputBound& ob : nz.outputs) {
      ob.terms = terms;
      ob.scale = std::max(ob.scale, x.mag);
    }
    if (n_in > 0) nz.input_kappa[0] = 1;
  } else if (rule == NoiseRule::kNormalization) {
    // Mean and variance are sums over the normalised elements (batch_norm: every element of
    // a channel; layer_norm: the normalised trailing dimensions); (x - mean) / std scales
    // the input's absolute error by 1 / std. std is estimated from the input's own
    // statistics (whole tensor: rms is an upper estimate of a channel's std when the mean
    // is small; when it is not, mean subtraction cancels and the input's error counts
    // mag / std times).
    const bool backward = op.find("backward") != std::string::npos;
    const Mag& x = input(backward ? 1 : 0);
    double terms = 1;
    if (op.find("layer_norm") != std::string::npos) {
      const Mag& w = input(backward ? 3 : 2);
      terms =
          w.tensor && w.numel > 0 ? static_cast<double>(w.numel) : static_cast<double>(last_dim(x));
    } else {
      terms =
          static_cast<double>(x.numel) / static_cast<double>(std::max<int64_t>(1, dim_size(x, 1)));
    }
    for (OutputBound& ob : nz.outputs) ob.terms = std::max(1.0, terms);
    // Every input's error may pass through amplified by mag / std of the normalised input
    // (mean subtraction), and by the output's own scale.
    double std_est = 0;
    const TensorStats* xs = nullptr;
    const size_t xi = backward ? 1 : 0;
    if (xi < a.inputs.size() && a.inputs[xi].is_tensor()) xs = &*a.inputs[xi].tensor;
    if (xs != nullptr) {
      const double finite = static_cast<double>(xs->numel - xs->non_finite());
      if (finite > 0) {
        const double ms = finite_or_zero(xs->norm) * finite_or_zero(xs->norm) / finite;
        const double mean = finite_or_zero(xs->mean);
        std_est = std::sqrt(std::max(0.0, ms - mean * mean));
      }
    }
    const double cancel = std_est > 0 ? std::max(1.0, x.mag / std_est) : 1.0;
    for (size_t i = 0; i < n_in; ++i) {
      nz.input_kappa[i] =
          cancel * std::max(1.0, out_mag > 0 ? in[i].mag / out_mag : 1.0) * (backward ? 2 : 1);
    }
    for (OutputBound& ob : nz.outputs) ob.terms *= cancel;
  } else if (rule == NoiseRule::kProduct) {
    // |d(xy)| <= |y||dx| + |x||dy|: each input's error counts |other| / |xy| times.
    double prod = 1;
    for (const Mag& m : in)
      if (m.mag > 0) prod *= m.mag;
    for (size_t i = 0; i < n_in; ++i)
      if (out_mag > 0) nz.input_kappa[i] = std::max(1.0, prod / out_mag);
    // A divisor's error is measured against its largest |y|; divided by its smallest one
    // (Adam's sqrt(v) + eps, eps-sized where a gradient is tiny), it counts mag / min|y|
    // times. A divisor that is zero somewhere or changes sign: its quotient is not bounded
    // by statistics, and the factor is left as it is.
    const size_t divisor = one_of(op, {"aten::div", "aten::div_"})           ? 1
                           : one_of(op, {"aten::addcdiv", "aten::addcdiv_"}) ? 2
                                                                             : n_in;
    if (divisor < n_in && in[divisor].tensor && in[divisor].min_abs > 0)
      nz.input_kappa[divisor] =
          std::max(nz.input_kappa[divisor], in[divisor].mag / in[divisor].min_abs);
  } else if (rule == NoiseRule::kSmooth) {
    // |d exp(x)| = exp(x) |dx|: the relative error of the output is the absolute one of x.
    for (size_t i = 0; i < n_in; ++i)
      nz.input_kappa[i] = std::max(nz.input_kappa[i], std::max(1.0, in[i].mag));
  }

  // Inputs an op rounds to its output's narrower format before computing (autocast's casts
  // run inside the op its record describes: a float32 weight into a bf16 linear): each
  // element to within u_out relative, which moves a sum by at most u_out times the scale of
  // its summands, and an element-wise result by kappa u_out.
  double rounded_inputs = 0;
  for (const OpRecord* r : {&a, &b}) {
    double u_out = 0;
    for (const Arg& o : r->outputs)
      if (o.is_tensor()) u_out = std::max(u_out, unit_roundoff(o.tensor->dtype));
    for (size_t i = 0; i < r->inputs.size() && i < n_in; ++i) {
      const Arg& x = r->inputs[i];
      if (!x.is_tensor()) continue;
      const double u_in = unit_roundoff(x.tensor->dtype);
      if (u_in > 0 && u_in < u_out) rounded_inputs += nz.input_kappa[i] * u_out;
    }
  }
  for (size_t k = 0; k < n_out; ++k) {
    OutputBound& ob = nz.outputs[k];
    // ATen sums Half and BFloat16 in float (at::opmath_type / acc_type, CPU and CUDA), as
    // oneDNN and cuBLAS do by default: a reduction with a 16-bit output makes float32's
    // rounding in its sums and one rounding of the result, at most u |y| <= u max|y|.
    if (ob.terms > 1 && ob.u > kFloatU)
      ob.bound = gamma_tilde(ob.terms, kFloatU) +
                 (ob.scale > 0 ? ob.u * std::min(1.0, out[k].mag / ob.scale) : ob.u);
    else
      ob.bound = gamma_tilde(ob.terms, ob.u);
    ob.bound += rounded_inputs;
    if (out[k].tensor && ob.scale > 0) ob.bound += u_stats * out[k].mag / ob.scale;
  }
}

}  // namespace precprobe
