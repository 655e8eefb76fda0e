// "record": "on_anomaly": the step snapshot (bit-exact round trips of AdamW and SGD state,
// a replayed healthy step equal to the first run), planted anomalies replayed and classified
// (float32 overflow → range, log of a negative → invalid, NaN in the batch → inherited), a
// loss spike on Fashion-MNIST after a learning-rate jump, a nondeterministic step
// (reproduced: false), the "record"/"on_anomaly" config keys, and run_step's plain cases.
#include <torch/torch.h>
#include <zstd.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "../../examples/fashion_mnist.h"
#include "debugger_fixture.h"
#include "frame_stream.h"
#include "precprobe_catch.h"
#include "replay/step_snapshot.h"
#include "snapshot_state.h"

using namespace precprobe;
using precprobe::test::copy_state;
using precprobe::test::options_in;
using precprobe::test::read_npy_zst;
using precprobe::test::same_bits;
using precprobe::test::same_state;
using precprobe::test::State;
using precprobe::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

struct SmallNetImpl : torch::nn::Module {
  SmallNetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(8, 16))),
        bn(register_module("bn", torch::nn::BatchNorm1d(16))),
        drop(register_module("drop", torch::nn::Dropout(0.5))),
        fc2(register_module("fc2", torch::nn::Linear(16, 1))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(drop(torch::relu(bn(fc1(x))))); }
  torch::nn::Linear fc1;
  torch::nn::BatchNorm1d bn;
  torch::nn::Dropout drop;
  torch::nn::Linear fc2;
};
TORCH_MODULE(SmallNet);

}  // namespace

TEMPLATE_TEST_CASE(
    "snapshot: restore gives the pre-step state bit for bit; a replayed step "
    "equals the first run",
    "[replay][snapshot]", torch::optim::AdamW, torch::optim::SGD) {
  torch::manual_seed(3);
  SmallNet net;
  std::unique_ptr<torch::optim::Optimizer> opt;
  if constexpr (std::is_same<TestType, torch::optim::AdamW>::value) {
    opt = std::make_unique<torch::optim::AdamW>(
        net->parameters(), torch::optim::AdamWOptions(1e-2).amsgrad(true).weight_decay(0.1));
  } else {
    opt = std::make_unique<torch::optim::SGD>(
        net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true));
  }
  auto x = torch::randn({32, 8}), y = torch::randn({32, 1});
  auto train_step = [&] {  // dropout on: the step draws from the CPU generator
    opt->zero_grad();
    auto loss = torch::mse_loss(net->forward(x), y);
    loss.backward();
    opt->step();
    return loss;
  };
  precprobe::detail::StepSnapshot snap;
  snap.bind(net.ptr().get(), {opt.get()});

  // Before the first step the optimizer has no state: restore removes what the step made.
  const State empty = copy_state(*net, *opt);
  snap.capture();
  auto first_loss = train_step();
  const State after_first = copy_state(*net, *opt);
  CHECK_FALSE(same_state(empty, after_first));
  snap.restore();
  CHECK(opt->state().empty());
  CHECK(same_state(copy_state(*net, *opt), empty));
  auto again_loss = train_step();
  CHECK(same_bits(first_loss, again_loss));
  CHECK(same_state(copy_state(*net, *opt), after_first));

  for (int i = 0; i < 3; ++i) train_step();
  const State before = copy_state(*net, *opt);
  snap.capture();
  CHECK(snap.bytes() > snap.model_bytes());
  CHECK(snap.optimizer_bytes() > 0);
  auto loss1 = train_step();
  const State after = copy_state(*net, *opt);
  CHECK_FALSE(same_state(before, after));
  // The options of a group are part of it too.
  opt->param_groups()[0].options().set_lr(123.0);
  snap.restore();
  CHECK(opt->param_groups()[0].options().get_lr() < 1.0);
  CHECK(same_state(copy_state(*net, *opt), before));
  auto loss2 = train_step();  // same dropout masks: the RNG state was restored
  CHECK(same_bits(loss1, loss2));
  CHECK(same_state(copy_state(*net, *opt), after));
  if constexpr (std::is_same<TestType, torch::optim::AdamW>::value) {
    auto* s = dynamic_cast<torch::optim::AdamWParamState*>(opt->state().begin()->second.get());
    REQUIRE(s != nullptr);
    CHECK(s->step() == 5);
  }
}

