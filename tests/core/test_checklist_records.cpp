// The accuracy checklist decided from the op records alone (no observe_batch): a synthetic
// conv -> batch_norm -> linear -> cross_entropy classifier as the op observer records it,
// healthy, then with each fault planted; the item's verdict must flip.
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "precprobe/checklist.h"
#include "precprobe/reader.h"
#include "precprobe_catch.h"

using namespace precprobe;

namespace {

Verdict verdict(const DumpData& d, std::string_view id) {
  const ChecklistResult r = run_checklist(d);
  const CheckItem* c = r.find(id);
  REQUIRE(c != nullptr);
  INFO(c->evidence);
  return c->verdict;
}

}  // namespace

namespace {

TensorStats tensor(const char* dtype, std::vector<int64_t> shape, double mean, double std,
                   std::string param = {}) {
  TensorStats t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.numel = 1;
  for (int64_t s : t.shape) t.numel *= s;
  t.mean = mean;
  // The L2 norm of n values with this mean and (population) std: sqrt(n (std² + mean²)).
  t.norm = std::sqrt(double(t.numel) * (std * std + mean * mean));
  t.min = mean - 2 * std;
  t.max = mean + 2 * std;
  t.param = std::move(param);
  t.requires_grad = !t.param.empty();
  return t;
}

Arg arg(TensorStats t) {
  Arg a;
  a.tensor = std::move(t);
  return a;
}

Arg value(const char* json) {
  Arg a;
  a.value = json;
  return a;
}

OpRecord record(int64_t step, int64_t seq, const char* name, std::vector<Arg> in,
                std::vector<Arg> out, Direction dir = Direction::kForward) {
  OpRecord r;
  r.step = step;
  r.seq = seq;
  r.op = name;
  r.dir = dir;
  r.inputs = std::move(in);
  r.outputs = std::move(out);
  return r;
}

struct StepSpec {
  double input_mean = 0, input_std = 1;
  std::optional<std::pair<double, double>> input_range;  // min, max (else mean -+ 2 std)
  bool train = true;                                     // grad mode on and a backward pass
  bool bn_training = true;                               // batch_norm's `training` argument
  double loss = 1.0;
  double label_min = 0, label_max = 9;
};

// One step of a conv → batch_norm → linear → cross_entropy classifier, as the op observer
// records it: the weights are read with their parameter names, the loss op's target is the
// Long labels.
void step_ops(DumpData& d, int64_t step, const StepSpec& s, double w_scale = 0.1) {
  int64_t seq = 0;
  auto out = [&](std::vector<int64_t> shape) {
    TensorStats t = tensor("Float", std::move(shape), 0.1, 1.0);
    t.requires_grad = s.train;
    return arg(t);
  };
  d.ops.push_back(record(step, seq++, "aten::t",
                         {arg(tensor("Float", {16, 8}, 0, w_scale, "fc.weight"))},
                         {arg(tensor("Float", {8, 16}, 0, w_scale, "fc.weight"))}));
  TensorStats x = tensor("Float", {64, 1, 28, 28}, s.input_mean, s.input_std);
  if (s.input_range) std::tie(x.min, x.max) = *s.input_range;
  d.ops.push_back(record(step, seq++, "aten::conv2d",
                         {arg(x), arg(tensor("Float", {8, 1, 3, 3}, 0, w_scale, "conv.weight")),
                          arg(tensor("Float", {8}, 0, w_scale, "conv.bias")), value("[1,1]")},
                         {out({64, 8, 28, 28})}));
  d.ops.push_back(
      record(step, seq++, "aten::batch_norm",
             {out({64, 8, 28, 28}), arg(tensor("Float", {8}, 1, 0, "bn.weight")),
              arg(tensor("Float", {8}, 0, 0, "bn.bias")), arg(tensor("Float", {8}, 0, 1)),
              arg(tensor("Float", {8}, 1, 0)), value(s.bn_training ? "true" : "false"),
              value("0.1"), value("1e-05"), value("true")},
             {out({64, 8, 28, 28})}));
  TensorStats labels = tensor("Long", {64}, 4.5, 2.9);
  labels.min = s.label_min;
  labels.max = s.label_max;
  TensorStats loss = tensor("Float", {}, s.loss, 0);
  loss.requires_grad = s.train;
  if (!std::isfinite(s.loss)) {
    loss.nan = 1;
    loss.mean = loss.norm = 0;
  }
  if (s.train) {
    d.ops.push_back(record(step, seq++, "aten::cross_entropy_loss",
                           {out({64, 10}), arg(labels), value("null"), value("1"), value("-100")},
                           {arg(loss)}));
    d.ops.push_back(
        record(step, seq++, "aten::mul", {out({64, 10})}, {out({64, 10})}, Direction::kBackward));
  }
}

DumpData records_run(int64_t steps, const StepSpec& s) {
  DumpData d;
  for (int64_t i = 0; i < steps; ++i) {
    StepSpec si = s;
    si.loss = s.loss * std::pow(0.9, double(i));
    step_ops(d, i, si);
  }
  StepSpec eval = s;
  eval.train = false;
  eval.bn_training = false;
  step_ops(d, steps, eval);
  return d;
}

const CheckItem& item_of(const ChecklistResult& r, std::string_view id) {
  const CheckItem* c = r.find(id);
  REQUIRE(c != nullptr);
  return *c;
}

double figure_of(const CheckItem& c, std::string_view key) {
  for (const auto& [k, v] : c.figures)
    if (k == key) return v;
  FAIL("no figure " << key << " in " << c.id);
  return 0;
}

}  // namespace

