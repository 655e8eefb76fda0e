// PrecisionDebugger: op naming, parameter names, levels, filters and life cycle, checked on
// dumps read back from disk with DumpReader.
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "precprobe/checklist.h"
#include "precprobe/reader.h"
#include "precprobe_catch.h"
#include "probe/debugger_fixture.h"

using namespace precprobe;
using precprobe::test::options_in;
using precprobe::test::read_ops;
using precprobe::test::TempDir;
using precprobe::test::with_name;
namespace fs = std::filesystem;

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl() { fc1 = register_module("fc1", torch::nn::Linear(4, 3)); }
  torch::Tensor forward(const torch::Tensor& x) { return fc1->forward(x); }
  torch::nn::Linear fc1{nullptr};
};
TORCH_MODULE(Net);

int64_t count_if(const std::vector<OpRecord>& ops, const std::function<bool(const OpRecord&)>& f) {
  return std::count_if(ops.begin(), ops.end(), f);
}

}  // namespace

TEST_CASE("a Linear forward and backward: names, call indices, seqnr, parameters", "[debugger]") {
  const bool async = GENERATE(true, false);
  TempDir dir("dbg_linear");
  torch::manual_seed(0);
  Net net;
  auto x = torch::randn({2, 4});
  {
    PrecisionDebugger dbg(options_in(dir, async));
    dbg.start(net);
    auto y = net->forward(x);
    auto loss = y.sum();
    loss.backward();
    dbg.step();
    dbg.stop();
    CHECK(dbg.counters().errors == 0);
  }
  auto ops = read_ops(dir);
  REQUIRE(!ops.empty());

  // Forward in execution order: t, addmm, sum, each call 0, seq increasing.
  std::vector<std::string> fwd;
  for (const auto& r : ops)
    if (r.dir == Direction::kForward) fwd.push_back(r.name());
  REQUIRE(fwd.size() >= 3);
  CHECK(fwd[0] == "aten::t.0.forward");
  CHECK(fwd[1] == "aten::addmm.0.forward");
  CHECK(fwd[2] == "aten::sum.0.forward");
  for (size_t i = 1; i < ops.size(); ++i) CHECK(ops[i].seq == ops[i - 1].seq + 1);
  for (const auto& r : ops) CHECK(r.step == 0);
  for (const auto& r : ops) CHECK(r.thread == 0);

  auto t = with_name(ops, "aten::t");
  REQUIRE(t.size() == 1);
  REQUIRE(t[0].inputs.size() == 1);
  CHECK(t[0].inputs[0].tensor->param == "fc1.weight");
  CHECK(t[0].inputs[0].tensor->requires_grad);

  auto addmm = with_name(ops, "aten::addmm");
  REQUIRE(addmm.size() == 1);
  const OpRecord& a = addmm[0];
  CHECK(a.overload.empty());
  CHECK(a.depth == 0);
  REQUIRE(a.inputs.size() == 5);  // self, mat1, mat2, beta, alpha
  CHECK(a.inputs[0].tensor->param == "fc1.bias");
  CHECK(a.inputs[1].tensor->param.empty());
  CHECK(a.inputs[2].tensor->param == "fc1.weight");  // weight.t(): a view of all of it
  CHECK(a.inputs[2].tensor->shape == std::vector<int64_t>{4, 3});
  CHECK(!a.inputs[3].is_tensor());
  CHECK(a.inputs[3].value == "1");
  REQUIRE(a.outputs.size() == 1);
  auto y = net->forward(x).detach();
  auto ref = precprobe::test::reference(y);
  CHECK(a.outputs[0].tensor->shape == std::vector<int64_t>{2, 3});
  CHECK(a.outputs[0].tensor->max == Approx(ref.max));
  CHECK(a.outputs[0].tensor->norm == Approx(ref.norm));
  CHECK(a.seqnr >= 0);

  // The autograd node of addmm carries the forward op's sequence number; the ops it runs
  // are backward records under it, linked by the same number.
  auto node = with_name(ops, "AddmmBackward0", Direction::kBackward);
  REQUIRE(node.size() == 1);
  CHECK(node[0].node == "AddmmBackward0");
  CHECK(node[0].seqnr == a.seqnr);
  CHECK(node[0].name() == "AddmmBackward0.0.backward");
  REQUIRE(node[0].inputs.size() == 1);  // the incoming gradient: ones(2, 3)
  CHECK(node[0].inputs[0].tensor->numel == 6);
  CHECK(node[0].inputs[0].tensor->min == 1.0);
  CHECK(node[0].inputs[0].tensor->max == 1.0);
  CHECK(count_if(ops, [&](const OpRecord& r) {
          return r.dir == Direction::kBackward && r.op.rfind("aten::", 0) == 0 &&
                 r.node == "AddmmBackward0" && r.seqnr == a.seqnr;
        }) >= 1);
  CHECK(with_name(ops, "SumBackward0", Direction::kBackward).size() == 1);
  // The weight gradient, as produced by the node's ops, is an output somewhere in backward.
  const double gw_norm = precprobe::test::reference(net->fc1->weight.grad()).norm;
  CHECK(count_if(ops, [&](const OpRecord& r) {
          if (r.dir != Direction::kBackward) return false;
          for (const auto& o : r.outputs)
            if (o.is_tensor() && o.tensor->numel == 12 && o.tensor->norm == Approx(gw_norm))
              return true;
          return false;
        }) >= 1);
}