namespace {

// out = f(fc(x) + shift): a layer whose op `f` can be pushed out of range at one step.
struct PlantImpl : torch::nn::Module {
  explicit PlantImpl(std::function<torch::Tensor(const torch::Tensor&)> f)
      : fc(register_module("fc", torch::nn::Linear(4, 1))), fn(std::move(f)) {}
  torch::Tensor forward(const torch::Tensor& x) { return fn(fc(x) + shift); }
  torch::nn::Linear fc;
  std::function<torch::Tensor(const torch::Tensor&)> fn;
  double shift = 0;
};
TORCH_MODULE(Plant);

std::vector<nlohmann::ordered_json> anomaly_events(const TempDir& dir) {
  precprobe::FrameReader r;
  std::string err;
  REQUIRE(r.open((dir.path() / "rank0/events.jsonl.zst").string(), &err));
  std::vector<nlohmann::ordered_json> out;
  std::string content;
  while (r.next(content)) {
    size_t at = 0;
    while (at < content.size()) {
      size_t end = content.find('\n', at);
      if (end == std::string::npos) end = content.size();
      auto j = nlohmann::ordered_json::parse(content.substr(at, end - at));
      if (j.value("name", "") == "anomaly") out.push_back(j);
      at = end + 1;
    }
  }
  return out;
}

struct PlantRun {
  DebuggerCounters counters;
  std::vector<nlohmann::ordered_json> events;
  std::vector<OpRecord> ops;
};

// 50 steps of Adam on `net`; at `bad_step` the shift is `shift`, and with `poison` one
// element of the batch is NaN.
PlantRun run_plant(const TempDir& dir, Plant& net, int64_t bad_step, double shift,
                   bool poison = false) {
  torch::manual_seed(11);
  auto o = options_in(dir);
  o.level = Level::kL2;
  o.record = RecordMode::kOnAnomaly;
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  auto x = torch::rand({16, 4}), y = torch::rand({16, 1});
  PlantRun out;
  {
    PrecisionDebugger dbg(o);
    dbg.start(net, opt);
    for (int64_t step = 0; step < 50; ++step) {
      net->shift = step == bad_step ? shift : 0.0;
      auto batch = x.clone();
      if (step == bad_step && poison) batch[3][1] = std::numeric_limits<float>::quiet_NaN();
      auto loss = dbg.run_step([&] {
        opt.zero_grad();
        auto l = torch::mse_loss(net->forward(batch), y);
        l.backward();
        opt.step();
        return l;
      });
      CHECK(loss.defined());
    }
    CHECK(dbg.current_step() == 49);  // the last step stays open until stop()
    dbg.stop();
    CHECK(dbg.current_step() == 50);
    out.counters = dbg.counters();
  }
  out.events = anomaly_events(dir);
  out.ops = precprobe::test::read_ops(dir);
  if (std::getenv("REPLAY_DEBUG"))
    for (const auto& r : out.ops)
      if (r.outputs_non_finite() || r.op == "aten::sum") {
        std::string line;
        append_json(r, line);
        std::printf("%s", line.c_str());
      }
  return out;
}

void check_only_step(const PlantRun& r, int64_t step) {
  REQUIRE_FALSE(r.ops.empty());
  for (const auto& op : r.ops) REQUIRE(op.step == step);
  CHECK(r.counters.replays == 1);
  CHECK(r.counters.errors == 0);
  REQUIRE(r.events.size() == 1);
  const auto& e = r.events[0];
  std::vector<std::string> keys;
  for (auto it = e.begin(); it != e.end(); ++it) keys.push_back(it.key());
  CHECK(keys == std::vector<std::string>{"step", "name", "value", "trigger", "reproduced", "origin",
                                         "origin_record", "classification", "why", "trigger_detail",
                                         "replay"});
  CHECK(e["step"] == step);
  CHECK(e["value"] == step);
  CHECK(e["replay"] == 1);
}

}  // namespace

