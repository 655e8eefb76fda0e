// PrecisionDebugger::start(models, optimizers): parameter names "<model>.<parameter>" for every
// form a model can be given in, the set-up errors, the gradient monitor in a GAN's loop (each
// network observed once a step, after its own optimizer's step: values against the tensors
// themselves), observe_batch over every model, and "record": "on_anomaly" snapshotting and
// replaying two optimizers.
#include <torch/torch.h>

#pragma GCC diagnostic ignored "-Wfloat-equal"

#include <algorithm>
#include <map>
#include <set>

#include "debugger_fixture.h"
#include "precprobe/analysis.h"
#include "precprobe/dump_format.h"
#include "precprobe/grad_monitor.h"
#include "precprobe_catch.h"
#include "replay/step_snapshot.h"

using namespace precprobe;
using precprobe::test::options_in;
using precprobe::test::TempDir;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

struct GenImpl : torch::nn::Module {
  GenImpl()
      : fc(register_module("fc", torch::nn::Linear(4, 8))),
        drop(register_module("drop", torch::nn::Dropout(0.5))),
        out(register_module("out", torch::nn::Linear(8, 3))) {}
  torch::Tensor forward(const torch::Tensor& z) {
    return torch::tanh(out(drop(torch::relu(fc(z)))));
  }
  torch::nn::Linear fc;
  torch::nn::Dropout drop;
  torch::nn::Linear out;
};
TORCH_MODULE(Gen);

torch::nn::Sequential make_disc() {
  return torch::nn::Sequential(torch::nn::Linear(3, 8), torch::nn::LeakyReLU(),
                               torch::nn::Linear(8, 1), torch::nn::Sigmoid());
}

torch::optim::AdamOptions adam() {
  return torch::optim::AdamOptions(1e-2).betas(std::make_tuple(0.5, 0.999));
}

double norm_of_grads(const at::Tensor& p) {
  return p.grad().to(torch::kDouble).norm().item<double>();
}

}  // namespace

TEST_CASE("start(models): parameters named <model>.<parameter>, any form of module", "[multi]") {
  TempDir dir("multi_names");
  torch::manual_seed(1);
  Gen gen;
  auto disc = make_disc();
  torch::nn::Linear by_value_holder(2, 2);
  torch::nn::LinearImpl by_value(3, 3);
  auto shared = std::make_shared<torch::nn::LinearImpl>(2, 1);
  auto o = options_in(dir);
  o.grad_monitor = true;
  PrecisionDebugger dbg(o);
  dbg.start({{"G", gen}, {"D", disc}, {"lin", by_value}, {"sp", shared}});
  CHECK(dbg.parameter_name(gen->fc->weight) == "G.fc.weight");
  CHECK(dbg.parameter_name(disc[0]->as<torch::nn::Linear>()->bias) == "D.0.bias");
  CHECK(dbg.parameter_name(by_value.weight) == "lin.weight");
  CHECK(dbg.parameter_name(shared->bias) == "sp.bias");
  CHECK(dbg.parameter_name(by_value_holder->weight).empty());
  REQUIRE(dbg.model() != nullptr);
  CHECK(dbg.model()->named_parameters().size() == 4 + 4 + 2 + 2);
  disc->forward(gen->forward(torch::randn({5, 4}))).sum().backward();
  dbg.step();
  dbg.stop();
  std::set<std::string> params;
  for (const auto& r : precprobe::test::read_ops(dir))
    for (const auto& a : r.inputs)
      if (a.tensor && !a.tensor->param.empty()) params.insert(a.tensor->param);
  CHECK(params.count("G.fc.weight") == 1);
  CHECK(params.count("G.out.bias") == 1);
  CHECK(params.count("D.0.weight") == 1);
  CHECK(params.count("D.2.bias") == 1);
  std::set<std::string> monitored;
  for (const auto& g : DumpReader(dir.path().string()).grads()) monitored.insert(g.param);
  CHECK(monitored.size() == 12);
  CHECK(monitored.count("D.2.weight") == 1);
  CHECK(monitored.count("sp.weight") == 1);
  // meta.json's "modules": what owns parameters and the dropouts, in named_modules() order,
  // which places G's dropout op (it reads no parameter) in G.drop.
  const RunMeta meta = DumpReader(dir.path().string()).ranks().front().run_meta();
  CHECK(meta.other.at("modules") == nlohmann::json::parse(R"([["G.fc","params"],)"
                                                          R"(["G.drop","dropout"],)"
                                                          R"(["G.out","params"],)"
                                                          R"(["D.0","params"],["D.2","params"],)"
                                                          R"(["lin","params"],["sp","params"]])"));
  DumpReader reader(dir.path().string());
  std::set<std::string> modules;
  for (const auto& m : summarize_dump(reader, {}, true).modules) modules.insert(m.module);
  // (top level): the input's aten::randn before any module, and the sum after D's last
  // parameter; G: the relu between G.fc and G.drop, and G's tanh after G.out (before D's first
  // parameter); D, a Sequential: its LeakyReLU D.1 between D.0 and D.2, its Sigmoid D.3 after
  // D.2 (meta.json's "module_types"; docs/cli.md, "Modules").
  CHECK(modules == std::set<std::string>{"(top level)", "G.fc", "G", "G.drop", "G.out", "D.0",
                                         "D.1", "D.2", "D.3"});
  const nlohmann::json& types = meta.other.at("module_types");
  CHECK(types.size() == 1 + 4 + 5 + 1 + 1);  // the set, G and its 3, D and its 4, lin, sp
  CHECK(std::count(types.begin(), types.end(),
                   nlohmann::json::parse(R"(["D","torch::nn::SequentialImpl"])")) == 1);
  CHECK(std::count(types.begin(), types.end(),
                   nlohmann::json::parse(R"(["D.1","torch::nn::LeakyReLUImpl"])")) == 1);
}