TEST_CASE("start() takes a module held by value", "[debugger]") {
  // `Net model; dbg.start(model);` as a user writes it without TORCH_MODULE: parameter
  // names, gradient records and observe_batch's mode as with a shared_ptr.
  struct Plain : torch::nn::Module {
    Plain() {
      fc = register_module("fc", torch::nn::Linear(4, 3));
      bn = register_module("bn", torch::nn::BatchNorm1d(3));
    }
    torch::nn::Linear fc{nullptr};
    torch::nn::BatchNorm1d bn{nullptr};
  };
  TempDir dir("dbg_by_value");
  torch::manual_seed(0);
  Plain model;
  auto x = torch::randn({8, 4});
  {
    DebuggerOptions o = options_in(dir, false);
    o.grad_monitor = true;
    PrecisionDebugger dbg(o);
    dbg.start(model);
    dbg.observe_batch(x, torch::zeros({8}, torch::kLong));
    model.bn->forward(model.fc->forward(x)).sum().backward();
    dbg.step();
    dbg.stop();
    CHECK(dbg.counters().errors == 0);
  }
  auto ops = read_ops(dir);
  auto t = with_name(ops, "aten::t");
  REQUIRE(t.size() == 1);
  CHECK(t[0].inputs[0].tensor->param == "fc.weight");
  DumpReader reader(dir.path().string());
  std::set<std::string> params;
  for (const GradRecord& g : reader.grads()) params.insert(g.param);
  CHECK(params == std::set<std::string>{"fc.weight", "fc.bias", "bn.weight", "bn.bias"});
  double training = -1, stat_training = -1;
  for (const ScalarRecord& r : reader.scalars()) {
    if (r.name == check_scalar::kTraining) training = r.value;
    if (r.name == check_scalar::kStatModulesTraining) stat_training = r.value;
  }
  CHECK(training == 1);
  CHECK(stat_training == 1);  // the BatchNorm1d, in training mode
}

TEST_CASE("call indices count per op and direction and restart each step", "[debugger]") {
  TempDir dir("dbg_calls");
  auto x = torch::randn({8});
  {
    PrecisionDebugger dbg(options_in(dir));
    dbg.start();
    for (int step = 0; step < 2; ++step) {
      auto a = x * 2;
      auto b = a * 3;
      auto c = b + a;
      dbg.step();
    }
    dbg.stop();
  }
  auto ops = read_ops(dir);
  std::vector<std::string> names;
  for (const auto& r : ops) names.push_back(std::to_string(r.step) + ":" + r.name());
  CHECK(names == std::vector<std::string>{"0:aten::mul.0.forward", "0:aten::mul.1.forward",
                                          "0:aten::add.0.forward", "1:aten::mul.0.forward",
                                          "1:aten::mul.1.forward", "1:aten::add.0.forward"});
  CHECK(ops[0].overload == "Scalar");
  CHECK(ops[2].overload == "Tensor");
  CHECK(ops[3].seq == 0);  // seq restarts with the step
}

