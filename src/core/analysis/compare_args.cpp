// The arguments of two paired ops compared (compare_parts.h): across languages and
// versions, what is the same argument spelled otherwise (docs/cli.md, "Pairing").
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <utility>

#include "compare_parts.h"
#include "op_names.h"
#include "pairing.h"

namespace precprobe::analysis_detail {

// A 0-d tensor of one element, no parameter, against a number on the other side: both
// values; nullopt otherwise.
std::optional<std::pair<double, double>> wrapped_number(const Arg& a, const Arg& b) {
  if (a.is_tensor() == b.is_tensor()) return std::nullopt;
  const Arg& t = a.is_tensor() ? a : b;
  const Arg& n = a.is_tensor() ? b : a;
  const std::optional<double> tv = wrapped_value(*t.tensor);
  const std::optional<double> v = numeric_value(n.value);
  if (!tv || !v) return std::nullopt;
  return a.is_tensor() ? std::pair{*tv, *v} : std::pair{*v, *tv};
}

// Which inputs of an op name dimensions of its first tensor (x.sum(-1), x.transpose(1, 2));
// empty for an op not listed: an integer elsewhere (an alpha, an index) counts as itself.
// Ops whose dimension ranges over one more than their input's rank (unsqueeze, stack) are
// left out.
std::vector<size_t> dim_inputs(const std::string& op) {
  static const OpNames kDim1{
      "aten::sum",     "aten::mean",        "aten::amax",         "aten::amin",
      "aten::softmax", "aten::log_softmax", "aten::_softmax",     "aten::_log_softmax",
      "aten::cat",     "aten::select",      "aten::squeeze",      "aten::squeeze_",
      "aten::permute", "aten::cumsum",      "aten::cumprod",      "aten::prod",
      "aten::std",     "aten::var",         "aten::flip",         "aten::logsumexp",
      "aten::unbind",  "aten::narrow",      "aten::index_select", "aten::gather",
      "aten::argmax",  "aten::argmin",      "aten::max",          "aten::min",
      "aten::all",     "aten::any",         "aten::sort",         "aten::argsort",
      "aten::cummax",  "aten::cummin"};
  static const OpNames kDim12{"aten::transpose", "aten::transpose_", "aten::swapaxes",
                              "aten::swapaxes_", "aten::swapdims",   "aten::swapdims_",
                              "aten::flatten",   "aten::movedim"};
  static const OpNames kDim2{"aten::chunk",
                             "aten::split",
                             "aten::split_with_sizes",
                             "aten::topk",
                             "aten::roll",
                             "aten::_softmax_backward_data",
                             "aten::_log_softmax_backward_data"};
  if (kDim1.contains(op)) return {1};
  if (kDim12.contains(op)) return {1, 2};
  if (kDim2.contains(op)) return {2};
  return {};
}

// Integers naming the same dimensions of a tensor of rank n, one side counting from the end
// (-1 against 2 on a 3-d tensor): an int or a flat list of ints.
bool same_dims(const std::string& x, const std::string& y, int64_t n) {
  if (n <= 0) return false;
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

// The rank of an op's first tensor input, the same in both runs; -1 otherwise.
int64_t common_rank(const OpRecord& a, const OpRecord& b) {
  auto rank = [](const OpRecord& r) -> int64_t {
    for (const Arg& t : r.inputs)
      if (t.is_tensor()) return static_cast<int64_t>(t.tensor->shape.size());
    return -1;
  };
  const int64_t n = rank(a);
  return n == rank(b) ? n : -1;
}

// Input k of a and of b is the same argument spelled otherwise (either may lack it): the note
// that says how, or nothing.
// - A reshape whose outputs have one shape: its size spelled otherwise ([-1, 256, 8] against
//   [28, 256, 8]), or torch.flatten(x, 1) against x.view({n, -1}) with the arguments of
//   one of them only.
// - Dimensions counted from the end (transpose(-2, -1) against transpose(1, 2) of a 3-d x),
//   and transpose's two dimensions named in the other order (transpose(x, 1, 0)).
std::optional<std::string> spelled_otherwise(const OpRecord& a, const OpRecord& b, size_t k) {
  const bool in_a = k < a.inputs.size(), in_b = k < b.inputs.size();
  if ((in_a && a.inputs[k].is_tensor()) || (in_b && b.inputs[k].is_tensor())) return std::nullopt;
  if (in_a && in_b) {  // 1 against 1.0: a Python int where LibTorch's C++ API passes a double
    const std::optional<double> x = numeric_value(a.inputs[k].value);
    const std::optional<double> y = numeric_value(b.inputs[k].value);
    if (x && y && std::equal_to<double>()(*x, *y))  // exactly: 1 against 1.0
      return "the same number spelled otherwise: " + a.inputs[k].value + " vs " + b.inputs[k].value;
  }
  if (is_reshape_op(a.op) && is_reshape_op(b.op) && !a.outputs.empty() && !b.outputs.empty() &&
      a.outputs[0].is_tensor() && b.outputs[0].is_tensor() &&
      a.outputs[0].tensor->shape == b.outputs[0].tensor->shape) {
    if (a.op != b.op && (!in_a || !in_b)) return "an argument of " + (in_a ? a.op : b.op) + " only";
    const std::string& x = in_a ? a.inputs[k].value : b.inputs[k].value;
    const std::string& y = in_b ? b.inputs[k].value : x;
    const bool lists = !x.empty() && x.front() == '[' && !y.empty() && y.front() == '[';
    if (in_a && in_b && (lists || a.op != b.op))
      return "the same shape spelled otherwise: " + x + " vs " + y;
  }
  if (!in_a || !in_b || a.op != b.op) return std::nullopt;
  const std::vector<size_t> dims = dim_inputs(a.op);
  if (std::find(dims.begin(), dims.end(), k) == dims.end()) return std::nullopt;
  const int64_t n = common_rank(a, b);
  if (same_dims(a.inputs[k].value, b.inputs[k].value, n))
    return "the same dimensions, counted from the other end";
  if (dims.size() == 2 && a.op.find("flatten") == std::string::npos && a.inputs.size() > 2 &&
      b.inputs.size() > 2 && same_dims(a.inputs[1].value, b.inputs[2].value, n) &&
      same_dims(a.inputs[2].value, b.inputs[1].value, n))
    return "the same two dimensions, named in the other order";
  return std::nullopt;
}

// One side's arguments against the other's; returns the largest tensor error and sets
// `value_differs` when a non-tensor argument differs in a way rounding cannot explain (a
// different string, integer or list, or a missing argument). Numbers that differ get a
// relative error and are judged by the noise model in compare_pair.
double compare_args(const OpRecord& ra, const OpRecord& rb, bool inputs, OpCompare& oc,
                    size_t first, bool& value_differs) {
  const std::vector<Arg>& a = inputs ? ra.inputs : ra.outputs;
  const std::vector<Arg>& b = inputs ? rb.inputs : rb.outputs;
  double worst = 0;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    ArgCompare& ac = oc.args.at(first + i);
    ac.io = inputs ? "input" : "output";
    ac.index = static_cast<int>(i);
    const bool differs = i >= a.size() || i >= b.size() || a[i].is_tensor() != b[i].is_tensor() ||
                         (!a[i].is_tensor() && a[i].value != b[i].value);
    if (const auto same = inputs && differs ? spelled_otherwise(ra, rb, i) : std::nullopt) {
      ac.tensor = false;
      ac.note = *same;  // exact: the same argument
    } else if (i >= a.size() || i >= b.size()) {
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
        ac.note = "value differs: " + shortest_number(w->first) + " vs " +
                  shortest_number(w->second) + " (a number, wrapped as a 0-d tensor on one side)";
      }
    } else {
      ac.tensor = false;
      ac.exact = a[i].is_tensor() == b[i].is_tensor() &&
                 (a[i].value == b[i].value || same_after_broadcast(a[i].value, b[i].value));
      if (!ac.exact && spelled_default(a[i], b[i])) {
        // A default spelled out on one side only: Python's argument parser passes
        // device="cpu", pin_memory=False, the input's dtype; LibTorch's C++ API leaves them
        // None. What the default means shows in the outputs, which are compared.
        ac.note = "default on one side: " + display_value(a[i].value) + " vs " +
                  display_value(b[i].value);
      } else if (!ac.exact) {
        ac.note =
            "value differs: " + display_value(a[i].value) + " vs " + display_value(b[i].value);
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
  }
  return worst;
}

}  // namespace precprobe::analysis_detail