TEST_CASE("on_anomaly: a float32 exp overflow at step 37 is replayed and classified range",
          "[replay]") {
  TempDir dir("replay_range");
  Plant net([](const torch::Tensor& t) { return torch::exp(t); });
  const PlantRun r = run_plant(dir, net, 37, 100.0);
  check_only_step(r, 37);
  const auto& e = r.events[0];
  CHECK(e["trigger"] == "loss_nonfinite");
  CHECK(e["trigger_detail"] == "loss = inf");
  CHECK(e["reproduced"] == true);
  CHECK(e["origin"] == "aten::exp");
  CHECK(e["origin_record"] == "aten::exp.0.forward");
  CHECK(e["classification"] == "range");
  CHECK_THAT(e["why"].get<std::string>(),
             Catch::Matchers::ContainsSubstring("beyond float32's max 3.4e+38"));
  // The replayed step's records: exp's output overflowed, its input did not.
  auto exps = precprobe::test::with_name(r.ops, "aten::exp");
  REQUIRE(exps.size() == 1);
  CHECK(exps[0].inputs[0].tensor->all_finite());
  CHECK(exps[0].outputs[0].tensor->pinf == 16);
  // Its input, saved as the tensor task saves it: x > 88.72 (exp overflows float32), and its
  // max is what the event's float64 exp reached.
  std::string header;
  const auto v =
      read_npy_zst(dir.path() / "rank0/tensors/step37/aten::exp.0.forward.in0.npy.zst", &header);
  CHECK(header.find("'shape': (16, 1)") != std::string::npos);
  REQUIRE(v.size() == 16);
  double hi = 0;
  for (float f : v) {
    CHECK(f > 88.73f);
    hi = std::max(hi, static_cast<double>(f));
  }
  CHECK(exps[0].inputs[0].tensor->max == Approx(hi));
  char reach[32];
  std::snprintf(reach, sizeof reach, "%.3g", std::exp(hi));
  CHECK_THAT(e["why"].get<std::string>(), Catch::Matchers::ContainsSubstring(reach));
}

TEST_CASE("on_anomaly: log of a negative value is classified invalid", "[replay]") {
  TempDir dir("replay_invalid");
  // fc(x) + 10 > 0 on healthy steps (|fc(x)| < 2); at step 12 the shift -20 makes it < 0.
  Plant shifted([](const torch::Tensor& t) { return torch::log(t + 10.0); });
  const PlantRun r = run_plant(dir, shifted, 12, -20.0);
  check_only_step(r, 12);
  const auto& e = r.events[0];
  CHECK(e["trigger"] == "loss_nonfinite");
  CHECK(e["trigger_detail"] == "loss = nan");
  CHECK(e["reproduced"] == true);
  CHECK(e["origin"] == "aten::log");
  CHECK(e["classification"] == "invalid");
  CHECK_THAT(e["why"].get<std::string>(), Catch::Matchers::ContainsSubstring("16 NaN"));
  CHECK(fs::exists(dir.path() / "rank0/tensors/step12/aten::log.0.forward.in0.npy.zst"));
}

// IEEE 754's exceptions tell the three apart (docs/debugger.md): an overflow of float32
// that float64 holds is "range"; a result beyond float64 too is "overflow"; an exact zero
// divided or logged is "divide_by_zero" (above: NaN from finite inputs is "invalid").
TEST_CASE("on_anomaly: exp of a value beyond float64's range is classified overflow", "[replay]") {
  TempDir dir("replay_overflow");
  Plant net([](const torch::Tensor& t) { return torch::exp(t); });
  const PlantRun r = run_plant(dir, net, 9, 1e30);  // exp(1e30): inf in float64 too
  check_only_step(r, 9);
  const auto& e = r.events[0];
  CHECK(e["reproduced"] == true);
  CHECK(e["origin"] == "aten::exp");
  CHECK(e["classification"] == "overflow");
  CHECK_THAT(e["why"].get<std::string>(),
             Catch::Matchers::ContainsSubstring("beyond float64's range"));
}

