// compare across a real port (docs/cli.md, "Differences made by ops of one run only"): a data
// pipeline written otherwise on each side, a difference born in ops of one run only, a number
// Python wraps as a 0-d tensor, an optimizer's constant named with its parameter, random ops
// whose draws differ, the same function spelled otherwise, and --by module agreeing with
// --first. Synthetic records shaped as the records of tests/ports' pairs are.
#include <cmath>
#include <sstream>

#include "analysis_fixtures.h"
#include "core/compare_check.h"
#include "precprobe_catch.h"

using namespace precprobe;
using namespace precprobe::test;

namespace {

Arg shaped(Arg a, std::vector<int64_t> shape) {
  a.tensor->shape = std::move(shape);
  return a;
}
Arg named(Arg a, const std::string& param) {
  a.tensor->param = param;
  return a;
}
// A number as Python passes it to a Tensor overload: a 0-d double tensor.
Arg wrapped(double v) { return shaped(targ({v}), {}); }

CompareOptions first_mode() {
  CompareOptions o;
  o.first = true;
  return o;
}

// The data pipeline of each side, then conv1. Python: ToTensor's division by 255 (a wrapped
// number), Normalize's sub_ and div_; LibTorch: a dataset that divided by 255 before the loop,
// then Normalize's sub and div. `mean_b`, `std_b`: LibTorch's constants; `normalize_b`: whether
// LibTorch normalizes at all.
std::pair<DumpData, DumpData> pipeline(double mean_b, double std_b, bool normalize_b) {
  const std::vector<double> raw = {0, 51, 255}, x01 = {0, 0.2, 1};
  const double mean = 0.2860, sd = 0.3530;
  auto normalized = [](const std::vector<double>& x, double m, double s) {
    std::vector<double> sub, div;
    for (double v : x) {
      sub.push_back(v - m);
      div.push_back((v - m) / s);
    }
    return std::pair{sub, div};
  };
  const auto [sub_a, div_a] = normalized(x01, mean, sd);
  const auto [sub_b, div_b] = normalized(x01, mean_b, std_b);
  const Arg w = named(targ({0.5, -0.25, 0.125}), "conv1.weight");
  auto conv = [&](const std::vector<double>& x) {
    double y = 0;
    for (size_t k = 0; k < x.size(); ++k) y += x[k] * w.tensor->max * (k == 0 ? 1 : 0.5);
    return targ({y});
  };
  DumpData a, b;
  add_step(a, 0, 0,
           {{"aten::to", 0, {shaped(targ(raw), {3}), varg("6")}, {targ({0, 51, 255})}},
            {"aten::div", 1, {targ({0, 51, 255}), wrapped(255)}, {targ(x01)}},
            {"aten::clone", 2, {targ(x01)}, {targ(x01)}},
            {"aten::sub_", 3, {targ(x01), shaped(targ({mean}), {1, 1, 1})}, {targ(sub_a)}},
            {"aten::div_", 4, {targ(sub_a), shaped(targ({sd}), {1, 1, 1})}, {targ(div_a)}},
            {"aten::conv2d", 5, {targ(div_a), w}, {conv(div_a)}}});
  if (normalize_b) {
    add_step(b, 0, 0,
             {{"aten::sub", 0, {targ(x01), shaped(targ({mean_b}), {1, 1, 1})}, {targ(sub_b)}},
              {"aten::div", 1, {targ(sub_b), shaped(targ({std_b}), {1, 1, 1})}, {targ(div_b)}},
              {"aten::conv2d", 2, {targ(div_b), w}, {conv(div_b)}}});
  } else {
    add_step(b, 0, 0, {{"aten::conv2d", 0, {targ(x01), w}, {conv(x01)}}});
  }
  return {a, b};
}

}  // namespace

TEST_CASE("compare: a data pipeline written otherwise, the same batch, is no divergence",
          "[analysis][compare][ports]") {
  auto [a, b] = pipeline(0.2860, 0.3530, true);
  CompareOptions opt = first_mode();
  opt.by_module = true;
  const CompareResult r = test::compare_checked(a, b, opt);
  CHECK_FALSE(r.found);
  CHECK(r.divergent_ops == 0);
  CHECK(r.divergent_places.empty());
  // sub_ against sub, div_ against div (in place or not), conv2d: compared; ToTensor's to,
  // div and the clone: Python's only, listed.
  CHECK(r.matched == 3);
  CHECK(r.unmatched.size() == 3);
  for (const ModuleCompare& m : r.modules) CHECK(m.divergent == 0);
}