TEST_CASE("start(models): set-up errors name the bad value", "[multi]") {
  TempDir dir("multi_errors");
  Gen gen;
  auto disc = make_disc();
  torch::optim::Adam opt(gen->parameters(), adam());
  PrecisionDebugger dbg(options_in(dir));
  using Catch::Matchers::ContainsSubstring;
  CHECK_THAT(error_of([&] { dbg.start(std::vector<NamedModel>{}); }),
             ContainsSubstring("no model given"));
  CHECK_THAT(error_of([&] { dbg.start({{"", gen}}); }), ContainsSubstring("name is empty"));
  CHECK_THAT(error_of([&] {
               dbg.start({{"G.x", gen}});
             }),
             ContainsSubstring("model name 'G.x' contains a '.'"));
  CHECK_THAT(error_of([&] {
               dbg.start({{"G", gen}, {"G", disc}});
             }),
             ContainsSubstring("model name 'G' is given twice"));
  CHECK_THAT(error_of([&] {
               dbg.start({{"G", gen}, {"H", gen}});
             }),
             ContainsSubstring("the model 'H' is a module already given"));
  CHECK_THAT(error_of([&] {
               dbg.start({{"G", std::shared_ptr<torch::nn::Module>()}});
             }),
             ContainsSubstring("the model 'G' is null"));
  CHECK_THAT(error_of([&] {
               dbg.start({{"G", gen}}, {&opt, nullptr});
             }),
             ContainsSubstring("optimizer 1 is null"));
  CHECK_FALSE(dbg.started());
  CHECK(PrecisionDebugger::current() == nullptr);
  dbg.start({{"G", gen}, {"D", disc}}, {&opt});
  CHECK(dbg.started());
  dbg.stop();

  TempDir dir2("multi_errors_anomaly");
  auto o = options_in(dir2);
  o.record = RecordMode::kOnAnomaly;
  PrecisionDebugger dbg2(o);
  CHECK_THAT(error_of([&] {
               dbg2.start({{"G", gen}});
             }),
             ContainsSubstring("start(models, optimizers)"));
  torch::optim::LBFGS lbfgs(disc->parameters(), torch::optim::LBFGSOptions(1));
  CHECK_THAT(error_of([&] {
               dbg2.start({{"G", gen}, {"D", disc}}, {&opt, &lbfgs});
             }),
             ContainsSubstring("optimizer 1 of start()"));
}