TEST_CASE("checklist from records: a healthy classifier", "[checklist][records]") {
  const ChecklistResult r = run_checklist(records_run(12, {}));
  for (const CheckItem& c : r.items) {
    INFO(c.id << ": " << c.evidence);
    CHECK(c.verdict != Verdict::kProblem);
  }
  const CheckItem& norm = item_of(r, "data.inputs_not_normalised");
  CHECK(norm.verdict == Verdict::kOk);
  CHECK(figure_of(norm, "mean") == Approx(0.0).margin(1e-12));
  CHECK(figure_of(norm, "std") == Approx(1.0));
  CHECK(figure_of(norm, "steps") == 12);  // training steps only; the evaluation pass is not
  CHECK_THAT(norm.evidence, Catch::Matchers::ContainsSubstring("aten::conv2d"));
  CHECK(item_of(r, "data.missing_values").verdict == Verdict::kOk);
  CHECK(item_of(r, "data.no_shuffling").verdict == Verdict::kOk);
  const CheckItem& mode = item_of(r, "api.train_eval_mode");
  CHECK(mode.verdict == Verdict::kOk);
  CHECK(figure_of(mode, "train_batches") == 12);
  CHECK(figure_of(mode, "eval_batches") == 1);
  const CheckItem& init = item_of(r, "api.init_weights");
  CHECK(init.verdict == Verdict::kOk);
  CHECK(figure_of(init, "weights") == 2);  // fc.weight, conv.weight; biases and norms excluded
  const CheckItem& loss = item_of(r, "hp.loss_trend");
  CHECK(loss.verdict == Verdict::kOk);
  CHECK(figure_of(loss, "first_value") == Approx(1.0));
  CHECK(figure_of(loss, "last_value") == Approx(std::pow(0.9, 11)));
  CHECK_THAT(loss.evidence, Catch::Matchers::ContainsSubstring("aten::cross_entropy_loss"));
  // The label counts are not in the records: the class histogram stays undecided.
  CHECK(item_of(r, "data.class_imbalance").verdict == Verdict::kNotApplicable);
  CHECK(r.problems_by_cause().empty());
}