TEST_CASE("compare: a normalization constant the port got wrong is named in the data",
          "[analysis][compare][ports]") {
  auto [a, b] = pipeline(0.2680, 0.3530, true);  // the mean's digits swapped
  CompareOptions opt = first_mode();
  opt.by_module = true;
  const CompareResult r = test::compare_checked(a, b, opt);
  REQUIRE(r.found);
  CHECK(r.first->op == "aten::sub_");
  CHECK(r.first->module == "(top level)");  // the data pipeline, before the model
  CHECK(r.first->step == 0);
  // The mean is a tensor both sides made before the loop: not the same start.
  CHECK(r.first->cause == "before_step");
  REQUIRE(r.first->args.size() >= 2);
  CHECK_FALSE(r.first->args[1].exact);
  // --by module names the same op first.
  const ModuleCompare* firstmod = nullptr;
  for (const ModuleCompare& m : r.modules)
    if (m.first_divergent &&
        (!firstmod || m.first_divergent->seq_a < firstmod->first_divergent->seq_a))
      firstmod = &m;
  REQUIRE(firstmod != nullptr);
  CHECK(firstmod->module == "(top level)");
  CHECK(firstmod->first_divergent->name == r.first->name);
}

TEST_CASE("compare: a transform one side lacks is reported where its difference enters the model",
          "[analysis][compare][ports]") {
  auto [a, b] = pipeline(0.2860, 0.3530, false);
  CompareOptions opt = first_mode();
  opt.by_module = true;
  const CompareResult r = test::compare_checked(a, b, opt);
  REQUIRE(r.found);
  CHECK(r.first->op == "aten::conv2d");
  CHECK(r.first->cause == "data");
  CHECK(r.first->module == "conv1");
  // Python's Normalize made the difference, nearest first; LibTorch ran nothing there.
  REQUIRE(r.first->made_by_a.size() >= 2);
  CHECK(r.first->made_by_a[0] == "aten::div_.0.forward");
  CHECK(r.first->made_by_a[1] == "aten::sub_.0.forward");
  CHECK(r.first->made_by_b.empty());
  CHECK(r.divergent_ops == 1);  // one op to read, not the whole model
  bool in_modules = false;
  for (const ModuleCompare& m : r.modules) in_modules = in_modules || m.divergent > 0;
  CHECK(in_modules);
  // The same pair without the debugger's start difference: identical data, no divergence.
  auto [c, e] = pipeline(0.2860, 0.3530, true);
  CHECK_FALSE(test::compare_checked(c, e, first_mode()).found);
}

TEST_CASE("compare: a difference made by ops of one run only within their rounding is noise",
          "[analysis][compare][ports]") {
  // torch.exp(x * (1/3)) in Python (the third a wrapped number) against x.div(3).exp_() in
  // C++: the quotients one float32 ulp apart, then the same exp.
  const double third = 1.0 / 3.0;
  const double qa = 1.0, qb = 1.0 + std::ldexp(1.0, -23);
  DumpData a, b;
  const Arg x = targ({3.0});
  add_step(a, 0, 0,
           {{"aten::mul", 0, {x, wrapped(third)}, {targ({qa})}},
            {"aten::exp", 1, {targ({qa})}, {targ({std::exp(qa)})}}});
  add_step(b, 0, 0,
           {{"aten::div", 0, {x, varg("3")}, {targ({qb})}},
            {"aten::exp_", 1, {targ({qb})}, {targ({std::exp(qb)})}}});
  const CompareResult r = test::compare_checked(a, b, first_mode());
  CHECK_FALSE(r.found);
  REQUIRE(r.ops.size() == 1);
  CHECK(r.ops[0].op == "aten::exp");
  CHECK(r.ops[0].classification == "noise");
  // Beyond rounding (x / 2.9 in the port): reported at the exp, made by the div.
  DumpData c;
  add_step(c, 0, 0,
           {{"aten::div", 0, {x, varg("2.9")}, {targ({3.0 / 2.9})}},
            {"aten::exp_", 1, {targ({3.0 / 2.9})}, {targ({std::exp(3.0 / 2.9)})}}});
  const CompareResult d = test::compare_checked(a, c, first_mode());
  REQUIRE(d.found);
  CHECK(d.first->op == "aten::exp");
  CHECK(d.first->cause == "data");  // before any parameter
  CHECK(d.first->made_by_a == std::vector<std::string>{"aten::mul.0.forward"});
  CHECK(d.first->made_by_b == std::vector<std::string>{"aten::div.0.forward"});
}

