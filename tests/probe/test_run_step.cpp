// run_step() in real loops: what the program does right after it (log_scalar of the loss and
// that .item()) belongs to the step it ran, so a NaN planted at step 5 is at step 5 for
// overflow, check and summary alike, with the module of its origin; a lambda may return
// several losses (std::vector, std::tuple, std::pair), every one checked by "on_anomaly";
// and a debugger switched off ("enable": false, PRECPROBE_DISABLE=1) does nothing.
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <tuple>
#include <vector>

#include "debugger_fixture.h"
#include "precprobe/analysis.h"
#include "precprobe/checklist.h"
#include "precprobe_catch.h"

using namespace precprobe;
using precprobe::test::options_in;
using precprobe::test::TempDir;
namespace fs = std::filesystem;

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(4, 8))),
        fc2(register_module("fc2", torch::nn::Linear(8, 1))) {
    torch::NoGradGuard no_grad;
    fc1->weight.fill_(0.5);  // deterministic: an input of 3e38 overflows fc1's output
    fc1->bias.zero_();
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

double figure(const CheckItem& c, const std::string& key) {
  for (const auto& [k, v] : c.figures)
    if (k == key) return v;
  FAIL("no figure " << key << " in " << c.id);
  return 0;
}

std::vector<ScalarRecord> scalars_named(const TempDir& dir, const std::string& name) {
  DumpReader r(dir.path().string());
  std::vector<ScalarRecord> out;
  for (const ScalarRecord& s : r.scalars())
    if (s.name == name) out.push_back(s);
  return out;
}

}  // namespace