TEST_CASE("statistics are computed once per tensor version", "[debugger]") {
  const bool async = GENERATE(true, false);
  const bool reuse = GENERATE(true, false);
  INFO((async ? "async" : "sync") << (reuse ? ", reuse_across_steps" : ""));
  TempDir dir("dbg_cache");
  auto x = torch::randn({100000});
  auto o = options_in(dir, async);
  o.reuse_across_steps = reuse;
  PrecisionDebugger dbg(o);
  dbg.start();
  auto a = x * 2;  // in: x, out: a           -> x, a summarised
  auto b = a + x;  // in: a, x (hits), out: b -> b
  a.add_(1);       // in: a (hit), out: a v1  -> a v1
  dbg.step();
  auto c = x * 2;  // new step: x again (carried from the last step, or read again)
  dbg.stop();
  auto k = dbg.counters();
  // x, a, b, a v1 | (x,) c. Async, x's statistics may not be computed yet when the next step
  // meets x: then it is read again rather than served unchecked.
  const bool carried = reuse && (!async || k.tensors_carried == 1);
  CHECK(k.tensors_carried == (carried ? 1 : 0));
  CHECK(k.tensors_summarised == (carried ? 5 : 6));
  CHECK(k.tensors_cached == (carried ? 4 : 3));
  auto ops = read_ops(dir);
  auto add_ = with_name(ops, "aten::add_");
  REQUIRE(add_.size() == 1);
  // Before and after the in-place add: input is a = 2x, output a + 1.
  auto ref_a = precprobe::test::reference(x * 2);
  auto ref_a1 = precprobe::test::reference(x * 2 + 1);
  CHECK(add_[0].inputs[0].tensor->mean == Approx(ref_a.mean).margin(1e-12));
  CHECK(add_[0].outputs[0].tensor->mean == Approx(ref_a1.mean).margin(1e-12));
}

TEST_CASE("L1 records only outermost ops; L2 records nested ones with their depth", "[debugger]") {
  auto run = [](Level level, TempDir& dir) {
    auto opts = options_in(dir);
    opts.level = level;
    auto x = torch::randn({4, 8}, torch::requires_grad());
    auto w = torch::ones({8}, torch::requires_grad());
    PrecisionDebugger dbg(opts);
    dbg.start();
    auto y = torch::layer_norm(x, {8}, w);
    y.sum().backward();
    dbg.step();
    dbg.stop();
    return read_ops(dir);
  };
  TempDir d1("dbg_l1"), d2("dbg_l2");
  auto l1 = run(Level::kL1, d1);
  auto l2 = run(Level::kL2, d2);
  CHECK(l2.size() > l1.size());
  for (const auto& r : l1) CHECK(r.depth == 0);
  CHECK(with_name(l1, "aten::layer_norm").size() == 1);
  CHECK(with_name(l1, "aten::native_layer_norm").empty());
  auto nested = with_name(l2, "aten::native_layer_norm");
  REQUIRE(nested.size() == 1);
  CHECK(nested[0].depth == 1);
  // Backward at L1: the node and the outermost op it runs.
  CHECK(with_name(l1, "NativeLayerNormBackward0", Direction::kBackward).size() == 1);
  auto bw = with_name(l1, "aten::native_layer_norm_backward", Direction::kBackward);
  REQUIRE(bw.size() == 1);
  CHECK(bw[0].node == "NativeLayerNormBackward0");
  CHECK(bw[0].depth == 0);
  CHECK(count_if(l2, [](const OpRecord& r) { return r.depth > 0; }) > 0);
}

