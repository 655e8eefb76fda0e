// GradMonitor's watchpoints: each flips on its planted condition and stays off otherwise, with
// the default thresholds and configured ones. Its statistics: test_grad_monitor.cpp.
#include <cmath>
#include <functional>
#include <map>
#include <stdexcept>
#include <vector>

#include "precprobe/error.h"
#include "support/grad_monitor_test.h"

namespace {

// Moves w by exactly `ratio` * ||w|| in a random direction.
void move(torch::Tensor& w, double ratio) {
  torch::NoGradGuard ng;
  auto d = torch::randn(w.sizes(), torch::kDouble);
  auto wd = w.to(torch::kDouble);
  d = d * (ratio * wd.norm().item<double>() / d.norm().item<double>());
  w.copy_(wd + d);
}

}  // namespace

TEST_CASE("each watchpoint flips on its planted condition and not otherwise", "[monitor]") {
  torch::manual_seed(3);
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto n : {"p0", "p1", "p2", "p3"}) {
    named.emplace_back(n, torch::randn({64}).set_requires_grad(true));
  }
  std::vector<precprobe::WatchHit> hits;
  GradMonitorOptions o;
  o.on_watch = [&](const precprobe::WatchHit& h) { hits.push_back(h); };
  GradMonitor m(named, o);

  // A healthy step: grads ~N(0, 0.1) (mean |g| ~0.08, norm ~0.8), weights move by 1%.
  auto healthy = [&] {
    for (auto& [n, p] : named) {
      p.mutable_grad() = torch::randn({64}) * 0.1;
      move(p, 0.01);
    }
  };
  healthy();
  CHECK(m.observe(0)[1].watch.empty());  // first observation: no ratio yet
  CHECK(hits.empty());
  int step = 1;
  // The median-relative watchpoints (grad_exploding's factor, weight_change_too_large's) judge
  // a parameter once its history holds `warmup` values.
  for (int64_t i = 0; i < o.watch.warmup; ++i) {
    healthy();
    for (const auto& r : m.observe(step++)) CHECK(r.watch.empty());
  }
  CHECK(hits.empty());
  // Plants a condition on p1 (given its weights at the last observe) and checks the hits.
  auto check = [&](const std::function<void(torch::Tensor&, const torch::Tensor&)>& plant,
                   const std::set<std::string>& want) {
    auto prev = named[1].second.detach().clone();
    healthy();
    {
      torch::NoGradGuard ng;
      plant(named[1].second, prev);
    }
    auto recs = m.observe(step++);
    for (size_t i = 0; i < recs.size(); ++i) {
      INFO("step " << step - 1 << " param " << recs[i].param);
      CHECK(watches(recs[i]) == (i == 1 ? want : std::set<std::string>{}));
    }
    CHECK(hits.size() == want.size());
    for (const auto& h : hits) {
      CHECK(h.param == "p1");
      CHECK(want.count(h.watch) == 1);
      CHECK(h.step == step - 1);
    }
    hits.clear();
  };
  using T = torch::Tensor;
  check([](T&, const T&) {}, {});  // nothing planted: nothing fires
  check([](T& p, const T&) { p.mutable_grad() = torch::randn({64}) * 1e-12; }, {"grad_vanishing"});
  check([](T& p, const T&) { p.mutable_grad() = torch::randn({64}) * 1e3; }, {"grad_exploding"});
  check([](T& p, const T&) { p.mutable_grad()[5] = kNaN; }, {"grad_exploding"});
  check([](T& p, const T&) { p.mutable_grad()[9] = -kInf; }, {"grad_exploding"});
  // An all-zero gradient is also a vanishing one (mean |g| = 0).
  check([](T& p, const T&) { p.mutable_grad().zero_(); }, {"grad_all_zero", "grad_vanishing"});
  check([](T& p, const T&) { p.mutable_grad() = T(); }, {});  // no gradient: no grad watch
  check([](T& p, const T& prev) { p.copy_(prev); }, {"weight_not_changed"});
  check(
      [](T& p, const T& prev) {
        p.copy_(prev);
        move(p, 0.5);
      },
      {"weight_change_too_large"});
  // One small change is no trend: weight_change_too_small needs a window of them (below).
  check(
      [](T& p, const T& prev) {
        p.copy_(prev);
        move(p, 1e-6);
      },
      {});
  check(
      [](T& p, const T& prev) {
        p.copy_(prev);
        move(p, 0.09);
      },
      {});  // just below 0.1
  check(
      [](T& p, const T& prev) {
        p.copy_(prev);
        move(p, 2e-4);
      },
      {});  // just above 1e-4
  // Zeroed weights: all zero, and a change of 100% of the norm.
  check([](T& p, const T&) { p.zero_(); }, {"weight_all_zero", "weight_change_too_large"});
  CHECK(hits.empty());
}