TEST_CASE("run_step: a NaN planted at step 5 is at step 5 for overflow, check and summary",
          "[run_step]") {
  constexpr int kSteps = 8, kBad = 5;
  TempDir dir("run_step_nan");
  torch::manual_seed(0);
  Net net;
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01));
  PrecisionDebugger dbg(options_in(dir));
  dbg.start(net);
  for (int k = 0; k < kSteps; ++k) {
    const auto x = torch::ones({2, 4}) * (k == kBad ? 3e38 : 1.0);
    const auto y = torch::zeros({2, 1});
    torch::Tensor loss = dbg.run_step([&] {
      opt.zero_grad();
      auto l = torch::mse_loss(net->forward(x), y);
      l.backward();
      opt.step();
      return l;
    });
    CHECK(dbg.current_step() == k);  // still the step just run
    dbg.log_scalar("loss", loss.item<double>());
  }
  dbg.stop();
  CHECK(dbg.current_step() == kSteps);  // stop() ended the last one

  DumpReader reader(dir.path().string());
  const SummaryResult s = summarize_dump(reader);
  REQUIRE(s.losses.size() == 1);
  CHECK(s.losses[0].points == kSteps);
  CHECK(s.losses[0].first_step == 0);
  CHECK(s.losses[0].last_step == kSteps - 1);
  CHECK(s.losses[0].nonfinite_step == kBad);
  CHECK(s.run.stopped());
  CHECK(s.run.ranks.at(0).complete_through == kSteps - 1);

  DumpReader reader2(dir.path().string());
  const OverflowResult o = find_overflow(reader2);
  REQUIRE(o.found);
  CHECK(o.origin.step == kBad);
  CHECK(o.origin_module == "fc1");  // the overflowing op reads fc1.weight

  DumpReader reader3(dir.path().string());
  const ChecklistResult c = run_checklist(reader3);
  const CheckItem* loss = c.find("hp.loss_trend");
  REQUIRE(loss != nullptr);
  CHECK(figure(*loss, "nonfinite_step") == kBad);
  const CheckItem* ov = c.find("mp.overflow");
  REQUIRE(ov != nullptr);
  CHECK_THAT(ov->evidence, Catch::Matchers::ContainsSubstring("in module fc1 (rank 0, step 5,"));

  // The .item() right after run_step is recorded in the step run_step ran.
  std::set<int64_t> item_steps;
  for (const OpRecord& r : precprobe::test::read_ops(dir))
    if (r.op == "aten::item") item_steps.insert(r.step);
  CHECK(item_steps == std::set<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("run_step then step() ends one step; plain step() loops are unchanged", "[run_step]") {
  TempDir dir("run_step_step");
  PrecisionDebugger dbg(options_in(dir));
  dbg.start();
  auto one = torch::ones({});
  dbg.run_step([&] { return one * 2; });
  CHECK(dbg.current_step() == 0);
  dbg.step();  // ends the step run_step ran, not one more
  CHECK(dbg.current_step() == 1);
  dbg.step();
  CHECK(dbg.current_step() == 2);
  dbg.run_step([&] { return one * 3; });
  dbg.run_step([&] { return one * 4; });  // ends the previous one first
  CHECK(dbg.current_step() == 3);
  dbg.stop();
  CHECK(dbg.current_step() == 4);
  std::vector<int64_t> mul_steps;
  for (const OpRecord& r : precprobe::test::with_name(precprobe::test::read_ops(dir), "aten::mul"))
    mul_steps.push_back(r.step);
  CHECK(mul_steps == std::vector<int64_t>{0, 2, 3});
  std::vector<int64_t> ends;
  for (const ScalarRecord& s : scalars_named(dir, std::string(kStepEndEventName)))
    ends.push_back(s.step);
  CHECK(ends == std::vector<int64_t>{0, 1, 2, 3});
}

TEST_CASE("run_step returns several losses as the lambda returned them", "[run_step]") {
  TempDir dir("run_step_many");
  PrecisionDebugger dbg(options_in(dir));
  auto a = torch::ones({}) * 2, b = torch::ones({}) * 3;
  std::vector<torch::Tensor> v = dbg.run_step([&] { return std::vector<torch::Tensor>{a, b}; });
  REQUIRE(v.size() == 2);
  CHECK(v[1].item<float>() == 3.0f);
  auto [x, y] = dbg.run_step([&] { return std::make_tuple(a * 1, b * 1); });
  CHECK(x.item<float>() == 2.0f);
  CHECK(y.item<float>() == 3.0f);
  std::pair<torch::Tensor, torch::Tensor> p = dbg.run_step([&] { return std::make_pair(b, a); });
  CHECK(p.first.item<float>() == 3.0f);
  int calls = 0;
  dbg.run_step([&] { ++calls; });  // nothing returned: only gradients would be checked
  CHECK(calls == 1);
}

TEST_CASE("on_anomaly checks every loss of a step and logs each", "[run_step][replay]") {
  for (const bool as_tuple : {false, true}) {
    INFO((as_tuple ? "std::tuple" : "std::vector"));
    TempDir dir("run_step_gan");
    torch::manual_seed(0);
    torch::nn::Linear g(3, 3), d(3, 1);
    torch::optim::SGD opt_g(g->parameters(), torch::optim::SGDOptions(0.01));
    torch::optim::SGD opt_d(d->parameters(), torch::optim::SGDOptions(0.01));
    auto o = options_in(dir);
    o.record = RecordMode::kOnAnomaly;
    o.on_anomaly.max_replays = 3;  // steps after a replay are checked too
    PrecisionDebugger dbg(o);
    dbg.start({{"G", g}, {"D", d}}, {&opt_g, &opt_d});
    const auto z = torch::ones({4, 3});
    for (int k = 0; k < 5; ++k) {
      // Step 3's g_loss is NaN while its gradients stay finite (a NaN constant added), so
      // the weights, and the later steps, stay healthy.
      const double poison = k == 3 ? std::nan("") : 0.0;
      auto step = [&] {
        opt_d.zero_grad();
        auto d_loss = d(g(z).detach()).mean();
        d_loss.backward();
        opt_d.step();
        opt_g.zero_grad();
        auto g_loss = -d(g(z)).mean() + torch::full({}, poison);
        g_loss.backward();
        opt_g.step();
        return std::make_pair(d_loss, g_loss);
      };
      torch::Tensor d_loss, g_loss;
      if (as_tuple) {
        std::tie(d_loss, g_loss) = dbg.run_step([&] {
          auto [dl, gl] = step();
          return std::make_tuple(dl, gl);
        });
      } else {
        auto losses = dbg.run_step([&] {
          auto [dl, gl] = step();
          return std::vector<torch::Tensor>{dl, gl};
        });
        REQUIRE(losses.size() == 2);
        d_loss = losses[0];
        g_loss = losses[1];
      }
      CHECK(std::isnan(g_loss.item<double>()) == (k == 3));
      CHECK(std::isfinite(d_loss.item<double>()));
    }
    dbg.stop();
    const auto l0 = scalars_named(dir, "loss/0"), l1 = scalars_named(dir, "loss/1");
    REQUIRE(l0.size() == 5);
    REQUIRE(l1.size() == 5);
    for (int k = 0; k < 5; ++k) {
      CHECK(l0[static_cast<size_t>(k)].step == k);
      CHECK(l1[static_cast<size_t>(k)].step == k);
    }
    CHECK(std::isnan(l1[3].value));
    CHECK(scalars_named(dir, "loss").empty());
    DumpReader reader(dir.path().string());
    const auto anomalies = reader.anomalies();
    REQUIRE(anomalies.size() == 1);
    CHECK(anomalies[0].step == 3);
    CHECK(anomalies[0].trigger == "loss_nonfinite");
    CHECK(anomalies[0].trigger_detail == "loss/1 = nan");
  }
}

TEST_CASE("a debugger switched off does nothing and needs no if", "[run_step][enable]") {
  TempDir dir("run_step_off");
  Net net;
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.01));
  const auto x = torch::ones({2, 4}), y = torch::zeros({2, 1});
  auto use = [&](PrecisionDebugger& dbg) {
    CHECK_FALSE(dbg.enabled());
    dbg.start(net, opt);
    CHECK_FALSE(dbg.started());
    CHECK(PrecisionDebugger::current() == nullptr);
    dbg.observe_batch(x, y);
    torch::Tensor loss = dbg.run_step([&] {
      opt.zero_grad();
      auto l = torch::mse_loss(net->forward(x), y);
      l.backward();
      opt.step();
      return l;
    });
    CHECK(loss.defined());
    dbg.log_scalar("loss", loss.item<double>());
    dbg.step();
    dbg.stop();
    CHECK(dbg.writer() == nullptr);
    CHECK(dbg.counters().ops_seen == 0);
    CHECK_FALSE(fs::exists(dir / "rank0"));
  };
  SECTION("\"enable\": false") {
    auto o = DebuggerOptions::from_json(R"({"enable": false, "dump_path": ")" +
                                        dir.path().string() + R"("})");
    CHECK_FALSE(o.enable);
    o.record = RecordMode::kOnAnomaly;  // would need start(model, optimizer): not checked
    PrecisionDebugger dbg(o);
    use(dbg);
    CHECK(dbg.current_step() == 1);
  }
  SECTION("PRECPROBE_DISABLE=1 reads no configuration") {
    precprobe::test::ScopedEnv off("PRECPROBE_DISABLE", "1");
    PrecisionDebugger dbg(dir / "no_such_config.json");
    use(dbg);
  }
  SECTION("PRECPROBE_DISABLE=0 and empty leave it on") {
    for (const char* v : {"0", ""}) {
      precprobe::test::ScopedEnv on("PRECPROBE_DISABLE", v);
      PrecisionDebugger dbg(options_in(dir));
      CHECK(dbg.enabled());
    }
  }
  SECTION("a value not understood is a set-up error naming the variable") {
    precprobe::test::ScopedEnv bad("PRECPROBE_DISABLE", "maybe");
    CHECK_THROWS_WITH(PrecisionDebugger(options_in(dir)),
                      Catch::Matchers::ContainsSubstring("PRECPROBE_DISABLE='maybe'"));
  }
  SECTION("the key's type is checked") {
    CHECK_THROWS_WITH(DebuggerOptions::from_json(R"({"enable": "no"})"),
                      Catch::Matchers::ContainsSubstring("enable"));
  }
}