TEST_CASE("on_anomaly: log of an exact zero is classified divide_by_zero", "[replay]") {
  TempDir dir("replay_divide_by_zero");
  // relu(fc(x) + 10) > 0 on healthy steps; at step 21 the shift -20 makes it exactly 0.
  Plant net([](const torch::Tensor& t) { return torch::log(torch::relu(t + 10.0)); });
  const PlantRun r = run_plant(dir, net, 21, -20.0);
  check_only_step(r, 21);
  const auto& e = r.events[0];
  CHECK(e["reproduced"] == true);
  CHECK(e["origin"] == "aten::log");
  CHECK(e["classification"] == "divide_by_zero");
  CHECK_THAT(e["why"].get<std::string>(), Catch::Matchers::ContainsSubstring("division by zero"));
}

TEST_CASE("on_anomaly: division of a finite value by an exact zero is divide_by_zero", "[replay]") {
  TempDir dir("replay_div_zero");
  Plant net([](const torch::Tensor& t) { return torch::ones_like(t) / torch::relu(t + 10.0); });
  const PlantRun r = run_plant(dir, net, 14, -20.0);
  check_only_step(r, 14);
  const auto& e = r.events[0];
  CHECK(e["origin"] == "aten::div");
  CHECK(e["classification"] == "divide_by_zero");
}

// A zero that an earlier op rounded from a value too small for its dtype: the division by
// it is an underflow, and the event names the op that underflowed. (relu's exact zeros above
// stay divide_by_zero: relu gives 0 in float64 too.)
TEST_CASE("on_anomaly: log of an exp that underflowed float32 is classified underflow",
          "[replay]") {
  TempDir dir("replay_underflow");
  // exp(fc(x) - 200) ~ 1e-87: zero in float32 (smallest subnormal 1.4e-45), not in float64.
  Plant net([](const torch::Tensor& t) { return torch::log(torch::exp(t)); });
  const PlantRun r = run_plant(dir, net, 17, -200.0);
  check_only_step(r, 17);
  const auto& e = r.events[0];
  CHECK(e["reproduced"] == true);
  CHECK(e["origin"] == "aten::log");
  CHECK(e["classification"] == "underflow");
  const std::string why = e["why"].get<std::string>();
  CHECK_THAT(why, Catch::Matchers::ContainsSubstring("where aten::exp"));
  CHECK_THAT(why, Catch::Matchers::ContainsSubstring("16 zeros"));  // the whole batch
  CHECK_THAT(why, Catch::Matchers::ContainsSubstring("below float32's smallest normal"));
  CHECK_THAT(why, Catch::Matchers::ContainsSubstring("division by zero"));
}

TEST_CASE("on_anomaly: a division by a bfloat16 exp that underflowed is classified underflow",
          "[replay]") {
  TempDir dir("replay_underflow_bf16");
  Plant net([](const torch::Tensor& t) {
    return (torch::ones_like(t) / torch::exp(t.to(torch::kBFloat16)).to(torch::kFloat));
  });
  const PlantRun r = run_plant(dir, net, 12, -120.0);  // exp(-120) ~ 8e-53
  check_only_step(r, 12);
  const auto& e = r.events[0];
  CHECK(e["origin"] == "aten::div");
  CHECK(e["classification"] == "underflow");
  const std::string why = e["why"].get<std::string>();
  // The zero reached the division through a cast to float32 (as autocast's casts hand
  // values on): the op named is the exp that underflowed, in bfloat16.
  CHECK_THAT(why, Catch::Matchers::ContainsSubstring("where aten::exp"));
  CHECK_THAT(why, Catch::Matchers::ContainsSubstring("bfloat16"));
}

