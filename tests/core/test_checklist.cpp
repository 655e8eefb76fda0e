// The accuracy checklist's rules on synthetic records: every item once with its problem
// planted and once without; the verdict must flip. Decided from the op records alone:
// test_checklist_records.cpp.
#include <cmath>
#include <map>
#include <string>

#include "precprobe/checklist.h"
#include "precprobe/reader.h"
#include "precprobe/writer.h"
#include "precprobe_catch.h"
#include "temp_dir.h"

using namespace precprobe;
namespace cs = precprobe::check_scalar;

namespace {

void scalar(DumpData& d, int64_t step, std::string_view name, double v) {
  ScalarRecord r;
  r.step = step;
  r.name = std::string(name);
  r.value = v;
  d.scalars.push_back(r);
}

struct BatchSpec {
  int64_t step = 0;
  int64_t epoch = -1;
  bool training = true, grad = true;
  int64_t stat_modules = 0;
  int64_t nan = 0, inf = 0;
  double mean = 0.0, std = 1.0;
  std::vector<int64_t> labels;  // one entry per target
  int64_t ignored = 0;
};

// What PrecisionDebugger::observe_batch writes for one batch.
void batch(DumpData& d, const BatchSpec& b) {
  scalar(d, b.step, cs::kBatchBegin, double(b.epoch));
  scalar(d, b.step, cs::kTraining, b.training);
  scalar(d, b.step, cs::kGradEnabled, b.grad);
  scalar(d, b.step, cs::kStatModulesTraining, double(b.stat_modules));
  scalar(d, b.step, cs::kInputsNumel, 784.0 * double(b.labels.size()));
  scalar(d, b.step, cs::kInputsNan, double(b.nan));
  scalar(d, b.step, cs::kInputsInf, double(b.inf));
  scalar(d, b.step, std::string(cs::kChannelMean) + "0", b.mean);
  scalar(d, b.step, std::string(cs::kChannelStd) + "0", b.std);
  scalar(d, b.step, cs::kTargetsNumel, double(b.labels.size() + size_t(b.ignored)));
  scalar(d, b.step, cs::kIgnored, double(b.ignored));
  std::map<int64_t, int64_t> h;
  uint64_t hash = 1469598103934665603ull;
  for (int64_t l : b.labels) {
    ++h[l];
    hash = (hash ^ uint64_t(l)) * 1099511628211ull;
  }
  for (const auto& [l, n] : h)
    scalar(d, b.step, std::string(cs::kLabelCount) + std::to_string(l), double(n));
  scalar(d, b.step, cs::kLabelHash, double(hash & ((uint64_t{1} << 48) - 1)));
  scalar(d, b.step, cs::kDistinctLabels, double(h.size()));
}

// 16 labels cycling through 10 classes, rotated by `shift`.
std::vector<int64_t> mixed(int shift) {
  std::vector<int64_t> v;
  for (int i = 0; i < 16; ++i) v.push_back((i + shift) % 10);
  return v;
}

Verdict verdict(const DumpData& d, std::string_view id, const ChecklistOptions& o = {}) {
  const ChecklistResult r = run_checklist(d, o);
  const CheckItem* c = r.find(id);
  REQUIRE(c != nullptr);
  INFO(c->evidence);
  return c->verdict;
}

// A clean run: 20 steps of shuffled, normalised, balanced batches; 2 epochs.
DumpData clean_run() {
  DumpData d;
  for (int64_t s = 0; s < 20; ++s) {
    BatchSpec b;
    b.step = s;
    b.epoch = s / 10;
    b.labels = mixed(int((s * 7 + s / 10) % 10));
    batch(d, b);
    scalar(d, s, cs::kLoss, 2.3 * std::exp(-0.1 * double(s)));
  }
  return d;
}

}  // namespace

TEST_CASE("checklist: a clean run has no problem", "[checklist]") {
  const ChecklistResult r = run_checklist(clean_run());
  for (const CheckItem& c : r.items) {
    INFO(c.id << ": " << c.evidence);
    CHECK(c.verdict != Verdict::kProblem);
  }
  CHECK_FALSE(r.problem());
  CHECK(r.find("data.missing_values")->verdict == Verdict::kOk);
  CHECK(r.find("hp.loss_trend")->verdict == Verdict::kOk);
  CHECK(r.find("mp.clip_before_unscale")->verdict == Verdict::kNotApplicable);
  CHECK(r.to_json().dump().find("\"verdict\":\"ok\"") != std::string::npos);
}