TEST_CASE("a GAN step returning its two losses, in every task: same losses, no error",
          "[run_step][arg_shapes]") {
  struct Config {
    const char* what;
    Task task;
    Level level;
    bool async;
    RecordMode record;
  };
  const Config configs[] = {
      {"statistics L1 async", Task::kStatistics, Level::kL1, true, RecordMode::kAlways},
      {"statistics L1 sync", Task::kStatistics, Level::kL1, false, RecordMode::kAlways},
      {"statistics L2 async", Task::kStatistics, Level::kL2, true, RecordMode::kAlways},
      {"statistics L2 sync", Task::kStatistics, Level::kL2, false, RecordMode::kAlways},
      {"overflow_check", Task::kOverflowCheck, Level::kL1, true, RecordMode::kAlways},
      {"tensor", Task::kTensor, Level::kL1, true, RecordMode::kAlways},
      {"on_anomaly", Task::kStatistics, Level::kL1, true, RecordMode::kOnAnomaly},
  };
  constexpr int kSteps = 4;
  // Step 2's g_loss is NaN (a NaN constant added: the gradients stay finite).
  auto train = [&](PrecisionDebugger* dbg) {
    torch::manual_seed(3);
    torch::nn::Linear g(3, 3), d(3, 1);
    torch::optim::SGD opt_g(g->parameters(), torch::optim::SGDOptions(0.05));
    torch::optim::SGD opt_d(d->parameters(), torch::optim::SGDOptions(0.05));
    if (dbg) dbg->start({{"G", g}, {"D", d}}, {&opt_g, &opt_d});
    const auto z = torch::linspace(-1, 1, 12).reshape({4, 3});
    std::vector<std::pair<double, double>> losses;
    for (int k = 0; k < kSteps; ++k) {
      auto step = [&] {
        opt_d.zero_grad();
        auto d_loss = d(g(z).detach()).mean();
        d_loss.backward();
        opt_d.step();
        opt_g.zero_grad();
        auto g_loss = -d(g(z)).mean() + torch::full({}, k == 2 ? std::nan("") : 0.0);
        g_loss.backward();
        opt_g.step();
        return std::make_tuple(d_loss, g_loss);
      };
      auto [d_loss, g_loss] = dbg ? dbg->run_step(step) : step();
      losses.emplace_back(d_loss.item<double>(), g_loss.item<double>());
    }
    if (dbg) dbg->stop();
    return losses;
  };
  const auto reference_losses = train(nullptr);
  for (const Config& c : configs) {
    INFO(c.what);
    TempDir dir("run_step_tasks");
    auto o = options_in(dir, c.async);
    o.task = c.task;
    o.level = c.level;
    o.record = c.record;
    o.overflow_nums = -1;
    if (c.task == Task::kTensor) o.list = {"aten::mean", "aten::add"};
    PrecisionDebugger dbg(o);
    const auto losses = train(&dbg);
    CHECK(dbg.counters().errors == 0);
    REQUIRE(losses.size() == reference_losses.size());
    for (size_t k = 0; k < losses.size(); ++k) {
      // Bit for bit what the program computes without the debugger (NaN at step 2 alike).
      CHECK(std::memcmp(&losses[k], &reference_losses[k], sizeof(losses[k])) == 0);
    }
    DumpReader reader(dir.path().string());
    const auto ops = reader.ops();
    CHECK(!ops.empty());
    for (const OpRecord& op : ops) CHECK(op.step < kSteps);
    if (c.record == RecordMode::kOnAnomaly) {
      const auto anomalies = reader.anomalies();
      REQUIRE(anomalies.size() == 1);
      CHECK(anomalies[0].step == 2);
      CHECK(anomalies[0].trigger_detail == "loss/1 = nan");
    }
  }
}
