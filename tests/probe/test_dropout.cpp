// DropoutGuard: every dropout variant is the identity (forward and backward) while a guard
// lives, and random again afterwards; nesting; which threads it covers; a taken key.
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "precprobe/dropout.h"
#include "precprobe/error.h"
#include "precprobe_catch.h"
#include "probe/repro_run.h"

namespace F = torch::nn::functional;

namespace {

constexpr double kP = 0.5;

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) {
    return false;
  }
  auto ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

struct Variant {
  std::string name;
  std::vector<int64_t> shape;
  // Applies the dropout to a tensor derived from the leaf (in-place variants need a
  // non-leaf), in training mode.
  std::function<at::Tensor(at::Tensor)> apply;
};

std::vector<Variant> variants() {
  // 4096 elements (or channels x 64): the chance that p = 0.5 drops nothing is 2^-64 or less.
  const std::vector<int64_t> flat{64, 64}, d2{4, 64, 4, 4}, d3{2, 64, 2, 4, 4};
  auto module = [](auto m) {
    m->train();
    return [m](const at::Tensor& x) mutable { return m->forward(x); };
  };
  std::vector<Variant> v;
  v.push_back({"nn::Dropout", flat, module(torch::nn::Dropout(kP))});
  v.push_back({"nn::Dropout inplace", flat,
               module(torch::nn::Dropout(torch::nn::DropoutOptions(kP).inplace(true)))});
  v.push_back({"nn::Dropout2d", d2, module(torch::nn::Dropout2d(kP))});
  v.push_back({"nn::Dropout3d", d3, module(torch::nn::Dropout3d(kP))});
  v.push_back({"nn::AlphaDropout", flat, module(torch::nn::AlphaDropout(kP))});
  v.push_back({"nn::FeatureAlphaDropout", d2, module(torch::nn::FeatureAlphaDropout(kP))});
  v.push_back({"torch::dropout", flat, [](at::Tensor x) { return torch::dropout(x, kP, true); }});
  v.push_back({"torch::dropout_", flat, [](at::Tensor x) { return torch::dropout_(x, kP, true); }});
  v.push_back({"torch::feature_dropout", d2,
               [](at::Tensor x) { return torch::feature_dropout(x, kP, true); }});
  v.push_back({"torch::feature_dropout_", d2,
               [](at::Tensor x) { return torch::feature_dropout_(x, kP, true); }});
  v.push_back({"torch::alpha_dropout", flat,
               [](at::Tensor x) { return torch::alpha_dropout(x, kP, true); }});
  v.push_back({"torch::alpha_dropout_", flat,
               [](at::Tensor x) { return torch::alpha_dropout_(x, kP, true); }});
  v.push_back({"torch::feature_alpha_dropout", d2,
               [](at::Tensor x) { return torch::feature_alpha_dropout(x, kP, true); }});
  v.push_back({"torch::feature_alpha_dropout_", d2,
               [](at::Tensor x) { return torch::feature_alpha_dropout_(x, kP, true); }});
  v.push_back({"F::dropout", flat,
               [](at::Tensor x) { return F::dropout(x, F::DropoutFuncOptions().p(kP)); }});
  v.push_back({"F::dropout inplace", flat, [](at::Tensor x) {
                 return F::dropout(x, F::DropoutFuncOptions().p(kP).inplace(true));
               }});
  v.push_back({"F::dropout2d", d2,
               [](at::Tensor x) { return F::dropout2d(x, F::Dropout2dFuncOptions().p(kP)); }});
  v.push_back({"F::dropout3d", d3,
               [](at::Tensor x) { return F::dropout3d(x, F::Dropout3dFuncOptions().p(kP)); }});
  v.push_back({"F::alpha_dropout", flat, [](at::Tensor x) {
                 return F::alpha_dropout(x, F::AlphaDropoutFuncOptions().p(kP).training(true));
               }});
  v.push_back({"F::feature_alpha_dropout", d2, [](at::Tensor x) {
                 return F::feature_alpha_dropout(
                     x, F::FeatureAlphaDropoutFuncOptions().p(kP).training(true));
               }});
  v.push_back({"at::native_dropout", flat,
               [](at::Tensor x) { return std::get<0>(at::native_dropout(x, kP, true)); }});
  return v;
}

