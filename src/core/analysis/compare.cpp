// compare_dumps, one (step, rank) group at a time: pairs the ops of the two runs and compares
// them (compare_read.cpp reads the runs and hands the groups over).
//
// Pairing (pairing.h): ops pair only with an op of the same content (op, direction, shapes,
// parameter). Equal sequences pair in order; differing ones are aligned by content, so an
// op inserted in one run leaves the later ops paired with their true counterparts, and the
// ops of one run only are reported (unmatched, sequence_diffs), never compared.
#include <algorithm>
#include <iterator>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "arg_rules.h"
#include "compare_group.h"
#include "compare_order.h"
#include "flips.h"
#include "json_util.h"
#include "loss_scale.h"
#include "modules.h"
#include "nesting.h"
#include "pairing.h"
#include "provenance.h"
#include "source.h"

namespace precprobe {
namespace {

using analysis_detail::ConstantsUse;
using analysis_detail::ProgramConstants;
using analysis_detail::same_after_broadcast;
using analysis_detail::spelled_default;
constexpr double kInf = std::numeric_limits<double>::infinity();

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
  static const char* const kReshapes[] = {"aten::view", "aten::_reshape_alias", "aten::reshape",
                                          "aten::_unsafe_view", "aten::expand", "aten::unflatten"};
  if (std::none_of(std::begin(kReshapes), std::end(kReshapes),
                   [&](const char* op) { return a.op == op; }) ||
      a.op != b.op || a.outputs.empty() || b.outputs.empty() || !a.outputs[0].is_tensor() ||
      !b.outputs[0].is_tensor() || a.outputs[0].tensor->shape != b.outputs[0].tensor->shape)
    return false;
  bool changed = false;
  for (size_t k = 0; k < oc.args.size() && oc.args[k].io == "input"; ++k) {
    ArgCompare& ac = oc.args[k];
    if (ac.exact || ac.tensor || k >= a.inputs.size() || k >= b.inputs.size()) continue;
    const std::string& x = a.inputs[k].value;
    if (x.empty() || x.front() != '[' || b.inputs[k].value.empty() || b.inputs[k].value.front() != '[')
      continue;
    ac.exact = true;
    ac.warning = false;
    ac.error = ac.abs_error = 0;
    ac.note = "the same shape spelled otherwise: " + x + " vs " + b.inputs[k].value;
    changed = true;
  }
  if (!changed) return false;
  oc.exact = std::all_of(oc.args.begin(), oc.args.end(), [](const ArgCompare& x) { return x.exact; });
  oc.warning = std::any_of(oc.args.begin(), oc.args.end(), [](const ArgCompare& x) { return x.warning; });
  return true;
}

// transpose(x, 1, 0) is transpose(x, 0, 1): the two dimensions' arguments given in the other
// order are the same arguments (marked exact, and the op's exactness recomputed).
bool swapped_dims(const OpRecord& a, const OpRecord& b, OpCompare& oc) {
  static const char* const kSwaps[] = {"aten::transpose", "aten::transpose_", "aten::swapaxes",
                                       "aten::swapaxes_", "aten::swapdims", "aten::swapdims_"};
  if (std::none_of(std::begin(kSwaps), std::end(kSwaps), [&](const char* op) { return a.op == op; }))
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
  oc.exact = std::all_of(oc.args.begin(), oc.args.end(), [](const ArgCompare& x) { return x.exact; });
  oc.warning = std::any_of(oc.args.begin(), oc.args.end(), [](const ArgCompare& x) { return x.warning; });
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
      ac.error = ac.abs_error = kInf;
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
        ac.error = mag > 0 ? ac.abs_error / mag : kInf;
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
          ac.error = ac.abs_error = kInf;
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

// Which ops a comparison is of: A's place and names, B's seq and name.
void identify(const OpRecord& a, const OpRecord& b, OpCompare& oc) {
  oc.step = a.step;
  oc.rank = a.rank;
  oc.seq_a = a.seq;
  oc.seq_b = b.seq;
  oc.name = a.name();
  oc.name_b = b.name();
  oc.op = a.op;
  oc.direction = std::string(to_string(a.dir));
  oc.scope = a.scope;
}

struct PairVerdict {
  OpCompare oc;
  bool divergent = false;
  bool beyond_rounding_only = false;  // divergent by the ratio alone (no value, no constant)
};

// x / scale with 0 / 0 = 0 and x / 0 = infinity.
double relative(double x, double scale) {
  if (!(x > 0)) return 0;
  return scale > 0 ? x / scale : kInf;
}

// Whether input i of r is a constant of its run. `use` (may be null) notes the question, and
// whether more groups of the run could change the answer (ProgramConstants::settled).
bool run_constant(const ProgramConstants* c, const OpRecord& r, size_t i, ConstantsUse* use) {
  if (c == nullptr) return false;
  if (use != nullptr) {
    use->asked = true;
    if (!c->settled(r, i)) use->unsettled = true;
  }
  return c->constant(r, i);
}

// Where each tensor input of a paired op was made (provenance.h), for the inputs whose
// difference no compared op explains: made by ops of one run only, or before the step.
struct InputOrigin {
  bool judged = false;       // its difference is this op's to report, beyond `bound`
  bool before_step = false;  // no op of the step made it, in either run
  bool data = false;         // the one-run ops that made it all ran before the model
  double bound = 0;          // the rounding the one-run ops that made it may add (relative)
  std::vector<std::string> made_a, made_b;
};

// What compare_pair knows of the ops before it.
struct Upstream {
  const std::vector<InputOrigin>* origins = nullptr;  // by input index, or null
  double seen_error = 0;  // the largest relative output error of the group's compared ops
};

// Random ops: those whose output is a draw whatever their tensor inputs hold (an in-place
// fill reads only its shape; randn_like only its input's), and those whose draw is applied to
// an input (dropout, bernoulli of probabilities, multinomial).
constexpr const char* kFillRandomOps[] = {
    "aten::normal_",      "aten::uniform_",   "aten::random_",     "aten::exponential_",
    "aten::cauchy_",      "aten::log_normal_", "aten::geometric_",  "aten::bernoulli_",
    "aten::randn_like",   "aten::rand_like",  "aten::randint_like", "aten::randn",
    "aten::rand",         "aten::randint",    "aten::randperm",    "aten::normal"};
constexpr const char* kAppliedRandomOps[] = {
    "aten::dropout",       "aten::dropout_",      "aten::native_dropout", "aten::feature_dropout",
    "aten::alpha_dropout", "aten::feature_alpha_dropout", "aten::bernoulli",
    "aten::multinomial",   "aten::poisson",       "aten::rrelu_with_noise"};

bool is_in(const std::string& op, const char* const* first, const char* const* last) {
  return std::any_of(first, last, [&](const char* r) { return op == r; });
}
bool is_fill_random(const std::string& op) {
  return is_in(op, std::begin(kFillRandomOps), std::end(kFillRandomOps));
}
bool is_random_op(const std::string& op) {
  return is_fill_random(op) || is_in(op, std::begin(kAppliedRandomOps), std::end(kAppliedRandomOps));
}

// Ops whose outputs are parts of their input, values unchanged.
bool is_selection_op(const std::string& op) {
  static const char* const kSelect[] = {
      "aten::chunk",       "aten::unsafe_chunk", "aten::split",        "aten::unsafe_split",
      "aten::split_with_sizes", "aten::unsafe_split_with_sizes", "aten::tensor_split",
      "aten::unbind",      "aten::select",       "aten::slice",        "aten::narrow",
      "aten::index_select", "aten::index",       "aten::gather",       "aten::take",
      "aten::masked_select", "aten::diagonal",   "aten::as_strided",   "aten::unfold",
      "aten::embedding"};
  return std::any_of(std::begin(kSelect), std::end(kSelect), [&](const char* s) { return op == s; });
}

// |x| at its largest over a tensor's finite values.
double magnitude(const TensorStats& t) { return std::max(std::fabs(t.min), std::fabs(t.max)); }

PairVerdict compare_pair(const OpRecord& a_in, const OpRecord& b, const CompareOptions& opt,
                         double loss_scale, const ProgramConstants* const_a,
                         const ProgramConstants* const_b, ConstantsUse* use,
                         const Upstream& up = {}) {
  // Gradients of a loss scaled by a GradScaler (fp16/bf16 AMP) against a run that scales
  // it otherwise (an fp32 reference): compared as gradients of the same loss.
  analysis_detail::ScaledArgs scaled;
  const bool rescale = std::fabs(loss_scale - 1) > 0 && a_in.dir == Direction::kBackward;
  const OpRecord a_copy =
      rescale ? analysis_detail::unscaled(a_in, b, loss_scale, scaled) : OpRecord{};
  const OpRecord& a = rescale ? a_copy : a_in;
  PairVerdict v;
  OpCompare& oc = v.oc;
  identify(a, b, oc);
  if (!scaled.empty()) oc.loss_scale = loss_scale;
  bool in_value = false, out_value = false;
  oc.args.reserve(std::max(a.inputs.size(), b.inputs.size()) +
                  std::max(a.outputs.size(), b.outputs.size()));
  oc.input_error = compare_args(a.inputs, b.inputs, "input", oc, in_value);
  oc.output_error = compare_args(a.outputs, b.outputs, "output", oc, out_value);
  if (swapped_dims(a, b, oc) | same_view_size(a, b, oc))
    in_value = std::any_of(oc.args.begin(), oc.args.end(), [](const ArgCompare& x) {
      return x.io == "input" && !x.tensor && !x.exact && std::isinf(x.error);
    });
  analysis_detail::note_unscaled(scaled, loss_scale, oc.args);
  // Error the op added; inf - inf (both sides already broken) is inherited, not added.
  oc.score = std::isinf(oc.output_error) && std::isinf(oc.input_error)
                 ? 0
                 : oc.output_error - oc.input_error;
  if (a.outputs_uninitialized()) {
    oc.exact = true;
    oc.warning = false;
    oc.score = 0;
    oc.classification = "match";
    return v;
  }
  if (oc.exact) {
    oc.classification = "match";
    return v;
  }
  // The same outputs: whatever differs in the arguments (a memory_format a port spells
  // otherwise, Contiguous against Preserve for backward's ones_like; an input whose
  // difference the op does not pass on) made no difference to what the op produced. An op
  // diverges only where its outputs differ; the notes say what differed.
  bool same_outputs = true, have_output = false;
  for (const ArgCompare& ac : oc.args) {
    if (ac.io != "output") continue;
    have_output = true;
    same_outputs = same_outputs && ac.exact;
  }
  if (have_output && same_outputs) {
    oc.classification = "noise";
    oc.score = 0;
    return v;
  }
  // A random op whose inputs are the same (a fill's tensor is only its shape) and whose
  // outputs differ drew other numbers: the generators' states differ, which no rounding
  // explains and no later op should be blamed for.
  if (is_random_op(a.op)) {
    const bool fill = is_fill_random(a.op);
    bool inputs_equal = true;
    for (size_t k = 0; k < oc.args.size() && oc.args[k].io == "input"; ++k) {
      const ArgCompare& ac = oc.args[k];
      const bool defaulted = !ac.tensor && k < a.inputs.size() && k < b.inputs.size() &&
                             spelled_default(a.inputs[k], b.inputs[k]);
      if (!ac.exact && !(fill && ac.tensor) && !defaulted) inputs_equal = false;
    }
    if (inputs_equal) {
      oc.classification = "divergent";
      oc.cause = "draws";
      oc.ratio = kInf;
      v.divergent = true;
      return v;
    }
  }
  // Noise model: the error each output carries beyond what its inputs brought, against
  // the rounding the op may make (docs/cli.md, "Noise model").
  const OpNoise nz = op_noise(a, b);
  const size_t n_in = std::min(a.inputs.size(), b.inputs.size());
  double u_op = 0;
  for (const OutputBound& ob : nz.outputs) u_op = std::max(u_op, ob.u);
  if (!(u_op > 0)) u_op = std::ldexp(1.0, -24);
  double inherited = 0;
  bool constant_differs = false, one_run_made = false;
  const bool fill_random = is_fill_random(a.op);
  for (size_t i = 0; i < oc.args.size() && oc.args[i].io == "input"; ++i) {
    const ArgCompare& ac = oc.args[i];
    if (ac.exact || i >= n_in || (!ac.tensor && spelled_default(a.inputs[i], b.inputs[i])) ||
        (fill_random && ac.tensor))
      continue;
    double rel = 0;
    if (ac.tensor) {
      const InputOrigin* origin =
          up.origins != nullptr && i < up.origins->size() ? &(*up.origins)[i] : nullptr;
      if (origin != nullptr && origin->judged) {
        // No compared op made this input: its difference is the ops of one run only that
        // did (or the start), unless their rounding explains it.
        const double own = relative(ac.abs_error, magnitude(*a.inputs[i].tensor));
        const double allowed = origin->bound + opt.inherited_weight * up.seen_error;
        if (own > opt.noise_factor * allowed && own > opt.rtol) {
          one_run_made = true;
          if (oc.cause.empty()) {
            oc.cause = origin->before_step ? "before_step"
                       : origin->data     ? "data"
                                          : "one_run_ops";
            oc.made_by_a = origin->made_a;
            oc.made_by_b = origin->made_b;
          }
          oc.args[i].note +=
              std::string(oc.args[i].note.empty() ? "" : "; ") +
              (origin->before_step ? "made before the first compared step, and differs"
                                   : "made by ops of one run only, and differs beyond their "
                                     "rounding");
          continue;
        }
      }
      rel = relative(ac.abs_error, nz.input_scale[i]);
    } else {
      // A number from the caller (a constant, or a value computed on the host from an
      // earlier item()): one rounding of the op's precision, times the noise factor, is
      // what it may differ by; beyond that the op was called with a different constant.
      rel = ac.error;
      const bool in_a = run_constant(const_a, a, i, use);
      const bool program_constant = run_constant(const_b, b, i, use) || in_a;
      if (program_constant || !(rel <= opt.noise_factor * u_op)) {
        constant_differs = true;  // the op's own cause, not inherited
        if (program_constant) oc.args[i].note += " (a constant of the program: every step)";
        continue;
      }
    }
    inherited += nz.input_kappa[i] * rel;
  }
  oc.inherited = inherited;
  oc.ratio = 0;
  bool have = false;
  for (size_t k = 0; k < oc.args.size(); ++k) {
    const ArgCompare& ac = oc.args[k];
    if (ac.io != "output") continue;
    const size_t out_index = static_cast<size_t>(ac.index);
    if (out_index >= nz.outputs.size()) continue;
    const OutputBound& ob = nz.outputs[out_index];
    // What the op's own rounding and its inputs' differences can explain: bound +
    // weight * inherited. The statistics see only part of an input's difference (its
    // extremes, mean and norm), so the inherited estimate is a lower bound and is weighted
    // (docs/cli.md: measured 12 times too low on the example's batch-summed gradients).
    const double err = relative(ac.abs_error, ob.scale);
    const double allowed = ob.bound + opt.inherited_weight * inherited;
    const double ratio = std::isinf(err) && std::isinf(inherited) ? 0
                         : !(err > 0)                             ? 0
                         : allowed > 0                            ? err / allowed
                                                                  : kInf;
    if (!have || ratio > oc.ratio) {
      have = true;
      oc.ratio = ratio;
      oc.error = err;
      oc.bound = ob.bound;
      oc.terms = static_cast<int64_t>(std::llround(std::min(ob.terms, 9e18)));
    }
  }
  const double added =
      std::isinf(oc.error) && std::isinf(oc.inherited) ? 0 : oc.error - oc.inherited;
  // An op that hands on part of its input (a chunk, a row, a gather) computes nothing: a
  // difference of its input that the input's statistics barely show may be all in the part
  // it hands on, so the part's difference is inherited whatever its size.
  const bool selects = is_selection_op(a.op) && inherited > 0;
  const bool beyond_noise = !selects && oc.ratio > opt.noise_factor && added > opt.rtol;
  v.divergent = in_value || out_value || constant_differs || beyond_noise || one_run_made;
  v.beyond_rounding_only =
      beyond_noise && !in_value && !out_value && !constant_differs && !one_run_made;
  if (v.divergent && oc.cause.empty() && is_random_op(a.op)) {
    // Dropout's masks: another count of zeros from the same count in the input.
    const TensorStats* ia = a.inputs.empty() || !a.inputs[0].is_tensor() ? nullptr : &*a.inputs[0].tensor;
    const TensorStats* ib = b.inputs.empty() || !b.inputs[0].is_tensor() ? nullptr : &*b.inputs[0].tensor;
    const TensorStats* xa = a.outputs.empty() || !a.outputs[0].is_tensor() ? nullptr : &*a.outputs[0].tensor;
    const TensorStats* xb = b.outputs.empty() || !b.outputs[0].is_tensor() ? nullptr : &*b.outputs[0].tensor;
    if (ia && ib && xa && xb && ia->zero == ib->zero && xa->zero != xb->zero) oc.cause = "draws";
  }
  oc.classification = v.divergent ? "divergent" : "noise";
  return v;
}

using analysis_detail::earlier;

// Ops of one run only between the same two compared ops: a different implementation of the
// same computation (LibTorch's C++ nn::Linear as t + addmm, Python's as aten::linear; x * 1.0
// as mul.Scalar in C++, mul.Tensor in Python) or a different computation (a layer without
// its bias, a constant 1.01). Ops of the place are compared by their first output, in order:
// an op of A with the first op of B after the last one taken that has the same name,
// direction and first output's dtype and shape; and the last op of each side, whatever their
// names, when their first outputs have the same dtype and shape. Identical, or within the
// rounding of the op (of every op of the place, for the last ones) plus what the compared ops
// before it already carried, is the same computation; beyond that the place is divergent.
// `seen_error` is the largest relative output error of the group's compared ops so far.
bool same_first_output(const OpRecord& x, const OpRecord& y) {
  if (x.outputs.empty() || y.outputs.empty() || !x.outputs[0].is_tensor() ||
      !y.outputs[0].is_tensor() || x.outputs_uninitialized() || y.outputs_uninitialized() ||
      x.dir != y.dir)
    return false;
  const TensorStats& tx = *x.outputs[0].tensor;
  const TensorStats& ty = *y.outputs[0].tensor;
  return tx.dtype == ty.dtype && tx.shape == ty.shape;
}

double output_bound(const OpRecord& r) {
  const OpNoise nz = op_noise(r, r);
  return nz.outputs.empty() ? 0 : nz.outputs[0].bound;
}

PairVerdict judge_place(const OpRecord& la, const OpRecord& lb, double bound, double seen_error,
                        const CompareOptions& opt) {
  PairVerdict v;
  OpCompare& oc = v.oc;
  identify(la, lb, oc);
  ArgCompare ac;
  ac.io = "output";
  ac.index = 0;
  compare_stats(*la.outputs[0].tensor, *lb.outputs[0].tensor, ac);
  oc.exact = ac.exact;
  oc.output_error = ac.error;
  const OpNoise na = op_noise(la, lb);
  const double scale = na.outputs.empty() ? 0 : na.outputs[0].scale;
  oc.error = relative(ac.abs_error, scale);
  oc.bound = bound;
  oc.inherited = seen_error;
  const double allowed = bound + opt.inherited_weight * seen_error;
  oc.ratio = !(oc.error > 0) ? 0 : allowed > 0 ? oc.error / allowed : kInf;
  ac.note = "ops of one run only, compared by their output: " + la.name() + " vs " + lb.name();
  oc.args.push_back(std::move(ac));
  v.divergent = !oc.exact && oc.ratio > opt.noise_factor && oc.error - seen_error > opt.rtol;
  oc.classification = oc.exact ? "match" : v.divergent ? "divergent" : "noise";
  return v;
}

// The same op on the same kinds of operands: the same overload, a tensor where the other has
// a tensor (0-d numbers aside, as in pairing), the same shapes. A Scalar against a Tensor
// operand of another shape is another computation (ToTensor's division by 255 against
// Normalize's by the std), not to be judged by its output.
bool same_operands(const OpRecord& x, const OpRecord& y) {
  if (x.overload != y.overload) return false;
  auto operands = [](const OpRecord& r) {
    std::vector<const std::vector<int64_t>*> shapes;
    for (const Arg& in : r.inputs)
      if (in.is_tensor() && !in.tensor->shape.empty()) shapes.push_back(&in.tensor->shape);
    return shapes;
  };
  const auto sx = operands(x), sy = operands(y);
  if (sx.size() != sy.size()) return false;
  for (size_t k = 0; k < sx.size(); ++k)
    if (*sx[k] != *sy[k]) return false;
  return true;
}

// The parameters the ops `at` of `ops` read, sorted.
std::vector<std::string> params_read(const std::vector<OpRecord>& ops,
                                     const std::vector<int64_t>& at) {
  std::vector<std::string> p;
  for (int64_t k : at)
    for (const Arg& in : ops[static_cast<size_t>(k)].inputs)
      if (in.is_tensor() && !in.tensor->param.empty()) p.push_back(in.tensor->param);
  std::sort(p.begin(), p.end());
  p.erase(std::unique(p.begin(), p.end()), p.end());
  return p;
}

// Both sides of a place read a parameter in common (a layer without its bias reads one less).
bool same_params_read(const std::vector<OpRecord>& a, const std::vector<int64_t>& only_a,
                      const std::vector<OpRecord>& b, const std::vector<int64_t>& only_b) {
  const std::vector<std::string> pa = params_read(a, only_a), pb = params_read(b, only_b);
  std::vector<std::string> common;
  std::set_intersection(pa.begin(), pa.end(), pb.begin(), pb.end(), std::back_inserter(common));
  return !common.empty();
}

// One comparison of a place: the verdict, and the ops of A and B it compared.
struct PlaceVerdict {
  PairVerdict v;
  int64_t ka = -1, kb = -1;
};

// The comparisons of one place, divergent or not, in A's order.
std::vector<PlaceVerdict> compare_place(const std::vector<OpRecord>& a,
                                        const std::vector<OpRecord>& b,
                                        const std::vector<int64_t>& only_a,
                                        const std::vector<int64_t>& only_b, double seen_error,
                                        const CompareOptions& opt) {
  std::vector<PlaceVerdict> out;
  if (only_a.empty() || only_b.empty()) return out;
  auto at = [](const std::vector<OpRecord>& ops, int64_t k) -> const OpRecord& {
    return ops[static_cast<size_t>(k)];
  };
  size_t next_b = 0;
  bool last_done = false;
  for (int64_t ka : only_a) {
    const OpRecord& ra = at(a, ka);
    for (size_t m = next_b; m < only_b.size(); ++m) {
      const OpRecord& rb = at(b, only_b[m]);
      if (rb.op != ra.op || !same_first_output(ra, rb) || !same_operands(ra, rb)) continue;
      next_b = m + 1;
      last_done = last_done || (ka == only_a.back() && m + 1 == only_b.size());
      out.push_back({judge_place(ra, rb, std::max(output_bound(ra), output_bound(rb)),
                                 seen_error, opt),
                     ka, only_b[m]});
      break;
    }
  }
  const OpRecord& la = at(a, only_a.back());
  const OpRecord& lb = at(b, only_b.back());
  // The last ops are compared whatever their names only inside the model, where both sides'
  // ops of the place read a parameter in common (nn.Linear as aten::linear against t +
  // addmm): elsewhere (a metric's item(), the data pipeline's own ops) two last ops of one
  // shape need not compute the same thing at all.
  if (!last_done && same_first_output(la, lb) && same_params_read(a, only_a, b, only_b)) {
    double bound = 0;  // the rounding the place may make: every op's, on both sides
    for (int64_t k : only_a) bound += output_bound(at(a, k));
    for (int64_t k : only_b) bound += output_bound(at(b, k));
    out.push_back({judge_place(la, lb, bound, seen_error, opt), only_a.back(), only_b.back()});
  }
  return out;
}

// The parameter each op of a group reads, or for an op of an optimizer step (a forward op
// run without grad mode) that reads none, the parameter the next op of its run of such ops
// reads: an optimizer works on a parameter's state (its momentum buffer, Adam's moments) and
// then updates the parameter, so its ops before the update are that parameter's.
std::vector<std::string> params_of(const std::vector<OpRecord>& ops) {
  std::vector<std::string> out(ops.size());
  auto own = [](const OpRecord& r) -> std::string {
    for (const Arg& in : r.inputs)
      if (in.is_tensor() && !in.tensor->param.empty()) return in.tensor->param;
    return {};
  };
  auto no_grad = [](const OpRecord& r) {
    return r.dir == Direction::kForward && r.grad.has_value() && !*r.grad;
  };
  std::string next;  // the parameter read next in the current run of no-grad ops
  for (size_t k = ops.size(); k-- > 0;) {
    out[k] = own(ops[k]);
    if (!no_grad(ops[k])) {
      next.clear();
      continue;
    }
    if (!out[k].empty()) {
      next = out[k];
    } else {
      out[k] = next;
    }
  }
  return out;
}

// "conv1" for "conv1.weight", "(root)" for a parameter of the top module.
std::string module_of_param(const std::string& param) {
  const size_t dot = param.rfind('.');
  return dot == std::string::npos ? "(root)" : param.substr(0, dot);
}

// Where the tensor inputs of each paired op were made (provenance.h), judged once per pair.
class Origins {
 public:
  Origins(const std::vector<OpRecord>& a, const std::vector<OpRecord>& b,
          const analysis_detail::AlignPairs& pairs, bool first_step)
      : a_(a), b_(b), prov_a_(a), prov_b_(b), first_step_(first_step),
        partner_a_(a.size(), -1), partner_b_(b.size(), -1),
        model_a_(first_model_op(a)), model_b_(first_model_op(b)) {
    for (const auto& [i, j] : pairs) {
      if (i < 0 || j < 0) continue;
      partner_a_[static_cast<size_t>(i)] = j;
      partner_b_[static_cast<size_t>(j)] = i;
    }
  }

  const analysis_detail::Provenance& provenance_a() const { return prov_a_; }
  const analysis_detail::Provenance& provenance_b() const { return prov_b_; }

  // A's op ka and B's op kb were compared with each other (a place's ops, by their outputs).
  void compared(int64_t ka, int64_t kb) {
    partner_a_[static_cast<size_t>(ka)] = kb;
    partner_b_[static_cast<size_t>(kb)] = ka;
  }

  // By input index of the pair (A's op i, B's op j).
  std::vector<InputOrigin> of(size_t i, size_t j) const {
    const size_t n = std::min(a_[i].inputs.size(), b_[j].inputs.size());
    std::vector<InputOrigin> out(n);
    // An op that makes no tensor (item(), is_nonzero) hands a number to the host: where the
    // number matters, the op that takes it as an argument compares it. Metrics' item() of one
    // run may pair with another item() of the other run.
    if (std::none_of(a_[i].outputs.begin(), a_[i].outputs.end(),
                     [](const Arg& o) { return o.is_tensor(); }))
      return out;
    for (size_t k = 0; k < n; ++k) {
      if (!a_[i].inputs[k].is_tensor() || !b_[j].inputs[k].is_tensor()) continue;
      const int64_t pa = prov_a_.producer(i, k), pb = prov_b_.producer(j, k);
      const bool compared_a = pa >= 0 && partner_a_[static_cast<size_t>(pa)] >= 0;
      const bool compared_b = pb >= 0 && partner_b_[static_cast<size_t>(pb)] >= 0;
      InputOrigin& o = out[k];
      if (compared_a && compared_b) continue;  // the compared ops' verdicts cover it
      if (pa < 0 && pb < 0) {
        // Made before the step in both runs: at the first step compared that is the start
        // (the loaded state, the data made up front), which must be the same; later, the
        // state the steps before left, judged there.
        o.judged = first_step_;
        o.before_step = true;
        o.bound = std::ldexp(1.0, -24);
        continue;
      }
      o.judged = true;
      const int64_t last_a = chain(a_, prov_a_, partner_a_, pa, o, o.made_a);
      const int64_t last_b = chain(b_, prov_b_, partner_b_, pb, o, o.made_b);
      o.data = last_a < model_a_ && last_b < model_b_;
      if (!(o.bound > 0)) o.bound = std::ldexp(1.0, -24);
    }
    return out;
  }

 private:
  // The ops of one run only upstream of a tensor op `from` made: itself and, through their
  // inputs, the one-run ops that made those, nearest first; their rounding adds to o.bound.
  // Returns the latest of them (-1: none).
  static int64_t chain(const std::vector<OpRecord>& ops, const analysis_detail::Provenance& prov,
                       const std::vector<int64_t>& partner, int64_t from, InputOrigin& o,
                       std::vector<std::string>& names) {
    constexpr size_t kVisit = 64;
    std::vector<int64_t> todo;
    std::vector<int64_t> seen;
    if (from >= 0 && partner[static_cast<size_t>(from)] < 0) todo.push_back(from);
    for (size_t q = 0; q < todo.size() && seen.size() < kVisit; ++q) {
      const int64_t k = todo[q];
      if (std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
      seen.push_back(k);
      const OpRecord& r = ops[static_cast<size_t>(k)];
      o.bound += output_bound(r);
      if (names.size() < kSequenceDiffNames) names.push_back(r.name());
      for (size_t in = 0; in < r.inputs.size(); ++in) {
        const int64_t p = prov.producer(static_cast<size_t>(k), in);
        if (p >= 0 && partner[static_cast<size_t>(p)] < 0) todo.push_back(p);
      }
    }
    return seen.empty() ? -1 : *std::max_element(seen.begin(), seen.end());
  }

  // The first forward op that reads a parameter: where the model starts (ops.size() if none).
  static int64_t first_model_op(const std::vector<OpRecord>& ops) {
    for (size_t k = 0; k < ops.size(); ++k) {
      if (ops[k].dir != Direction::kForward) continue;
      for (const Arg& in : ops[k].inputs)
        if (in.is_tensor() && !in.tensor->param.empty()) return static_cast<int64_t>(k);
    }
    return static_cast<int64_t>(ops.size());
  }

  const std::vector<OpRecord>& a_;
  const std::vector<OpRecord>& b_;
  analysis_detail::Provenance prov_a_, prov_b_;
  bool first_step_;
  std::vector<int64_t> partner_a_, partner_b_;
  int64_t model_a_, model_b_;
};

// A difference made by ops of one run only may be the same computation in another order:
// Python's multi-head attention scales q after splitting the heads, LibTorch's C++ before,
// so the split's input differs by the scale, and the two runs agree again at the product
// q k^T. Such a difference is held (pending) from the op where it was found, its values
// followed downstream in both runs (provenance.h): a compared op that reads it in both runs
// and whose inputs agree again within rounding reconciles it, and it is no divergence
// (classified noise, cause "reconciled"). A difference no op reconciles by the end of the
// step stands. Outputs that came out the same in both runs carry nothing on.
class Reconciler {
 public:
  Reconciler(size_t na, size_t nb) : taint_a_(na), taint_b_(nb) {}

  // An op of one run only: what made its inputs, it carries on.
  void one_run_op(bool in_a, size_t k, const analysis_detail::Provenance& prov,
                  const std::vector<OpRecord>& ops) {
    std::vector<uint32_t> src;
    auto& taint = in_a ? taint_a_ : taint_b_;
    for (size_t in = 0; in < ops[k].inputs.size(); ++in) merge(src, from(taint, prov.producer(k, in)));
    taint[k] = std::move(src);
  }

  // A compared op (A's i, B's j) and its comparison. Returns the pending differences it
  // reconciles (ids), after noting what its outputs carry on; `pending_id` >= 0 when its own
  // verdict starts one.
  std::vector<uint32_t> compared_op(size_t i, size_t j, const std::vector<OpRecord>& a,
                                    const std::vector<OpRecord>& b, const Origins& origins,
                                    const OpCompare& oc, int64_t pending_id,
                                    const CompareOptions& opt) {
    std::vector<uint32_t> src;
    bool any_both = false, agree = true;
    const size_t n = std::min(a[i].inputs.size(), b[j].inputs.size());
    for (size_t k = 0; k < n; ++k) {
      const auto& ta = from(taint_a_, origins.provenance_a().producer(i, k));
      const auto& tb = from(taint_b_, origins.provenance_b().producer(j, k));
      if (ta.empty() && tb.empty()) continue;
      merge(src, ta);
      merge(src, tb);
      if (ta.empty() || tb.empty()) {
        agree = false;  // one run's value only went through the difference
        continue;
      }
      any_both = true;
      if (k >= oc.args.size() || !a[i].inputs[k].is_tensor()) continue;
      const ArgCompare& ac = oc.args[k];
      const TensorStats& t = *a[i].inputs[k].tensor;
      const double u = std::max(unit_roundoff(t.dtype), std::ldexp(1.0, -24));
      if (!ac.exact && !(relative(ac.abs_error, magnitude(t)) <= opt.noise_factor * 4 * u))
        agree = false;
    }
    std::vector<uint32_t> reconciled;
    if (pending_id < 0 && any_both && agree) {
      reconciled = std::move(src);  // the same values again: nothing carried on
    } else {
      if (pending_id >= 0) merge(src, {static_cast<uint32_t>(pending_id)});
      bool outputs_differ = false;
      for (const ArgCompare& ac : oc.args) outputs_differ = outputs_differ || (ac.io == "output" && !ac.exact);
      if (outputs_differ) {
        taint_a_[i] = src;
        taint_b_[j] = std::move(src);
      }
    }
    return reconciled;
  }

 private:
  static const std::vector<uint32_t>& from(const std::vector<std::vector<uint32_t>>& taint,
                                           int64_t k) {
    static const std::vector<uint32_t> kNone;
    return k >= 0 ? taint[static_cast<size_t>(k)] : kNone;
  }
  static void merge(std::vector<uint32_t>& to, const std::vector<uint32_t>& add) {
    for (uint32_t x : add)
      if (std::find(to.begin(), to.end(), x) == to.end()) to.push_back(x);
  }
  std::vector<std::vector<uint32_t>> taint_a_, taint_b_;
};

UnmatchedOp unmatched(const OpRecord& r, const char* side) {
  return UnmatchedOp{r.step, r.rank, side, r.seq, r.name()};
}

// The group's earliest divergent op, or an op nested in it that diverges too (nesting.h):
// an outer op inherits the divergence of the op it ran, which is the one to blame.
// `get(k)` is the comparison of the k-th op of `index` (positions in `a`).
template <class Get>
std::optional<OpCompare> group_first(const std::vector<OpRecord>& a,
                                     const std::vector<size_t>& index, Get get) {
  if (index.empty()) return std::nullopt;
  std::vector<analysis_detail::OpPlace> places;
  places.reserve(a.size());
  for (const OpRecord& r : a) places.push_back({r.seq, r.thread, r.depth});
  const analysis_detail::CallTree tree(places);
  const size_t chosen = tree.innermost_earliest(index);
  for (size_t k = 0; k < index.size(); ++k) {
    if (index[k] == chosen) return get(k);
  }
  return std::nullopt;
}

// Module attribution (modules.h), `ops` one step of one rank in seq order.
std::vector<std::string> modules_of(const std::vector<OpRecord>& ops,
                                    const analysis_detail::ModuleOrder* order) {
  std::vector<analysis_detail::ModuleOp> m;
  m.reserve(ops.size());
  for (const OpRecord& r : ops) m.push_back(analysis_detail::module_op(r));
  return analysis_detail::attribute_modules(m, order, analysis_detail::BackwardRule::kInherit);
}

// An op downstream of a near-tie flip (flips.h) that the rounding model alone would call
// divergent is classified noise and counted as excused.
void excuse_after_flip(const std::optional<analysis_detail::FlipTracker::Source>& flip, int64_t seq,
                       PairVerdict& v, CompareResult& res) {
  if (!flip) return;
  v.oc.after_flip = flip->name;
  v.oc.after_flip_seq = flip->seq;
  if (flip->seq == seq) ++res.flip_ops;
  if (!v.divergent || !v.beyond_rounding_only) return;
  v.divergent = false;
  v.oc.classification = "noise";
  v.oc.excused = true;
  ++res.excused_ops;
  if (!res.first_excused || earlier(v.oc, *res.first_excused)) res.first_excused = v.oc;
}

// Adds `m` to the module of its name in `modules` (in order of first appearance; `index`
// by name), or appends it.
void add_module(std::vector<ModuleCompare>& modules, std::map<std::string, size_t>& index,
                ModuleCompare&& m) {
  auto [at, added] = index.emplace(m.module, modules.size());
  if (added) {
    modules.push_back(std::move(m));
    return;
  }
  ModuleCompare& to = modules[at->second];
  to.ops += m.ops;
  to.match += m.match;
  to.noise += m.noise;
  to.divergent += m.divergent;
  to.max_ratio = std::max(to.max_ratio, m.max_ratio);
  if (m.first_divergent &&
      (!to.first_divergent || earlier(*m.first_divergent, *to.first_divergent)))
    to.first_divergent = std::move(m.first_divergent);
}

// Per module in order of first appearance among `ops` (--by module), with the places of ops
// of one run only found divergent (`places`): the same verdicts as --first.
std::vector<ModuleCompare> modules_compared(const std::vector<OpCompare>& ops,
                                            const std::vector<OpCompare>& places) {
  std::vector<ModuleCompare> out;
  std::map<std::string, size_t> index;
  std::vector<const OpCompare*> all;
  all.reserve(ops.size() + places.size());
  for (const OpCompare& o : ops) all.push_back(&o);
  for (const OpCompare& o : places) all.push_back(&o);
  std::stable_sort(all.begin(), all.end(),
                   [](const OpCompare* x, const OpCompare* y) { return x->seq_a < y->seq_a; });
  for (const OpCompare* op : all) {
    const OpCompare& o = *op;
    ModuleCompare m;  // the op alone
    m.module = o.module;
    m.ops = 1;
    m.match = o.classification == "match";
    m.noise = o.classification == "noise";
    m.divergent = o.classification == "divergent";
    if (m.divergent) m.first_divergent = o;
    if (std::isfinite(o.ratio)) m.max_ratio = std::max(0.0, o.ratio);
    add_module(out, index, std::move(m));
  }
  return out;
}

}  // namespace

namespace analysis_detail {

GroupResult compare_group(const GroupKey& key, const std::vector<OpRecord>& a,
                          const std::vector<OpRecord>& b, const CompareOptions& opt,
                          double loss_scale, const ModuleOrder* order_a,
                          const ProgramConstants& const_a, const ProgramConstants& const_b,
                          ConstantsUse* use, bool first_step) {
  GroupResult g;
  CompareResult& res = g.part;
  res.ops_a = static_cast<int64_t>(a.size());
  res.ops_b = static_cast<int64_t>(b.size());
  res.groups_compared = 1;
  std::vector<std::string> module_of = modules_of(a, order_a);
  const std::vector<std::string> param_of = params_of(a);
  for (size_t k = 0; k < a.size(); ++k)  // an optimizer's op: its parameter's module
    if (!param_of[k].empty() && !consumed_module(a[k])) module_of[k] = module_of_param(param_of[k]);
  const GroupPairing paired = pair_ops(a, b, opt.max_align_cost);
  add_sequence_diffs(a, b, paired.pairs, res.sequence_diffs);
  Origins origins(a, b, paired.pairs, first_step);
  std::vector<OpCompare> divergent, ops;
  ops.reserve(paired.pairs.size());
  // Inexact ops: their positions in A and in `ops` (most ops of two runs are inexact: no
  // copies of them).
  std::vector<size_t> divergent_at, inexact_at, inexact_op;
  FlipTracker flips;
  std::vector<int64_t> only_a, only_b;
  double seen_error = 0;
  // A place of ops of one run only, closed by the next compared op or the group's end.
  auto close_place = [&]() {
    for (PlaceVerdict& p : compare_place(a, b, only_a, only_b, seen_error, opt)) {
      // What the place's compared ops made counts as compared: a difference they pass on
      // is theirs, judged here.
      origins.compared(p.ka, p.kb);
      if (!p.v.divergent) continue;
      PairVerdict& pv = p.v;
      const int64_t ka = p.ka;
      pv.oc.module = module_of[static_cast<size_t>(ka)];
      pv.oc.param = param_of[static_cast<size_t>(ka)];
      ++res.divergent_ops;
      divergent.push_back(pv.oc);
      divergent_at.push_back(static_cast<size_t>(ka));
      res.divergent_places.push_back(std::move(pv.oc));
    }
    only_a.clear();
    only_b.clear();
  };
  Reconciler reconcile(a.size(), b.size());
  // Differences made by ops of one run only, held until an op reconciles them or the step
  // ends: where their comparison is in `ops` and in `divergent`.
  struct Pending {
    size_t op, divergent;
    std::string reconciled_at;
  };
  std::vector<Pending> pending;
  for (const auto& [i, j] : paired.pairs) {
    if (i < 0 || j < 0) {
      res.unmatched.push_back(i < 0 ? unmatched(b[j], "b") : unmatched(a[i], "a"));
      (i < 0 ? only_b : only_a).push_back(i < 0 ? j : i);
      if (i < 0)
        reconcile.one_run_op(false, static_cast<size_t>(j), origins.provenance_b(), b);
      else
        reconcile.one_run_op(true, static_cast<size_t>(i), origins.provenance_a(), a);
      continue;
    }
    close_place();
    const std::vector<InputOrigin> in_origins =
        origins.of(static_cast<size_t>(i), static_cast<size_t>(j));
    PairVerdict v = compare_pair(a[i], b[j], opt, loss_scale, &const_a, &const_b, use,
                                 Upstream{&in_origins, seen_error});
    if (std::isfinite(v.oc.error)) seen_error = std::max(seen_error, v.oc.error);
    v.oc.module = module_of[static_cast<size_t>(i)];
    v.oc.param = param_of[static_cast<size_t>(i)];
    excuse_after_flip(flips.observe(a[i], v.oc), a[i].seq, v, res);
    res.warnings += v.oc.warning ? 1 : 0;
    if (v.oc.classification == "match") {
      ++res.match_ops;
    } else if (v.oc.classification == "noise") {
      ++res.noise_ops;
      if (!v.oc.excused && !std::isnan(v.oc.ratio) &&
          (!res.max_noise || v.oc.ratio > res.max_noise->ratio))
        res.max_noise = v.oc;
    } else {
      ++res.divergent_ops;
    }
    const bool held = v.divergent && (v.oc.cause == "data" || v.oc.cause == "one_run_ops");
    for (uint32_t p : reconcile.compared_op(static_cast<size_t>(i), static_cast<size_t>(j), a, b,
                                            origins, v.oc,
                                            held ? static_cast<int64_t>(pending.size()) : -1, opt))
      if (pending[p].reconciled_at.empty()) pending[p].reconciled_at = a[i].name();
    if (held) pending.push_back({ops.size(), divergent.size(), {}});
    if (v.divergent) {
      divergent.push_back(v.oc);
      divergent_at.push_back(static_cast<size_t>(i));
    }
    if (!v.oc.exact) {
      inexact_op.push_back(ops.size());
      inexact_at.push_back(static_cast<size_t>(i));
    }
    ++res.matched;
    ops.push_back(std::move(v.oc));
  }
  close_place();
  if (std::any_of(pending.begin(), pending.end(),
                  [](const Pending& p) { return !p.reconciled_at.empty(); })) {
    std::vector<bool> drop(divergent.size(), false);
    for (const Pending& p : pending) {
      if (p.reconciled_at.empty()) continue;
      OpCompare& o = ops[p.op];
      o.classification = "noise";
      o.cause = "reconciled";
      for (ArgCompare& ac : o.args)
        if (ac.note.find("ops of one run only") != std::string::npos)
          ac.note += "; the runs agree again at " + p.reconciled_at +
                     ": the same computation in another order";
      --res.divergent_ops;
      ++res.noise_ops;
      drop[p.divergent] = true;
    }
    size_t kept = 0;
    for (size_t k = 0; k < divergent.size(); ++k) {
      if (drop[k]) continue;
      if (kept != k) divergent[kept] = std::move(divergent[k]);
      divergent_at[kept++] = divergent_at[k];
    }
    divergent.resize(kept);
    divergent_at.resize(kept);
  }
  g.first_divergent = group_first(a, divergent_at, [&](size_t k) { return divergent[k]; });
  g.first_inexact = group_first(a, inexact_at, [&](size_t k) { return ops[inexact_op[k]]; });
  res.aligned_by_lcs = paired.by == PairedBy::kContent ? 1 : 0;
  res.aligned_by_thread = paired.by == PairedBy::kThread ? 1 : 0;
  res.aligned_approximately = paired.approximate ? 1 : 0;
  if (opt.by_module) res.modules = modules_compared(ops, res.divergent_places);
  if (opt.keep_ops == KeepOps::kAll) {
    res.ops = std::move(ops);
  } else {
    const bool warned = opt.keep_ops == KeepOps::kWarned;
    for (OpCompare& o : ops)
      if (o.classification == "divergent" || (warned && o.warning)) res.ops.push_back(std::move(o));
  }
  return g;
}

GroupResult one_run_group(const GroupKey& key, const std::vector<OpRecord>& ops, const char* side) {
  GroupResult g;
  const bool in_a = side[0] == 'a';
  (in_a ? g.part.ops_a : g.part.ops_b) = static_cast<int64_t>(ops.size());
  (in_a ? g.part.only_a : g.part.only_b).push_back(key);
  for (const OpRecord& r : ops) g.part.unmatched.push_back(unmatched(r, side));
  return g;
}

CompareMerge::CompareMerge(const CompareOptions& opt) : opt_(opt) {
  res_.first_mode = opt.first;
  res_.exact_mode = opt.exact;
}

void CompareMerge::add(GroupResult&& g) {
  CompareResult& res = res_;
  CompareResult& p = g.part;
  auto append = [](auto& to, auto& from) {
    to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
  };
  append(res.ops, p.ops);
  append(res.unmatched, p.unmatched);
  append(res.only_a, p.only_a);
  append(res.only_b, p.only_b);
  append(res.sequence_diffs, p.sequence_diffs);
  append(res.divergent_places, p.divergent_places);
  for (int64_t CompareResult::*n :
       {&CompareResult::warnings, &CompareResult::groups_compared, &CompareResult::aligned_by_lcs,
        &CompareResult::aligned_by_thread, &CompareResult::aligned_approximately,
        &CompareResult::match_ops, &CompareResult::noise_ops, &CompareResult::divergent_ops,
        &CompareResult::flip_ops, &CompareResult::excused_ops, &CompareResult::ops_a,
        &CompareResult::ops_b, &CompareResult::matched})
    res.*n += p.*n;
  if (p.max_noise && (!res.max_noise || p.max_noise->ratio > res.max_noise->ratio))
    res.max_noise = std::move(p.max_noise);
  if (p.first_excused && (!res.first_excused || earlier(*p.first_excused, *res.first_excused)))
    res.first_excused = std::move(p.first_excused);
  auto keep_earliest = [](std::optional<OpCompare>& found, std::optional<OpCompare>& in) {
    if (in && (!found || earlier(*in, *found))) found = std::move(in);
  };
  keep_earliest(first_divergent_, g.first_divergent);
  keep_earliest(first_inexact_, g.first_inexact);
  for (ModuleCompare& m : p.modules) add_module(res.modules, module_index_, std::move(m));
}

CompareResult CompareMerge::finish(int64_t background_a, int64_t background_b) {
  CompareResult& res = res_;
  res.background_a = background_a;
  res.background_b = background_b;
  for (const UnmatchedOp& u : res.unmatched) {
    if (!res.first_unmatched || earlier(u, *res.first_unmatched)) res.first_unmatched = u;
  }
  for (const SequenceDiff& d : res.sequence_diffs) {
    const SequenceDiff* f = res.first_sequence_diff ? &*res.first_sequence_diff : nullptr;
    if (!f || std::tie(d.step, d.seq_a, d.rank) < std::tie(f->step, f->seq_a, f->rank))
      res.first_sequence_diff = d;
  }
  if (res.ops_a + res.ops_b > 0)
    res.aligned_fraction =
        2.0 * static_cast<double>(res.matched) / static_cast<double>(res.ops_a + res.ops_b);
  res.found = first_divergent_.has_value();
  res.identical = !first_inexact_ && res.unmatched.empty();
  res.first = opt_.exact ? std::move(first_inexact_) : std::move(first_divergent_);
  return std::move(res);
}

}  // namespace analysis_detail

bool CompareResult::differs() const noexcept {
  if (exact_mode) return !identical;
  if (first_mode) return found;
  return warnings > 0 || !unmatched.empty();
}

}  // namespace precprobe