TEST_CASE("compare: an optimizer's constant is named at its first effect, with its parameter",
          "[analysis][compare][ports]") {
  // SGD with momentum, step 1: buf.mul_(momentum).add_(grad); param.add_(buf, alpha=-lr).
  // Python passes the momentum to mul_.Tensor as a wrapped 0-d tensor; LibTorch to
  // mul_.Scalar. The port has 0.9 for 0.5.
  auto run = [](bool python, double momentum) {
    DumpData d;
    for (int64_t step = 0; step < 3; ++step) {
      const Arg w = named(targ({1.0 + step, 2.0}), "conv1.weight");
      const Arg w2 = named(targ({3.0 + step, 4.0}), "conv2.weight");
      const Arg g = targ({0.5, 0.25}), buf = targ({0.1 * static_cast<double>(step + 1), 0.2});
      std::vector<double> nb = {buf.tensor->min * momentum + 0.5,
                                buf.tensor->max * momentum + 0.25};
      const Arg m = python ? wrapped(momentum) : varg(std::to_string(momentum));
      add_step(d, step, 0,
               {{"aten::mul_",
                 0,
                 {buf, m},
                 {targ({buf.tensor->min * momentum, buf.tensor->max * momentum})}},
                {"aten::add_",
                 1,
                 {targ({buf.tensor->min * momentum, buf.tensor->max * momentum}), g, varg("1")},
                 {targ(nb)}},
                {"aten::add_",
                 2,
                 {w, targ(nb), varg("-0.01")},
                 {targ({w.tensor->min - 0.01 * nb[0], 2.0 - 0.01 * nb[1]})}},
                {"aten::add_",
                 3,
                 {w2, g, varg("-0.01")},
                 {targ({w2.tensor->min - 0.005, 4.0 - 0.0025})}}});
    }
    for (OpRecord& r : d.ops) r.grad = false;  // optimizer.step() runs under no_grad
    return d;
  };
  CompareOptions opt = first_mode();
  opt.by_module = true;
  const CompareResult same = test::compare_checked(run(true, 0.5), run(false, 0.5), opt);
  CHECK_FALSE(same.found);
  CHECK(same.unmatched.empty());  // mul_.Tensor with a 0-d number pairs with mul_.Scalar
  const CompareResult r = test::compare_checked(run(true, 0.5), run(false, 0.9), opt);
  REQUIRE(r.found);
  CHECK(r.first->op == "aten::mul_");
  CHECK(r.first->step == 0);
  CHECK(r.first->param == "conv1.weight");
  CHECK(r.first->module == "conv1");
  REQUIRE(r.first->args.size() == 3);  // two inputs, the output
  CHECK(r.first->args[1].note.find("0.5 vs 0.9") != std::string::npos);
  CHECK(r.first->args[1].note.find("a constant of the program") != std::string::npos);
}

TEST_CASE("compare: a random op whose inputs are equal and whose draws differ says so",
          "[analysis][compare][ports]") {
  // The VAE's eps = randn_like(std), and an in-place normal_ on a fresh (uninitialised) tensor.
  const Arg sd = targ({0.5, 0.7});
  auto run = [&](std::vector<double> eps, std::vector<double> fresh, std::vector<double> z) {
    DumpData d;
    add_step(d, 0, 0,
             {{"aten::randn_like", 0, {sd, varg("null")}, {targ(eps)}},
              {"aten::normal_", 1, {targ(fresh), varg("0"), varg("1")}, {targ(z)}}});
    return d;
  };
  const CompareResult same = test::compare_checked(
      run({0.1, -0.3}, {1e30, 0}, {0.2, 0.4}), run({0.1, -0.3}, {-7, 3}, {0.2, 0.4}), first_mode());
  CHECK_FALSE(same.found);  // normal_'s input holds garbage: only its shape matters
  const CompareResult r = test::compare_checked(run({0.1, -0.3}, {0, 0}, {0.2, 0.4}),
                                                run({0.9, 1.3}, {0, 0}, {0.2, 0.4}), first_mode());
  REQUIRE(r.found);
  CHECK(r.first->op == "aten::randn_like");
  CHECK(r.first->cause == "draws");
}