TEST_CASE("on_anomaly: NaN in the input batch is classified inherited", "[replay]") {
  TempDir dir("replay_inherited");
  Plant net([](const torch::Tensor& t) { return torch::tanh(t); });
  const PlantRun r = run_plant(dir, net, 5, 0.0, /*poison=*/true);
  check_only_step(r, 5);
  const auto& e = r.events[0];
  CHECK(e["trigger"] == "loss_nonfinite");
  CHECK(e["reproduced"] == true);
  CHECK(e["classification"] == "inherited");
  // The first op that read the batch: aten::addmm (LibTorch 1.13's Linear at depth 0) or
  // aten::linear around it.
  CHECK((e["origin"] == "aten::addmm" || e["origin"] == "aten::linear"));
  CHECK_THAT(
      e["why"].get<std::string>(),
      Catch::Matchers::ContainsSubstring("(no parameter: data or an activation: 1 NaN, 0 Inf)"));
}

TEST_CASE("on_anomaly: a loss spike after a learning-rate jump on Fashion-MNIST", "[replay]") {
  TempDir dir("replay_spike");
  torch::manual_seed(5);
  const auto data = fashion_mnist::load("t10k");
  auto images = data.images.slice(0, 0, 384).flatten(1), labels = data.labels.slice(0, 0, 384);
  torch::nn::Sequential net(torch::nn::Linear(784, 32), torch::nn::ReLU(),
                            torch::nn::Linear(32, 10));
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05));
  auto o = options_in(dir);
  o.record = RecordMode::kOnAnomaly;
  o.on_anomaly.spike_k = 4;
  o.on_anomaly.spike_n = 8;
  std::vector<double> losses;
  {
    PrecisionDebugger dbg(o);
    dbg.start(net, opt);
    for (int64_t step = 0; step < 36; ++step) {
      const int64_t at = (step % 12) * 32;
      auto x = images.slice(0, at, at + 32), y = labels.slice(0, at, at + 32);
      opt.param_groups()[0].options().set_lr(step == 24 ? 30.0 : 0.05);  // the jump
      auto loss = dbg.run_step([&] {
        opt.zero_grad();
        auto l = torch::nn::functional::cross_entropy(net->forward(x), y);
        l.backward();
        opt.step();
        return l;
      });
      losses.push_back(loss.item<double>());
    }
    dbg.stop();
    CHECK(dbg.counters().replays == 1);
  }
  // The jump's update shows in the next step's loss.
  std::vector<double> window(losses.begin() + 17, losses.begin() + 25);
  std::sort(window.begin(), window.end());
  const double median = 0.5 * (window[3] + window[4]);
  REQUIRE(std::isfinite(losses[25]));
  REQUIRE(losses[25] > 4 * median);
  const auto events = anomaly_events(dir);
  REQUIRE(events.size() == 1);
  const auto& e = events[0];
  CHECK(e["step"] == 25);
  CHECK(e["trigger"] == "loss_spike");
  CHECK(e["reproduced"] == true);
  CHECK(e["origin"] == "");
  CHECK(e["classification"] == "unknown");
  CHECK_THAT(e["trigger_detail"].get<std::string>(),
             Catch::Matchers::ContainsSubstring("x median"));
  const auto ops = precprobe::test::read_ops(dir);
  REQUIRE_FALSE(ops.empty());
  for (const auto& op : ops) REQUIRE(op.step == 25);
}

TEST_CASE("on_anomaly: a step that draws from std::random_device is not reproduced", "[replay]") {
  TempDir dir("replay_nondet");
  torch::manual_seed(2);
  torch::nn::Linear net(4, 1);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01));
  auto x = torch::rand({8, 4}), y = torch::rand({8, 1});
  auto o = options_in(dir);
  o.record = RecordMode::kOnAnomaly;
  o.on_anomaly.spike_k = 10;
  o.on_anomaly.spike_n = 5;
  std::random_device rd;
  {
    PrecisionDebugger dbg(o);
    dbg.start(net, opt);
    for (int64_t step = 0; step < 12; ++step) {
      dbg.run_step([&] {
        opt.zero_grad();
        double scale = 1.0;
        if (step == 9) scale = 1000.0 + 1000.0 * (rd() / 4294967296.0);  // differs per call
        auto l = torch::mse_loss(net->forward(x), y) * scale + 1.0;
        l.backward();
        opt.step();
        return l;
      });
    }
    dbg.stop();
  }
  const auto events = anomaly_events(dir);
  REQUIRE(events.size() == 1);
  CHECK(events[0]["step"] == 9);
  CHECK(events[0]["trigger"] == "loss_spike");
  CHECK(events[0]["reproduced"] == false);
  CHECK_FALSE(precprobe::test::read_ops(dir).empty());  // what was recorded is kept
}

