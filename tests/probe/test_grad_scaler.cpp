// GradScaler against an independent reference of PyTorch's published algorithm, step by
// step, and on small models with a planted Inf and with natural overflow.
#include <map>
#include <random>

#include "support/grad_scaler_test.h"

namespace {

// The reference, written from the description of torch._amp_update_scale_: on Inf/NaN the
// scale is multiplied by the backoff factor and the tracker reset; otherwise the tracker
// counts the step and, when it reaches the interval, the scale is multiplied by the growth
// factor unless that would be infinite, and the tracker restarts. float32 arithmetic.
struct RefScaler {
  float scale;
  int32_t tracker = 0;
};

void ref_update(RefScaler& r, bool found_inf, float growth, float backoff, int32_t interval) {
  if (found_inf) {
    r.scale = r.scale * backoff;
    r.tracker = 0;
    return;
  }
  r.tracker += 1;
  if (r.tracker == interval) {
    const float grown = r.scale * growth;
    if (std::isfinite(grown)) r.scale = grown;
    r.tracker = 0;
  }
}

enum class Kind { kDense, kTransposed, kStrided, kSparse, kNone };

// A parameter whose scaled gradient the test writes itself from a list of values.
struct Slot {
  std::string name;  // expected in the logs
  int opt, group;
  Kind kind;
  torch::Tensor param;
  std::vector<double> c;  // unscaled gradient values, multiples of 1/8
};

std::vector<double> base_values(size_t n, int seed) {
  std::vector<double> c(n);
  for (size_t i = 0; i < n; ++i)
    c[i] = static_cast<double>((static_cast<int>(i) + seed) % 9 - 4) / 8;
  return c;
}

const std::vector<int64_t> kSparseRows{0, 2, 2, 4};  // a duplicate row: coalesce sums it

// Builds the gradient of `s` holding c * scale in the parameter's dtype and layout.
torch::Tensor make_grad(const Slot& s, const std::vector<double>& c, double scale) {
  auto dt = s.param.scalar_type();
  torch::Tensor v = torch::tensor(c, torch::kDouble) * scale;
  switch (s.kind) {
    case Kind::kDense:
      return v.to(dt).reshape(s.param.sizes());
    case Kind::kTransposed:
      return v.to(dt).reshape({s.param.size(1), s.param.size(0)}).t();
    case Kind::kStrided: {
      auto buf = torch::zeros({2 * s.param.numel()}, dt);
      buf.slice(0, 0, buf.numel(), 2).copy_(v);
      return buf.slice(0, 0, buf.numel(), 2);
    }
    case Kind::kSparse: {
      auto idx = torch::tensor(kSparseRows, torch::kLong).reshape({1, -1});
      return torch::sparse_coo_tensor(idx, v.to(dt).reshape({4, s.param.size(1)}), s.param.sizes());
    }
    case Kind::kNone:
      return {};
  }
  return {};
}

// NaN-aware exact equality of two tensors of the same shape.
bool same_values(const torch::Tensor& a, const torch::Tensor& b) {
  auto x = a.to(torch::kDouble), y = b.to(torch::kDouble);
  return ((x == y) | (x.isnan() & y.isnan())).all().item<bool>();
}

struct RunConfig {
  float growth, backoff;
  int32_t interval;
  int steps;
  bool exact;  // power-of-two scales: every product exact
};

// Drives two optimizers (Adam with 2 groups, SGD with 3) for cfg.steps steps with Infs/NaNs
// planted by a seeded pattern, and checks every step against the reference.
void run_scripted(const RunConfig& cfg) {
  torch::manual_seed(0);
  auto P = [](std::vector<int64_t> shape, torch::Dtype dt) {
    return torch::zeros(shape, dt).set_requires_grad(true);
  };
  std::vector<Slot> slots{
      {"a0", 0, 0, Kind::kDense, P({4, 3}, torch::kFloat), {}},
      {"a1", 0, 0, Kind::kTransposed, P({4, 2}, torch::kFloat), {}},
      {"a3", 0, 1, Kind::kNone, P({3}, torch::kFloat), {}},
      {"a2", 0, 1, Kind::kDense, P({5}, torch::kDouble), {}},
      {"group0.param0", 1, 0, Kind::kStrided, P({6}, torch::kFloat), {}},
      {"group0.param1", 1, 0, Kind::kDense, P({2, 3}, torch::kBFloat16), {}},
      {"group1.param0", 1, 1, Kind::kNone, P({2}, torch::kFloat), {}},
      {"group1.param1", 1, 1, Kind::kDense, P({8}, torch::kFloat), {}},
      {"group2.param0", 1, 2, Kind::kSparse, P({5, 3}, torch::kFloat), {}},
  };
  for (size_t i = 0; i < slots.size(); ++i) {
    int64_t n = slots[i].kind == Kind::kSparse ? 12 : slots[i].param.numel();
    slots[i].c = base_values(static_cast<size_t>(n), static_cast<int>(i));
  }
  auto params_of = [&](int opt, int group) {
    std::vector<torch::Tensor> v;
    for (auto& s : slots) {
      if (s.opt == opt && s.group == group) v.push_back(s.param);
    }
    return v;
  };
  torch::optim::Adam adam({torch::optim::OptimizerParamGroup(params_of(0, 0)),
                           torch::optim::OptimizerParamGroup(params_of(0, 1))},
                          torch::optim::AdamOptions(1e-3));
  torch::optim::SGD sgd({torch::optim::OptimizerParamGroup(params_of(1, 0)),
                         torch::optim::OptimizerParamGroup(params_of(1, 1)),
                         torch::optim::OptimizerParamGroup(params_of(1, 2))},
                        torch::optim::SGDOptions(1e-3));
  const int n_groups[2] = {2, 3};

  GradScalerOptions o;
  o.growth_factor = cfg.growth;
  o.backoff_factor = cfg.backoff;
  o.growth_interval = cfg.interval;
  o.collapse_scale = 0;
  o.collapse_backoffs = 0;
  GradScaler scaler(o);
  scaler.set_parameter_names({{"a0", slots[0].param},
                              {"a1", slots[1].param},
                              {"a3", slots[2].param},
                              {"a2", slots[3].param}});
  RefScaler ref{static_cast<float>(o.init_scale)};

  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> gap(3, 17);
  int next_inf = 5, inf_steps = 0;
  std::vector<size_t> dense_slots;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].kind != Kind::kNone) dense_slots.push_back(i);
  }
  int skipped_steps = 0, growths = 0, capped = 0, multi_bad = 0;
  float lowest = ref.scale, highest = ref.scale;
  size_t records_seen = 0;
  for (int step = 0; step < cfg.steps; ++step) {
    // Phases: sparse Infs; none (the scale reaches float32's cap); a burst; sparse again.
    // Phases: an Inf after gaps of 3..17 finite steps (as many growths as backoffs on
    // average at interval 7); none (the scale reaches float32's cap); a burst of 100; gaps.
    const bool burst = step >= 4200 && step < 4300;
    const bool quiet = step >= 3000 && step < 4200;
    if (quiet || burst) next_inf = step + 1 + gap(rng);
    const bool inf_step = burst || step == next_inf;
    if (inf_step && !burst) next_inf = step + 1 + gap(rng);
    const bool multi = inf_step && ++inf_steps % 9 == 4;  // several bad params in two groups
    const size_t victim = dense_slots[rng() % dense_slots.size()];
    const float scale = ref.scale;
    REQUIRE(scaler.get_scale() == scale);
    auto loss = torch::full({}, 1.5, torch::kFloat);
    REQUIRE(scaler.scale(loss).item<float>() == 1.5f * scale);

    std::vector<std::vector<double>> cs(slots.size());
    std::vector<bool> planted(slots.size(), false);
    for (size_t i = 0; i < slots.size(); ++i) {
      Slot& s = slots[i];
      cs[i] = s.c;
      if (s.kind == Kind::kNone) {
        s.param.mutable_grad() = torch::Tensor();
        continue;
      }
      if ((inf_step && i == victim) || (multi && (i == 0 || i == 1 || i == 4 || i == 5))) {
        const double what[3] = {kInf, -kInf, kNaN};
        cs[i][rng() % cs[i].size()] = what[rng() % 3];
        planted[i] = true;
      }
      s.param.mutable_grad() = make_grad(s, cs[i], scale);
    }
    // Expected per group, from the planted pattern alone.
    std::vector<ScalerRecord> expect;
    bool opt_inf[2] = {false, false};
    for (int opt = 0; opt < 2; ++opt) {
      for (int g = 0; g < n_groups[opt]; ++g) {
        ScalerRecord r;
        r.optimizer = opt;
        r.group = g;
        for (size_t i = 0; i < slots.size(); ++i) {
          if (slots[i].opt != opt || slots[i].group != g || slots[i].kind == Kind::kNone) continue;
          if (planted[i]) {
            r.found_inf = true;
            ++r.nonfinite_params;
            r.bad_params.push_back(slots[i].name);
          }
        }
        opt_inf[opt] = opt_inf[opt] || r.found_inf;
        expect.push_back(r);
      }
    }
    std::vector<torch::Tensor> before;
    for (auto& s : slots) before.push_back(s.param.detach().clone());

    if (step % 3 == 0) scaler.unscale_(adam);
    REQUIRE(scaler.step(adam) == !opt_inf[0]);
    if (step % 5 == 0) scaler.unscale_(sgd);
    REQUIRE(scaler.step(sgd) == !opt_inf[1]);
    // Unscaled in place: float(float(c * scale) * float(1 / double(scale))).
    // Group norms are recomputed here in float64 from these tensors (finite elements).
    const float inv = static_cast<float>(1.0 / static_cast<double>(scale));
    std::map<std::pair<int, int>, std::pair<double, double>> sumsq;
    auto finite_sumsq = [](const torch::Tensor& t) {
      auto d = t.to(torch::kDouble);
      return d.masked_select(d.isfinite()).square().sum().item<double>();
    };
    for (size_t i = 0; i < slots.size(); ++i) {
      const Slot& s = slots[i];
      INFO("step " << step << " slot " << s.name << " scale " << scale);
      if (s.kind == Kind::kNone) continue;
      auto scaled = make_grad(s, cs[i], scale);
      auto got = s.param.grad();
      if (s.kind == Kind::kSparse) {
        scaled = scaled.coalesce()._values();
        got = got._values();
      }
      auto want = s.param.scalar_type() == torch::kDouble
                      ? scaled * static_cast<double>(inv)
                      : (scaled.to(torch::kFloat) * inv).to(s.param.scalar_type());
      REQUIRE(same_values(got, want));
      auto& acc = sumsq[{s.opt, s.group}];
      acc.first += finite_sumsq(scaled);
      acc.second += finite_sumsq(want);
      if (cfg.exact && !planted[i]) {
        auto dense = [](const torch::Tensor& t) { return t.is_sparse() ? t.to_dense() : t; };
        REQUIRE(same_values(dense(s.param.grad()), dense(make_grad(s, cs[i], 1.0))));
      }
      if (opt_inf[s.opt]) REQUIRE(same_values(s.param, before[i]));  // skipped: unchanged
    }

    scaler.update();
    const bool any_inf = opt_inf[0] || opt_inf[1];
    const float old_scale = ref.scale;
    ref_update(ref, any_inf, cfg.growth, cfg.backoff, cfg.interval);
    REQUIRE(scaler.get_scale() == ref.scale);
    REQUIRE(scaler.get_growth_tracker() == ref.tracker);
    skipped_steps += any_inf ? 1 : 0;
    growths += ref.scale > old_scale ? 1 : 0;
    lowest = std::min(lowest, ref.scale);
    highest = std::max(highest, ref.scale);
    capped += (!any_inf && ref.tracker == 0 && ref.scale == old_scale) ? 1 : 0;

    const auto& h = scaler.history();
    REQUIRE(h.size() == records_seen + expect.size());
    for (size_t k = 0; k < expect.size(); ++k) {
      const ScalerRecord& got = h[records_seen + k];
      const ScalerRecord& want = expect[k];
      INFO("step " << step << " opt " << want.optimizer << " group " << want.group);
      REQUIRE(got.step == step);
      REQUIRE(got.optimizer == want.optimizer);
      REQUIRE(got.group == want.group);
      REQUIRE(got.found_inf == want.found_inf);
      REQUIRE(got.nonfinite_params == want.nonfinite_params);
      REQUIRE(got.bad_params == want.bad_params);
      multi_bad += got.nonfinite_params > 1 ? 1 : 0;
      REQUIRE(got.skipped == opt_inf[want.optimizer]);
      REQUIRE(got.scale_before == static_cast<double>(old_scale));
      REQUIRE(got.scale_after == static_cast<double>(ref.scale));
      REQUIRE(got.growth_tracker == ref.tracker);
      REQUIRE(got.event == (any_inf ? "backoff" : ref.scale > old_scale ? "growth" : ""));
      const auto& acc = sumsq[{want.optimizer, want.group}];
      REQUIRE(got.grad_norm_scaled == Approx(std::sqrt(acc.first)).epsilon(1e-12));
      REQUIRE(got.grad_norm == Approx(std::sqrt(acc.second)).epsilon(1e-12));
    }
    records_seen += expect.size();
  }
  // The pattern exercised every branch many times.
  CHECK(skipped_steps > 100);
  CHECK(growths > 100);
  CHECK(multi_bad > 20);
  CHECK(lowest > 1e-30f);  // never so small that 1/scale overflows
  if (cfg.steps > 4200) CHECK(capped > 10);
  if (cfg.steps > 4200) CHECK(highest == std::ldexp(1.0f, 127));
}

}  // namespace