struct Outcome {
  at::Tensor input, output, grad;
};

// y = variant(x * 1) for x ~ U(1, 2) (no zeros, so a dropped element shows), then
// sum(y).backward(): x.grad is d sum / dx, all ones exactly when dropout is the identity.
Outcome run(const Variant& v) {
  auto x = torch::rand(v.shape, torch::kFloat).add_(1).requires_grad_(true);
  auto in = x * 1;  // a non-leaf copy: in-place variants may write into it
  const auto before = in.detach().clone();
  auto y = v.apply(in);
  y.sum().backward();
  return {before, y.detach(), x.grad()};
}

}  // namespace

TEST_CASE("while a guard lives every dropout variant is the identity, forward and backward",
          "[dropout]") {
  precprobe::DropoutGuard guard;
  REQUIRE(precprobe::DropoutGuard::active());
  for (const auto& v : variants()) {
    INFO(v.name);
    auto o = run(v);
    CHECK(bitwise_equal(o.output, o.input));
    REQUIRE(o.grad.defined());
    CHECK(bitwise_equal(o.grad, torch::ones_like(o.grad)));
  }
  // native_dropout's mask keeps everything.
  auto mask = std::get<1>(at::native_dropout(torch::ones({1000}), kP, true));
  CHECK(mask.all().item<bool>());
}

#if TORCH_VERSION_MAJOR >= 2
TEST_CASE("while a guard lives attention's dropout_p is 0, in the fused kernel too", "[dropout]") {
  // nn.MultiheadAttention of LibTorch 2.x's Python trains through scaled_dot_product_attention
  // with dropout_p, applied inside the kernel: no aten::dropout to catch.
  torch::manual_seed(7);
  const auto q = torch::randn({2, 4, 16, 8}), k = torch::randn({2, 4, 16, 8}),
             v = torch::randn({2, 4, 16, 8});
  const auto exact = at::scaled_dot_product_attention(q, k, v, {}, 0.0);
  {
    precprobe::DropoutGuard guard;
    CHECK(at::allclose(at::scaled_dot_product_attention(q, k, v, {}, kP), exact, 1e-6, 1e-6));
  }
  // Without the guard the same call drops: the test can tell.
  CHECK_FALSE(at::allclose(at::scaled_dot_product_attention(q, k, v, {}, kP), exact, 1e-6, 1e-6));
}
#endif

TEST_CASE("while a guard lives an LSTM's dropout between layers is 0, forward and backward",
          "[dropout]") {
  torch::manual_seed(11);
  torch::nn::LSTM dropping(torch::nn::LSTMOptions(6, 8).num_layers(3).dropout(kP));
  torch::nn::LSTM exact(torch::nn::LSTMOptions(6, 8).num_layers(3).dropout(0.0));
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < exact->parameters().size(); ++i)
      exact->parameters()[i].copy_(dropping->parameters()[i]);
  }
  const auto x = torch::randn({5, 2, 6});
  auto want = std::get<0>(exact->forward(x));
  want.sum().backward();
  {
    precprobe::DropoutGuard guard;
    auto got = std::get<0>(dropping->forward(x));
    got.sum().backward();
    CHECK(bitwise_equal(got, want));
    for (size_t i = 0; i < exact->parameters().size(); ++i)
      CHECK(bitwise_equal(dropping->parameters()[i].grad(), exact->parameters()[i].grad()));
  }
  // Without the guard the same LSTM drops between its layers: the test can tell.
  CHECK_FALSE(bitwise_equal(std::get<0>(dropping->forward(x)), want));
}