TEST_CASE("weight_change_too_small fires when the ratio stays below it for a window of steps",
          "[monitor]") {
  torch::manual_seed(4);
  auto p = torch::randn({32}).set_requires_grad(true);
  std::vector<precprobe::WatchHit> hits;
  GradMonitorOptions o;
  o.on_watch = [&](const precprobe::WatchHit& h) { hits.push_back(h); };
  const int64_t window = o.watch.weight_change_too_small_steps;
  REQUIRE(window > 1);
  GradMonitor m({{"p", p}}, o);
  int64_t step = 0;
  auto observe_after = [&](double ratio) {
    p.mutable_grad() = torch::randn({32}) * 0.1;
    move(p, ratio);
    return m.observe(step++)[0];
  };
  observe_after(1e-3);
  for (int i = 0; i < 20; ++i) CHECK(observe_after(1e-3).watch.empty());
  // A run one step short of the window, then an ordinary step: nothing.
  for (int64_t i = 0; i + 1 < window; ++i) CHECK(observe_after(5e-5).watch.empty());
  CHECK(observe_after(1e-3).watch.empty());
  // A full window: the hit comes at its last step, and again a window later.
  for (int64_t i = 0; i + 1 < window; ++i) CHECK(observe_after(5e-5).watch.empty());
  auto r = observe_after(5e-5);
  CHECK(watches(r) == std::set<std::string>{"weight_change_too_small"});
  CHECK(r.update_ratio == Approx(5e-5).epsilon(1e-2));
  const int64_t first_hit = step - 1;
  for (int64_t i = 0; i + 1 < window; ++i) CHECK(observe_after(5e-5).watch.empty());
  CHECK(watches(observe_after(5e-5)) == std::set<std::string>{"weight_change_too_small"});
  REQUIRE(hits.size() == 2);
  CHECK(hits[0].step == first_hit);
  CHECK(hits[1].step == first_hit + window);
  CHECK(hits[0].threshold == 1e-4);
  // A ratio of exactly 0 is weight_not_changed's, at once, and breaks the run.
  {
    torch::NoGradGuard ng;
    p.mutable_grad() = torch::randn({32}) * 0.1;
  }
  CHECK(watches(m.observe(step++)[0]) == std::set<std::string>{"weight_not_changed"});
}

