// GradScaler's API around the reference: PyTorch's state-machine errors, FP16 refusal,
// option validation, the disabled scaler, update(new_scale), the archive round trip,
// collapse warnings, the log file and the process-group hook.
#include <filesystem>
#include <sstream>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "precprobe/reader.h"
#include "support/grad_scaler_test.h"

namespace {

// One parameter p (3 elements) and an SGD optimizer over it.
struct Tiny {
  torch::Tensor p = torch::ones({3}).set_requires_grad(true);
  torch::optim::SGD opt{std::vector<torch::Tensor>{p}, torch::optim::SGDOptions(0.1)};
  void backward(GradScaler& s, double bad = 1.0) {
    opt.zero_grad();
    auto loss = (p * torch::tensor({1.0, 2.0, 3.0}, torch::kFloat)).sum() * bad;
    s.scale(loss).backward();
  }
};

std::string thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const precprobe::Error& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

}  // namespace

TEST_CASE("state machine errors carry PyTorch's messages", "[scaler]") {
  GradScaler s;
  Tiny t;
  using Catch::Matchers::ContainsSubstring;
  // Nothing scaled yet.
  CHECK_THAT(thrown([&] { s.unscale_(t.opt); }),
             ContainsSubstring("Attempted unscale_ but _scale is None"));
  CHECK_THAT(thrown([&] { s.step(t.opt); }),
             ContainsSubstring("Attempted step but _scale is None"));
  CHECK_THAT(thrown([&] { s.update(); }), ContainsSubstring("Attempted update but _scale is None"));
  t.backward(s);
  CHECK_THAT(thrown([&] { s.update(); }),
             ContainsSubstring("No inf checks were recorded prior to update."));
  s.unscale_(t.opt);
  CHECK_THAT(
      thrown([&] { s.unscale_(t.opt); }),
      ContainsSubstring("unscale_() has already been called on this optimizer since the last "
                        "update()."));
  CHECK(s.step(t.opt));
  CHECK_THAT(thrown([&] { s.unscale_(t.opt); }),
             ContainsSubstring("unscale_() is being called after step()."));
  CHECK_THAT(thrown([&] { s.step(t.opt); }),
             ContainsSubstring("step() has already been called since the last update()."));
  s.update();
  // After update() the cycle starts again.
  t.backward(s);
  CHECK_NOTHROW(s.unscale_(t.opt));
  CHECK(s.step(t.opt));
  s.update();

  // An optimizer whose parameters have no gradient records no inf check.
  auto q = torch::ones({2}).set_requires_grad(true);
  torch::optim::SGD empty(std::vector<torch::Tensor>{q}, torch::optim::SGDOptions(0.1));
  CHECK_THAT(thrown([&] { s.step(empty); }),
             ContainsSubstring("No inf checks were recorded for this optimizer."));
}

TEST_CASE("FP16 gradients are refused before anything is unscaled", "[scaler]") {
  GradScaler s;
  auto a = torch::ones({2}).set_requires_grad(true);
  auto h = torch::ones({2}, torch::kHalf).set_requires_grad(true);
  torch::optim::SGD opt(std::vector<torch::Tensor>{a, h}, torch::optim::SGDOptions(0.1));
  s.scale(torch::ones({}));
  a.mutable_grad() = torch::full({2}, 65536.0f);
  h.mutable_grad() = torch::full({2}, 1.0, torch::kHalf);
  CHECK_THAT(thrown([&] { s.unscale_(opt); }),
             Catch::Matchers::ContainsSubstring("Attempting to unscale FP16 gradients."));
  CHECK(a.grad()[0].item<float>() == 65536.0f);  // untouched
}

TEST_CASE("options are validated as PyTorch asserts them", "[scaler]") {
  auto make = [](double g, double b, int64_t i) {
    GradScalerOptions o;
    o.growth_factor = g;
    o.backoff_factor = b;
    o.growth_interval = i;
    return thrown([&] { GradScaler s(o); });
  };
  using Catch::Matchers::ContainsSubstring;
  CHECK_THAT(make(1.0, 0.5, 10), ContainsSubstring("growth factor must be > 1.0"));
  CHECK_THAT(make(2.0, 1.0, 10), ContainsSubstring("backoff factor must be < 1.0"));
  CHECK_THAT(make(2.0, 0.5, 0), ContainsSubstring("growth_interval"));
  CHECK(make(1.0001, 0.9999, 1) == "(nothing thrown)");
  GradScalerOptions off;
  off.enabled = false;
  off.growth_factor = 0.5;  // not checked when disabled, as PyTorch
  CHECK(thrown([&] { GradScaler s(off); }) == "(nothing thrown)");
}