TEST_CASE("on_anomaly: healthy steps write no op records and no events; gradient trigger",
          "[replay]") {
  TempDir dir("replay_grad");
  torch::manual_seed(4);
  torch::nn::Linear net(4, 2);
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(1e-3));
  auto x = torch::rand({8, 4});
  auto o = options_in(dir);
  o.record = RecordMode::kOnAnomaly;
  PrecisionDebugger dbg(o);
  dbg.start(net, opt);
  for (int64_t step = 0; step < 6; ++step) {
    // Healthy steps: the op observer is not installed, no op is even seen.
    if (step == 4) CHECK(dbg.counters().ops_seen == 0);
    dbg.run_step([&] {
      opt.zero_grad();
      auto l = net->forward(x).sum();
      l.backward();
      if (step == 4) {  // the weight's gradient turns inf; the loss stays finite
        torch::NoGradGuard no_grad;
        net->weight.grad()[0][1] = std::numeric_limits<float>::infinity();
      }
      opt.step();
      return l;
    });
  }
  CHECK(dbg.counters().ops_seen > 0);  // the replay's
  dbg.stop();
  const auto events = anomaly_events(dir);
  REQUIRE(events.size() == 1);
  CHECK(events[0]["step"] == 4);
  CHECK(events[0]["trigger"] == "grad_nonfinite");
  CHECK_THAT(events[0]["trigger_detail"].get<std::string>(),
             Catch::Matchers::ContainsSubstring("gradient of weight holds"));
  for (const auto& op : precprobe::test::read_ops(dir)) REQUIRE(op.step == 4);
}

TEST_CASE("run_step: not started, always, exceptions of f", "[replay]") {
  TempDir dir("replay_plain");
  auto o = options_in(dir);
  PrecisionDebugger dbg(o);
  auto one = torch::ones({});
  auto l = dbg.run_step([&] { return one * 2; });
  CHECK(l.item<float>() == Approx(2.0));
  CHECK(dbg.current_step() == 0);  // the step stays open: the next run_step/step/stop ends it
  dbg.start();
  l = dbg.run_step([&] { return one * 3; });
  CHECK(l.item<float>() == Approx(3.0));
  CHECK(dbg.current_step() == 1);
  dbg.stop();
  CHECK(dbg.current_step() == 2);
  // "always": the step's mul was recorded (the checks' item() calls too).
  CHECK(precprobe::test::with_name(precprobe::test::read_ops(dir), "aten::mul").size() == 1);

  TempDir dir2("replay_throw");
  auto o2 = options_in(dir2);
  o2.record = RecordMode::kOnAnomaly;
  torch::nn::Linear net(2, 1);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  PrecisionDebugger dbg2(o2);
  CHECK_THAT(error_of([&] { dbg2.start(net); }),
             Catch::Matchers::ContainsSubstring("call start(model, optimizer)"));
  dbg2.start(net, opt);
  CHECK_THROWS_WITH(dbg2.run_step([]() -> torch::Tensor { throw std::runtime_error("mine"); }),
                    "mine");
  CHECK(dbg2.counters().snapshot_bytes > 0);
  dbg2.stop();

  // A module held by value, as start(model) takes it.
  SmallNetImpl by_value;
  torch::optim::SGD opt4(by_value.parameters(), torch::optim::SGDOptions(0.1));
  TempDir dir4("replay_by_value");
  auto o4 = options_in(dir4);
  o4.record = RecordMode::kOnAnomaly;
  PrecisionDebugger dbg4(o4);
  dbg4.start(by_value, opt4);
  CHECK(dbg4.started());
  CHECK(dbg4.model() == &by_value);
  dbg4.stop();

  TempDir dir3("replay_lbfgs");
  auto o3 = options_in(dir3);
  o3.record = RecordMode::kOnAnomaly;
  torch::optim::LBFGS lbfgs(net->parameters(), torch::optim::LBFGSOptions(1));
  PrecisionDebugger dbg3(o3);
  CHECK_THAT(error_of([&] { dbg3.start(net, lbfgs); }),
             Catch::Matchers::ContainsSubstring("cannot snapshot this optimizer"));
}