// The GAN loop of pytorch/examples' cpp/dcgan: D.zero_grad(), D's backward, D's step, then
// G.zero_grad() (clearing last step's G gradients, already observed), G's backward through D,
// G's step. Each parameter must be observed once a step with the gradient its optimizer
// used (G) or holds at step() (D: its own plus what G's backward added), and an update ratio
// of one step of its own optimizer. The second loop order clears each network right after
// its step (zeroing in place: LibTorch 2.x's default set_to_none frees gradients without an op,
// and the debugger cannot see them go): each is observed right before its own zero_grad().
TEMPLATE_TEST_CASE_SIG("start(models): the gradient monitor in a GAN's step", "[multi][monitor]",
                       ((bool ClearAfterStep), ClearAfterStep), false, true) {
  TempDir dir(ClearAfterStep ? "multi_gan_clear_after" : "multi_gan");
  torch::manual_seed(7);
  Gen gen;
  auto disc = make_disc();
  torch::optim::Adam opt_g(gen->parameters(), adam()), opt_d(disc->parameters(), adam());
  auto o = options_in(dir);
  o.grad_monitor = true;
  PrecisionDebugger dbg(o);
  dbg.start({{"G", gen}, {"D", disc}}, {&opt_g, &opt_d});
  auto named = dbg.model()->named_parameters();
  // What the monitor should record for each parameter and step, taken from the tensors.
  std::map<std::pair<int64_t, std::string>, double> want_gn;
  std::map<std::string, at::Tensor> prev_w;
  std::map<std::pair<int64_t, std::string>, double> want_ur;
  auto take = [&](int64_t step, const std::string& prefix) {
    for (const auto& p : named) {
      if (p.key().rfind(prefix, 0) != 0) continue;
      want_gn[{step, p.key()}] = norm_of_grads(p.value());
      const at::Tensor w = p.value().detach().to(torch::kDouble);
      if (prev_w.count(p.key()))
        want_ur[{step, p.key()}] =
            (w - prev_w[p.key()]).norm().item<double>() / prev_w[p.key()].norm().item<double>();
      prev_w[p.key()] = w.clone();
    }
  };
  const auto real = torch::randn({16, 3});
  const int64_t steps = 8;
  for (int64_t step = 0; step < steps; ++step) {
    auto bce = [](const at::Tensor& p, double target) {
      return torch::binary_cross_entropy(p, torch::full_like(p, target));
    };
    if (!ClearAfterStep) disc->zero_grad();
    auto fake = gen->forward(torch::randn({16, 4}));
    auto d_loss = bce(disc->forward(real), 1) + bce(disc->forward(fake.detach()), 0);
    d_loss.backward();
    opt_d.step();
    if (ClearAfterStep) {
      take(step, "D.");
      disc->zero_grad(/*set_to_none=*/false);  // LibTorch 2.x frees them by default, unseen
    } else {
      gen->zero_grad();
    }
    auto g_loss = bce(disc->forward(fake), 1);
    g_loss.backward();
    opt_g.step();
    if (ClearAfterStep) {
      take(step, "G.");
      gen->zero_grad(/*set_to_none=*/false);
    } else {
      take(step, "");
    }
    dbg.step();
  }
  dbg.stop();
  const auto grads = DumpReader(dir.path().string()).grads();
  CHECK(grads.size() == static_cast<size_t>(steps) * named.size());
  std::map<std::pair<int64_t, std::string>, int> seen;
  for (const auto& g : grads) {
    INFO("step " << g.step << " " << g.param);
    CHECK(++seen[{g.step, g.param}] == 1);
    CHECK(g.grad_norm == Approx(want_gn.at({g.step, g.param})).epsilon(1e-9));
    CHECK(g.grad_norm > 0);
    if (g.step > 0) {
      CHECK(g.update_ratio == Approx(want_ur.at({g.step, g.param})).epsilon(1e-9));
      CHECK(g.update_ratio > 0);
    }
    CHECK(g.watch.empty());
  }
}

TEST_CASE("start(models): observe_batch checks every model, in train mode if any model is",
          "[multi][checklist]") {
  TempDir dir("multi_batch");
  Gen gen;
  auto disc = make_disc();
  PrecisionDebugger dbg(options_in(dir));
  dbg.start({{"G", gen}, {"D", disc}});
  const auto x = torch::randn({8, 3});
  dbg.observe_batch(x, {});
  dbg.step();
  gen->eval();
  dbg.observe_batch(x, {});
  dbg.step();
  disc->eval();
  dbg.observe_batch(x, {});
  dbg.step();
  dbg.stop();
  std::vector<double> training;
  double init_params = -1;
  for (const auto& s : DumpReader(dir.path().string()).scalars()) {
    if (s.name == check_scalar::kTraining) training.push_back(s.value);
    if (s.name == check_scalar::kInitParams) init_params = s.value;
  }
  CHECK(training == std::vector<double>{1, 1, 0});
  CHECK(init_params == 4);  // the weights (dim >= 2) of both models
}