TEST_CASE("checklist: items without data say n/a", "[checklist]") {
  const ChecklistResult r = run_checklist(DumpData{});
  for (const CheckItem& c : r.items) {
    INFO(c.id);
    CHECK(c.verdict == Verdict::kNotApplicable);
    CHECK_FALSE(c.evidence.empty());
  }
}

TEST_CASE("checklist: missing values in inputs", "[checklist]") {
  DumpData d = clean_run();
  CHECK(verdict(d, "data.missing_values") == Verdict::kOk);
  BatchSpec b;
  b.step = 20;
  b.nan = 3;
  b.inf = 1;
  b.labels = mixed(0);
  batch(d, b);
  CHECK(verdict(d, "data.missing_values") == Verdict::kProblem);
  const ChecklistResult res = run_checklist(d);
  const CheckItem* c = res.find("data.missing_values");
  // Independent count: one bad batch, 3 NaN and 1 Inf.
  CHECK(c->evidence == "1 of 21 batches hold NaN/Inf (3 NaN, 1 Inf); first at step 20");
}

TEST_CASE("checklist: class imbalance", "[checklist]") {
  DumpData d;
  // 9 classes twice each, class 9 once per batch: max/min = 2 (ok); then class 0 x 30: 32/1.
  for (int64_t s = 0; s < 4; ++s) {
    BatchSpec b;
    b.step = s;
    for (int64_t c = 0; c < 9; ++c) b.labels.insert(b.labels.end(), {c, c});
    b.labels.push_back(9);
    batch(d, b);
  }
  CHECK(verdict(d, "data.class_imbalance") == Verdict::kOk);
  const ChecklistResult res = run_checklist(d);
  const CheckItem* c = res.find("data.class_imbalance");
  CHECK(c->figures[4].second == Approx(2.0));  // ratio 8/4
  BatchSpec b;
  b.step = 4;
  b.labels.assign(120, 0);  // class 0: 8 + 120 = 128 vs class 9: 4 -> 32
  batch(d, b);
  CHECK(verdict(d, "data.class_imbalance") == Verdict::kProblem);
  CHECK(run_checklist(d).find("data.class_imbalance")->figures[4].second == Approx(32.0));
}

// One-channel batches of images with this mean and std (what observe_batch records).
DumpData pixels(double mean, double std) {
  DumpData d;
  for (int64_t s = 0; s < 5; ++s) {
    BatchSpec b;
    b.step = s;
    b.mean = mean;
    b.std = std;
    b.labels = mixed(int(s));
    batch(d, b);
  }
  return d;
}

const CheckItem& normalised_item(const ChecklistResult& r) {
  const CheckItem* c = r.find("data.inputs_not_normalised");
  REQUIRE(c != nullptr);
  INFO(c->evidence);
  return *c;
}

TEST_CASE("checklist: inputs not normalised", "[checklist]") {
  DumpData ok = clean_run();
  CHECK(verdict(ok, "data.inputs_not_normalised") == Verdict::kOk);
  // Raw Fashion-MNIST pixels, 0..255: mean 72.9, std 90.0 (root mean square 116).
  CHECK(verdict(pixels(72.9, 90.0), "data.inputs_not_normalised") == Verdict::kProblem);
  // Pooled std: batch means 0.5 and -0.5 with std 0.6 each -> sqrt(0.36 + 0.25) = 0.781.
  DumpData pooled;
  for (int64_t s = 0; s < 2; ++s) {
    BatchSpec b;
    b.step = s;
    b.mean = s == 0 ? 0.5 : -0.5;
    b.std = 0.6;
    b.labels = mixed(0);
    batch(pooled, b);
  }
  const ChecklistResult res = run_checklist(pooled);
  const CheckItem* c = res.find("data.inputs_not_normalised");
  CHECK(c->verdict == Verdict::kOk);
  CHECK(c->figures[0].second == Approx(0.0).margin(1e-12));
  CHECK(c->figures[1].second == Approx(std::sqrt(0.61)));
}