TEST_CASE("config: record and on_anomaly", "[replay][config]") {
  auto o = DebuggerOptions::from_json(
      R"({"record": "on_anomaly", "on_anomaly": {"loss_nonfinite": false, "grad_nonfinite": true,
          "loss_spike": {"k": 5, "n": 30}, "max_replays": 3}})");
  CHECK(o.record == RecordMode::kOnAnomaly);
  CHECK_FALSE(o.on_anomaly.loss_nonfinite);
  CHECK(o.on_anomaly.grad_nonfinite);
  CHECK(o.on_anomaly.spike_k == Approx(5));
  CHECK(o.on_anomaly.spike_n == 30);
  CHECK(o.on_anomaly.max_replays == 3);
  const auto back = DebuggerOptions::from_json(o.to_json());
  CHECK(back.record == RecordMode::kOnAnomaly);
  CHECK_FALSE(back.on_anomaly.loss_nonfinite);
  CHECK(back.on_anomaly.spike_k == Approx(5));
  CHECK(back.on_anomaly.spike_n == 30);
  CHECK(back.on_anomaly.max_replays == 3);
  CHECK_FALSE(DebuggerOptions::from_json(R"({"record": "on_anomaly"})").on_anomaly.spike_k > 0);
  CHECK(DebuggerOptions{}.record == RecordMode::kAlways);

  auto err = [](const std::string& text) {
    return error_of([&] { DebuggerOptions::from_json(text); });
  };
  using Catch::Matchers::ContainsSubstring;
  CHECK_THAT(err(R"({"record": "sometimes"})"), ContainsSubstring("config key 'record'"));
  CHECK_THAT(err(R"({"record": "on_anomaly", "on_anomaly": {"loss_nan": true}})"),
             ContainsSubstring("unknown config key 'on_anomaly.loss_nan'"));
  CHECK_THAT(err(R"({"record": "on_anomaly", "on_anomaly": {"loss_nonfinite": 1}})"),
             ContainsSubstring("'on_anomaly.loss_nonfinite'"));
  CHECK_THAT(err(R"({"record": "on_anomaly", "on_anomaly": {"loss_spike": {"k": 0.5}}})"),
             ContainsSubstring("'on_anomaly.loss_spike.k'"));
  CHECK_THAT(err(R"({"record": "on_anomaly", "on_anomaly": {"loss_spike": {"n": 1}}})"),
             ContainsSubstring("'on_anomaly.loss_spike.n'"));
  CHECK_THAT(err(R"({"record": "on_anomaly", "on_anomaly": {"loss_spike": {"m": 1}}})"),
             ContainsSubstring("'on_anomaly.loss_spike.m'"));
  CHECK_THAT(err(R"({"record": "on_anomaly", "on_anomaly": {"max_replays": -1}})"),
             ContainsSubstring("'on_anomaly.max_replays'"));
  CHECK_THAT(err(R"({"on_anomaly": {"max_replays": 2}})"),
             ContainsSubstring("\"record\" is \"always\""));
  CHECK_THAT(err(R"({"record": "on_anomaly", "on_anomaly": {"loss_nonfinite": false,
                    "grad_nonfinite": false}})"),
             ContainsSubstring("turns every trigger off"));
}