TEST_CASE("start(models): dropout forced off in every model", "[multi]") {
  TempDir dir("multi_dropout");
  torch::manual_seed(3);
  Gen gen;
  auto disc = make_disc();
  auto o = options_in(dir);
  o.keep_dropout = false;
  const auto z = torch::randn({64, 4});
  gen->eval();
  const auto without = gen->forward(z);
  gen->train();
  PrecisionDebugger dbg(o);
  dbg.start({{"G", gen}, {"D", disc}});
  CHECK(torch::equal(gen->forward(z), without));
  dbg.stop();
  CHECK_FALSE(torch::equal(gen->forward(z), without));
}

TEST_CASE("on_anomaly with two optimizers: both states snapshot and restored bit for bit",
          "[multi][replay]") {
  torch::manual_seed(5);
  Gen gen;
  auto disc = make_disc();
  torch::optim::Adam opt_g(gen->parameters(), adam());
  torch::optim::SGD opt_d(disc->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  auto set = std::make_shared<torch::nn::Module>();
  set->register_module("G", gen.ptr());
  set->register_module("D", disc.ptr());
  precprobe::detail::StepSnapshot snap;
  snap.bind(set.get(), {&opt_g, &opt_d});
  const auto real = torch::randn({16, 3});
  auto train_step = [&] {
    opt_g.zero_grad();
    opt_d.zero_grad();
    auto fake = gen->forward(torch::randn({16, 4}));  // draws from the CPU generator
    auto loss = disc->forward(real).mean() - disc->forward(fake).mean();
    loss.backward();
    opt_g.step();
    opt_d.step();
    return loss;
  };
  auto copy_all = [&] {
    std::vector<at::Tensor> v;
    for (const auto& p : set->parameters()) v.push_back(p.detach().clone());
    for (auto* opt : std::vector<torch::optim::Optimizer*>{&opt_g, &opt_d})
      for (auto& kv : opt->state()) {
        if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(kv.second.get())) {
          v.push_back(a->exp_avg().clone());
          v.push_back(a->exp_avg_sq().clone());
        } else if (auto* s = dynamic_cast<torch::optim::SGDParamState*>(kv.second.get())) {
          v.push_back(s->momentum_buffer().clone());
        }
      }
    return v;
  };
  auto same = [](const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!torch::equal(a[i], b[i])) return false;
    return true;
  };
  for (int i = 0; i < 3; ++i) train_step();
  const auto before = copy_all();
  snap.capture();
  CHECK(snap.optimizer_name(0) == std::string("Adam"));
  CHECK(snap.optimizer_name(1) == std::string("SGD"));
  const auto loss1 = train_step();
  const auto after = copy_all();
  CHECK_FALSE(same(before, after));
  snap.restore();
  CHECK(same(copy_all(), before));
  const auto loss2 = train_step();
  CHECK(torch::equal(loss1, loss2));
  CHECK(same(copy_all(), after));
}