// A scale that trains is not a problem, even when not standardised exactly.
TEST_CASE("checklist: [0, 1] pixels and MNIST's constants on Fashion-MNIST are not a problem",
          "[checklist]") {
  // Fashion-MNIST scaled to [0, 1]: mean 0.286, std 0.353.
  const ChecklistResult unit = run_checklist(pixels(0.286, 0.353));
  const CheckItem& u = normalised_item(unit);
  CHECK(u.verdict == Verdict::kOk);
  CHECK_THAT(u.evidence, Catch::Matchers::ContainsSubstring("not a problem"));
  CHECK_THAT(u.evidence, Catch::Matchers::ContainsSubstring("mean 0.286"));
  // Normalised with MNIST's constants, (x - 0.1307) / 0.3081: mean 0.504, std 1.146, a
  // centring off by 0.44 std.
  const ChecklistResult mnist = run_checklist(pixels(0.504, 1.146));
  const CheckItem& m = normalised_item(mnist);
  CHECK(m.verdict == Verdict::kOk);
  CHECK(m.figures[0].second == Approx(0.504));
  CHECK(m.figures[1].second == Approx(1.146));
  CHECK_THAT(m.evidence, Catch::Matchers::ContainsSubstring("mean 0.504 is 0.44 std off centre"));
  CHECK_THAT(m.evidence, Catch::Matchers::ContainsSubstring("not a problem"));
}

TEST_CASE("checklist: tabular features spanning orders of magnitude", "[checklist]") {
  // Per feature, as observe_batch records [N, F] inputs: feature j uniform in [0, scale_j]
  // (mean s/2, std s/sqrt(12)), Boston housing's ranges (regression_diverge.cpp).
  const std::vector<double> boston = {89, 100, 28, 1, 0.9, 8.8, 100, 12, 24, 711, 22, 397, 38};
  auto features = [](const std::vector<std::pair<double, double>>& mean_std) {
    DumpData d;
    for (int64_t s = 0; s < 5; ++s) {
      BatchSpec b;
      b.step = s;
      b.mean = mean_std[0].first;
      b.std = mean_std[0].second;
      b.labels = mixed(int(s));
      batch(d, b);
      for (size_t f = 1; f < mean_std.size(); ++f) {
        scalar(d, s, std::string(cs::kChannelMean) + std::to_string(f), mean_std[f].first);
        scalar(d, s, std::string(cs::kChannelStd) + std::to_string(f), mean_std[f].second);
      }
    }
    return d;
  };
  std::vector<std::pair<double, double>> raw;
  for (double scale : boston) raw.emplace_back(scale / 2, scale / std::sqrt(12.0));
  const ChecklistResult r = run_checklist(features(raw));
  const CheckItem& c = normalised_item(r);
  CHECK(c.verdict == Verdict::kProblem);
  CHECK_THAT(c.evidence, Catch::Matchers::ContainsSubstring("ch9 mean 356"));  // TAX
  // Each feature within the unit scale, but 0.005 next to 8: 1600x apart.
  const ChecklistResult spread = run_checklist(features({{0, 8}, {0.002, 0.005}, {0, 1}}));
  const CheckItem& sp = normalised_item(spread);
  CHECK(sp.verdict == Verdict::kProblem);
  CHECK_THAT(sp.evidence, Catch::Matchers::ContainsSubstring("orders of magnitude"));
  // Standardised features: ok.
  CHECK(normalised_item(run_checklist(features({{0, 1}, {0.1, 0.9}, {-0.2, 1.2}}))).verdict ==
        Verdict::kOk);
}

TEST_CASE("checklist: no shuffling", "[checklist]") {
  CHECK(verdict(clean_run(), "data.no_shuffling") == Verdict::kOk);
  SECTION("sorted labels: batches of one class") {
    DumpData d;
    for (int64_t s = 0; s < 10; ++s) {
      BatchSpec b;
      b.step = s;
      b.labels.assign(16, s / 3);
      batch(d, b);
    }
    CHECK(verdict(d, "data.no_shuffling") == Verdict::kProblem);
  }
  SECTION("two epochs in the same order") {
    DumpData d;
    for (int64_t s = 0; s < 20; ++s) {
      BatchSpec b;
      b.step = s;
      b.epoch = s / 10;
      b.labels = mixed(int(s % 10));
      batch(d, b);
    }
    CHECK(verdict(d, "data.no_shuffling") == Verdict::kProblem);
  }
  SECTION("repeated order without epoch numbers") {
    DumpData d;
    for (int64_t s = 0; s < 12; ++s) {
      BatchSpec b;
      b.step = s;
      b.labels = mixed(int(s % 5));
      batch(d, b);
    }
    CHECK(verdict(d, "data.no_shuffling") == Verdict::kProblem);
  }
}