TEST_CASE("step, list, scope and data_mode filters", "[debugger]") {
  auto x = torch::randn({16}, torch::requires_grad());
  auto program = [&](PrecisionDebugger& dbg) {
    dbg.start();
    for (int s = 0; s < 3; ++s) {
      auto a = x + 1;
      auto b = a * 2;
      auto c = b - 1;
      auto d = c / 2;
      {
        Scope enc("enc");
        Scope block("block1");
        d = d * 3;
      }
      d.sum().backward();
      dbg.step();
    }
    dbg.stop();
  };
  SECTION("step") {
    TempDir dir("dbg_fstep");
    auto o = options_in(dir);
    o.step.add(1, 1);
    PrecisionDebugger dbg(o);
    program(dbg);
    auto ops = read_ops(dir);
    REQUIRE(!ops.empty());
    for (const auto& r : ops) CHECK(r.step == 1);
  }
  SECTION("step: every 2nd of a range") {
    TempDir dir("dbg_fstride");
    auto o = options_in(dir);
    o.step.add_every(0, 100, 2);
    PrecisionDebugger dbg(o);
    program(dbg);
    std::set<int64_t> steps;
    for (const auto& r : read_ops(dir)) steps.insert(r.step);
    CHECK(steps == std::set<int64_t>{0, 2});
  }
  SECTION("max_calls_per_op: the first calls of each op per step") {
    TempDir dir("dbg_fmaxcalls");
    auto o = options_in(dir);
    o.max_calls_per_op = 1;
    PrecisionDebugger dbg(o);
    program(dbg);
    auto ops = read_ops(dir);
    REQUIRE(!ops.empty());
    for (const auto& r : ops) CHECK(r.call == 0);
    // mul runs twice forward per step: only its first call, in each of the 3 steps.
    auto muls = with_name(ops, "aten::mul");
    CHECK(muls.size() == 3);
  }
  SECTION("list: an exact full name") {
    TempDir dir("dbg_flist");
    auto o = options_in(dir);
    o.list = {"aten::mul.1.forward"};
    PrecisionDebugger dbg(o);
    program(dbg);
    auto ops = read_ops(dir);
    REQUIRE(ops.size() == 3);
    for (const auto& r : ops) CHECK(r.name() == "aten::mul.1.forward");
    CHECK(ops[0].scope == "enc/block1");
  }
  SECTION("scope: a range of two names") {
    TempDir dir("dbg_frange");
    auto o = options_in(dir);
    o.scope = {"aten::mul.0.forward", "aten::sub.0.forward"};
    o.step.add(0, 0);
    PrecisionDebugger dbg(o);
    program(dbg);
    auto ops = read_ops(dir);
    REQUIRE(ops.size() == 2);
    CHECK(ops[0].name() == "aten::mul.0.forward");
    CHECK(ops[1].name() == "aten::sub.0.forward");
  }
  SECTION("scope: a scope path prefix") {
    TempDir dir("dbg_fscope");
    auto o = options_in(dir);
    o.scope = {"enc"};
    PrecisionDebugger dbg(o);
    program(dbg);
    auto ops = read_ops(dir);
    REQUIRE(ops.size() == 3);
    for (const auto& r : ops) CHECK(r.scope == "enc/block1");
  }
  SECTION("data_mode: forward inputs") {
    TempDir dir("dbg_fmode");
    auto o = options_in(dir);
    o.dump_backward = false;
    o.dump_outputs = false;
    PrecisionDebugger dbg(o);
    program(dbg);
    auto ops = read_ops(dir);
    REQUIRE(!ops.empty());
    for (const auto& r : ops) {
      CHECK(r.dir == Direction::kForward);
      CHECK(r.outputs.empty());
      CHECK(!r.inputs.empty());
    }
  }
  SECTION("data_mode: backward only") {
    TempDir dir("dbg_fback");
    auto o = options_in(dir);
    o.dump_forward = false;
    PrecisionDebugger dbg(o);
    program(dbg);
    auto ops = read_ops(dir);
    REQUIRE(!ops.empty());
    for (const auto& r : ops) CHECK(r.dir == Direction::kBackward);
  }
  SECTION("rank not selected: nothing is written") {
    TempDir dir("dbg_frank");
    precprobe::test::ScopedEnv rank("RANK", "1");
    auto o = options_in(dir);
    o.rank.add(0, 0);
    PrecisionDebugger dbg(o);
    CHECK(dbg.rank() == 1);
    program(dbg);
    CHECK(dbg.writer() == nullptr);
    CHECK(fs::is_empty(dir.path()));
  }
}

TEST_CASE("start and stop twice continue the same dump", "[debugger]") {
  TempDir dir("dbg_restart");
  auto x = torch::randn({8});
  {
    PrecisionDebugger dbg(options_in(dir));
    dbg.start();
    auto a = x * 2;
    dbg.step();
    dbg.stop();
    auto b = x * 3;  // not observed
    dbg.step();
    dbg.start();
    auto c = x * 4;
    dbg.step();
    dbg.stop();
    CHECK(PrecisionDebugger::current() == nullptr);
  }
  auto ops = read_ops(dir);
  REQUIRE(ops.size() == 2);
  CHECK(ops[0].step == 0);
  CHECK(ops[1].step == 2);
  CHECK(ops[1].name() == "aten::mul.0.forward");
  CHECK(ops[1].inputs[1].value == "4");
  std::ifstream meta((dir.path() / "rank0" / "meta.json").string());
  std::string text((std::istreambuf_iterator<char>(meta)), std::istreambuf_iterator<char>());
  CHECK(text.find("\"stopped\"") != std::string::npos);
  CHECK(text.find("\"ops_recorded\": 2") != std::string::npos);
}