TEST_CASE("checklist from records: each planted fault flips its item", "[checklist][records]") {
  SECTION("unnormalised inputs, listed before the loss they make diverge") {
    StepSpec s;
    s.input_mean = 58;
    s.input_std = 118;
    DumpData d = records_run(12, s);
    // The loss turns NaN at step 3.
    for (OpRecord& op : d.ops) {
      if (op.op != "aten::cross_entropy_loss" || op.step < 3) continue;
      op.outputs[0].tensor->nan = 1;
    }
    const ChecklistResult r = run_checklist(d);
    const CheckItem& norm = item_of(r, "data.inputs_not_normalised");
    CHECK(norm.verdict == Verdict::kProblem);
    CHECK(figure_of(norm, "mean") == Approx(58));
    CHECK(figure_of(norm, "std") == Approx(118));
    CHECK(item_of(r, "hp.loss_trend").verdict == Verdict::kProblem);
    CHECK(figure_of(item_of(r, "hp.loss_trend"), "nonfinite_step") == 3);
    const auto causes = r.problems_by_cause();
    REQUIRE(causes.size() >= 2);
    CHECK(causes.front()->id == "data.inputs_not_normalised");
    CHECK(r.to_json().dump().find("\"likely_causes\":[\"data.inputs_not_normalised\"") !=
          std::string::npos);
  }
  SECTION("NaN in the inputs") {
    DumpData d = records_run(12, {});
    d.ops[1].inputs[0].tensor->nan = 3;  // step 0's conv2d input
    CHECK(verdict(d, "data.missing_values") == Verdict::kProblem);
  }
  SECTION("evaluation in training mode") {
    DumpData d = records_run(12, {});
    for (OpRecord& op : d.ops)
      if (op.step == 12 && op.op == "aten::batch_norm") op.inputs[5].value = "true";
    CHECK(verdict(d, "api.train_eval_mode") == Verdict::kProblem);
  }
  SECTION("training in eval mode") {
    DumpData d = records_run(12, {});
    for (OpRecord& op : d.ops)
      if (op.step == 4 && op.op == "aten::batch_norm") op.inputs[5].value = "false";
    CHECK(verdict(d, "api.train_eval_mode") == Verdict::kProblem);
  }
  SECTION("zero, constant and identical weights") {
    DumpData zero = records_run(12, {});
    TensorStats& w = *zero.ops[1].inputs[1].tensor;  // conv.weight at its first read
    w.zero = w.numel;
    CHECK(verdict(zero, "api.init_weights") == Verdict::kProblem);
    DumpData constant = records_run(12, {});
    TensorStats& c = *constant.ops[1].inputs[1].tensor;
    c.min = c.max = 0.5;
    CHECK(verdict(constant, "api.init_weights") == Verdict::kProblem);
    DumpData same = records_run(12, {});
    same.ops[0].inputs[0].tensor->hash = 42;  // fc.weight
    same.ops[1].inputs[1].tensor->hash = 42;  // conv.weight
    CHECK(verdict(same, "api.init_weights") == Verdict::kProblem);
    same.ops[1].inputs[1].tensor->hash = 43;
    CHECK(verdict(same, "api.init_weights") == Verdict::kOk);
  }
  SECTION("labels in order: every batch one class") {
    DumpData d;
    for (int64_t i = 0; i < 12; ++i) {
      StepSpec s;
      s.label_min = s.label_max = double(i / 6);
      s.loss = 1.0 - 0.05 * double(i);
      step_ops(d, i, s);
    }
    CHECK(verdict(d, "data.no_shuffling") == Verdict::kProblem);
    CHECK(verdict(d, "data.class_imbalance") == Verdict::kNotApplicable);  // 0 and 1 seen
    DumpData one;
    for (int64_t i = 0; i < 12; ++i) {
      StepSpec s;
      s.label_min = s.label_max = 3;
      step_ops(one, i, s);
    }
    CHECK(verdict(one, "data.class_imbalance") == Verdict::kProblem);
  }
  SECTION("the same batches in the same order again") {
    DumpData d = records_run(12, {});
    for (OpRecord& op : d.ops)
      if (op.op == "aten::cross_entropy_loss") op.inputs[1].tensor->hash = uint64_t(op.step % 4);
    CHECK(verdict(d, "data.no_shuffling") == Verdict::kProblem);
    for (OpRecord& op : d.ops)
      if (op.op == "aten::cross_entropy_loss") op.inputs[1].tensor->hash = uint64_t(op.step);
    CHECK(verdict(d, "data.no_shuffling") == Verdict::kOk);
  }
}