TEST_CASE("compare: labels that differ at the start are reported, not inherited",
          "[analysis][compare][ports]") {
  Arg y = targ({1, 2, 3}), y2 = targ({1, 2, 4});
  y.tensor->dtype = y2.tensor->dtype = "Long";
  const Arg logp = targ({-0.1, -2.3, -1.2});
  auto [a, b] = one_op("aten::nll_loss", {logp, y, varg("null"), varg("1"), varg("-100")},
                       {shaped(targ({0.9}), {})}, {logp, y2, varg("null"), varg("1"), varg("-100")},
                       {shaped(targ({1.1}), {})});
  const CompareResult r = test::compare_checked(a, b, first_mode());
  REQUIRE(r.found);
  CHECK(r.first->cause == "before_step");
}

TEST_CASE("compare: dimensions counted from the end are the same only where an op names dims",
          "[analysis][compare][ports]") {
  Arg x = shaped(targ({1, 2, 3, 4}), {2, 2}), y = shaped(targ({1, 1, 1, 1}), {2, 2});
  // sum(x, -1) against sum(x, 1) of a 2-d x: the same dimension.
  auto [a, b] = one_op("aten::sum", {x, varg("[-1]"), varg("false")}, {shaped(targ({3, 7}), {2})},
                       {x, varg("[1]"), varg("false")}, {shaped(targ({3, 7}), {2})});
  const CompareResult r = test::compare_checked(a, b, first_mode());
  CHECK_FALSE(r.found);
  REQUIRE(r.ops.size() == 1);
  CHECK(r.ops[0].args[1].exact);
  // add(x, y, alpha=-1) against alpha=1: -1 + 2 is 1, but an alpha is no dimension.
  auto [c, e] = one_op("aten::add", {x, y, varg("-1")}, {shaped(targ({0, 1, 2, 3}), {2, 2})},
                       {x, y, varg("1")}, {shaped(targ({2, 3, 4, 5}), {2, 2})});
  const CompareResult d = test::compare_checked(c, e, first_mode());
  REQUIRE(d.found);
  CHECK(d.first->args[2].note == "value differs: -1 vs 1");
}