TEST_CASE("configuration errors surface at construction", "[debugger]") {
  TempDir dir("dbg_config");
  SECTION("a bad PRECPROBE_CONFIG") {
    std::string path = dir / "bad.json";
    precprobe::test::write_bytes(path, R"({"task": "statistcs", "dump_path": "x"})");
    precprobe::test::ScopedEnv env("PRECPROBE_CONFIG", path);
    CHECK_THROWS_AS(PrecisionDebugger(DebuggerOptions{}), Error);
  }
  SECTION("a missing config file") {
    CHECK_THROWS_AS(PrecisionDebugger(dir / "missing.json"), Error);
  }
  SECTION("a bad name-regex") {
    auto o = options_in(dir);
    o.list = {"name-regex(([)"};
    CHECK_THROWS_AS(PrecisionDebugger(o), Error);
  }
  SECTION("PRECPROBE_CONFIG overrides the options given") {
    std::string path = dir / "good.json";
    precprobe::test::write_bytes(
        path, R"({"task": "statistics", "dump_path": ")" + (dir / "d") + R"(", "level": "L2"})");
    precprobe::test::ScopedEnv env("PRECPROBE_CONFIG", path);
    PrecisionDebugger dbg(options_in(dir));
    CHECK(dbg.options().level == Level::kL2);
    CHECK(dbg.options().dump_path == dir / "d");
  }
  SECTION("a second started debugger") {
    PrecisionDebugger one(options_in(dir));
    TempDir other("dbg_config2");
    PrecisionDebugger two(options_in(other));
    one.start();
    CHECK_THROWS_AS(two.start(), Error);
    one.stop();
    two.start();
    CHECK(PrecisionDebugger::current() == &two);
  }
}