TEST_CASE("checklist: ignore index share", "[checklist]") {
  DumpData d = clean_run();
  CHECK(verdict(d, "data.ignore_index") == Verdict::kNotApplicable);
  BatchSpec b;
  b.step = 20;
  b.labels = mixed(0);
  b.ignored = 4;  // 4 of 20 targets of this batch
  batch(d, b);
  CHECK(verdict(d, "data.ignore_index") == Verdict::kOk);
  BatchSpec all;
  all.step = 21;
  all.ignored = 16;  // a batch with nothing to learn from
  batch(d, all);
  CHECK(verdict(d, "data.ignore_index") == Verdict::kProblem);
}

TEST_CASE("checklist: learning rate against the LR range test", "[checklist]") {
  DumpData d = clean_run();
  CHECK(verdict(d, "hp.learning_rate") == Verdict::kNotApplicable);
  scalar(d, 0, cs::kLrRangeLo, 1e-4);
  scalar(d, 0, cs::kLrRangeHi, 1e-2);
  CHECK(verdict(d, "hp.learning_rate") == Verdict::kNotApplicable);  // lr not logged
  DumpData inside = d, outside = d;
  scalar(inside, 1, cs::kLr, 1e-3);
  scalar(outside, 1, cs::kLr, 0.5);
  CHECK(verdict(inside, "hp.learning_rate") == Verdict::kOk);
  CHECK(verdict(outside, "hp.learning_rate") == Verdict::kProblem);
}

TEST_CASE("checklist: loss trend", "[checklist]") {
  CHECK(verdict(clean_run(), "hp.loss_trend") == Verdict::kOk);
  auto run = [](auto f) {
    DumpData d;
    for (int64_t s = 0; s < 20; ++s) scalar(d, s, cs::kLoss, f(double(s)));
    return d;
  };
  CHECK(verdict(run([](double) { return 2.3; }), "hp.loss_trend") == Verdict::kProblem);
  CHECK(verdict(run([](double s) { return 1.0 + 0.2 * s; }), "hp.loss_trend") == Verdict::kProblem);
  CHECK(verdict(run([](double s) { return s > 11.5 && s < 12.5 ? NAN : 2.0 - 0.05 * s; }),
                "hp.loss_trend") == Verdict::kProblem);
  // Window max(3, 20/5) = 4: first mean (2+1.95+1.9+1.85)/4 = 1.925, last 1.125.
  const ChecklistResult r = run_checklist(run([](double s) { return 2.0 - 0.05 * s; }));
  const CheckItem* c = r.find("hp.loss_trend");
  CHECK(c->verdict == Verdict::kOk);
  CHECK(c->figures[2].second == Approx(1.925));
  CHECK(c->figures[3].second == Approx(1.125));
}

TEST_CASE("checklist: train/eval mode", "[checklist]") {
  DumpData d = clean_run();
  BatchSpec eval;
  eval.step = 20;
  eval.training = false;
  eval.grad = false;
  eval.labels = mixed(3);
  batch(d, eval);
  CHECK(verdict(d, "api.train_eval_mode") == Verdict::kOk);
  DumpData bad = d;
  eval.training = true;  // evaluation forgot model->eval()
  eval.stat_modules = 2;
  batch(bad, eval);
  CHECK(verdict(bad, "api.train_eval_mode") == Verdict::kProblem);
  DumpData bn = d;
  eval.training = false;  // the model is in eval mode but a BatchNorm was put back in train
  eval.stat_modules = 1;
  batch(bn, eval);
  CHECK(verdict(bn, "api.train_eval_mode") == Verdict::kProblem);
  DumpData train_eval = d;
  BatchSpec t;
  t.step = 21;
  t.training = false;  // training step after an evaluation without model->train()
  t.labels = mixed(1);
  batch(train_eval, t);
  CHECK(verdict(train_eval, "api.train_eval_mode") == Verdict::kProblem);
}

