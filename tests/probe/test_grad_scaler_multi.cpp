// GradScaler with several optimizers, held step by step against a transcription of PyTorch's
// torch/amp/grad_scaler.py (per-optimizer state keyed by the optimizer, found_inf per device,
// one _amp_update_scale_ from the sum of every optimizer's found_inf) driving twin copies of
// the same two networks, each with its own Adam: gradients that overflow in one optimizer
// skip that optimizer's step only, and the scale backs off once per update however many
// optimizers overflowed. The two networks are started in a PrecisionDebugger as "A" and "B",
// which names them in the scaler's records.
#include <map>
#include <set>

#include "core/temp_dir.h"
#include "precprobe/debugger.h"
#include "precprobe/reader.h"
#include "support/grad_scaler_test.h"

namespace {

// torch/amp/grad_scaler.py, for CPU tensors (one device), line by line where it matters.
class RefScaler {
 public:
  RefScaler(double init_scale, double growth, double backoff, int32_t interval)
      : growth_(growth), backoff_(backoff), interval_(interval) {
    scale_ = torch::full({}, init_scale, torch::kFloat);  // _lazy_init_scale_growth_tracker
  }

  // scale(outputs): outputs * self._scale
  torch::Tensor scale(const torch::Tensor& loss) const { return loss * scale_; }

  // unscale_(optimizer): inv_scale = self._scale.double().reciprocal().float();
  // found_inf = torch.full((), 0.0); _amp_foreach_non_finite_check_and_unscale_(grads, ...)
  void unscale_(torch::optim::Optimizer& opt) {
    State& st = states_[&opt];
    REQUIRE(st.stage == Stage::kReady);
    const torch::Tensor inv = scale_.to(torch::kDouble).reciprocal().to(torch::kFloat);
    torch::Tensor found = torch::full({}, 0.0, torch::kFloat);
    bool any = false;
    for (auto& g : opt.param_groups()) {
      for (auto& p : g.params()) {
        if (!p.grad().defined()) continue;
        any = true;
        torch::NoGradGuard ng;
        if (!p.grad().isfinite().all().item<bool>()) found.fill_(1.0);
        p.mutable_grad().mul_(inv);  // float * float, rounded to float, as the kernel
      }
    }
    if (any) st.found_inf_per_device = found;
    st.stage = Stage::kUnscaled;
  }

  // step(optimizer): unscale_ if READY; if not sum(v.item() for v in found_inf_per_device):
  // optimizer.step(); stage = STEPPED. Returns whether it stepped.
  bool step(torch::optim::Optimizer& opt) {
    State& st = states_[&opt];
    REQUIRE(st.stage != Stage::kStepped);
    if (st.stage == Stage::kReady) unscale_(opt);
    REQUIRE(st.found_inf_per_device.defined());
    bool stepped = false;
    if (st.found_inf_per_device.item<float>() == 0) {
      opt.step();
      stepped = true;
    }
    st.stage = Stage::kStepped;
    return stepped;
  }

  // update(): found_inf_combined = found_infs[0]; += found_infs[i]; _amp_update_scale_ (its
  // CPU/CUDA kernel: float32 scale times a double factor, rounded to float32; the scale
  // grows only to a finite value); self._per_optimizer_states = defaultdict(...).
  void update() {
    float combined = 0;
    for (auto& [opt, st] : states_) combined += st.found_inf_per_device.item<float>();
    float s = scale_.item<float>();
    if (combined != 0) {
      s = static_cast<float>(s * backoff_);
      tracker_ = 0;
    } else {
      const int32_t successful = tracker_ + 1;
      if (successful == interval_) {
        const float grown = static_cast<float>(s * growth_);
        if (std::isfinite(grown)) s = grown;
        tracker_ = 0;
      } else {
        tracker_ = successful;
      }
    }
    scale_.fill_(s);
    states_.clear();
  }

  float get_scale() const { return scale_.item<float>(); }
  int32_t tracker() const { return tracker_; }

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct State {
    Stage stage = Stage::kReady;
    torch::Tensor found_inf_per_device;
  };
  double growth_, backoff_;
  int32_t interval_;
  torch::Tensor scale_;
  int32_t tracker_ = 0;
  std::map<const torch::optim::Optimizer*, State> states_;
};

torch::nn::Sequential make_net(int64_t in, int64_t out) {
  return torch::nn::Sequential(torch::nn::Linear(in, 6), torch::nn::Tanh(),
                               torch::nn::Linear(6, out));
}

void copy_params(const torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard ng;
  auto src = from.parameters();
  auto dst = to.parameters();
  for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
}

bool same_bits(const torch::nn::Module& a, const torch::nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    if (!torch::equal(pa[i], pb[i])) return false;
  return true;
}

torch::optim::AdamOptions adam() {
  return torch::optim::AdamOptions(1e-2).betas(std::make_tuple(0.5, 0.999));
}

}  // namespace