TEST_CASE("checklist from records: class balance from the loss target's histogram",
          "[checklist][records]") {
  // The probe records "hist" for small integer tensors: the loss op's labels then give the
  // class counts without observe_batch. Counts summed over steps, the ignore index left out.
  auto with_hist = [](std::vector<std::pair<int64_t, int64_t>> per_step) {
    DumpData d = records_run(12, {});
    for (OpRecord& op : d.ops)
      if (op.op == "aten::cross_entropy_loss") op.inputs[1].tensor->hist = per_step;
    return d;
  };
  SECTION("balanced labels: ok, with the summed counts") {
    std::vector<std::pair<int64_t, int64_t>> h;
    for (int64_t k = 0; k < 10; ++k) h.emplace_back(k, 6 + k % 2);  // 6 or 7 of each
    h.emplace_back(-100, 5);  // padding: the ignore index is not a class
    const ChecklistResult r = run_checklist(with_hist(h));
    const CheckItem& c = item_of(r, "data.class_imbalance");
    CHECK(c.verdict == Verdict::kOk);
    CHECK(figure_of(c, "classes") == 10);
    CHECK(figure_of(c, "labels") == 12 * 65);  // 12 training steps x (5 x 6 + 5 x 7)
    CHECK(figure_of(c, "ratio") == Approx(7.0 / 6.0));
    CHECK_THAT(c.evidence, Catch::Matchers::ContainsSubstring("aten::cross_entropy_loss"));
  }
  SECTION("one class 20 times rarer than another: problem") {
    const ChecklistResult r = run_checklist(with_hist({{0, 40}, {1, 22}, {2, 2}}));
    const CheckItem& c = item_of(r, "data.class_imbalance");
    CHECK(c.verdict == Verdict::kProblem);
    CHECK(figure_of(c, "ratio") == Approx(20.0));
  }
  SECTION("ignored targets counted from the histogram at the loss op's ignore index") {
    CHECK(verdict(with_hist({{0, 30}, {9, 34}}), "data.ignore_index") == Verdict::kNotApplicable);
    const ChecklistResult some = run_checklist(with_hist({{-100, 4}, {0, 30}, {9, 30}}));
    const CheckItem& c = item_of(some, "data.ignore_index");
    CHECK(c.verdict == Verdict::kOk);
    CHECK(figure_of(c, "ignored") == 12 * 4);
    CHECK(figure_of(c, "targets") == 12 * 64);  // numel of the Long labels
    DumpData all = with_hist({{0, 32}, {9, 32}});
    for (OpRecord& op : all.ops)
      if (op.op == "aten::cross_entropy_loss" && op.step == 7)
        op.inputs[1].tensor->hist = {{-100, 64}};
    CHECK(verdict(all, "data.ignore_index") == Verdict::kProblem);
  }
  SECTION("some steps without a histogram: only the range, n/a") {
    DumpData d = with_hist({{0, 32}, {9, 32}});
    for (OpRecord& op : d.ops)
      if (op.op == "aten::cross_entropy_loss" && op.step == 5) op.inputs[1].tensor->hist.clear();
    CHECK(verdict(d, "data.class_imbalance") == Verdict::kNotApplicable);
  }
}

namespace {

// One step of PyTorch's MNIST CNN (tests/check/tutorial_cnn.cpp: conv2d -> feature_dropout ->
// addmm -> dropout -> nll_loss) as the op observer records it: a training pass (gradients on,
// dropout in train mode) and its backward; with `eval_train` an evaluation pass inside the
// same step too (NoGradGuard, dropout's `train` argument = *eval_train), as a loop that
// evaluates every N steps runs it. `grad_recorded`: the records carry their grad mode
// (OpRecord::grad), as the debugger writes them; else the dump of an older debugger.
void cnn_step(DumpData& d, int64_t step, std::optional<bool> eval_train, bool grad_recorded) {
  int64_t seq = 0;
  auto pass = [&](bool grad, bool train) {
    auto act = [&](std::vector<int64_t> shape) {
      TensorStats t = tensor("Float", std::move(shape), 0.1, 1.0);
      t.requires_grad = grad;
      return arg(t);
    };
    auto add = [&](const char* op, std::vector<Arg> in, std::vector<Arg> out) {
      OpRecord r = record(step, seq++, op, std::move(in), std::move(out));
      if (grad_recorded) r.grad = grad;
      d.ops.push_back(std::move(r));
    };
    add("aten::conv2d",
        {arg(tensor("Float", {64, 1, 28, 28}, 0, 1)),
         arg(tensor("Float", {10, 1, 5, 5}, 0, 0.1, "conv1.weight"))},
        {act({64, 10, 24, 24})});
    add("aten::feature_dropout",
        {act({64, 20, 8, 8}), value("0.5"), value(train ? "true" : "false")},
        {act({64, 20, 8, 8})});
    add("aten::addmm",
        {arg(tensor("Float", {50}, 0, 0.1, "fc1.bias")), act({64, 320}),
         arg(tensor("Float", {320, 50}, 0, 0.1, "fc1.weight"))},
        {act({64, 50})});
    add("aten::dropout", {act({64, 50}), value("0.5"), value(train ? "true" : "false")},
        {act({64, 50})});
  };
  pass(true, true);
  TensorStats loss = tensor("Float", {}, 1.0 - 0.02 * double(step), 0);
  loss.requires_grad = true;
  OpRecord l =
      record(step, seq++, "aten::nll_loss_nd", {arg(tensor("Float", {64, 10}, 0, 1))}, {arg(loss)});
  if (grad_recorded) l.grad = true;
  d.ops.push_back(l);
  d.ops.push_back(record(step, seq++, "aten::mul", {}, {}, Direction::kBackward));
  if (eval_train) pass(false, *eval_train);
}

DumpData cnn_run(std::optional<bool> eval_train, bool grad_recorded = true) {
  DumpData d;
  for (int64_t s = 0; s < 30; ++s)
    cnn_step(d, s, s % 10 == 9 ? eval_train : std::nullopt, grad_recorded);
  return d;
}

CheckItem item_in(const DumpData& d, std::string_view id) {
  const ChecklistResult r = run_checklist(d);
  return item_of(r, id);
}

}  // namespace