TEST_CASE("compare: ops of one key pair by their constants where the sequences differ",
          "[analysis][compare][ports]") {
  // Adam's moments. Python 2.x: exp_avg.lerp_(g, 1 - b1); exp_avg_sq.mul_(b2).addcmul_(g, g,
  // 1 - b2). LibTorch's C++: exp_avg.mul_(b1).add_(g, 1 - b1); then the same. Every mul_ has
  // one key; the alignment must set mul_(b2) against mul_(b2), not against mul_(b1).
  const std::vector<double> m = {0.1, 0.2}, g = {0.5, 0.25}, v = {0.01, 0.02};
  auto moments = [&](bool python, double b2) {
    std::vector<double> m1, mb1, vb2, v2, q;
    for (size_t k = 0; k < m.size(); ++k) {
      mb1.push_back(0.9 * m[k]);
      m1.push_back(python ? m[k] + 0.1 * (g[k] - m[k]) : 0.9 * m[k] + 0.1 * g[k]);
      vb2.push_back(b2 * v[k]);
      v2.push_back(b2 * v[k] + (1 - b2) * g[k] * g[k]);
      q.push_back(m[k] - 0.001 * m1[k] / std::sqrt(v2[k]));
    }
    auto number = [python](double x) {
      std::ostringstream o;
      o.precision(17);
      o << x;
      return python ? wrapped(x) : varg(o.str());
    };
    // The end of the backward pass, then two parameters' updates as the optimizer's loop runs
    // them (as recorded from Python 2.6's Adam and LibTorch 2.6's, bias corrections aside).
    std::vector<test::OpSpec> ops = {{"aten::detach", 0, {targ(g)}, {targ(g)}}};
    for (int param = 0; param < 2; ++param) {
      auto add = [&ops](std::string op, std::vector<Arg> in, std::vector<double> out) {
        ops.push_back(
            {std::move(op), static_cast<int64_t>(ops.size()), std::move(in), {targ(out)}});
      };
      if (python) {
        add("aten::add_", {wrapped(1.0 + param), wrapped(1)}, {2.0 + param});  // step_t += 1
        add("aten::lerp_", {targ(m), targ(g), wrapped(0.1)}, m1);
      } else {
        add("aten::mul_", {targ(m), varg("0.9")}, mb1);
        add("aten::add_", {targ(mb1), targ(g), varg("0.1")}, m1);
      }
      add("aten::mul_", {targ(v), number(b2)}, vb2);
      add("aten::addcmul_", {targ(vb2), targ(g), targ(g), number(1 - b2)}, v2);
      if (python) add("aten::item", {wrapped(2.0 + param)}, {});
      std::vector<double> sq;
      for (double x : v2) sq.push_back(std::sqrt(x));
      add("aten::sqrt", {targ(v2)}, sq);
      add("aten::addcdiv_", {targ(m), targ(m1), targ(sq), number(-0.001)}, q);
    }
    DumpData d;
    add_step(d, 0, 0, ops);
    for (OpRecord& r : d.ops) r.grad = false;
    return d;
  };
  const CompareResult same =
      test::compare_checked(moments(true, 0.999), moments(false, 0.999), first_mode());
  CHECK_FALSE(same.found);
  bool b2_paired = false;
  for (const OpCompare& o : same.ops)
    if (o.op == "aten::mul_") b2_paired = o.args.size() > 1 && o.args[1].exact;
  CHECK(b2_paired);
  // lerp_ on one side, LibTorch's mul_(b1) and add_ on the other: listed, not compared.
  CHECK(same.unmatched.size() == 10);  // and Python's step_t += 1 and item()
  // The port's b2 is 0.99: named at its mul_, against Python's b2 (the nearest constant).
  const CompareResult r =
      test::compare_checked(moments(true, 0.999), moments(false, 0.99), first_mode());
  REQUIRE(r.found);
  CHECK(r.first->op == "aten::mul_");
  REQUIRE(r.first->args.size() > 1);
  CHECK(r.first->args[1].note.find("0.999 vs 0.99") != std::string::npos);
}

TEST_CASE("compare: a place's last ops are compared only where the next op reads both",
          "[analysis][compare][ports]") {
  // Python 2.x's multi-head attention: proj = linear(x, W); q, k, v = proj[0], proj[1],
  // proj[2]; then q.view(...). LibTorch's C++: t(W), matmul, chunk, q * scaling (1 here, so
  // q is the same value on both sides); then q.view(...). The last ops of the place, v and
  // q * scaling, have one shape and read W in common, but are not one value: the view after
  // the place reads q on both sides.
  const Arg x = targ({1, 2}), w = named(targ({0.5, 1, 1.5, 2, 2.5, 3}), "attn.in_proj_weight");
  const Arg proj = targ({1, 2, 3, 4, 5, 6}), q = targ({1, 2}), k = targ({3, 4}), v = targ({5, 6});
  DumpData a, b;
  add_step(a, 0, 0,
           {{"aten::linear", 0, {x, w}, {proj}},
            {"aten::select", 1, {proj, varg("0"), varg("0")}, {q}},
            {"aten::select", 2, {proj, varg("0"), varg("1")}, {k}},
            {"aten::select", 3, {proj, varg("0"), varg("2")}, {v}},
            {"aten::view", 4, {q, varg("[2, 1]")}, {shaped(targ({1, 2}), {2, 1})}}});
  add_step(b, 0, 0,
           {{"aten::t", 0, {w}, {w}},
            {"aten::matmul", 1, {x, w}, {proj}},
            {"aten::chunk", 2, {proj, varg("3"), varg("-1")}, {q, k, v}},
            {"aten::mul", 3, {q, varg("1")}, {q}},
            {"aten::view", 4, {q, varg("[2, 1]")}, {shaped(targ({1, 2}), {2, 1})}}});
  const CompareResult r = test::compare_checked(a, b, first_mode());
  CHECK_FALSE(r.found);
  CHECK(r.divergent_places.empty());
  // A place whose last ops are what the next op reads is still judged by them: the port
  // scales q by 2 and reads it next, Python reads q unscaled.
  DumpData c;
  add_step(c, 0, 0,
           {{"aten::t", 0, {w}, {w}},
            {"aten::matmul", 1, {x, w}, {proj}},
            {"aten::chunk", 2, {proj, varg("3"), varg("-1")}, {q, k, v}},
            {"aten::mul", 3, {q, varg("2")}, {targ({2, 4})}},
            {"aten::view", 4, {targ({2, 4}), varg("[2, 1]")}, {shaped(targ({2, 4}), {2, 1})}}});
  const CompareResult d = test::compare_checked(a, c, first_mode());
  CHECK(d.found);
}