TEST_CASE("several optimizers: each steps on its own gradients, the scale updates once",
          "[scaler][multi]") {
  precprobe::test::TempDir dir("scaler_multi");
  torch::manual_seed(11);
  auto a = make_net(3, 2), b = make_net(2, 1);
  auto ref_a = make_net(3, 2), ref_b = make_net(2, 1);
  copy_params(*a, *ref_a);
  copy_params(*b, *ref_b);
  torch::optim::Adam opt_a(a->parameters(), adam()), opt_b(b->parameters(), adam());
  torch::optim::Adam ref_opt_a(ref_a->parameters(), adam()), ref_opt_b(ref_b->parameters(), adam());

  GradScalerOptions o;
  o.growth_interval = 4;  // growths happen within the run too
  o.collapse_scale = 0;
  o.collapse_backoffs = 0;
  GradScaler scaler(o);
  RefScaler ref(o.init_scale, o.growth_factor, o.backoff_factor,
                static_cast<int32_t>(o.growth_interval));

  precprobe::DebuggerOptions dopt;
  dopt.dump_path = dir.path().string();
  dopt.keep_dropout = true;
  precprobe::PrecisionDebugger dbg(dopt);
  dbg.start({{"A", a}, {"B", b}}, {&opt_a, &opt_b});

  const auto x = torch::randn({16, 3});
  const auto ya = torch::randn({16, 2});
  // B's loss overflows under the scale at these steps (x 1e35 * 65536 > float32's max); at
  // step 13 A's too.
  const std::set<int> b_overflows{3, 9, 13, 14}, a_overflows{13};
  const int steps = 24;
  for (int step = 0; step < steps; ++step) {
    INFO("step " << step);
    const double amp_a = a_overflows.count(step) ? 1e35 : 1.0;
    const double amp_b = b_overflows.count(step) ? 1e35 : 1.0;
    // The same arithmetic on both sides: A's output feeds B (a GAN-like chain, detached).
    auto loss_pair = [&](torch::nn::Sequential& na, torch::nn::Sequential& nb) {
      auto out_a = na->forward(x);
      auto la = torch::mse_loss(out_a, ya) * amp_a;
      auto lb = nb->forward(out_a.detach()).pow(2).mean() * amp_b;
      return std::make_pair(la, lb);
    };
    opt_a.zero_grad();
    opt_b.zero_grad();
    auto [la, lb] = loss_pair(a, b);
    scaler.scale(la).backward();
    scaler.scale(lb).backward();
    scaler.unscale_(opt_a);  // explicit for A (clipping would go here), implicit for B
    const bool stepped_a = scaler.step(opt_a);
    const bool stepped_b = scaler.step(opt_b);
    scaler.update();
    dbg.step();

    ref_opt_a.zero_grad();
    ref_opt_b.zero_grad();
    auto [ra, rb] = loss_pair(ref_a, ref_b);
    ref.scale(ra).backward();
    ref.scale(rb).backward();
    ref.unscale_(ref_opt_a);
    const bool ref_stepped_a = ref.step(ref_opt_a);
    const bool ref_stepped_b = ref.step(ref_opt_b);
    ref.update();

    CHECK(stepped_a == ref_stepped_a);
    CHECK(stepped_b == ref_stepped_b);
    CHECK(stepped_a == (a_overflows.count(step) == 0));
    CHECK(stepped_b == (b_overflows.count(step) == 0));
    CHECK(same_bits(*a, *ref_a));
    CHECK(same_bits(*b, *ref_b));
    CHECK(scaler.get_scale() == ref.get_scale());
    CHECK(scaler.get_growth_tracker() == ref.tracker());
  }
  dbg.stop();

  // The records: one per optimizer and group per update; found_inf and skipped on the
  // overflowing optimizer only; one backoff (x 0.5) per update that saw any overflow.
  const auto& h = scaler.history();
  REQUIRE(h.size() == 2 * steps);
  float expect_scale = static_cast<float>(o.init_scale);
  int finite_run = 0;
  for (int step = 0; step < steps; ++step) {
    INFO("step " << step);
    const ScalerRecord& ra = h[2 * step];
    const ScalerRecord& rb = h[2 * step + 1];
    CHECK(ra.optimizer == 0);
    CHECK(rb.optimizer == 1);
    const bool bad_a = a_overflows.count(step) > 0, bad_b = b_overflows.count(step) > 0;
    CHECK(ra.found_inf == bad_a);
    CHECK(rb.found_inf == bad_b);
    CHECK(ra.skipped == bad_a);
    CHECK(rb.skipped == bad_b);
    CHECK(ra.scale_before == expect_scale);
    if (bad_a || bad_b) {
      expect_scale *= 0.5f;  // once, even at step 13 where both overflowed
      finite_run = 0;
      CHECK(rb.event == "backoff");
    } else if (++finite_run == o.growth_interval) {
      expect_scale *= 2.0f;
      finite_run = 0;
      CHECK(rb.event == "growth");
    }
    CHECK(ra.scale_after == expect_scale);
    CHECK(rb.scale_after == expect_scale);
    if (bad_b) {
      // Named by the debugger started with both models.
      REQUIRE_FALSE(rb.bad_params.empty());
      for (const auto& name : rb.bad_params) CHECK(name.rfind("B.", 0) == 0);
    }
  }
  // The debugger's dump holds the same records, and the gradient monitor covered both nets.
  precprobe::DumpReader reader(dir.path().string());
  CHECK(reader.scaler().size() == h.size());
  std::set<std::string> monitored;
  for (const auto& g : reader.grads()) monitored.insert(g.param);
  CHECK(monitored == std::set<std::string>{"A.0.weight", "A.0.bias", "A.2.weight", "A.2.bias",
                                           "B.0.weight", "B.0.bias", "B.2.weight", "B.2.bias"});
}
