// RecordsCollector: the checklist's view of the op records (checklist_records.h).
#include "checklist_records.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>

namespace precprobe {
namespace analysis_detail {
namespace {

bool is_floating(const std::string& dtype) {
  return dtype == "Float" || dtype == "Double" || dtype == "Half" || dtype == "BFloat16";
}

bool is_integer(const std::string& dtype) {
  return dtype == "Long" || dtype == "Int" || dtype == "Short" || dtype == "Byte" ||
         dtype == "Char";
}

// Position of the `training` (batch_norm, instance_norm: use_input_stats) or `train`
// (dropout family) argument; -1 for other ops.
int mode_arg(std::string_view op) {
  if (op == "aten::batch_norm" || op == "aten::instance_norm") return 5;
  if (op == "aten::dropout" || op == "aten::feature_dropout" || op == "aten::alpha_dropout" ||
      op == "aten::feature_alpha_dropout")
    return 2;
  return -1;
}

// The grad mode a forward op ran under: recorded (OpRecord::grad), else inferred: an op
// reading a tensor that requires grad returns one exactly when grad mode is on. nullopt when
// neither tells (no input requires grad).
std::optional<bool> grad_mode(const OpRecord& op, bool in_rg, bool out_rg) {
  if (op.grad) return op.grad;
  if (out_rg) return true;
  if (in_rg) return false;
  return std::nullopt;
}

RecordsView::Input input_of(const OpRecord& op, const TensorStats& t) {
  RecordsView::Input in;
  in.step = op.step;
  in.op = op.op;
  in.numel = t.numel;
  in.nan = t.nan;
  in.inf = t.pinf + t.ninf;
  const int64_t finite = t.numel - t.non_finite();
  if (finite > 0) {
    in.mean = t.mean;
    // E[x^2] from the L2 norm over the finite values.
    const double ms = t.norm * t.norm / double(finite);
    in.std = std::sqrt(std::max(0.0, ms - t.mean * t.mean));
    in.abs_max = std::max(std::fabs(t.min), std::fabs(t.max));
    in.min = t.min;
    in.max = t.max;
  }
  return in;
}

}  // namespace

void RecordsCollector::add(const OpRecord& op) {
  if (!rank_) rank_ = op.rank;
  if (op.rank != *rank_) return;
  // A step is judged once a later one starts (a rank's records come in step order): only the
  // steps in flight are held.
  if (!steps_.empty() && op.step > steps_.rbegin()->first) flush_before(op.step);
  Step& s = steps_[op.step];
  if (op.dir == Direction::kBackward) {
    s.backward = true;
    return;
  }
  bool has_param = false, out_rg = false, in_rg = false;
  for (const Arg& a : op.inputs) {
    if (!a.tensor) continue;
    if (!a.tensor->param.empty()) has_param = true;
    in_rg = in_rg || a.tensor->requires_grad;
  }
  for (const Arg& a : op.outputs)
    if (a.tensor) out_rg = out_rg || a.tensor->requires_grad;
  const std::optional<bool> grad = grad_mode(op, in_rg, out_rg);

  // Parameters where they are first read: their values at the start of the recording.
  for (const Arg& a : op.inputs) {
    if (!a.tensor || a.tensor->param.empty()) continue;
    const TensorStats& t = *a.tensor;
    v_.params_named = true;
    if (!seen_params_.emplace(t.param, true).second) continue;
    if (t.shape.size() < 2 || !is_floating(t.dtype) || t.numel < 2) continue;
    ++v_.weights;
    v_.init_step = std::min(v_.init_step.value_or(op.step), op.step);
    if (t.zero == t.numel)
      v_.zero.push_back(t.param);
    else if (t.all_finite() && !(t.min < t.max))
      v_.constant.push_back(t.param);
    if (t.hash) by_hash_[*t.hash].push_back(t.param);
  }

  // The model's input: the first floating non-parameter input of the step's first op of a
  // training pass that also reads a parameter (ops reading only parameters, e.g. aten::t of a
  // weight, are passed; so are ops run with gradients off: an evaluation pass, a sampling
  // pass such as a VAE's decode(z) of random z, the optimizer). When that op's other input is
  // not floating (an embedding of token ids) the model's input holds no NaN/Inf to count:
  // the floating tensors after it are the model's own values.
  if (has_param && !s.input_decided && op.depth == 0 && grad != false) {
    for (const Arg& a : op.inputs) {
      if (!a.tensor || !a.tensor->param.empty() || a.tensor->numel == 0) continue;
      s.input_decided = true;
      if (!is_floating(a.tensor->dtype)) continue;
      s.input = input_of(op, *a.tensor);
      break;
    }
  }

  const int arg = mode_arg(op.op);
  if (arg >= 0 && size_t(arg) < op.inputs.size() && !op.inputs[size_t(arg)].is_tensor()) {
    ModeUse m;
    m.op = op.op;
    m.training = op.inputs[size_t(arg)].value == "true";
    // Gradient mode as recorded (or inferred); when unknown the step decides (a backward
    // pass ran or not).
    m.grad = grad;
    m.recorded = op.grad.has_value();
    s.modes.push_back(std::move(m));
  }

  if (!s.loss && is_loss_op(op.op) && !op.outputs.empty() && op.outputs[0].tensor &&
      op.outputs[0].tensor->numel == 1) {
    const TensorStats& out = *op.outputs[0].tensor;
    if (v_.loss_op.empty()) v_.loss_op = op.op;
    s.loss = out.all_finite() ? out.mean
                              : (out.nan > 0    ? NAN
                                 : out.pinf > 0 ? INFINITY
                                                : -INFINITY);
    if (op.inputs.size() > 1 && op.inputs[1].tensor && is_integer(op.inputs[1].tensor->dtype)) {
      const TensorStats& t = *op.inputs[1].tensor;
      RecordsView::Target tg;
      tg.step = op.step;
      tg.numel = t.numel;
      tg.min = t.min;
      tg.max = t.max;
      tg.hash = t.hash;
      tg.hist = t.hist;
      s.target = tg;
      // cross_entropy_loss / nll_loss*: (self, target, weight, reduction, ignore_index, ...)
      const bool nll = op.op == "aten::cross_entropy_loss" || op.op.rfind("aten::nll_loss", 0) == 0;
      if (!v_.ignore_index && nll && op.inputs.size() > 4 && !op.inputs[4].is_tensor()) {
        int64_t ii = 0;
        const std::string& v = op.inputs[4].value;
        if (std::from_chars(v.data(), v.data() + v.size(), ii).ec == std::errc())
          v_.ignore_index = ii;
      }
    }
  }
}

void RecordsCollector::flush_before(int64_t step, bool all) {
  RecordsView& v = v_;
  for (auto it = steps_.begin(); it != steps_.end() && (all || it->first < step);
       it = steps_.erase(it)) {
    const int64_t at = it->first;
    Step& s = it->second;
    if (s.input) {
      s.input->train = s.backward;
      v.inputs.push_back(*s.input);
    }
    // A step's training pass (gradients on) and its evaluation pass (off), each counted once
    // and judged once: an evaluation inside a training step is judged as an evaluation.
    bool train_pass = false, eval_pass = false, bad_train = false, bad_eval = false;
    for (const ModeUse& m : s.modes) {
      ++v.mode_ops;
      v.grad_recorded += m.recorded;
      const bool grad = m.grad.value_or(s.backward);
      (grad ? train_pass : eval_pass) = true;
      bool& bad = grad ? bad_train : bad_eval;
      if (grad != m.training && !bad) {
        bad = true;
        (grad ? v.train_in_eval : v.eval_in_train) += 1;
        RecordsView::FirstBad& first = grad ? v.first_train_in_eval : v.first_eval_in_train;
        if (!first.step) first = {at, m.op};
      }
    }
    v.train_passes += train_pass;
    v.eval_passes += eval_pass;
    if (s.backward && s.loss) v.loss.emplace_back(at, *s.loss);
    if (s.backward && s.target) v.targets.push_back(*s.target);
  }
}

RecordsView RecordsCollector::finish() {
  flush_before(0, /*all=*/true);
  RecordsView v = std::move(v_);
  for (auto& [hash, names] : by_hash_)
    if (names.size() > 1) v.identical.push_back(names);
  return v;
}

bool is_loss_op(std::string_view op) {
  static constexpr std::string_view kLoss[] = {"aten::cross_entropy_loss",
                                               "aten::nll_loss",
                                               "aten::nll_loss_nd",
                                               "aten::nll_loss2d",
                                               "aten::mse_loss",
                                               "aten::l1_loss",
                                               "aten::smooth_l1_loss",
                                               "aten::huber_loss",
                                               "aten::binary_cross_entropy",
                                               "aten::binary_cross_entropy_with_logits",
                                               "aten::kl_div",
                                               "aten::soft_margin_loss",
                                               "aten::multi_margin_loss"};
  return std::find(std::begin(kLoss), std::end(kLoss), op) != std::end(kLoss);
}

}  // namespace analysis_detail
}  // namespace precprobe