TEST_CASE("compare: a layer's hyper-parameter is named at its op, with what differs",
          "[analysis][compare][ports]") {
  const Arg w = named(targ({0.5, -0.25}), "conv2.weight"), bias = named(targ({0.1}), "conv2.bias");
  const Arg x = targ({1, 2, 3}), count = shaped(targ({0}), {}), counted = shaped(targ({1}), {});
  const Arg y = targ({0.7, 1.1, 0.2}), after = targ({-0.9, 1.3, -0.4});
  SECTION("padding by reflection: the conv is named, its input shape and padding shown") {
    // BatchNorm's num_batches_tracked += 1 runs between the conv and the batch_norm that
    // reads it: the conv's output is what the computation goes on with all the same.
    DumpData a, b;
    add_step(a, 0, 0,
             {{"aten::conv2d", 0, {x, w, bias, varg("[1,1]"), varg("[1,1]")}, {y}},
              {"aten::add_", 1, {count, varg("1")}, {counted}},
              {"aten::batch_norm", 2, {y}, {after}}});
    const Arg padded = targ({2, 1, 2, 3, 2}), y_b = targ({0.6, 1.2, 0.25});
    add_step(b, 0, 0,
             {{"aten::_pad_enum", 0, {x, varg("[1,1]"), varg("1")}, {padded}},
              {"aten::conv2d", 1, {padded, w, bias, varg("[1,1]"), varg("[0,0]")}, {y_b}},
              {"aten::add_", 2, {count, varg("1")}, {counted}},
              {"aten::batch_norm", 3, {y_b}, {targ({-0.95, 1.35, -0.38})}}});
    const CompareResult r = test::compare_checked(a, b, first_mode());
    REQUIRE(r.found);
    CHECK(r.first->op == "aten::conv2d");
    CHECK(r.first->step == 0);
    std::string notes;
    for (const ArgCompare& ac : r.first->args)
      notes += ac.io + std::to_string(ac.index) + ": " + ac.note + "\n";
    CHECK_THAT(notes, Catch::Matchers::ContainsSubstring("input0: shape differs: [3] vs [5]"));
    CHECK_THAT(notes, Catch::Matchers::ContainsSubstring("input4: value differs: [1,1] vs [0,0]"));
  }
  SECTION("a layer without its bias: named at the layer, the bias read by one run only") {
    const Arg fw = named(targ({0.5, -0.25, 2}), "fc1.weight"), fb = named(targ({0.1}), "fc1.bias");
    DumpData a, b;
    add_step(a, 0, 0,
             {{"aten::linear", 0, {x, fw, fb}, {targ({5.1})}},
              {"aten::relu", 1, {targ({5.1})}, {targ({5.1})}}});
    add_step(b, 0, 0,
             {{"aten::t", 0, {fw}, {fw}},
              {"aten::matmul", 1, {x, fw}, {targ({5.0})}},
              {"aten::relu", 2, {targ({5.0})}, {targ({5.0})}}});
    const CompareResult r = test::compare_checked(a, b, first_mode());
    REQUIRE(r.found);
    CHECK(r.first->op == "aten::linear");
    REQUIRE_FALSE(r.first->args.empty());
    CHECK_THAT(
        r.first->args.front().note,
        Catch::Matchers::ContainsSubstring("parameters read by one run only: fc1.bias (A only)"));
  }
}
