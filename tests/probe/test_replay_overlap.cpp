// "record": "on_anomaly" with the snapshot's copy overlapping the step (snapshot_copier.h):
// the overlapped snapshot equals a synchronous capture byte for byte (AdamW and SGD with
// momentum, BatchNorm's running statistics changing in forward) and its hooks leave training
// unchanged; a write the copy could have missed is found (the step is not replayed, later
// snapshots are synchronous); the healthy steps' "loss" scalars and grads records hold what a
// float64 recomputation gives, and the report of a replayed anomaly shows the steps before it.
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "debugger_fixture.h"
#include "frame_stream.h"
#include "precprobe/report.h"
#include "precprobe_catch.h"
#include "replay/step_snapshot.h"
#include "snapshot_state.h"

using namespace precprobe;
using precprobe::detail::StepSnapshot;
using precprobe::test::copy_state;
using precprobe::test::options_in;
using precprobe::test::same_bits;
using precprobe::test::same_state;
using precprobe::test::State;
using precprobe::test::TempDir;

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(8, 64))),
        bn(register_module("bn", torch::nn::BatchNorm1d(64))),
        drop(register_module("drop", torch::nn::Dropout(0.5))),
        fc2(register_module("fc2", torch::nn::Linear(64, 1))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(drop(torch::relu(bn(fc1(x))))); }
  torch::nn::Linear fc1;
  torch::nn::BatchNorm1d bn;
  torch::nn::Dropout drop;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Net);

template <typename O>
std::unique_ptr<torch::optim::Optimizer> make_optimizer(Net& net) {
  if constexpr (std::is_same<O, torch::optim::AdamW>::value) {
    return std::make_unique<torch::optim::AdamW>(
        net->parameters(), torch::optim::AdamWOptions(1e-2).amsgrad(true).weight_decay(0.1));
  } else {
    return std::make_unique<torch::optim::SGD>(
        net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true));
  }
}

// Gradients set to zero, kept defined (zero_grad() sets them to None from LibTorch 2.0 on):
// the same on every version.
void zero_grads(torch::nn::Module& m) {
  for (auto& p : m.parameters())
    if (p.grad().defined()) p.mutable_grad().zero_();
}

}  // namespace

TEMPLATE_TEST_CASE(
    "overlapped snapshot: equals a synchronous capture byte for byte; training is unchanged",
    "[replay][snapshot][overlap]", torch::optim::AdamW, torch::optim::SGD) {
  torch::manual_seed(3);
  Net net;
  torch::manual_seed(3);
  Net twin;  // the same weights, trained without a snapshot
  auto opt = make_optimizer<TestType>(net);
  auto twin_opt = make_optimizer<TestType>(twin);
  REQUIRE(same_state(copy_state(*net, *opt), copy_state(*twin, *twin_opt)));
  auto x = torch::randn({32, 8}), y = torch::randn({32, 1});
  auto train_step = [&](Net& n, torch::optim::Optimizer& o) {  // dropout draws from the RNG
    o.zero_grad();
    auto loss = torch::mse_loss(n->forward(x), y);
    loss.backward();
    o.step();
    return loss;
  };
  at::Generator gen = at::detail::getDefaultCPUGenerator();

  StepSnapshot overlapped, sync;
  overlapped.bind(net.ptr().get(), {opt.get()});
  sync.bind(net.ptr().get(), {opt.get()});
  sync.set_overlap(false);
  // Step 0 starts without optimizer state (the step makes it); the others with it.
  for (int step = 0; step < 6; ++step) {
    INFO("step " << step);
    const State before = copy_state(*net, *opt);
    const at::Tensor rng = gen.get_state();
    sync.capture();
    overlapped.begin_capture();
    const at::Tensor loss = train_step(net, *opt);  // the helper copies meanwhile
    REQUIRE(overlapped.finish_capture().empty());
    REQUIRE(overlapped.captured());
    const State after = copy_state(*net, *opt);
    CHECK_FALSE(same_state(before, after));
    // The hooks did not change the step: the twin's, on the same dropout masks, is the same.
    gen.set_state(rng);
    CHECK(same_bits(loss, train_step(twin, *twin_opt)));
    CHECK(same_state(after, copy_state(*twin, *twin_opt)));

    // Both snapshots put back the same bytes, RNG state included (the next draw).
    CHECK(overlapped.bytes() == sync.bytes());
    overlapped.restore();
    const State from_overlapped = copy_state(*net, *opt);
    const at::Tensor draw_overlapped = torch::rand({16});
    sync.restore();
    const State from_sync = copy_state(*net, *opt);
    const at::Tensor draw_sync = torch::rand({16});
    CHECK(same_state(from_overlapped, before));
    CHECK(same_state(from_overlapped, from_sync));
    CHECK(same_bits(draw_overlapped, draw_sync));
    // Replayed from there, the step gives what it gave.
    sync.restore();
    CHECK(same_bits(loss, train_step(net, *opt)));
    CHECK(same_state(copy_state(*net, *opt), after));
  }
  CHECK(overlapped.overlap());
}

