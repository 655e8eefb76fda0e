// The checklist's probe side on real Fashion-MNIST batches: what observe_batch and
// check_initial_model write, read back through the dump, and the verdicts they lead to.
#include <torch/torch.h>

#include <string>

#include "../../examples/fashion_mnist.h"
#include "debugger_fixture.h"
#include "precprobe/checklist.h"
#include "precprobe/checklist_probe.h"
#include "precprobe/grad_scaler.h"
#include "precprobe/lr_range.h"
#include "precprobe_catch.h"

using namespace precprobe;
using precprobe::test::TempDir;

namespace {

const fashion_mnist::Split& train_raw() {
  static const fashion_mnist::Split s = fashion_mnist::load("t10k", /*normalise=*/false);
  return s;
}

struct Net : torch::nn::Module {
  Net() {
    fc = register_module("fc", torch::nn::Linear(784, 10));
    bn = register_module("bn", torch::nn::BatchNorm1d(10));
  }
  torch::Tensor forward(const torch::Tensor& x) { return bn(fc(x.flatten(1))); }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

struct RunSpec {
  bool normalise = true;
  bool raw = false;  // with normalise = false: 0..255 instead of [0, 1]
  bool sorted = false;
  bool eval_in_train = false;
  bool zero_weight = false;
};

// Observes 12 batches of 64 over two epochs and 2 evaluation batches; returns the checklist.
ChecklistResult run(const RunSpec& spec, std::vector<ScalarRecord>* scalars = nullptr) {
  TempDir dir("checklist_probe");
  auto net = std::make_shared<Net>();
  if (spec.zero_weight) {
    torch::NoGradGuard g;
    net->fc->weight.zero_();
  }
  const auto& data = train_raw();
  at::Tensor images = data.images.slice(0, 0, 2000);
  at::Tensor labels = data.labels.slice(0, 0, 2000);
  if (spec.normalise) images = (images - fashion_mnist::kMean) / fashion_mnist::kStd;
  if (spec.raw) images = images * 255.0;  // the file's bytes, 0..255
  {
    PrecisionDebugger dbg(test::options_in(dir));
    dbg.start(net);
    for (int epoch = 0; epoch < 2; ++epoch) {
      at::Tensor order = spec.sorted ? std::get<1>(labels.sort(c10::optional<bool>(true), 0))
                                     : torch::randperm(labels.size(0), torch::kInt64);
      for (int64_t b = 0; b < 6; ++b) {
        at::Tensor idx = order.slice(0, b * 64, (b + 1) * 64);
        dbg.observe_batch(images.index_select(0, idx), labels.index_select(0, idx), epoch);
        net->forward(images.index_select(0, idx));
        dbg.step();
      }
    }
    torch::NoGradGuard no_grad;
    if (!spec.eval_in_train) net->eval();
    for (int64_t b = 0; b < 2; ++b) {  // the free-function form, with the model given
      observe_batch(dbg, *net, images.slice(0, b * 100, (b + 1) * 100),
                    labels.slice(0, b * 100, (b + 1) * 100));
      net->forward(images.slice(0, b * 100, (b + 1) * 100));
    }
    dbg.stop();
  }
  DumpReader reader(dir.path().string());
  if (scalars) *scalars = reader.scalars();
  return run_checklist(reader);
}

Verdict of(const ChecklistResult& r, const char* id) {
  const CheckItem* c = r.find(id);
  REQUIRE(c != nullptr);
  INFO(id << ": " << c->evidence);
  return c->verdict;
}

}  // namespace

TEST_CASE("checklist probe: clean Fashion-MNIST batches", "[checklist]") {
  torch::manual_seed(7);
  std::vector<ScalarRecord> scalars;
  const ChecklistResult r = run({}, &scalars);
  CHECK(of(r, "data.missing_values") == Verdict::kOk);
  CHECK(of(r, "data.inputs_not_normalised") == Verdict::kOk);
  CHECK(of(r, "data.no_shuffling") == Verdict::kOk);
  CHECK(of(r, "data.class_imbalance") == Verdict::kOk);
  CHECK(of(r, "api.train_eval_mode") == Verdict::kOk);
  CHECK(of(r, "api.init_weights") == Verdict::kOk);
  // The first evaluation batch's channel mean, against a float64 recomputation.
  const at::Tensor x =
      (train_raw().images.slice(0, 0, 100) - fashion_mnist::kMean) / fashion_mnist::kStd;
  const double ref = test::reference(x).mean;
  std::vector<double> means;
  for (const ScalarRecord& s : scalars)
    if (s.name == "check/batch/mean/0") means.push_back(s.value);
  REQUIRE(means.size() == 14);
  CHECK(means[12] == Approx(ref).epsilon(1e-9));
  // One weight checked: fc.weight (biases and BatchNorm weights are 1-d).
  for (const ScalarRecord& s : scalars)
    if (s.name == "check/init/params") CHECK(s.value == Approx(1.0));
}

TEST_CASE("checklist probe: planted data and API bugs flip their items", "[checklist]") {
  torch::manual_seed(7);
  RunSpec raw;
  raw.normalise = false;
  raw.raw = true;
  CHECK(of(run(raw), "data.inputs_not_normalised") == Verdict::kProblem);
  // Pixels in [0, 1] train: a scale that trains is not a problem.
  RunSpec unit;
  unit.normalise = false;
  CHECK(of(run(unit), "data.inputs_not_normalised") == Verdict::kOk);
  RunSpec sorted;
  sorted.sorted = true;
  const ChecklistResult s = run(sorted);
  CHECK(of(s, "data.no_shuffling") == Verdict::kProblem);
  RunSpec eval;
  eval.eval_in_train = true;
  CHECK(of(run(eval), "api.train_eval_mode") == Verdict::kProblem);
  RunSpec zero;
  zero.zero_weight = true;
  CHECK(of(run(zero), "api.init_weights") == Verdict::kProblem);
}

namespace {

// A small MLP on normalised Fashion-MNIST for the mixed-precision and learning-rate items.
struct Mlp : torch::nn::Module {
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(784, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x.flatten(1)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

at::Tensor normalised_images() {
  return (train_raw().images.slice(0, 0, 4096) - fashion_mnist::kMean) / fashion_mnist::kStd;
}

enum class Clip {
  kNone,
  kBeforeUnscale,
  kAfterUnscale,
  kPenaltyScaled,    // PyTorch's gradient-penalty recipe without its unscaling
  kPenaltyUnscaled,  // the recipe as written: grads * (1 / scale) before the norm
  kPenaltyFromGrad,  // backward(create_graph) on the scaled loss, penalty from .grad
};

// The squared norm of the gradients of the scaled loss, as a penalty; `unscale`: multiply
// them by 1/scale first, as https://pytorch.org/docs/stable/notes/amp_examples.html does.
at::Tensor penalty(const at::Tensor& scaled_loss, Mlp& net, GradScaler& scaler, bool unscale) {
  auto grads = torch::autograd::grad({scaled_loss}, net.parameters(), /*grad_outputs=*/{},
                                     /*retain_graph=*/true, /*create_graph=*/true);
  at::Tensor sum = torch::zeros({});
  const double inv_scale = 1.0 / scaler.get_scale();
  for (auto& g : grads) sum = sum + (unscale ? g * inv_scale : g).pow(2).sum();
  return sum;
}

// Six steps with a GradScaler; gradient clipping where `clip` says. `with_model`: whether
// the debugger knows the parameters.
ChecklistResult run_scaled(Clip clip, bool with_model = true) {
  TempDir dir("checklist_clip");
  torch::manual_seed(3);
  auto net = std::make_shared<Mlp>();
  torch::optim::SGD opt(net->parameters(), 0.05);
  GradScaler scaler;  // init_scale 65536, as PyTorch
  const at::Tensor images = normalised_images();
  const at::Tensor labels = train_raw().labels.slice(0, 0, 4096);
  {
    PrecisionDebugger dbg(test::options_in(dir));
    if (with_model) {
      dbg.start(net);
    } else {
      dbg.start();
    }
    for (int64_t b = 0; b < 6; ++b) {
      const at::Tensor x = images.slice(0, b * 64, (b + 1) * 64);
      const at::Tensor y = labels.slice(0, b * 64, (b + 1) * 64);
      opt.zero_grad();
      const at::Tensor loss = torch::cross_entropy_loss(net->forward(x), y);
      if (clip == Clip::kPenaltyScaled || clip == Clip::kPenaltyUnscaled) {
        const at::Tensor p =
            penalty(scaler.scale(loss), *net, scaler, clip == Clip::kPenaltyUnscaled);
        scaler.scale(loss + 1e-3 * p).backward();
      } else if (clip == Clip::kPenaltyFromGrad) {
        scaler.scale(loss).backward({}, /*retain_graph=*/true, /*create_graph=*/true);
        at::Tensor p = torch::zeros({});
        for (const auto& w : net->parameters()) p = p + w.grad().pow(2).sum();
        (1e-3 * p).backward();
      } else {
        scaler.scale(loss).backward();
      }
      if (clip == Clip::kBeforeUnscale) {
        torch::nn::utils::clip_grad_norm_(net->parameters(), 1.0);  // on scaled gradients
      } else if (clip == Clip::kAfterUnscale) {
        scaler.unscale_(opt);
        torch::nn::utils::clip_grad_norm_(net->parameters(), 1.0);
      }
      scaler.step(opt);
      scaler.update();
      dbg.step();
    }
    dbg.stop();
  }
  DumpReader reader(dir.path().string());
  return run_checklist(reader);
}

}  // namespace

TEST_CASE("checklist probe: clipping before unscale_ is found, after it is not", "[checklist]") {
  const ChecklistResult bad = run_scaled(Clip::kBeforeUnscale);
  const CheckItem* c = bad.find("mp.clip_before_unscale");
  REQUIRE(c != nullptr);
  INFO(c->evidence);
  CHECK(c->verdict == Verdict::kProblem);
  // clip_grad_norm_ reads each gradient through Tensor::norm; the scale is still the
  // initial 2^16 at the first step (no overflow in this run, so no backoff).
  CHECK_THAT(c->evidence,
             Catch::Matchers::ContainsSubstring("norm"));  // aten::norm; 2.x: linalg_vector_norm
  CHECK_THAT(c->evidence, Catch::Matchers::ContainsSubstring("(65536)"));
  CHECK_THAT(c->evidence, Catch::Matchers::ContainsSubstring("in 6 step(s), first at step 0"));
  // The clip's in-place aten::mul_ writes the gradients: not a read.
  CHECK_THAT(c->evidence, !Catch::Matchers::ContainsSubstring("aten::mul_"));

  const ChecklistResult good = run_scaled(Clip::kAfterUnscale);
  CHECK(of(good, "mp.clip_before_unscale") == Verdict::kOk);
  CHECK(of(run_scaled(Clip::kNone), "mp.clip_before_unscale") == Verdict::kOk);
  // Gradient penalties: on the scaled gradients of torch::autograd::grad, or of .grad after a
  // create_graph backward, found (their aten::pow); unscaled first as PyTorch's recipe
  // does (g * inv_scale), not.
  for (const Clip planted : {Clip::kPenaltyScaled, Clip::kPenaltyFromGrad}) {
    const ChecklistResult p = run_scaled(planted);
    const CheckItem* pc = p.find("mp.clip_before_unscale");
    REQUIRE(pc != nullptr);
    INFO(pc->evidence);
    CHECK(pc->verdict == Verdict::kProblem);
    CHECK_THAT(pc->evidence, Catch::Matchers::ContainsSubstring("aten::pow"));
  }
  {
    const ChecklistResult p = run_scaled(Clip::kPenaltyUnscaled);
    INFO(p.find("mp.clip_before_unscale")->evidence);
    CHECK(of(p, "mp.clip_before_unscale") == Verdict::kOk);
  }
  // Without start(model) the parameters are unknown: not decidable.
  CHECK(of(run_scaled(Clip::kBeforeUnscale, /*with_model=*/false), "mp.clip_before_unscale") ==
        Verdict::kNotApplicable);
}

namespace {

double mean_loss_after(const Mlp& init, double lr, int64_t steps) {
  auto net = std::make_shared<Mlp>();
  {
    torch::NoGradGuard g;
    auto src = init.parameters();
    auto dst = net->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  torch::optim::SGD opt(net->parameters(), lr);
  const at::Tensor images = normalised_images();
  const at::Tensor labels = train_raw().labels.slice(0, 0, 4096);
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t b = s % 64;
    opt.zero_grad();
    auto loss = torch::cross_entropy_loss(net->forward(images.slice(0, b * 64, (b + 1) * 64)),
                                          labels.slice(0, b * 64, (b + 1) * 64));
    loss.backward();
    opt.step();
  }
  torch::NoGradGuard g;
  const double l =
      torch::cross_entropy_loss(net->forward(images.slice(0, 0, 1024)), labels.slice(0, 0, 1024))
          .item<double>();
  return std::isfinite(l) ? l : 1e9;
}

}  // namespace

TEST_CASE("lr_range_test on an MLP on Fashion-MNIST, and the checklist's verdict",
          "[checklist][lr_range]") {
  torch::manual_seed(11);
  Mlp init;
  // The test trains a copy, as its documentation asks.
  auto net = std::make_shared<Mlp>();
  {
    torch::NoGradGuard g;
    auto src = init.parameters();
    auto dst = net->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  torch::optim::SGD opt(net->parameters(), 1e-4);
  const at::Tensor images = normalised_images();
  const at::Tensor labels = train_raw().labels.slice(0, 0, 4096);
  int64_t batch = 0;
  auto train_step = [&](double lr) {
    for (auto& g : opt.param_groups()) static_cast<torch::optim::SGDOptions&>(g.options()).lr(lr);
    const int64_t b = batch++ % 64;
    opt.zero_grad();
    auto loss = torch::cross_entropy_loss(net->forward(images.slice(0, b * 64, (b + 1) * 64)),
                                          labels.slice(0, b * 64, (b + 1) * 64));
    loss.backward();
    opt.step();
    return loss.item<double>();
  };
  LrRangeOptions lo;
  lo.lr_min = 1e-5;
  lo.lr_max = 10.0;
  lo.steps = 80;

  LrRangeResult r;
  for (const bool planted : {false, true}) {
    TempDir d(planted ? "lr_range_bad" : "lr_range_good");
    ChecklistResult check;
    {
      PrecisionDebugger dbg(test::options_in(d));
      dbg.start();
      if (!planted) {
        r = lr_range_test(train_step, lo, dbg.writer());
      } else {
        // The range measured above, recorded as lr_range_test records it.
        ScalarRecord s;
        s.name = std::string(check_scalar::kLrRangeLo);
        s.value = r.lr_lo;
        dbg.writer()->submit(ScalarRecord(s));
        s.name = std::string(check_scalar::kLrRangeHi);
        s.value = r.lr_hi;
        dbg.writer()->submit(std::move(s));
      }
      // The training learning rate the user logs: the steepest point, or far above the range.
      dbg.log_scalar("lr", planted ? r.lr_hi * 100 : r.lr_steepest);
      dbg.stop();
    }
    DumpReader reader(d.path().string());
    if (!planted) {
      // The curve read back is the one returned.
      std::vector<double> lrs;
      for (const ScalarRecord& s : reader.scalars())
        if (s.name == "check/lr_range/lr") lrs.push_back(s.value);
      CHECK(lrs == r.lrs);
    }
    check = run_checklist(reader);
    CHECK(of(check, "hp.learning_rate") == (planted ? Verdict::kProblem : Verdict::kOk));
  }

  INFO("range [" << r.lr_lo << ", " << r.lr_hi << "], steepest " << r.lr_steepest << ", "
                 << r.lrs.size() << " steps" << (r.diverged ? ", diverged" : ""));
  REQUIRE(r.found);
  CHECK(r.lr_lo < r.lr_steepest);
  CHECK(r.lr_steepest <= r.lr_hi);
  // Plain SGD on this normalised MLP diverges well before lr = 10: the test stops early.
  CHECK(r.diverged);
  CHECK(r.lrs.size() < static_cast<size_t>(lo.steps));
  // Independent check of the range's meaning: 60 steps from the same initial weights at the
  // steepest learning rate reach a lower loss than at a learning rate 100x below the range,
  // and than at one 100x above it.
  const double at_steepest = mean_loss_after(init, r.lr_steepest, 60);
  CHECK(at_steepest < mean_loss_after(init, r.lr_lo / 100, 60));
  CHECK(at_steepest < mean_loss_after(init, r.lr_hi * 100, 60));
}