TEST_CASE("grad_exploding judges a norm against the parameter's own running median", "[monitor]") {
  // "sum": a sum-reduced loss's scale (||g|| ~ 3e4, which the old fixed 1e3 called
  // exploding on every step); "mean": a mean-reduced one's (||g|| ~ 1e-3).
  torch::manual_seed(5);
  auto sum = torch::randn({100}).set_requires_grad(true);
  auto mean = torch::randn({100}).set_requires_grad(true);
  std::vector<precprobe::WatchHit> hits;
  GradMonitorOptions o;
  o.update_ratio = false;  // gradients only
  o.on_watch = [&](const precprobe::WatchHit& h) { hits.push_back(h); };
  GradMonitor m({{"sum", sum}, {"mean", mean}}, o);
  std::vector<double> mean_norms;  // the history the monitor should keep, recomputed here
  int64_t step = 0;
  auto observe = [&](double sum_scale, double mean_scale) {
    sum.mutable_grad() = torch::randn({100}) * sum_scale;
    mean.mutable_grad() = torch::randn({100}) * mean_scale;
    return m.observe(step++);
  };
  auto median_of_last = [](std::vector<double> v, size_t n) {
    if (v.size() > n) v.erase(v.begin(), v.end() - static_cast<std::ptrdiff_t>(n));
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  // Before the warm-up a jump of 100x is not judged: there is no history yet.
  for (int i = 0; i < o.watch.warmup; ++i) {
    auto recs = observe(3e3, i == 2 ? 1e-2 : 1e-4);
    mean_norms.push_back(recs[1].grad_norm);
    CHECK(recs[0].watch.empty());
    CHECK(recs[1].watch.empty());
  }
  for (int i = 0; i < 60; ++i) {
    auto recs = observe(3e3, 1e-4);
    mean_norms.push_back(recs[1].grad_norm);
    CHECK(recs[0].grad_norm > 1e4);
    CHECK(recs[0].watch.empty());
    CHECK(recs[1].watch.empty());
  }
  CHECK(hits.empty());
  // 8x the usual norm: in line with nothing but not 10x; 30x: exploding.
  const double median = median_of_last(mean_norms, static_cast<size_t>(o.watch.median_window));
  mean.mutable_grad() = torch::full({100}, 1.0) * (8 * median / 10);  // norm 8 x median
  auto recs = m.observe(step++);
  CHECK(recs[1].grad_norm == Approx(8 * median));
  CHECK(recs[1].watch.empty());
  mean_norms.push_back(recs[1].grad_norm);
  const double median2 = median_of_last(mean_norms, static_cast<size_t>(o.watch.median_window));
  mean.mutable_grad() = torch::full({100}, 1.0) * (30 * median2 / 10);
  recs = m.observe(step++);
  CHECK(watches(recs[1]) == std::set<std::string>{"grad_exploding"});
  CHECK(recs[0].watch.empty());
  REQUIRE(hits.size() == 1);
  CHECK(hits[0].param == "mean");
  CHECK(hits[0].value == Approx(30 * median2));
  CHECK(hits[0].threshold == Approx(10 * median2));
  // NaN fires at once, whatever the history.
  mean.mutable_grad()[3] = kNaN;
  CHECK(watches(m.observe(step++)[1]) == std::set<std::string>{"grad_exploding"});
}

TEST_CASE("weight_change_too_large needs a change out of line with the parameter's history",
          "[monitor]") {
  // A small bias that keeps crossing zero moves by ~0.3 of its norm every step: a large
  // ratio, but its usual step. A change of 10x the usual fires; with the factor off the
  // ratio threshold 0.1 alone fires on every step.
  torch::manual_seed(6);
  auto b = torch::randn({8}).set_requires_grad(true);
  std::vector<precprobe::WatchHit> hits;
  GradMonitorOptions o;
  o.on_watch = [&](const precprobe::WatchHit& h) { hits.push_back(h); };
  GradMonitor m({{"b", b}}, o);
  GradMonitorOptions absolute = o;
  absolute.watch.weight_change_too_large_factor.reset();
  std::vector<precprobe::WatchHit> absolute_hits;
  absolute.on_watch = [&](const precprobe::WatchHit& h) { absolute_hits.push_back(h); };
  GradMonitor a({{"b", b}}, absolute);
  std::vector<double> changes;  // ||b_t - b_(t-1)||, recomputed here
  auto step_by = [&](double ratio) {
    const auto before = b.detach().to(torch::kDouble);
    b.mutable_grad() = torch::randn({8});
    move(b, ratio);
    changes.push_back((b.detach().to(torch::kDouble) - before).norm().item<double>());
    return before.norm().item<double>();
  };
  b.mutable_grad() = torch::randn({8});
  m.observe(0);
  a.observe(0);
  for (int64_t step = 1; step < 30; ++step) {
    step_by(0.3);
    CHECK(m.observe(step)[0].watch.empty());
    a.observe(step);
  }
  CHECK(absolute_hits.size() == 29);  // every step after the first: ratio 0.3 > 0.1
  std::vector<double> sorted = changes;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];  // 29 changes
  const double prev_norm =
      step_by(12 * median / (b.detach().to(torch::kDouble).norm().item<double>()));
  auto r = m.observe(30)[0];
  CHECK(changes.back() == Approx(12 * median).epsilon(1e-5));
  CHECK(watches(r) == std::set<std::string>{"weight_change_too_large"});
  REQUIRE(hits.size() == 1);
  CHECK(hits[0].value == Approx(r.update_ratio));
  CHECK(hits[0].threshold == Approx(10 * median / prev_norm).epsilon(1e-5));
}