TEST_CASE("overlapped snapshot: large parameters, copied by the helper and the first hook",
          "[replay][snapshot][overlap]") {
  // 8 MB of weights and 24 MB of AdamW state against a forward of one row: backward's first
  // hook arrives while the helper is still copying, and takes chunks itself.
  torch::manual_seed(5);
  torch::nn::Sequential net(torch::nn::Linear(1024, 1024), torch::nn::Tanh(),
                            torch::nn::Linear(1024, 1024));
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(1e-3));
  auto x = torch::randn({1, 1024});
  auto train_step = [&] {
    opt.zero_grad();
    auto loss = net->forward(x).square().mean();
    loss.backward();
    opt.step();
    return loss;
  };
  train_step();  // AdamW's state exists from here on
  StepSnapshot snap;
  snap.bind(net.ptr().get(), {&opt});
  for (int step = 0; step < 4; ++step) {
    INFO("step " << step);
    const State before = copy_state(*net, opt);
    snap.begin_capture();
    const at::Tensor loss = train_step();
    const State after = copy_state(*net, opt);
    REQUIRE(snap.finish_capture().empty());
    snap.restore();
    CHECK(same_state(copy_state(*net, opt), before));
    CHECK(same_bits(train_step(), loss));
    CHECK(same_state(copy_state(*net, opt), after));
  }
}