TEST_CASE("a disabled scaler passes everything through", "[scaler]") {
  GradScalerOptions o;
  o.enabled = false;
  GradScaler s(o);
  Tiny t;
  auto loss = torch::full({}, 2.5f);
  CHECK(s.scale(loss).is_same(loss));
  t.backward(s);
  s.unscale_(t.opt);
  CHECK(t.p.grad()[2].item<float>() == 3.0f);  // not divided
  CHECK(s.step(t.opt));
  CHECK(t.p[2].item<float>() == Approx(1.0 - 0.1 * 3.0));
  s.update();
  CHECK(s.get_scale() == 1.0f);
  CHECK_FALSE(s.is_enabled());
  CHECK(s.history().empty());
}

TEST_CASE("update(new_scale) sets the scale and keeps the tracker", "[scaler]") {
  GradScalerOptions o;
  o.growth_interval = 100;
  GradScaler s(o);
  Tiny t;
  for (int i = 0; i < 3; ++i) {
    t.backward(s);
    s.step(t.opt);
    s.update();
  }
  CHECK(s.get_growth_tracker() == 3);
  t.backward(s);
  s.step(t.opt);
  s.update(1024.0f);
  CHECK(s.get_scale() == 1024.0f);
  CHECK(s.get_growth_tracker() == 3);
  CHECK(s.history().back().event == "set");
  CHECK(s.history().back().scale_after == 1024.0);
  t.backward(s);
  CHECK(t.p.grad()[0].item<float>() == 1024.0f);
}

TEST_CASE("save/load round trip through a torch archive with PyTorch's keys", "[scaler]") {
  GradScalerOptions o;
  o.init_scale = 256;
  o.growth_factor = 4;
  o.backoff_factor = 0.25;
  o.growth_interval = 3;
  GradScaler a(o);
  Tiny t;
  const double pattern[] = {1, 1, 1, 1, kInf, 1, 1};  // growth, then backoff, then 2 steps
  for (double bad : pattern) {
    t.backward(a, bad);
    a.step(t.opt);
    a.update();
  }
  REQUIRE(a.get_scale() == 256.0f * 4 * 0.25f);
  REQUIRE(a.get_growth_tracker() == 2);
  std::stringstream buf;
  {
    torch::serialize::OutputArchive out;
    a.save(out);
    out.save_to(buf);
  }
  torch::serialize::InputArchive in;
  in.load_from(buf);
  c10::IValue v;
  REQUIRE(in.try_read("_growth_tracker", v));
  CHECK(v.toInt() == 2);
  REQUIRE(in.try_read("scale", v));
  CHECK(v.toDouble() == 256.0);

  GradScaler b;  // different defaults, replaced by the archive
  b.load(in);
  CHECK(b.get_scale() == 256.0f);
  CHECK(b.get_growth_tracker() == 2);
  CHECK(b.get_growth_factor() == 4.0);
  CHECK(b.get_backoff_factor() == 0.25);
  CHECK(b.get_growth_interval() == 3);
  // Both continue identically: one more finite step grows the scale (tracker 2 -> 3).
  Tiny t2;
  for (auto* s : {&a, &b}) {
    Tiny& tt = s == &a ? t : t2;
    tt.backward(*s);
    s->step(tt.opt);
    s->update();
  }
  CHECK(a.get_scale() == 1024.0f);
  CHECK(b.get_scale() == 1024.0f);
  CHECK(b.get_growth_tracker() == 0);

  torch::serialize::InputArchive nothing;
  CHECK_THAT(thrown([&] { b.load(nothing); }), Catch::Matchers::ContainsSubstring("empty"));
}

TEST_CASE("collapse is reported once and recorded", "[scaler]") {
  std::vector<std::string> reported;
  precprobe::set_error_handler([&](const std::string& m) { reported.push_back(m); });
  GradScalerOptions o;
  o.collapse_backoffs = 3;
  o.collapse_scale = 0;
  GradScaler s(o);
  Tiny t;
  for (int i = 0; i < 6; ++i) {
    t.backward(s, kInf);
    CHECK_FALSE(s.step(t.opt));
    s.update();
    CHECK(s.collapsed() == (i >= 2));
  }
  const auto& h = s.history();
  REQUIRE(h.size() == 6);
  CHECK(h[1].event == "backoff");
  CHECK(h[2].event == "collapse");
  CHECK(h[3].event == "backoff");
  CHECK(reported.size() == 1);

  // The scale threshold: 4 -> 2 -> 1 -> 0.5 < 1.
  reported.clear();
  GradScalerOptions o2;
  o2.init_scale = 4;
  GradScaler s2(o2);
  for (int i = 0; i < 3; ++i) {
    t.backward(s2, kInf);
    s2.step(t.opt);
    s2.update();
    CHECK(s2.collapsed() == (i == 2));
  }
  CHECK(reported.size() == 1);
  precprobe::set_error_handler(nullptr);
}