// Planted faults in a real training loop (an MLP under Adam), judged with the default
// thresholds: a frozen layer, a gradient blown up 1e4 times at one step, one shrunk 1e-12
// times. Each fires where it was planted and nowhere else.
TEST_CASE("planted faults in a training loop fire with the default thresholds", "[monitor]") {
  enum class Fault { kNone, kFrozen, kExploding, kVanishing };
  auto run = [](Fault fault) {
    torch::manual_seed(8);
    torch::nn::Sequential net(torch::nn::Linear(6, 16), torch::nn::Tanh(),
                              torch::nn::Linear(16, 2));
    std::vector<torch::Tensor> trained;
    for (const auto& p : net->named_parameters())
      if (fault != Fault::kFrozen || p.key().rfind("0.", 0) != 0) trained.push_back(p.value());
    torch::optim::Adam opt(trained, torch::optim::AdamOptions(1e-2));
    GradMonitor m(*net);
    const auto x = torch::randn({64, 6}), y = torch::randn({64, 2});
    std::map<std::pair<int64_t, std::string>, std::set<std::string>> hits;
    for (int64_t step = 0; step < 40; ++step) {
      opt.zero_grad();
      auto loss = torch::mse_loss(net->forward(x), y);
      if (step == 30 && fault == Fault::kExploding) loss = loss * 1e4;
      if (step == 30 && fault == Fault::kVanishing) loss = loss * 1e-12;
      loss.backward();
      opt.step();
      for (const auto& r : m.observe(step))
        if (!r.watch.empty()) hits[{step, r.param}] = watches(r);
    }
    return hits;
  };
  CHECK(run(Fault::kNone).empty());
  const std::set<std::string> all{"0.weight", "0.bias", "2.weight", "2.bias"};
  auto frozen = run(Fault::kFrozen);
  CHECK(frozen.size() == 2 * 39);  // 0.weight and 0.bias, every step after the first
  for (const auto& [at, w] : frozen) {
    CHECK(at.first > 0);
    CHECK(at.second.rfind("0.", 0) == 0);
    CHECK(w == std::set<std::string>{"weight_not_changed"});
  }
  auto exploding = run(Fault::kExploding);
  CHECK(exploding.size() == all.size());
  for (const auto& p : all) CHECK(exploding[{30, p}] == std::set<std::string>{"grad_exploding"});
  auto vanishing = run(Fault::kVanishing);
  CHECK(vanishing.size() == all.size());
  for (const auto& p : all) CHECK(vanishing[{30, p}] == std::set<std::string>{"grad_vanishing"});
}