TEST_CASE("checklist from records: an evaluation inside a training step", "[checklist][records]") {
  SECTION("done right (gradients off, model.eval()): ok") {
    const CheckItem c = item_in(cnn_run(false), "api.train_eval_mode");
    INFO(c.evidence);
    CHECK(c.verdict == Verdict::kOk);  // the 3 passes without gradients are evaluation
    CHECK(figure_of(c, "train_batches") == 30);
    CHECK(figure_of(c, "eval_batches") == 3);
    CHECK(figure_of(c, "grad_recorded_ops") == 30 * 2 + 3 * 2);
    CHECK_THAT(c.evidence, Catch::Matchers::ContainsSubstring("grad mode recorded with each op"));
  }
  SECTION("the model left in train mode: problem") {
    const CheckItem c = item_in(cnn_run(true), "api.train_eval_mode");
    INFO(c.evidence);
    CHECK(c.verdict == Verdict::kProblem);
    CHECK(figure_of(c, "eval_in_train_mode") == 3);
    CHECK_THAT(c.evidence,
               Catch::Matchers::ContainsSubstring("3 of 3 evaluation passes (gradients off) ran "
                                                  "aten::feature_dropout in training mode"));
    CHECK_THAT(c.evidence, Catch::Matchers::ContainsSubstring("first at step 9"));
  }
  SECTION("training passes with dropout in eval mode are still a problem") {
    DumpData d = cnn_run(false);
    for (OpRecord& op : d.ops)
      if (op.step == 4 && op.op == "aten::dropout") op.inputs[2].value = "false";
    const CheckItem c = item_in(d, "api.train_eval_mode");
    CHECK(c.verdict == Verdict::kProblem);
    CHECK(figure_of(c, "train_in_eval_mode") == 1);
  }
  SECTION("no evaluation: ok") {
    CHECK(item_in(cnn_run(std::nullopt), "api.train_eval_mode").verdict == Verdict::kOk);
  }
  SECTION("a dump without the grad mode: inferred, as before") {
    const CheckItem c = item_in(cnn_run(true, false), "api.train_eval_mode");
    CHECK(figure_of(c, "grad_recorded_ops") == 0);
    CHECK_THAT(c.evidence, Catch::Matchers::ContainsSubstring("inferred from requires_grad"));
  }
}

TEST_CASE("checklist from records: the model's input is a training pass's, not a sample's",
          "[checklist][records]") {
  // A VAE on [0, 1] pixels that samples at the start of some steps: decode(z) of z ~ N(0, 1)
  // under NoGradGuard (largest |z| 3.4) runs before the step's training forward.
  for (bool grad_recorded : {true, false}) {
    INFO("grad mode recorded: " << grad_recorded);
    DumpData d;
    for (int64_t s = 0; s < 12; ++s) {
      int64_t seq = 0;
      auto add = [&](OpRecord r, bool grad) {
        r.seq = seq++;
        if (grad_recorded) r.grad = grad;
        d.ops.push_back(std::move(r));
      };
      if (s % 4 == 0) {
        TensorStats z = tensor("Float", {64, 20}, 0, 1);
        z.min = -3.4;
        z.max = 3.1;
        add(record(s, 0, "aten::linear",
                   {arg(z), arg(tensor("Float", {400, 20}, 0, 0.1, "fc4.weight"))},
                   {arg(tensor("Float", {64, 400}, 0, 1))}),
            false);
      }
      TensorStats x = tensor("Float", {64, 784}, 0.13, 0.31);
      x.min = 0;
      x.max = 1;
      TensorStats h = tensor("Float", {64, 400}, 0, 1);
      h.requires_grad = true;
      add(record(s, 0, "aten::linear",
                 {arg(x), arg(tensor("Float", {400, 784}, 0, 0.1, "fc1.weight"))}, {arg(h)}),
          true);
      add(record(s, 0, "aten::mul", {}, {}, Direction::kBackward), true);
    }
    const CheckItem c = item_in(d, "data.inputs_not_normalised");
    INFO(c.evidence);
    CHECK(c.verdict == Verdict::kOk);             // [0, 1] pixels
    CHECK(figure_of(c, "mean") == Approx(0.13));  // not z's 0
    CHECK(figure_of(c, "abs_max") == 1.0);        // not z's 3.4
    CHECK(figure_of(c, "steps") == 12);
    CHECK_THAT(c.evidence, Catch::Matchers::ContainsSubstring("values in [0, 1]"));
  }
}

