// One paired op judged (compare_parts.h): the noise model, constants of the program,
// differences made by ops of one run only, random draws (docs/cli.md).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>

#include "compare_parts.h"
#include "loss_scale.h"
#include "op_names.h"

namespace precprobe::analysis_detail {

// Which ops a comparison is of: A's place and names, B's seq and name.
void identify(const OpRecord& a, const OpRecord& b, OpCompare& oc) {
  oc.step = a.step;
  oc.rank = a.rank;
  oc.seq_a = a.seq;
  oc.seq_b = b.seq;
  a.name_into(oc.name);
  b.name_into(oc.name_b);
  oc.op = a.op;
  oc.direction.assign(to_string(a.dir));
  oc.scope = a.scope;
}

// Every field is reset by name: a field added to these structs must be added here (the
// sizes below say when one was).
#if defined(__GLIBCXX__) && !defined(_GLIBCXX_DEBUG) && UINTPTR_MAX == UINT64_MAX
static_assert(sizeof(ArgCompare) == 344, "a field added to ArgCompare: reset it below");
static_assert(sizeof(OpCompare) == 560, "a field added to OpCompare: reset it below");
#endif

void reset_keeping_storage(ArgCompare& ac) {
  ac.io.clear();
  ac.index = 0;
  ac.tensor = true;
  ac.dtype_n.clear();
  ac.dtype_b.clear();
  ac.shape_n.clear();
  ac.shape_b.clear();
  ac.max = ac.min = ac.mean = ac.norm = StatDiff{};
  ac.warning = false;
  ac.error = ac.abs_error = 0;
  ac.exact = true;
  ac.note.clear();
}

void reset_keeping_storage(OpCompare& oc, size_t args) {
  oc.step = 0;
  oc.rank = 0;
  oc.seq_a = oc.seq_b = 0;
  for (std::string* s : {&oc.name, &oc.name_b, &oc.op, &oc.direction, &oc.scope, &oc.module,
                         &oc.after_flip, &oc.cause, &oc.param, &oc.made_by_values})
    s->clear();
  oc.args.resize(args);
  for (ArgCompare& ac : oc.args) reset_keeping_storage(ac);
  oc.warning = false;
  oc.input_error = oc.output_error = oc.score = 0;
  oc.exact = true;
  oc.error = oc.inherited = oc.bound = oc.ratio = 0;
  oc.terms = 1;
  oc.classification = "match";
  oc.after_flip_seq = -1;
  oc.excused = false;
  oc.loss_scale = 1;
  oc.made_by_a.clear();
  oc.made_by_b.clear();
}

// x / scale with 0 / 0 = 0 and x / 0 = infinity.
double relative(double x, double scale) {
  if (!(x > 0)) return 0;
  return scale > 0 ? x / scale : kCompareInf;
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

// Random ops: those whose output is a draw whatever their tensor inputs hold (an in-place
// fill reads only its shape; randn_like only its input's), and those whose draw is applied to
// an input (dropout, bernoulli of probabilities, multinomial).
bool is_fill_random(const std::string& op) {
  static const OpNames kFillRandom{
      "aten::normal_",    "aten::uniform_",    "aten::random_",      "aten::exponential_",
      "aten::cauchy_",    "aten::log_normal_", "aten::geometric_",   "aten::bernoulli_",
      "aten::randn_like", "aten::rand_like",   "aten::randint_like", "aten::randn",
      "aten::rand",       "aten::randint",     "aten::randperm",     "aten::normal"};
  return kFillRandom.contains(op);
}
// Random ops whose draw is applied to an input.
bool is_applied_random(const std::string& op) {
  static const OpNames kAppliedRandom{"aten::dropout",        "aten::dropout_",
                                      "aten::native_dropout", "aten::feature_dropout",
                                      "aten::alpha_dropout",  "aten::feature_alpha_dropout",
                                      "aten::bernoulli",      "aten::multinomial",
                                      "aten::poisson",        "aten::rrelu_with_noise"};
  return kAppliedRandom.contains(op);
}

// Ops whose outputs are parts of their input, values unchanged.
bool is_selection_op(const std::string& op) {
  static const OpNames kSelect{
      "aten::chunk",         "aten::unsafe_chunk",     "aten::split",
      "aten::unsafe_split",  "aten::split_with_sizes", "aten::unsafe_split_with_sizes",
      "aten::tensor_split",  "aten::unbind",           "aten::select",
      "aten::slice",         "aten::narrow",           "aten::index_select",
      "aten::index",         "aten::gather",           "aten::take",
      "aten::masked_select", "aten::diagonal",         "aten::as_strided",
      "aten::unfold",        "aten::embedding"};
  return kSelect.contains(op);
}

// |x| at its largest over a tensor's finite values.
double magnitude(const TensorStats& t) { return std::max(std::fabs(t.min), std::fabs(t.max)); }

void compare_pair(const OpRecord& a_in, const OpRecord& b, const CompareOptions& opt,
                  double loss_scale, const ProgramConstants* const_a,
                  const ProgramConstants* const_b, ConstantsUse* use, const Upstream& up,
                  PairVerdict& v) {
  // Gradients of a loss scaled by a GradScaler (fp16/bf16 AMP) against a run that scales
  // it otherwise (an fp32 reference): compared as gradients of the same loss.
  analysis_detail::ScaledArgs scaled;
  const bool rescale = std::fabs(loss_scale - 1) > 0 && a_in.dir == Direction::kBackward;
  const OpRecord a_copy =
      rescale ? analysis_detail::unscaled(a_in, b, loss_scale, scaled) : OpRecord{};
  const OpRecord& a = rescale ? a_copy : a_in;
  v.divergent = v.beyond_rounding_only = false;
  OpCompare& oc = v.oc;
  const size_t n_inputs = std::max(a.inputs.size(), b.inputs.size());
  reset_keeping_storage(oc, n_inputs + std::max(a.outputs.size(), b.outputs.size()));
  identify(a, b, oc);
  if (!scaled.empty()) oc.loss_scale = loss_scale;
  bool in_value = false, out_value = false;
  oc.input_error = compare_args(a, b, /*inputs=*/true, oc, 0, in_value);
  oc.output_error = compare_args(a, b, /*inputs=*/false, oc, n_inputs, out_value);
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
    return;
  }
  if (oc.exact) {
    oc.classification = "match";
    return;
  }
  // The same outputs: whatever differs in the arguments (a memory_format a port spells
  // otherwise, Contiguous against Preserve for backward's ones_like; an input whose
  // difference the op does not pass on) made no difference to what the op produced. An op
  // diverges only where its outputs differ; the notes say what differed.
  bool same_outputs = true, have_output = false;
  for (const ArgCompare& ac : oc.args) {
    if (!equals(ac.io, "output")) continue;
    have_output = true;
    same_outputs = same_outputs && ac.exact;
  }
  if (have_output && same_outputs) {
    oc.classification = "noise";
    oc.score = 0;
    return;
  }
  // A random op whose inputs are the same (a fill's tensor is only its shape) and whose
  // outputs differ drew other numbers: the generators' states differ, which no rounding
  // explains and no later op should be blamed for.
  const bool fill_random = is_fill_random(a.op);
  const bool random = fill_random || is_applied_random(a.op);
  if (random) {
    const bool fill = fill_random;
    bool inputs_equal = true;
    for (size_t k = 0; k < oc.args.size() && equals(oc.args[k].io, "input"); ++k) {
      const ArgCompare& ac = oc.args[k];
      const bool defaulted = !ac.tensor && k < a.inputs.size() && k < b.inputs.size() &&
                             spelled_default(a.inputs[k], b.inputs[k]);
      if (!ac.exact && !(fill && ac.tensor) && !defaulted) inputs_equal = false;
    }
    if (inputs_equal) {
      oc.classification = "divergent";
      oc.cause = "draws";
      oc.ratio = kCompareInf;
      v.divergent = true;
      return;
    }
  }
  // Noise model: the error each output carries beyond what its inputs brought, against
  // the rounding the op may make (docs/cli.md, "Noise model").
  thread_local OpNoise noise;  // its vectors' storage, pair after pair
  op_noise(a, b, noise);
  const OpNoise& nz = noise;
  const size_t n_in = std::min(a.inputs.size(), b.inputs.size());
  double u_op = 0;
  for (const OutputBound& ob : nz.outputs) u_op = std::max(u_op, ob.u);
  if (!(u_op > 0)) u_op = std::ldexp(1.0, -24);
  double inherited = 0;
  bool constant_differs = false, one_run_made = false;
  for (size_t i = 0; i < oc.args.size() && equals(oc.args[i].io, "input"); ++i) {
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
        // A gradient's difference an accumulation carried is no rounding (compare_dead.h
        // carries only differences beyond it): read here beyond the rounding of the value,
        // it is read; the errors the step's other ops show are not its.
        const double allowed =
            origin->carried ? origin->bound : origin->bound + opt.inherited_weight * up.seen_error;
        if (own > opt.noise_factor * allowed && own > opt.rtol) {
          one_run_made = true;
          if (oc.cause.empty()) {
            oc.cause = origin->carried       ? "accumulated"
                       : origin->before_step ? "before_step"
                       : origin->data        ? "data"
                                             : "one_run_ops";
            oc.made_by_a = origin->made_a;
            oc.made_by_b = origin->made_b;
            oc.made_by_values = origin->values;
          }
          oc.args[i].note +=
              std::string(oc.args[i].note.empty() ? "" : "; ") +
              (origin->carried       ? "a gradient accumulated onto a different value in each run, "
                                       "and differs beyond rounding"
               : origin->before_step ? "made before the first compared step, and differs"
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
    if (!equals(ac.io, "output")) continue;
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
                                                                  : kCompareInf;
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
  const bool selects = inherited > 0 && is_selection_op(a.op);
  const bool beyond_noise = !selects && oc.ratio > opt.noise_factor && added > opt.rtol;
  v.divergent = in_value || out_value || constant_differs || beyond_noise || one_run_made;
  v.beyond_rounding_only =
      beyond_noise && !in_value && !out_value && !constant_differs && !one_run_made;
  if (v.divergent && oc.cause.empty() && random) {
    // Dropout's masks: another count of zeros from the same count in the input.
    auto first = [](const std::vector<Arg>& args) -> const TensorStats* {
      return args.empty() || !args[0].is_tensor() ? nullptr : &*args[0].tensor;
    };
    const TensorStats *ia = first(a.inputs), *ib = first(b.inputs);
    const TensorStats *xa = first(a.outputs), *xb = first(b.outputs);
    if (ia && ib && xa && xb && ia->zero == ib->zero && xa->zero != xb->zero) oc.cause = "draws";
  }
  oc.classification = v.divergent ? "divergent" : "noise";
}

}  // namespace precprobe::analysis_detail