TEST_CASE("scripted 10500 steps match the reference exactly, step by step", "[scaler]") {
  run_scripted({2.0f, 0.5f, 7, 10500, true});
}

TEST_CASE("non-power-of-two factors follow the float32 reference", "[scaler]") {
  run_scripted({3.0f, 0.25f, 5, 2000, false});
}

TEST_CASE("a model with an overflowing group: the log names group and parameter", "[scaler]") {
  torch::manual_seed(3);
  torch::nn::Sequential model(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 2));
  auto named = model->named_parameters();
  std::vector<torch::Tensor> first, second;
  for (auto& item : named) (item.key()[0] == '0' ? first : second).push_back(item.value());
  torch::optim::Adam opt(
      {torch::optim::OptimizerParamGroup(first), torch::optim::OptimizerParamGroup(second)},
      torch::optim::AdamOptions(1e-2));
  GradScaler s;
  s.set_parameter_names(*model);
  auto x = torch::randn({32, 4});
  auto y = (x.sum(1) > 0).to(torch::kLong);
  const int planted_step = 5;
  float first_loss = 0, last_loss = 0;
  for (int step = 0; step < 40; ++step) {
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    (step == 0 ? first_loss : last_loss) = loss.item<float>();
    s.scale(loss).backward();
    if (step == planted_step) {
      named["2.bias"].mutable_grad()[1] = std::numeric_limits<float>::infinity();
    }
    auto w_before = named["2.bias"].detach().clone();
    const bool stepped = s.step(opt);
    CHECK(stepped == (step != planted_step));
    if (!stepped) CHECK(named["2.bias"].equal(w_before));
    s.update();
  }
  CHECK(last_loss < first_loss);  // it trained
  const auto& h = s.history();
  REQUIRE(h.size() == 80);
  for (const auto& r : h) {
    INFO("step " << r.step << " group " << r.group);
    const bool bad = r.step == planted_step && r.group == 1;
    CHECK(r.found_inf == bad);
    CHECK(r.skipped == (r.step == planted_step));  // both groups share the optimizer
    if (bad) {
      CHECK(r.bad_params == std::vector<std::string>{"2.bias"});
      CHECK(r.nonfinite_params == 1);
      CHECK(r.event == "backoff");
      CHECK(r.scale_after == r.scale_before / 2);
    }
    CHECK(r.grad_norm == Approx(r.grad_norm_scaled / r.scale_before).epsilon(1e-6));
  }
}