TEST_CASE("checklist: frozen or unused weights", "[checklist]") {
  DumpData d;
  CHECK(verdict(d, "api.frozen_weights") == Verdict::kNotApplicable);
  for (int64_t s = 0; s < 3; ++s) {
    for (const char* p : {"fc.weight", "fc.bias"}) {
      GradRecord g;
      g.step = s;
      g.param = p;
      g.grad_norm = 0.5;
      g.update_ratio = s == 0 ? 0.0 : 1e-3;
      d.grads.push_back(g);
    }
  }
  CHECK(verdict(d, "api.frozen_weights") == Verdict::kOk);
  DumpData unused = d, frozen = d;
  for (int64_t s = 0; s < 3; ++s) {
    GradRecord g;
    g.step = s;
    g.param = "head.weight";
    g.has_grad = false;
    unused.grads.push_back(g);
    g.has_grad = true;
    g.grad_norm = 0.3;  // has gradients, but the optimizer never moves it
    frozen.grads.push_back(g);
  }
  CHECK(verdict(unused, "api.frozen_weights") == Verdict::kProblem);
  CHECK(verdict(frozen, "api.frozen_weights") == Verdict::kProblem);
  CHECK(run_checklist(unused).find("api.frozen_weights")->evidence ==
        "1 parameters never received a non-zero gradient: head.weight");
  // A gradient that is all NaN (finite norm 0) was computed: not an unused weight. One
  // recorded step (a replayed anomaly) cannot show whether a weight moves.
  DumpData replayed;
  GradRecord nan_grad;
  nan_grad.step = 37;
  nan_grad.param = "fc.weight";
  nan_grad.grad_norm = 0;
  nan_grad.grad_nan = 64;
  replayed.grads.push_back(nan_grad);
  CHECK(verdict(replayed, "api.frozen_weights") == Verdict::kOk);
  replayed.grads.back().grad_nan = 0;
  CHECK(verdict(replayed, "api.frozen_weights") == Verdict::kProblem);
  // "record": "on_anomaly" records every checked step's gradients without the weights
  // (has_weight false, update_ratio absent): they show no change, and no absence of one.
  DumpData watched;
  for (int64_t s = 0; s < 5; ++s) {
    GradRecord w;
    w.step = s;
    w.param = "fc.weight";
    w.grad_norm = 0.5;
    w.has_weight = false;
    w.weight_norm = w.update_ratio = std::nan("");
    watched.grads.push_back(w);
  }
  CHECK(verdict(watched, "api.frozen_weights") == Verdict::kOk);
  CHECK(run_checklist(watched).find("api.frozen_weights")->evidence ==
        "all 1 parameters received gradients; 0 of them changed, the others' weights were not "
        "recorded on two steps");
}

TEST_CASE("checklist: initial weights", "[checklist]") {
  DumpData d;
  CHECK(verdict(d, "api.init_weights") == Verdict::kNotApplicable);
  scalar(d, 0, cs::kInitParams, 3);
  CHECK(verdict(d, "api.init_weights") == Verdict::kOk);
  DumpData z = d, same = d;
  scalar(z, 0, std::string(cs::kInitZero) + "fc.weight", 1);
  scalar(same, 0, std::string(cs::kInitIdentical) + "fc.weight", 1);
  CHECK(verdict(z, "api.init_weights") == Verdict::kProblem);
  CHECK(verdict(same, "api.init_weights") == Verdict::kProblem);
}

TEST_CASE("checklist: module hash", "[checklist]") {
  const uint64_t h = 0x0123456789abcdefull;
  DumpData d;
  scalar(d, 0, cs::kHashHi, double(h >> 32));
  scalar(d, 0, cs::kHashLo, double(h & 0xffffffffull));
  CHECK(verdict(d, "api.module_hash") == Verdict::kNotApplicable);
  ChecklistOptions match, other;
  match.module_hash = h;
  other.module_hash = h ^ 1;
  CHECK(verdict(d, "api.module_hash", match) == Verdict::kOk);
  CHECK(verdict(d, "api.module_hash", other) == Verdict::kProblem);
  DumpData expected = d;
  scalar(expected, 0, cs::kExpectedHashHi, double(h >> 32));
  scalar(expected, 0, cs::kExpectedHashLo, double((h ^ 1) & 0xffffffffull));
  CHECK(verdict(expected, "api.module_hash") == Verdict::kProblem);
}