TEST_CASE("checklist from records: a language model's input is its token ids",
          "[checklist][records]") {
  // embedding(wte.weight, ids) then layer_norm(x, ln1.weight): once the weights went NaN (a
  // NaN update at step 3), x is NaN from step 4 on. x is the model's own value, not its input:
  // the input was the Long token ids, which hold no NaN.
  DumpData d;
  for (int64_t s = 0; s < 8; ++s) {
    const double nan = s >= 4 ? 1 : 0;
    TensorStats ids = tensor("Long", {8, 16}, 5, 3);
    TensorStats wte = tensor("Float", {11, 32}, 0, 0.02, "wte.weight");
    TensorStats x = tensor("Float", {8, 16, 32}, 0, 0.02);
    wte.nan = x.nan = static_cast<int64_t>(nan * 32);
    TensorStats ln = tensor("Float", {32}, 1, 0, "ln1.weight");
    OpRecord emb = record(s, 0, "aten::embedding", {arg(wte), arg(ids)}, {arg(x)});
    OpRecord norm = record(s, 1, "aten::layer_norm", {arg(x), arg(ln)},
                           {arg(tensor("Float", {8, 16, 32}, 0, 1))});
    emb.grad = norm.grad = true;
    d.ops.push_back(emb);
    d.ops.push_back(norm);
    d.ops.push_back(record(s, 2, "aten::mul", {}, {}, Direction::kBackward));
  }
  const CheckItem c = item_in(d, "data.missing_values");
  INFO(c.evidence);
  CHECK(c.verdict == Verdict::kNotApplicable);  // no floating input to count
}

TEST_CASE("checklist from records: normalisation judged by what hurts training",
          "[checklist][records]") {
  auto with_input = [](double mean, double std, std::optional<std::pair<double, double>> range) {
    StepSpec s;
    s.input_mean = mean;
    s.input_std = std;
    s.input_range = range;
    return item_in(records_run(12, s), "data.inputs_not_normalised");
  };
  // Raw 0..255 Fashion-MNIST pixels.
  const CheckItem raw = with_input(72.9, 90.0, std::pair{0.0, 255.0});
  CHECK(raw.verdict == Verdict::kProblem);
  CHECK(figure_of(raw, "rms") == Approx(std::hypot(72.9, 90.0)));
  // [0, 1] pixels: not a problem, said with the figures.
  const CheckItem unit = with_input(0.286, 0.353, std::pair{0.0, 1.0});
  INFO(unit.evidence);
  CHECK(unit.verdict == Verdict::kOk);
  CHECK_THAT(unit.evidence, Catch::Matchers::ContainsSubstring(
                                "values in [0, 1], not standardised (mean 0.286 is 0.81 std off "
                                "centre, std 0.353)"));
  // Fashion-MNIST normalised with MNIST's constants: mean 0.504, std 1.146.
  const CheckItem mnist = with_input(0.504, 1.146, std::pair{-0.424, 2.82});
  INFO(mnist.evidence);
  CHECK(mnist.verdict == Verdict::kOk);
  CHECK(figure_of(mnist, "mean") == Approx(0.504));
  CHECK(figure_of(mnist, "std") == Approx(1.146));
  CHECK_THAT(mnist.evidence,
             Catch::Matchers::ContainsSubstring("mean 0.504 is 0.44 std off centre, std 1.15"));
  CHECK_THAT(mnist.evidence, Catch::Matchers::ContainsSubstring("not a problem"));
  // Standardised.
  CHECK_THAT(with_input(0, 1, std::nullopt).evidence,
             Catch::Matchers::ContainsSubstring("inputs standardised"));
}