TEST_CASE("natural overflow under a huge scale backs off until steps succeed", "[scaler]") {
  torch::manual_seed(4);
  torch::nn::Sequential model(torch::nn::Linear(4, 16), torch::nn::Tanh(),
                              torch::nn::Linear(16, 3));
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01));
  GradScalerOptions o;
  o.init_scale = std::ldexp(1.0, 127);
  GradScaler s(o);
  s.set_parameter_names(*model);
  auto x = torch::randn({16, 4}) * 10;
  auto y = torch::randint(0, 3, {16});
  int skipped = 0;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    namespace F = torch::nn::functional;
    auto loss =
        F::cross_entropy(model->forward(x), y, F::CrossEntropyFuncOptions().reduction(torch::kSum));
    s.scale(loss).backward();  // loss * 2^127 overflows at first
    skipped += s.step(opt) ? 0 : 1;
    s.update();
  }
  CHECK(skipped >= 1);
  CHECK(skipped < 20);
  const auto& first = s.history().front();
  CHECK(first.found_inf);
  CHECK(first.nonfinite_params >= 1);
  for (const auto& n : first.bad_params) {
    CHECK((n == "0.weight" || n == "0.bias" || n == "2.weight" || n == "2.bias"));
  }
  CHECK(s.history().back().found_inf == false);
}