TEST_CASE("log_path: the records go to scaler.jsonl.zst and read back equal", "[scaler]") {
  const std::string dir = std::string(PRECPROBE_BINARY_DIR) + "/test_out/scaler_log/rank0";
  std::filesystem::remove_all(dir);
  GradScalerOptions o;
  o.log_path = dir;
  o.growth_interval = 2;
  std::vector<ScalerRecord> hist;
  {
    GradScaler s(o);
    Tiny t;
    s.set_parameter_names({{"tiny.p", t.p}});
    const double pattern[] = {1, kNaN, 1, 1, 1, kInf, 1};
    for (double bad : pattern) {
      t.backward(s, bad);
      s.step(t.opt);
      s.update();
    }
    hist = s.history();
  }  // the destructor closes the writer
  precprobe::DumpReader reader(dir);
  auto recs = reader.scaler();
  REQUIRE(recs.size() == 7);
  REQUIRE(hist.size() == 7);
  for (size_t i = 0; i < recs.size(); ++i) {
    INFO("record " << i);
    CHECK(recs[i].step == hist[i].step);
    CHECK(recs[i].group == hist[i].group);
    CHECK(recs[i].found_inf == hist[i].found_inf);
    CHECK(recs[i].nonfinite_params == hist[i].nonfinite_params);
    CHECK(recs[i].bad_params == hist[i].bad_params);
    CHECK(recs[i].grad_norm == hist[i].grad_norm);
    CHECK(recs[i].grad_norm_scaled == hist[i].grad_norm_scaled);
    CHECK(recs[i].scale_before == hist[i].scale_before);
    CHECK(recs[i].scale_after == hist[i].scale_after);
    CHECK(recs[i].growth_tracker == hist[i].growth_tracker);
    CHECK(recs[i].skipped == hist[i].skipped);
    CHECK(recs[i].event == hist[i].event);
  }
  CHECK(recs[1].bad_params == std::vector<std::string>{"tiny.p"});
  CHECK(recs[1].event == "backoff");
  CHECK(recs[3].event == "growth");  // steps 2 and 3 finite: the tracker reaches 2 at step 3
  CHECK(recs[3].scale_after == 2 * recs[3].scale_before);
}

namespace {

// A two-rank process group whose other rank is simulated: allreduce(MAX) sees its flag.
class FakeGroup : public c10d::ProcessGroup {
 public:
  FakeGroup() : c10d::ProcessGroup(0, 2) {}
  const std::string getBackendName() const override { return "fake"; }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    ++calls;
    all_max = all_max && opts.reduceOp == c10d::ReduceOp::MAX;
    for (auto& t : tensors) t.clamp_min_(other_rank_found_inf ? 1.0f : 0.0f);
    return c10::make_intrusive<Done>();
  }
  bool other_rank_found_inf = false;
  int calls = 0;
  bool all_max = true;

 private:
  struct Done : c10d::Work {
    bool wait(std::chrono::milliseconds) override { return true; }
  };
};

}  // namespace

TEST_CASE("process group: found_inf is all-reduced (MAX) so all ranks skip together", "[scaler]") {
  auto group = c10::make_intrusive<FakeGroup>();
  GradScaler s;
  s.set_process_group(group);
  Tiny t;
  t.backward(s);
  group->other_rank_found_inf = true;  // finite here, Inf on the other rank
  const auto before = t.p.detach().clone();
  CHECK_FALSE(s.step(t.opt));
  CHECK(t.p.equal(before));
  s.update();
  CHECK(s.get_scale() == 32768.0f);
  CHECK(s.history().back().found_inf == false);  // this rank's own gradients were finite
  CHECK(s.history().back().skipped);
  group->other_rank_found_inf = false;
  t.backward(s);
  CHECK(s.step(t.opt));
  s.update();
  CHECK(group->calls == 2);
  CHECK(group->all_max);
}
