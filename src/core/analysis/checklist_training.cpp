// The checklist's hyper-parameter and API items (precprobe/checklist.h): learning rate,
// train/eval mode, frozen weights, initial weights, module hash (the loss trend is in
// checklist_loss.cpp). Rules and thresholds: docs/checklist.md.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "checklist_items.h"

namespace precprobe::checklist_detail {

// ------------------------------------------------------------------- hyper-parameters

CheckItem check_lr(const Observed& o) {
  CheckItem c = item("hp.learning_rate", "hyper-parameters",
                     "learning rate inside the LR range test's range");
  if (!o.lr_lo || !o.lr_hi) {
    return set(c, Verdict::kNotApplicable, "no lr_range_test result in the dump"), c;
  }
  if (o.lr.empty()) {
    return set(c, Verdict::kNotApplicable,
               fmt::format("LR range test found [{:.3g}, {:.3g}] but the training learning "
                           "rate was not logged (dbg.log_scalar(\"lr\", v))",
                           *o.lr_lo, *o.lr_hi)),
           c;
  }
  const double peak = *std::max_element(o.lr.begin(), o.lr.end());
  c.figures = {{"lr", peak}, {"range_lo", *o.lr_lo}, {"range_hi", *o.lr_hi}};
  const bool inside = peak >= *o.lr_lo && peak <= *o.lr_hi;
  set(c, inside ? Verdict::kOk : Verdict::kProblem,
      fmt::format("peak training lr {:.3g} is {} the range [{:.3g}, {:.3g}] where loss fell "
                  "fastest",
                  peak, inside ? "inside" : "outside", *o.lr_lo, *o.lr_hi));
  return c;
}

// ---------------------------------------------------------------------- API and graph

// Without observe_batch: the `training` argument of batch_norm/instance_norm/dropout ops in
// passes with gradients (training) and without (evaluation).
CheckItem check_mode_records(CheckItem c, const RecordsView& rv, int64_t op_records) {
  if (op_records == 0)
    return set(c, Verdict::kNotApplicable, "no batch observed and no op records"), c;
  if (rv.mode_ops == 0) {
    return set(c, Verdict::kOk,
               fmt::format("no BatchNorm/InstanceNorm/Dropout op in {} op records: the mode does "
                           "not change what the model computes",
                           op_records)),
           c;
  }
  c.figures = {{"train_batches", double(rv.train_passes)},
               {"eval_batches", double(rv.eval_passes)},
               {"eval_in_train_mode", double(rv.eval_in_train)},
               {"train_in_eval_mode", double(rv.train_in_eval)},
               {"grad_recorded_ops", double(rv.grad_recorded)}};
  // Where the grad mode came from: recorded per op, or inferred from requires_grad and the
  // step's backward pass (dumps of older writers).
  const std::string grad_from =
      rv.grad_recorded == rv.mode_ops ? "the grad mode recorded with each op"
      : rv.grad_recorded == 0
          ? "the grad mode inferred from requires_grad and the step's backward pass"
          : fmt::format("the grad mode recorded with {} of them (inferred for the others)",
                        rv.grad_recorded);
  const std::string from =
      fmt::format("; from the training argument of {} BatchNorm/InstanceNorm/Dropout ops and {}",
                  rv.mode_ops, grad_from);
  if (rv.eval_in_train > 0) {
    set(c, Verdict::kProblem,
        fmt::format("{} of {} evaluation passes (gradients off) ran {} in training mode "
                    "(model.eval() missing); first at step {}{}",
                    rv.eval_in_train, rv.eval_passes, rv.first_eval_in_train.op,
                    *rv.first_eval_in_train.step, from));
  } else if (rv.train_in_eval > 0) {
    set(c, Verdict::kProblem,
        fmt::format("{} of {} training passes (gradients on) ran {} in eval mode (model.train() "
                    "missing); first at step {}{}",
                    rv.train_in_eval, rv.train_passes, rv.first_train_in_eval.op,
                    *rv.first_train_in_eval.step, from));
  } else {
    set(c, Verdict::kOk,
        fmt::format("{} training passes in train mode, {} evaluation passes in eval mode{}{}",
                    rv.train_passes, rv.eval_passes,
                    rv.eval_passes == 0 ? " (no evaluation pass recorded)" : "", from));
  }
  return c;
}

CheckItem check_mode(const Observed& o, const RecordsView& rv, int64_t op_records) {
  CheckItem c = item("api.train_eval_mode", "api", "train/eval mode");
  if (o.batches.empty()) return check_mode_records(std::move(c), rv, op_records);
  int64_t train = 0, eval = 0, train_in_eval = 0, eval_in_train = 0;
  std::optional<int64_t> first_bad;
  for (const Batch& b : o.batches) {
    if (!b.training || !b.grad) continue;
    const bool stat_train = *b.training || b.stat_modules_training > 0;
    if (*b.grad) {
      ++train;
      if (!*b.training) ++train_in_eval, first_bad = first_bad.value_or(b.step);
    } else {
      ++eval;
      if (stat_train) ++eval_in_train, first_bad = first_bad.value_or(b.step);
    }
  }
  if (train + eval == 0) {
    return set(c, Verdict::kNotApplicable,
               "batches observed but the model's mode not recorded: the debugger was started "
               "without the model (dbg.start(model))"),
           c;
  }
  c.figures = {{"train_batches", double(train)},
               {"eval_batches", double(eval)},
               {"eval_in_train_mode", double(eval_in_train)},
               {"train_in_eval_mode", double(train_in_eval)}};
  if (eval_in_train > 0) {
    set(c, Verdict::kProblem,
        fmt::format("{} of {} evaluation batches (gradients off) ran with the model or its "
                    "BatchNorm/Dropout in training mode; first at step {}",
                    eval_in_train, eval, *first_bad));
  } else if (train_in_eval > 0) {
    set(c, Verdict::kProblem,
        fmt::format("{} of {} training batches ran with the model in eval mode; first at step {}",
                    train_in_eval, train, *first_bad));
  } else {
    set(c, Verdict::kOk,
        fmt::format("{} training batches in train mode, {} evaluation batches in eval mode{}",
                    train, eval, eval == 0 ? " (no evaluation batch observed)" : ""));
  }
  return c;
}

CheckItem check_frozen(const std::vector<GradRecord>& grads) {
  CheckItem c = item("api.frozen_weights", "api", "frozen or unused weights");
  if (grads.empty()) {
    return set(c, Verdict::kNotApplicable, "no gradient monitor records (grads stream)"), c;
  }
  struct P {
    int64_t records = 0, with_grad = 0, weighed = 0, moved = 0, first_step = INT64_MAX;
  };
  std::map<std::string, P> ps;
  const int rank = grads.front().rank;
  for (const GradRecord& g : grads) {
    if (g.rank != rank) continue;
    P& p = ps[g.param];
    ++p.records;
    // A NaN/Inf gradient is a gradient (mp.overflow reports it), not a missing one.
    if (g.has_grad && (g.grad_norm > 0 || g.grad_nan > 0 || g.grad_inf > 0)) ++p.with_grad;
    // Records without weight statistics (the on_anomaly watch's) tell nothing of a change.
    if (!g.has_weight) continue;
    ++p.weighed;
    if (g.update_ratio > 0) ++p.moved;
  }
  std::vector<std::string> no_grad, unchanged;
  for (const auto& [name, p] : ps) {
    if (p.with_grad == 0)
      no_grad.push_back(name);
    else if (p.weighed >= 2 && p.moved == 0)
      unchanged.push_back(name);
  }
  c.figures = {{"params", double(ps.size())},
               {"no_gradient", double(no_grad.size())},
               {"never_changed", double(unchanged.size())}};
  std::string ev;
  if (!no_grad.empty())
    ev = fmt::format("{} parameters never received a non-zero gradient: {}", no_grad.size(),
                     join_first(no_grad));
  if (!unchanged.empty())
    ev += fmt::format("{}{} parameters never changed: {}", ev.empty() ? "" : "; ", unchanged.size(),
                      join_first(unchanged));
  if (!ev.empty()) {
    set(c, Verdict::kProblem, ev);
  } else {
    bool all_weighed = true;  // every record has weight statistics
    size_t moved = 0;
    for (const auto& [name, p] : ps) {
      all_weighed = all_weighed && p.weighed == p.records;
      moved += p.moved > 0 ? 1 : 0;
    }
    set(c, Verdict::kOk,
        all_weighed ? fmt::format("all {} parameters received gradients and changed", ps.size())
                    : fmt::format("all {} parameters received gradients; {} of them changed, the "
                                  "others' weights were not recorded on two steps",
                                  ps.size(), moved));
  }
  return c;
}

// Without check_initial_model: each weight's statistics and hash where it is first read.
CheckItem check_init_records(CheckItem c, const RecordsView& rv) {
  if (rv.weights == 0) {
    return set(c, Verdict::kNotApplicable,
               rv.params_named
                   ? "no weight (dim >= 2) read by a recorded op"
                   : "no parameter named in the op records (the debugger names them when "
                     "started with the model: dbg.start(model))"),
           c;
  }
  std::vector<std::string> same;
  for (const auto& g : rv.identical) same.push_back(fmt::format("{{{}}}", join_first(g, 4)));
  c.figures = {{"weights", double(rv.weights)},
               {"zero", double(rv.zero.size())},
               {"identical", double(rv.constant.size() + rv.identical.size())}};
  std::string ev;
  if (!rv.zero.empty()) ev = fmt::format("all-zero weights: {}", join_first(rv.zero));
  if (!rv.constant.empty())
    ev += fmt::format("{}weights holding one value (all units identical): {}",
                      ev.empty() ? "" : "; ", join_first(rv.constant));
  if (!same.empty())
    ev += fmt::format("{}parameters identical to each other: {}", ev.empty() ? "" : "; ",
                      join_first(same, 3));
  const std::string from =
      fmt::format(" (from the op records where each is first read, step {})", *rv.init_step);
  if (!ev.empty()) {
    set(c, Verdict::kProblem, ev + from);
  } else {
    set(c, Verdict::kOk,
        fmt::format("{} weight tensors, none zero, constant or identical to another{}", rv.weights,
                    from));
  }
  return c;
}

CheckItem check_init(const Observed& o, const RecordsView& rv) {
  CheckItem c = item("api.init_weights", "api", "weights not zero or identical at start");
  if (!o.init_params) return check_init_records(std::move(c), rv);
  c.figures = {{"weights", *o.init_params},
               {"zero", double(o.init_zero.size())},
               {"identical", double(o.init_identical.size())}};
  std::string ev;
  if (!o.init_zero.empty()) ev = fmt::format("all-zero weights: {}", join_first(o.init_zero));
  if (!o.init_identical.empty())
    ev += fmt::format("{}rows identical across the layer: {}", ev.empty() ? "" : "; ",
                      join_first(o.init_identical));
  if (!ev.empty()) {
    set(c, Verdict::kProblem, ev);
  } else {
    set(c, Verdict::kOk, fmt::format("{} weight tensors checked", *o.init_params));
  }
  return c;
}

uint64_t join_hash(double hi, double lo) {
  return (static_cast<uint64_t>(hi) << 32) | static_cast<uint64_t>(lo);
}

CheckItem check_module_hash(const Observed& o, const ChecklistOptions& options) {
  CheckItem c = item("api.module_hash", "api", "loaded checkpoint matches the expected hash");
  if (!o.hash_hi || !o.hash_lo) {
    return set(c, Verdict::kNotApplicable,
               "module hash not recorded (the first dbg.observe_batch() or "
               "precprobe::check_initial_model(dbg, model) records it)"),
           c;
  }
  const uint64_t actual = join_hash(*o.hash_hi, *o.hash_lo);
  std::optional<uint64_t> expected = options.module_hash;
  if (!expected && o.exp_hi && o.exp_lo) expected = join_hash(*o.exp_hi, *o.exp_lo);
  if (!expected) {
    return set(c, Verdict::kNotApplicable,
               fmt::format("module hash {:016x} at start; no expected hash given "
                           "(dbg.expect_module_hash or --module-hash)",
                           actual)),
           c;
  }
  set(c, actual == *expected ? Verdict::kOk : Verdict::kProblem,
      fmt::format("module hash at start {:016x}, expected {:016x}", actual, *expected));
  return c;
}

}  // namespace precprobe::checklist_detail