// Every aten op of the running LibTorch that takes a dropout probability, read from the
// dispatcher's schemas here; each one is guarded, or named below with why it is not. A
// LibTorch that adds an op taking `p`, `dropout_p` or `dropout` fails this test until the
// op is understood.
TEST_CASE("the guard covers every op of this LibTorch that applies a dropout", "[dropout]") {
  const std::vector<std::string> guarded = precprobe::DropoutGuard::guarded_ops();
  const std::set<std::string> covered(guarded.begin(), guarded.end());
  // `p` that is not a dropout probability.
  const std::set<std::string> other_p = {
      "cdist",          "_cdist_forward",  "_cdist_backward",   "pdist",
      "_pdist_forward", "_pdist_backward", "pairwise_distance", "triplet_margin_loss",
      "bernoulli",      "bernoulli_",      "geometric",         "geometric_"};
  // Take a dropout probability without applying one in a forward pass.
  const std::set<std::string> not_applied = {"_fused_sdp_choice", "_cudnn_init_dropout_state",
                                             "_fill_mem_eff_dropout_mask_"};
  auto& dispatcher = c10::Dispatcher::singleton();
  int seen = 0;
  for (const auto& op : dispatcher.getAllOpNames()) {
    if (op.name.rfind("aten::", 0) != 0) continue;
    const auto handle = dispatcher.findSchema(op);
    if (!handle) continue;
    bool takes_probability = false;
    for (const auto& arg : handle->schema().arguments())
      takes_probability |=
          arg.type()->kind() == c10::TypeKind::FloatType &&
          (arg.name() == "p" || arg.name() == "dropout_p" || arg.name() == "dropout");
    if (!takes_probability) continue;
    const std::string base = op.name.substr(6);
    const std::string full = op.name + (op.overload_name.empty() ? "" : "." + op.overload_name);
    const bool backward = base.size() > 9 && base.compare(base.size() - 9, 9, "_backward") == 0;
    INFO(full);
    if (other_p.count(base) || not_applied.count(base) || backward) {
      CHECK(covered.count(full) == 0);
    } else {
      CHECK(covered.count(full) == 1);
      ++seen;
    }
  }
  // dropout, feature_/alpha_ variants and their in-place forms, native_dropout, lstm, gru, ...
  CHECK(seen >= 20);
  CHECK(covered.count("aten::dropout") == 1);
  CHECK(covered.count("aten::lstm.input") == 1);
  CHECK(static_cast<int>(covered.size()) == seen);
}

TEST_CASE("after the guard, dropout is random again with scale 1/(1-p)", "[dropout]") {
  { precprobe::DropoutGuard guard; }
  REQUIRE_FALSE(precprobe::DropoutGuard::active());
  for (const auto& v : variants()) {
    INFO(v.name);
    auto o = run(v);
    CHECK_FALSE(bitwise_equal(o.output, o.input));
    CHECK_FALSE(bitwise_equal(o.grad, torch::ones_like(o.grad)));
    if (v.name.find("lpha") == std::string::npos) {  // alpha and Alpha
      // Inputs are in [1, 2): a zero is a dropped element; the rest are scaled by exactly
      // 1/(1-p) = 2 (a power of two, so exact in float).
      auto dropped = o.output.eq(0);
      CHECK(dropped.any().item<bool>());
      CHECK_FALSE(dropped.all().item<bool>());
      auto kept = dropped.logical_not();
      CHECK(bitwise_equal(o.output.masked_select(kept), o.input.masked_select(kept) * 2));
    }
  }
  // Plain dropout of ones, p = 0.5: survivors are exactly 1/(1-p) = 2, the rest 0, and
  // about half survive (4096 draws: 5 sigma is +-160).
  auto y = torch::dropout(torch::ones({4096}), kP, true);
  const auto zeros = y.eq(0).sum().item<int64_t>();
  const auto twos = y.eq(2).sum().item<int64_t>();
  CHECK(zeros + twos == 4096);
  CHECK(zeros > 2048 - 160);
  CHECK(zeros < 2048 + 160);
  // p = 0.2: survivors scaled by 1/0.8, computed in float.
  auto z = torch::dropout(torch::ones({4096}), 0.2, true);
  auto kept = z.masked_select(z.ne(0));
  CHECK(kept.numel() > 0);
  CHECK(kept.numel() < 4096);
  CHECK(torch::allclose(kept, torch::full_like(kept, 1.0 / 0.8), 1e-6, 0));
}