TEST_CASE("on_anomaly with two models: a NaN in D's gradients is replayed and named",
          "[multi][replay]") {
  TempDir dir("multi_anomaly");
  torch::manual_seed(9);
  Gen gen;
  auto disc = make_disc();
  torch::optim::Adam opt_g(gen->parameters(), adam()), opt_d(disc->parameters(), adam());
  auto o = options_in(dir);
  o.record = RecordMode::kOnAnomaly;
  o.on_anomaly.loss_nonfinite = false;  // the gradients' trigger
  const auto real = torch::randn({16, 3});
  {
    PrecisionDebugger dbg(o);
    dbg.start({{"G", gen}, {"D", disc}}, {&opt_g, &opt_d});
    for (int64_t step = 0; step < 6; ++step) {
      const auto noise = torch::randn({16, 4});
      auto batch = real.clone();
      if (step == 4) batch[2][1] = std::numeric_limits<float>::quiet_NaN();
      dbg.run_step([&] {  // G's step first: the NaN reaches D's gradients only
        opt_g.zero_grad();
        auto g_loss = -disc->forward(gen->forward(noise)).mean();
        g_loss.backward();
        opt_g.step();
        opt_d.zero_grad();
        auto d_loss =
            disc->forward(batch).mean() - disc->forward(gen->forward(noise).detach()).mean();
        d_loss.backward();
        opt_d.step();
        return g_loss;
      });
    }
    CHECK(dbg.counters().replays == 1);
    CHECK(dbg.counters().errors == 0);
    // Both models' parameters and buffers and both Adams' moments (3 x the parameters).
    int64_t param_bytes = 0;
    for (const auto& p : dbg.model()->parameters()) param_bytes += p.numel() * 4;
    CHECK(dbg.counters().snapshot_bytes >= 3 * param_bytes);
    dbg.stop();
  }
  const auto events = DumpReader(dir.path().string()).anomalies();
  REQUIRE(events.size() == 1);
  CHECK(events[0].step == 4);
  CHECK(events[0].trigger == "grad_nonfinite");
  CHECK(events[0].reproduced);
  CHECK_THAT(events[0].trigger_detail,
             Catch::Matchers::ContainsSubstring("gradient of D.0.weight holds 24 NaN"));
  CHECK_THAT(events[0].trigger_detail,
             Catch::Matchers::ContainsSubstring("(4 parameters with non-finite gradients)"));
}

namespace {

// Two steps of a Sequential MLP with Adam, clip_grad_norm_ run under NoGradGuard (as PyTorch
// 2.x runs it), the optimizer's step marked or not: each module's op count (summary --by
// module) and the records.
std::pair<std::map<std::string, int64_t>, std::vector<OpRecord>> clipped_steps(bool mark) {
  TempDir dir(mark ? "mark_optimizer_on" : "mark_optimizer_off");
  torch::manual_seed(3);
  torch::nn::Sequential net(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 2));
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  PrecisionDebugger dbg(options_in(dir));
  dbg.start(net, opt);
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    net->forward(torch::randn({5, 4})).pow(2).mean().backward();
    {
      torch::NoGradGuard no_grad;
      torch::nn::utils::clip_grad_norm_(net->parameters(), 0.5);
    }
    if (mark) dbg.mark_optimizer(true);
    opt.step();
    if (mark) dbg.mark_optimizer(false);
    dbg.step();
  }
  dbg.stop();
  std::map<std::string, int64_t> modules;
  DumpReader reader(dir.path().string());
  for (const auto& m : summarize_dump(reader, {}, true).modules) modules[m.module] = m.ops;
  return {modules, precprobe::test::read_ops(dir)};
}

}  // namespace

TEST_CASE("mark_optimizer: clipping without grad mode before a marked step is after backward",
          "[multi]") {
  const auto [marked, records] = clipped_steps(true);
  // The ops of opt.step() carry the mark, and only they: every in-place update of a
  // parameter does, no norm (the clipping's) does.
  int64_t updates = 0, norms = 0;
  for (const OpRecord& r : records) {
    const bool update = !r.op.empty() && r.op.back() == '_' && !r.inputs.empty() &&
                        r.inputs[0].tensor && !r.inputs[0].tensor->param.empty();
    if (update && r.dir == Direction::kForward) {
      ++updates;
      CHECK(r.optimizer);
    }
    if (r.op.find("norm") != std::string::npos) {
      ++norms;
      CHECK_FALSE(r.optimizer);
    }
  }
  CHECK(updates >= 2 * 4);  // each step, Adam's update of each of the 4 parameters
  CHECK(norms > 0);
  CHECK(marked.count("(after backward)") == 1);
  CHECK(marked.count("1") == 1);  // the Sequential's ReLU
  // Unmarked, the clipping reads as the optimizer's work on its first parameter (docs/cli.md,
  // "Modules"): the mark is what tells them apart.
  const auto [unmarked, unmarked_records] = clipped_steps(false);
  CHECK(unmarked.count("(after backward)") == 0);
  for (const OpRecord& r : unmarked_records) CHECK_FALSE(r.optimizer);
  CHECK(unmarked.at("0") > marked.at("0"));
}