namespace {
OpRecord op(int64_t step, int64_t seq, const char* name, const char* dtype, double out_nan) {
  OpRecord r;
  r.step = step;
  r.seq = seq;
  r.op = name;
  Arg in, out;
  in.tensor = TensorStats{};
  in.tensor->dtype = dtype;
  in.tensor->numel = 4;
  out.tensor = in.tensor;
  out.tensor->nan = int64_t(out_nan);
  r.inputs.push_back(in);
  r.outputs.push_back(out);
  return r;
}
}  // namespace

TEST_CASE("checklist: overflow and the GradScaler", "[checklist]") {
  DumpData d;
  CHECK(verdict(d, "mp.overflow") == Verdict::kNotApplicable);
  d.ops.push_back(op(0, 0, "aten::mul", "Float", 0));
  CHECK(verdict(d, "mp.overflow") == Verdict::kOk);
  CHECK(verdict(d, "mp.grad_scaler") == Verdict::kNotApplicable);
  DumpData nan = d;
  nan.ops.push_back(op(0, 1, "aten::exp", "Float", 2));
  CHECK(verdict(nan, "mp.overflow") == Verdict::kProblem);
  CHECK(run_checklist(nan).find("mp.overflow")->evidence.find("aten::exp") != std::string::npos);

  // Uninitialised memory from an allocation is not an overflow.
  DumpData empty = d;
  empty.ops.push_back(op(0, 1, "aten::empty_like", "Float", 1));
  CHECK(verdict(empty, "mp.overflow") == Verdict::kOk);
  OpRecord fill = op(0, 2, "aten::fill_", "Float", 0);
  fill.inputs[0].tensor->nan = 1;  // the garbage fill_ overwrites
  empty.ops.push_back(fill);
  CHECK(verdict(empty, "mp.overflow") == Verdict::kOk);
  OpRecord add = op(0, 3, "aten::add", "Float", 0);
  add.inputs[0].tensor->nan = 1;  // a NaN really consumed
  empty.ops.push_back(add);
  CHECK(verdict(empty, "mp.overflow") == Verdict::kProblem);

  DumpData half = d;
  half.ops.push_back(op(0, 1, "aten::addmm", "Half", 0));
  CHECK(verdict(half, "mp.grad_scaler") == Verdict::kProblem);
  ScalerRecord s;
  s.scale_before = 65536;
  s.scale_after = 65536;
  half.scaler.push_back(s);
  CHECK(verdict(half, "mp.grad_scaler") == Verdict::kOk);
  s.event = "collapse";
  s.scale_after = 1e-4;
  half.scaler.push_back(s);
  CHECK(verdict(half, "mp.grad_scaler") == Verdict::kProblem);
}

TEST_CASE("checklist: read back through a DumpWriter dump", "[checklist]") {
  test::TempDir dir("checklist");
  const DumpData clean = clean_run();
  {
    WriterOptions w;
    w.dir = dir / "rank0";
    DumpWriter writer(w);
    writer.write_meta("{\"format_version\":1,\"rank\":0,\"world_size\":1}");
    for (ScalarRecord r : clean.scalars) writer.submit(std::move(r));
    BatchSpec b;
    b.step = 20;
    b.epoch = 1;
    b.nan = 5;
    b.labels = mixed(2);
    DumpData extra;
    batch(extra, b);
    for (ScalarRecord r : extra.scalars) writer.submit(std::move(r));
    writer.close();
  }
  DumpReader reader(dir.path().string());
  const ChecklistResult r = run_checklist(reader);
  CHECK(r.find("data.missing_values")->verdict == Verdict::kProblem);
  CHECK(r.find("data.inputs_not_normalised")->verdict == Verdict::kOk);
  CHECK(r.find("hp.loss_trend")->verdict == Verdict::kOk);
  CHECK(r.problem());
}