TEST_CASE("overlapped snapshot: writes before the copy is known complete", "[replay][overlap]") {
  torch::manual_seed(7);
  Net net;
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(1e-2));
  auto x = torch::randn({32, 8}), y = torch::randn({32, 1});
  int write = 0;  // 1: in place through the dispatcher; 2: through .data()
  auto train_step = [&] {
    zero_grads(*net);
    if (write == 1) {
      torch::NoGradGuard no_grad;
      net->fc1->weight.add_(0.25);  // bumps the version counter
    } else if (write == 2) {
      net->fc1->weight.data().add_(0.25);  // .data() has a counter of its own
    }
    auto loss = torch::mse_loss(net->forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  StepSnapshot snap;
  snap.bind(net.ptr().get(), {&opt});
  for (int i = 0; i < 2; ++i) {
    snap.begin_capture();
    train_step();
    REQUIRE(snap.finish_capture().empty());
  }

  // Not seen: a write that bumps no version (docs/debugger.md). The copy may hold the
  // weight from before it or after it.
  write = 2;
  snap.begin_capture();
  train_step();
  CHECK(snap.finish_capture().empty());
  CHECK(snap.overlap());

  // Seen: the snapshot is not valid, cannot be restored, and later ones are synchronous.
  write = 1;
  snap.begin_capture();
  train_step();
  CHECK(snap.finish_capture() == "fc1.weight");
  CHECK_FALSE(snap.captured());
  CHECK_FALSE(snap.overlap());
  CHECK_THROWS_AS(snap.restore(), precprobe::Error);
  // Synchronous from now on: the same write in the step is part of what a replay redoes.
  const State before = copy_state(*net, opt);
  snap.begin_capture();
  CHECK(snap.captured());
  const at::Tensor loss = train_step();
  const State after = copy_state(*net, opt);
  CHECK(snap.finish_capture().empty());
  snap.restore();
  CHECK(same_state(copy_state(*net, opt), before));
  CHECK(same_bits(train_step(), loss));  // the RNG was put back: the same dropout masks
  CHECK(same_state(copy_state(*net, opt), after));
}

TEST_CASE("overlapped snapshot: a parameter optimizer.step() moves without this step's gradient",
          "[replay][overlap]") {
  torch::manual_seed(8);
  torch::nn::Linear a(4, 4), b(4, 1);
  torch::optim::SGD opt(std::vector<torch::Tensor>{a->weight, a->bias, b->weight, b->bias},
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::nn::Sequential both(a, b);
  auto x = torch::randn({8, 4});
  auto train_step = [&](bool use_b) {
    zero_grads(*both);
    auto h = a->forward(x);
    auto loss = use_b ? b->forward(h).sum() : h.sum();
    loss.backward();
    opt.step();
  };
  StepSnapshot snap;
  snap.bind(both.ptr().get(), {&opt});
  snap.begin_capture();
  train_step(true);
  REQUIRE(snap.finish_capture().empty());
  // b gets no gradient now, yet SGD moves it (a zero gradient, a momentum buffer), through
  // .data(): no version shows it. a's first hook held backward until b was copied too.
  const State before = copy_state(*both, opt);
  const at::Tensor b_before = b->weight.detach().clone();
  snap.begin_capture();
  train_step(false);
  CHECK_FALSE(same_bits(b->weight, b_before));
  CHECK(snap.finish_capture().empty());
  snap.restore();
  CHECK(same_state(copy_state(*both, opt), before));
  CHECK(snap.overlap());
}

namespace {

// out = exp(fc(x) + shift): the loss is +inf at a step with a large shift.
struct PlantImpl : torch::nn::Module {
  PlantImpl() : fc(register_module("fc", torch::nn::Linear(4, 1))) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::exp(fc(x) + shift); }
  torch::nn::Linear fc;
  double shift = 0;
};
TORCH_MODULE(Plant);

struct ErrorLog {
  std::mutex mu;
  std::vector<std::string> lines;
  ErrorLog() {
    set_error_handler([this](const std::string& m) {
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(m);
    });
  }
  ~ErrorLog() { set_error_handler({}); }
  size_t count(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu);
    size_t n = 0;
    for (const auto& l : lines) n += l.find(text) != std::string::npos ? 1 : 0;
    return n;
  }
};

std::vector<std::string> raw_lines(const TempDir& dir, const char* stream) {
  precprobe::FrameReader r;
  std::string err;
  REQUIRE(r.open((dir.path() / "rank0" / stream).string(), &err));
  std::vector<std::string> out;
  std::string content;
  while (r.next(content)) {
    size_t at = 0;
    while (at < content.size()) {
      size_t end = content.find('\n', at);
      if (end == std::string::npos) end = content.size();
      out.push_back(content.substr(at, end - at));
      at = end + 1;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("on_anomaly: a step that wrote a weight before its copy is not replayed", "[replay]") {
  TempDir dir("replay_overlap_written");
  ErrorLog log;
  torch::manual_seed(11);
  Plant net;
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  auto o = options_in(dir);
  o.record = RecordMode::kOnAnomaly;
  auto x = torch::rand({16, 4}), y = torch::rand({16, 1});
  {
    PrecisionDebugger dbg(o);
    dbg.start(net, opt);
    for (int64_t step = 0; step < 30; ++step) {
      net->shift = step == 8 || step == 20 ? 100.0 : 0.0;  // exp overflows: loss = inf
      dbg.run_step([&] {
        opt.zero_grad();
        if (step == 8) {  // the program changes a weight in the step, before backward
          torch::NoGradGuard no_grad;
          net->fc->bias.add_(0.5);
        }
        auto l = torch::mse_loss(net->forward(x), y);
        l.backward();
        if (std::isfinite(l.item<double>())) opt.step();  // as a GradScaler skips
        return l;
      });
    }
    dbg.stop();
    // Step 8 could not be replayed (its snapshot is not valid); step 20, synchronous, was.
    CHECK(dbg.counters().replays == 1);
    CHECK(dbg.counters().errors == 1);
  }
  CHECK(log.count("step 8 (loss = inf) is not replayed: its snapshot is not valid (fc.bias ") == 1);
  CHECK(log.count("fc.bias was written during the step before the snapshot's copy") == 1);
  CHECK(log.count("from now on the snapshot is copied before each step") == 1);
  DumpReader reader(dir.path().string());
  const auto events = reader.anomalies();
  REQUIRE(events.size() == 1);
  CHECK(events[0].step == 20);
  CHECK(events[0].reproduced);
  CHECK(events[0].origin == "aten::exp");
}

TEST_CASE("on_anomaly: healthy steps write the loss and each gradient's statistics", "[replay]") {
  TempDir dir("replay_overlap_records");
  torch::manual_seed(12);
  Plant net;
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  auto o = options_in(dir);
  o.record = RecordMode::kOnAnomaly;
  o.grad_monitor = true;  // the replayed step's grads records are the monitor's
  auto x = torch::rand({16, 4}), y = torch::rand({16, 1});
  constexpr int64_t kBad = 10;
  std::map<int64_t, double> losses;  // healthy steps: the float64 value of the float loss
  struct Expected {
    double norm, max, mean;
  };
  std::map<std::pair<int64_t, std::string>, Expected> grads;
  {
    PrecisionDebugger dbg(o);
    dbg.start(net, opt);
    for (int64_t step = 0; step < 12; ++step) {
      net->shift = step == kBad ? 100.0 : 0.0;
      at::Tensor loss = dbg.run_step([&] {
        opt.zero_grad();
        auto l = torch::mse_loss(net->forward(x), y);
        l.backward();
        if (std::isfinite(l.item<double>())) opt.step();
        return l;
      });
      if (step >= kBad) continue;
      losses[step] = static_cast<double>(loss.item<float>());
      for (const auto& p : net->named_parameters()) {
        // Independently of the probe: a sequential float64 loop over the gradient.
        const at::Tensor g = p.value().grad().contiguous();
        const float* v = g.data_ptr<float>();
        double ss = 0, sum = 0, mx = 0;
        for (int64_t i = 0; i < g.numel(); ++i) {
          const double a = std::fabs(static_cast<double>(v[i]));
          ss += a * a;
          sum += a;
          mx = std::max(mx, a);
        }
        grads[{step, p.key()}] = {std::sqrt(ss), mx, sum / static_cast<double>(g.numel())};
      }
    }
    dbg.stop();
    CHECK(dbg.counters().replays == 1);
    CHECK(dbg.counters().errors == 0);
  }
  DumpReader reader(dir.path().string());
  std::map<int64_t, double> dumped_losses;
  for (const ScalarRecord& s : reader.scalars())
    if (s.name == "loss") dumped_losses[s.step] = s.value;
  // Steps 0-10 were checked (11: max_replays spent, not watched); 10's loss is the first
  // run's, +inf.
  REQUIRE(dumped_losses.size() == kBad + 1);
  for (const auto& [step, value] : losses) CHECK(dumped_losses.at(step) == value);
  CHECK(dumped_losses.at(kBad) == std::numeric_limits<double>::infinity());

  size_t healthy = 0, replayed = 0;
  for (const GradRecord& r : reader.grads()) {
    INFO("step " << r.step << " " << r.param);
    if (r.step == kBad) {  // the gradient monitor's, from the replay: weights included
      ++replayed;
      CHECK(r.has_weight);
      continue;
    }
    REQUIRE(r.step < kBad);
    ++healthy;
    const Expected& e = grads.at({r.step, r.param});
    CHECK(r.has_grad);
    CHECK_FALSE(r.has_weight);  // not read: absent, not 0
    CHECK(std::isnan(r.weight_norm));
    CHECK(std::isnan(r.update_ratio));
    CHECK(r.grad_norm == Approx(e.norm).epsilon(1e-12));  // summation order differs
    CHECK(r.grad_abs_max == e.max);                       // a max has no order
    CHECK(r.grad_abs_mean == Approx(e.mean).epsilon(1e-12));
    CHECK(r.grad_nan == 0);
    CHECK(r.grad_inf == 0);
    CHECK(r.watch.empty());
  }
  CHECK(healthy == 2 * kBad);  // fc.weight and fc.bias
  CHECK(replayed == 2);        // once each: the first run's records are not written too
  const auto lines = raw_lines(dir, "grads.jsonl.zst");
  REQUIRE_FALSE(lines.empty());
  CHECK(lines[0].find("\"wn\"") == std::string::npos);
  CHECK(lines[0].find("\"ur\"") == std::string::npos);

  // The report of the replayed anomaly shows the steps before it.
  ReportOptions ro;
  ro.dump = dir.path().string();
  const auto data = nlohmann::json::parse(build_report_data(ro));
  REQUIRE(data["loss"].is_object());
  CHECK(data["loss"]["name"] == "loss");
  CHECK(data["loss"]["n"] == kBad + 1);
  REQUIRE(data["grads"].is_object());
  CHECK(data["grads"]["n"] == 2 * kBad + 2);
  CHECK(data["grads"]["params"] == nlohmann::json::array({"fc.weight", "fc.bias"}));
}
