// The arguments of two paired ops compared (compare_parts.h): across languages and
// versions, what is the same argument spelled otherwise (docs/cli.md, "Pairing").
#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <utility>

#include "compare_parts.h"

namespace precprobe::analysis_detail {

// The shortest of %.15g and %.17g that reads back as v.
std::string fmt_number(double v) {
  for (int digits : {15, 17}) {
    std::ostringstream o;
    o.precision(digits);
    o << v;
    const double back = std::stod(o.str());
    if (digits == 17 || !(back < v || v < back)) return o.str();
  }
  return {};
}

// A 0-d tensor of one element, no parameter, against a number on the other side: both
// values; nullopt otherwise.
std::optional<std::pair<double, double>> wrapped_number(const Arg& a, const Arg& b) {
  if (a.is_tensor() == b.is_tensor()) return std::nullopt;
  const Arg& t = a.is_tensor() ? a : b;
  const Arg& n = a.is_tensor() ? b : a;
  const TensorStats& s = *t.tensor;
  if (!s.shape.empty() || s.numel != 1 || !s.param.empty() || !s.all_finite()) return std::nullopt;
  const std::optional<double> v = numeric_value(n.value);
  if (!v) return std::nullopt;
  const double tv = s.zero == 1 ? 0.0 : s.max;
  return a.is_tensor() ? std::pair{tv, *v} : std::pair{*v, tv};
}

// Integers that name the same dimensions of the op's first tensor, one side counting from
// the end (x.transpose(-2, -1) in Python, x.transpose(1, 2) in C++, on a 3-d x): an int or a
// flat list of ints, the tensors of the same rank on both sides.
bool same_dims(const std::string& x, const std::string& y, const std::vector<Arg>& a,
               const std::vector<Arg>& b) {
  const auto rank = [](const std::vector<Arg>& args) -> int64_t {
    for (const Arg& t : args)
      if (t.is_tensor()) return static_cast<int64_t>(t.tensor->shape.size());
    return -1;
  };
  const int64_t n = rank(a);
  if (n <= 0 || n != rank(b)) return false;
  const auto ints = [](std::string s, std::vector<int64_t>& out) {
    if (!s.empty() && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
    if (s.empty() || s.find_first_not_of("-0123456789,") != std::string::npos) return false;
    size_t start = 0;
    for (;;) {
      const size_t comma = s.find(',', start);
      const std::string item = s.substr(start, comma - start);
      if (item.empty() || item == "-") return false;
      out.push_back(std::stoll(item));
      if (comma == std::string::npos) return true;
      start = comma + 1;
    }
  };
  std::vector<int64_t> p, q;
  if (!ints(x, p) || !ints(y, q) || p.size() != q.size()) return false;
  for (size_t k = 0; k < p.size(); ++k) {
    const int64_t u = p[k] < 0 ? p[k] + n : p[k], v = q[k] < 0 ? q[k] + n : q[k];
    if (u != v || u < 0 || u >= n) return false;
  }
  return true;
}

// A reshape's size spelled otherwise ([-1, 256, 8] against [28, 256, 8]): the same argument
// when the outputs have the same shape (marked exact, the op's exactness recomputed).
bool same_view_size(const OpRecord& a, const OpRecord& b, OpCompare& oc) {
  static const char* const kReshapes[] = {"aten::view",    "aten::_reshape_alias",
                                          "aten::reshape", "aten::_unsafe_view",
                                          "aten::flatten", "aten::unflatten"};
  auto reshape = [](const std::string& op) {
    return std::any_of(std::begin(kReshapes), std::end(kReshapes),
                       [&](const char* r) { return op == r; });
  };
  // torch.flatten(x, 1) against x.view({x.size(0), -1}): one op of the family on each side.
  const bool family = reshape(a.op) && reshape(b.op);
  if (!(family || (a.op == b.op && a.op == "aten::expand")) || a.outputs.empty() ||
      b.outputs.empty() || !a.outputs[0].is_tensor() || !b.outputs[0].is_tensor() ||
      a.outputs[0].tensor->shape != b.outputs[0].tensor->shape)
    return false;
  bool changed = false;
  for (size_t k = 0; k < oc.args.size() && oc.args[k].io == "input"; ++k) {
    ArgCompare& ac = oc.args[k];
    if (ac.exact || ac.tensor) continue;
    if (k >= a.inputs.size() || k >= b.inputs.size()) {
      // flatten(x, start, end) against view(x, size): an argument of one op only.
      if (a.op == b.op) continue;
      ac.exact = true;
      ac.warning = false;
      ac.error = ac.abs_error = 0;
      ac.note = "an argument of " + (k < a.inputs.size() ? a.op : b.op) + " only";
      changed = true;
      continue;
    }
    const std::string& x = a.inputs[k].value;
    const bool lists = !x.empty() && x.front() == '[' && !b.inputs[k].value.empty() &&
                       b.inputs[k].value.front() == '[';
    if (!lists && a.op == b.op) continue;
    ac.exact = true;
    ac.warning = false;
    ac.error = ac.abs_error = 0;
    ac.note = "the same shape spelled otherwise: " + x + " vs " + b.inputs[k].value;
    changed = true;
  }
  if (!changed) return false;
  oc.exact =
      std::all_of(oc.args.begin(), oc.args.end(), [](const ArgCompare& x) { return x.exact; });
  oc.warning =
      std::any_of(oc.args.begin(), oc.args.end(), [](const ArgCompare& x) { return x.warning; });
  return true;
}

// transpose(x, 1, 0) is transpose(x, 0, 1): the two dimensions' arguments given in the other
// order are the same arguments (marked exact, and the op's exactness recomputed).
bool swapped_dims(const OpRecord& a, const OpRecord& b, OpCompare& oc) {
  static const char* const kSwaps[] = {"aten::transpose", "aten::transpose_", "aten::swapaxes",
                                       "aten::swapaxes_", "aten::swapdims",   "aten::swapdims_"};
  if (std::none_of(std::begin(kSwaps), std::end(kSwaps),
                   [&](const char* op) { return a.op == op; }))
    return false;
  if (a.inputs.size() < 3 || b.inputs.size() < 3 || oc.args.size() < 3 || oc.args[1].exact)
    return false;
  if (!same_dims(a.inputs[1].value, b.inputs[2].value, a.inputs, b.inputs) ||
      !same_dims(a.inputs[2].value, b.inputs[1].value, a.inputs, b.inputs))
    return false;
  for (size_t k : {size_t{1}, size_t{2}}) {
    ArgCompare& ac = oc.args[k];
    ac.exact = true;
    ac.warning = false;
    ac.error = ac.abs_error = 0;
    ac.note = "the same two dimensions, named in the other order";
  }
  oc.exact =
      std::all_of(oc.args.begin(), oc.args.end(), [](const ArgCompare& x) { return x.exact; });
  oc.warning =
      std::any_of(oc.args.begin(), oc.args.end(), [](const ArgCompare& x) { return x.warning; });
  return true;
}

// One side's arguments against the other's; returns the largest tensor error and sets
// `value_differs` when a non-tensor argument differs in a way rounding cannot explain (a
// different string, integer or list, or a missing argument). Numbers that differ get a
// relative error and are judged by the noise model in compare_pair.
double compare_args(const std::vector<Arg>& a, const std::vector<Arg>& b, const char* io,
                    OpCompare& oc, bool& value_differs) {
  double worst = 0;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    ArgCompare ac;
    ac.io = io;
    ac.index = static_cast<int>(i);
    if (i >= a.size() || i >= b.size()) {
      ac.tensor = (i < a.size() ? a[i] : b[i]).is_tensor();
      ac.error = ac.abs_error = kCompareInf;
      ac.exact = false;
      ac.warning = true;
      // Another LibTorch version may call an overload with more or fewer arguments
      // (aten::_reshape_alias(x, size, stride) vs aten::view(x, size)): noted; the
      // arguments both runs have decide.
      ac.note = i >= a.size() ? "missing in a" : "missing in b";
    } else if (a[i].is_tensor() && b[i].is_tensor()) {
      compare_stats(*a[i].tensor, *b[i].tensor, ac);
      worst = std::max(worst, ac.error);
    } else if (const auto w = wrapped_number(a[i], b[i])) {
      // A number Python wrapped as a 0-d tensor against the number LibTorch's C++ API passes
      // as a Scalar: compared as the numbers they are.
      ac.tensor = false;
      ac.exact = !(w->first < w->second || w->second < w->first);
      if (!ac.exact) {
        ac.abs_error = std::fabs(w->first - w->second);
        const double mag = std::max(std::fabs(w->first), std::fabs(w->second));
        ac.error = mag > 0 ? ac.abs_error / mag : kCompareInf;
        ac.warning = ac.abs_error / (mag + 1e-10) > 0.5;
        ac.note = "value differs: " + fmt_number(w->first) + " vs " + fmt_number(w->second) +
                  " (a number, wrapped as a 0-d tensor on one side)";
      }
    } else {
      ac.tensor = false;
      ac.exact = a[i].is_tensor() == b[i].is_tensor() &&
                 (a[i].value == b[i].value || same_after_broadcast(a[i].value, b[i].value) ||
                  same_dims(a[i].value, b[i].value, a, b));
      if (!ac.exact && spelled_default(a[i], b[i])) {
        // A default spelled out on one side only: Python's argument parser passes
        // device="cpu", pin_memory=False, the input's dtype; LibTorch's C++ API leaves them
        // None. What the default means shows in the outputs, which are compared.
        ac.note = "default on one side: " + a[i].value + " vs " + b[i].value;
      } else if (!ac.exact) {
        ac.note = "value differs: " + a[i].value + " vs " + b[i].value;
        const std::optional<double> x = a[i].is_tensor() ? std::nullopt : numeric_value(a[i].value);
        const std::optional<double> y = b[i].is_tensor() ? std::nullopt : numeric_value(b[i].value);
        const bool integral = a[i].value.find_first_of(".eE") == std::string::npos &&
                              b[i].value.find_first_of(".eE") == std::string::npos;
        if (x.has_value() && y.has_value() && !integral) {
          const double xv = x.value_or(0), yv = y.value_or(0);
          ac.abs_error = std::fabs(xv - yv);
          const double mag = std::max(std::fabs(xv), std::fabs(yv));
          ac.error = ac.abs_error / mag;
          // msprobe's statistics rule, applied to the value itself.
          ac.warning = ac.abs_error / (mag + 1e-10) > 0.5;
        } else {
          ac.error = ac.abs_error = kCompareInf;
          ac.warning = true;
          value_differs = true;
        }
      }
    }
    oc.warning = oc.warning || ac.warning;
    oc.exact = oc.exact && ac.exact;
    oc.args.push_back(std::move(ac));
  }
  return worst;
}

}  // namespace precprobe::analysis_detail