TEST_CASE("the gradient monitor sees each step's gradients before zero_grad clears them",
          "[debugger][grads]") {
  TempDir dir("dbg_grads");
  torch::manual_seed(1);
  Net net;
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  auto x = torch::randn({5, 4});
  auto o = options_in(dir);
  o.grad_monitor = true;
  std::vector<double> expected;  // ||grad of fc1.weight|| per step
  {
    PrecisionDebugger dbg(o);
    dbg.start(net);
    for (int s = 0; s < 3; ++s) {
      auto loss = net->forward(x).pow(2).sum();
      loss.backward();
      expected.push_back(net->fc1->weight.grad().norm().item<double>());
      opt.step();
      opt.zero_grad();  // before dbg.step(): the monitor must have read the grads already
      dbg.step();
    }
    dbg.stop();
  }
  DumpReader reader(dir.path().string());
  auto grads = reader.grads();
  std::vector<double> got;
  for (const auto& g : grads)
    if (g.param == "fc1.weight") got.push_back(g.grad_norm);
  REQUIRE(got.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(got[i] == Approx(expected[i]).epsilon(1e-6));
  CHECK(expected[0] > 0);
  for (const auto& g : grads) CHECK((g.param == "fc1.weight" || g.param == "fc1.bias"));
}

TEST_CASE("gradient accumulation inside the autograd engine is backward", "[debugger]") {
  TempDir dir("dbg_accum");
  auto x = torch::randn({6}, torch::requires_grad());
  {
    PrecisionDebugger dbg(options_in(dir));
    dbg.start();
    auto y = x * 2;
    auto z = (y * 3 + y.sin()).sum();  // two gradients for y meet in the engine
    z.backward();
    dbg.step();
    dbg.stop();
  }
  auto ops = read_ops(dir);
  auto first_bw = std::find_if(ops.begin(), ops.end(),
                               [](const OpRecord& r) { return r.dir == Direction::kBackward; });
  REQUIRE(first_bw != ops.end());
  for (auto it = first_bw; it != ops.end(); ++it) {
    INFO(it->name());
    CHECK(it->dir == Direction::kBackward);
    CHECK(!it->node.empty());
  }
  // y's node (linked to y = x * 2 by its sequence number) receives the sum of both
  // gradients: 3 + cos(y).
  auto mul = with_name(ops, "aten::mul");
  REQUIRE(mul.size() == 2);
  const OpRecord* node = nullptr;
  for (const auto& r : ops)
    if (r.op == r.node && r.seqnr == mul[0].seqnr) node = &r;  // the node record itself
  REQUIRE(node != nullptr);
  CHECK(node->op.rfind("MulBackward", 0) == 0);
  auto ref = precprobe::test::reference(3 + torch::cos(x.detach() * 2));
  CHECK(node->inputs.at(0).tensor->norm == Approx(ref.norm).epsilon(1e-6));
  CHECK(node->inputs.at(0).tensor->min == Approx(ref.min).epsilon(1e-6));
}

TEST_CASE("start seeds when the config names a seed and forces dropout to p=0",
          "[debugger][repro]") {
  TempDir dir("dbg_seed");
  auto o = options_in(dir);
  o.seed = 4321;
  o.keep_dropout = false;
  auto x = torch::ones({1000});
  PrecisionDebugger dbg(o);
  dbg.start();
  auto r1 = torch::rand({4});
  auto kept = torch::dropout(x, 0.5, /*train=*/true);
  CHECK(torch::equal(kept, x));  // p = 0 while started
  dbg.stop();
  auto dropped = torch::dropout(x, 0.5, /*train=*/true);
  CHECK(dropped.eq(0).sum().item<int64_t>() > 100);  // back to normal after stop
  torch::manual_seed(4321);
  CHECK(torch::equal(r1, torch::rand({4})));  // start() seeded the generator with 4321
  const std::string meta =
      precprobe::test::read_bytes((dir.path() / "rank0" / "meta.json").string());
  CHECK(meta.find("\"seed_report\"") != std::string::npos);
  CHECK(meta.find("4321") != std::string::npos);
}

TEST_CASE("forward ops carry their grad mode: an evaluation inside a step is told apart",
          "[debugger][checklist]") {
  struct DropNet : torch::nn::Module {
    DropNet() {
      fc1 = register_module("fc1", torch::nn::Linear(4, 8));
      fc2 = register_module("fc2", torch::nn::Linear(8, 2));
    }
    torch::Tensor forward(const torch::Tensor& x) {
      return fc2(torch::dropout(torch::relu(fc1(x)), 0.5, is_training()));
    }
    torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  };
  // 12 training steps; at steps 4 and 9 an evaluation under NoGradGuard inside the step, with
  // model->eval() or (the planted bug) without.
  auto run = [](bool eval_mode, TempDir& dir) {
    torch::manual_seed(0);
    auto net = std::make_shared<DropNet>();
    torch::optim::SGD opt(net->parameters(), 0.01);
    PrecisionDebugger dbg(options_in(dir));
    dbg.start(net);
    for (int step = 0; step < 12; ++step) {
      auto loss = torch::mse_loss(net->forward(torch::randn({16, 4})), torch::zeros({16, 2}));
      opt.zero_grad();
      loss.backward();
      opt.step();
      if (step % 5 == 4) {
        torch::NoGradGuard no_grad;
        if (eval_mode) net->eval();
        net->forward(torch::randn({32, 4}));
        net->train();
      }
      dbg.step();
    }
    dbg.stop();
  };
  TempDir good("dbg_grad_mode"), bad("dbg_grad_mode_bad");
  run(true, good);
  run(false, bad);
  DumpReader reader(good.path().string());
  CHECK(reader.ranks().front().meta->ops_grad_mode == true);
  const auto ops = reader.ops();
  const auto drops = with_name(ops, "aten::dropout");
  REQUIRE(drops.size() == 12 + 2);
  int64_t off = 0;
  for (const OpRecord& r : drops) {
    REQUIRE(r.grad.has_value());
    off += *r.grad ? 0 : 1;
    if (!*r.grad) CHECK(r.inputs[2].value == "false");  // model.eval() ran
  }
  CHECK(off == 2);
  for (const OpRecord& r : ops)
    if (r.dir == Direction::kBackward) CHECK_FALSE(r.grad.has_value());
  const auto mode = [](TempDir& dir) {
    DumpReader r(dir.path().string());
    const ChecklistResult c = run_checklist(r);
    const CheckItem* item = c.find("api.train_eval_mode");
    REQUIRE(item != nullptr);
    INFO(item->evidence);
    return item->verdict;
  };
  CHECK(mode(good) == Verdict::kOk);
  CHECK(mode(bad) == Verdict::kProblem);
}