TEST_CASE("watch options are checked at construction", "[monitor]") {
  auto p = torch::zeros({4});
  auto error_of = [&](const std::function<void(GradMonitorOptions&)>& edit) {
    GradMonitorOptions o;
    edit(o);
    try {
      GradMonitor m({{"p", p}}, o);
    } catch (const precprobe::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  using Catch::Matchers::ContainsSubstring;
  CHECK_THAT(error_of([](auto& o) { o.watch.median_window = 0; }),
             ContainsSubstring("watch.median_window = 0"));
  CHECK_THAT(error_of([](auto& o) { o.watch.warmup = 51; }),
             ContainsSubstring("watch.warmup = 51"));
  CHECK_THAT(error_of([](auto& o) { o.watch.warmup = 0; }), ContainsSubstring("watch.warmup = 0"));
  CHECK_THAT(error_of([](auto& o) { o.watch.weight_change_too_small_steps = -3; }),
             ContainsSubstring("weight_change_too_small_steps = -3"));
  CHECK(error_of([](auto&) {}).empty());
}

TEST_CASE("a parameter that starts at zero is judged by its update ratio once it has a scale",
          "[monitor]") {
  // A bias initialised to zero under Adam: each step moves every element by lr = 1e-3, so
  // ||w_t - w_(t-1)|| / ||w_(t-1)|| = 1/(t-1) after t steps (1, 1/2, ... 1/10 at step 11):
  // no weight_change_too_large while it grows; once a ratio was <= 0.1, a jump fires.
  auto bias = torch::zeros({16}).set_requires_grad(true);
  auto weight = torch::randn({16, 4}).set_requires_grad(true);
  std::vector<precprobe::WatchHit> hits;
  GradMonitorOptions o;
  o.on_watch = [&](const precprobe::WatchHit& h) { hits.push_back(h); };
  GradMonitor m({{"bias", bias}, {"weight", weight}}, o);
  auto adam_step = [&](double jump) {
    torch::NoGradGuard ng;
    bias.mutable_grad() = torch::full({16}, -0.5f);
    weight.mutable_grad() = torch::randn({16, 4}) * 0.1;
    bias.add_(1e-3 + jump);
    move(weight, 0.01);
  };
  std::vector<double> ratios;
  for (int64_t step = 0; step < 14; ++step) {
    adam_step(0);
    auto recs = m.observe(step);
    REQUIRE(recs.size() == 2);
    ratios.push_back(recs[0].update_ratio);
    INFO("step " << step << " ratio " << recs[0].update_ratio);
    CHECK(recs[0].watch.empty());
    CHECK(recs[1].watch.empty());
  }
  CHECK(ratios[1] == Approx(1.0).epsilon(1e-2));   // 2e-3 from 1e-3: as large as the weight
  CHECK(ratios[10] == Approx(0.1).epsilon(1e-2));  // 11e-3 from 10e-3: armed about here
  CHECK(ratios[13] == Approx(1.0 / 13).epsilon(1e-2));
  CHECK(hits.empty());
  adam_step(0.1);  // a jump of 100x the usual step: 0.101 / 0.014 per element
  auto recs = m.observe(14);
  CHECK(watches(recs[0]) == std::set<std::string>{"weight_change_too_large"});
  CHECK(recs[1].watch.empty());
  REQUIRE(hits.size() == 1);
  CHECK(hits[0].param == "bias");
  CHECK(hits[0].value == Approx(0.101 / 0.014).epsilon(1e-2));
}

TEST_CASE("watch thresholds are configurable and can be turned off", "[monitor]") {
  auto p = torch::zeros({100}).set_requires_grad(true);
  GradMonitorOptions o;
  o.watch.grad_exploding = 10.0;  // absolute: ||g|| = 0.1 * |x| * 10 for a constant gradient x
  o.watch.grad_vanishing.reset();
  o.watch.grad_all_zero = false;
  o.watch.weight_all_zero = false;
  o.update_ratio = false;
  GradMonitor m({{"p", p}}, o);
  p.mutable_grad() = torch::full({100}, 1.1f);  // norm 11
  CHECK(watches(m.observe(0)[0]) == std::set<std::string>{"grad_exploding"});
  p.mutable_grad() = torch::full({100}, 0.9f);  // norm 9
  CHECK(m.observe(1)[0].watch.empty());
  p.mutable_grad() = torch::zeros({100});  // vanishing and all-zero turned off; zero weights
  CHECK(m.observe(2)[0].watch.empty());
  o.watch.grad_exploding_nonfinite = false;
  o.watch.grad_exploding.reset();
  o.watch.grad_exploding_factor.reset();
  GradMonitor quiet({{"p", p}}, o);
  p.mutable_grad()[0] = kNaN;
  auto r = quiet.observe(3)[0];
  CHECK(r.watch.empty());
  CHECK(r.grad_nan == 1);
}

TEST_CASE("weight_all_zero without update ratios; a throwing callback is contained", "[monitor]") {
  auto p = torch::zeros({8}).set_requires_grad(true);
  p.mutable_grad() = torch::ones({8});
  GradMonitorOptions o;
  o.update_ratio = false;
  o.on_watch = [](const precprobe::WatchHit&) { throw std::runtime_error("user bug"); };
  GradMonitor m({{"p", p}}, o);
  std::vector<std::string> reported;
  precprobe::set_error_handler([&](const std::string& msg) { reported.push_back(msg); });
  std::vector<GradRecord> recs;
  CHECK_NOTHROW(recs = m.observe(0));
  precprobe::set_error_handler(nullptr);
  REQUIRE(reported.size() == 1);
  CHECK(reported[0].find("user bug") != std::string::npos);
  REQUIRE(recs.size() == 1);
  CHECK(watches(recs[0]) == std::set<std::string>{"weight_all_zero"});
}