TEST_CASE("nested guards: dropout returns only when the outermost guard is gone", "[dropout]") {
  auto is_identity = [] {
    auto x = torch::ones({4096});
    return bitwise_equal(torch::dropout(x, kP, true), x);
  };
  CHECK(precprobe::DropoutGuard::depth() == 0);
  CHECK_FALSE(is_identity());
  {
    precprobe::DropoutGuard outer;
    CHECK(precprobe::DropoutGuard::depth() == 1);
    {
      precprobe::DropoutGuard inner;
      CHECK(precprobe::DropoutGuard::depth() == 2);
      CHECK(is_identity());
    }
    CHECK(precprobe::DropoutGuard::depth() == 1);
    CHECK(precprobe::DropoutGuard::active());
    CHECK(is_identity());
  }
  CHECK(precprobe::DropoutGuard::depth() == 0);
  CHECK_FALSE(precprobe::DropoutGuard::active());
  CHECK_FALSE(is_identity());

  // Destroyed out of order (heap-held guards): still balanced.
  auto a = std::make_unique<precprobe::DropoutGuard>();
  auto b = std::make_unique<precprobe::DropoutGuard>();
  a.reset();
  CHECK(is_identity());
  b.reset();
  CHECK_FALSE(is_identity());
}

TEST_CASE("at::launch inherits the guard; a plain std::thread does not", "[dropout][threads]") {
  precprobe::DropoutGuard guard;
  auto probe = [] {
    auto x = torch::ones({4096});
    return std::make_pair(precprobe::DropoutGuard::active(),
                          bitwise_equal(torch::dropout(x, kP, true), x));
  };
  std::promise<std::pair<bool, bool>> launched;
  auto launched_result = launched.get_future();
  at::launch([&] { launched.set_value(probe()); });
  const auto l = launched_result.get();
  CHECK(l.first);
  CHECK(l.second);

  std::pair<bool, bool> plain;
  std::thread([&] { plain = probe(); }).join();
  CHECK_FALSE(plain.first);
  CHECK_FALSE(plain.second);
  // A guard made inside the thread covers it.
  std::thread([&] {
    precprobe::DropoutGuard own;
    plain = probe();
  }).join();
  CHECK(plain.first);
  CHECK(plain.second);
}

TEST_CASE("the backward of a guarded forward, run after the guard is gone, is the identity",
          "[dropout]") {
  // The graph recorded p = 0, so backward needs no guard.
  auto x = torch::rand({64, 64}).add_(1).requires_grad_(true);
  at::Tensor y;
  {
    precprobe::DropoutGuard guard;
    y = torch::dropout(x, kP, true) * 3;
  }
  y.sum().backward();
  CHECK(bitwise_equal(x.grad(), torch::full_like(x, 3)));
}

TEST_CASE("a guard fails with precprobe::Error when another library holds the key",
          "[dropout][error]") {
  // In a separate process: a fallback on the key cannot be taken back from this one.
  auto run = precprobe_test::run_helper("--conflict");
  CHECK(run.status == 0);
  // Both attempts fail the same way (the failure is remembered, not retried into a crash).
  const auto first = run.output.find("error DropoutGuard: another library already registered");
  REQUIRE(first != std::string::npos);
  CHECK(run.output.find("error DropoutGuard: another library", first + 1) != std::string::npos);
  CHECK(run.output.find("TESTING_ONLY_GenericMode") != std::string::npos);
  CHECK(run.output.find("no error") == std::string::npos);
}
