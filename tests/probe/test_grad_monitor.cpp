// GradMonitor: statistics against float64 recomputation, update ratios, parameter names and
// the records' round trip through a dump. The watchpoints: test_grad_watchpoints.cpp.
#include <cmath>
#include <filesystem>

#include "precprobe/reader.h"
#include "precprobe/writer.h"
#include "support/grad_monitor_test.h"

namespace {

// Reference statistics of a gradient, from ATen in float64 with explicit masks.
struct RefStats {
  double norm, abs_max, abs_mean;
  int64_t nan, inf;
};

RefStats reference(const torch::Tensor& grad) {
  auto g = (grad.is_sparse() ? grad.to_dense() : grad).to(torch::kDouble);
  auto fin = g.isfinite();
  auto a = g.masked_select(fin).abs();
  RefStats r{};
  r.norm = std::sqrt(a.square().sum().item<double>());
  r.abs_max = a.numel() > 0 ? a.max().item<double>() : 0.0;
  r.abs_mean = a.numel() > 0 ? a.mean().item<double>() : 0.0;
  r.nan = g.isnan().sum().item<int64_t>();
  r.inf = g.isinf().sum().item<int64_t>();
  return r;
}

}  // namespace

TEST_CASE("gradient statistics match a float64 recomputation", "[monitor]") {
  torch::manual_seed(1);
  std::vector<std::pair<std::string, torch::Tensor>> named;
  auto add = [&](const char* name, torch::Tensor p, torch::Tensor g) {
    p.set_requires_grad(true);
    p.mutable_grad() = g;
    named.emplace_back(name, p);
  };
  auto special = torch::randn({5, 7});
  special[0][0] = kNaN;
  special[1][1] = kInf;
  special[2][2] = -kInf;
  special[3][3] = 0.0f;
  special[4][4] = -0.0f;
  add("special", torch::zeros({5, 7}), special);
  add("transposed", torch::zeros({7, 5}), special.t());  // dense, not contiguous
  auto wide = torch::randn({6, 10});
  add("strided", torch::zeros({6, 5}), wide.slice(1, 0, 10, 2));  // not dense
  add("bf16", torch::zeros({33}, torch::kBFloat16), torch::randn({33}).to(torch::kBFloat16));
  add("double", torch::zeros({17}, torch::kDouble), torch::randn({17}, torch::kDouble) * 1e30);
  add("half", torch::zeros({9}, torch::kHalf), torch::randn({9}).to(torch::kHalf));
  auto idx = torch::tensor({0, 3, 3}, torch::kLong).reshape({1, 3});
  auto vals = torch::randn({3, 4});
  vals[0][1] = kNaN;
  add("sparse", torch::zeros({6, 4}), torch::sparse_coo_tensor(idx, vals, {6, 4}));
  add("empty", torch::zeros({0}), torch::zeros({0}));
  named.emplace_back("nograd", torch::ones({3}).set_requires_grad(true));

  GradMonitor m(named);
  auto recs = m.observe(7);
  REQUIRE(recs.size() == named.size());
  for (size_t i = 0; i + 1 < named.size(); ++i) {
    INFO(named[i].first);
    const auto& r = recs[i];
    CHECK(r.param == named[i].first);
    CHECK(r.step == 7);
    CHECK(r.has_grad);
    const RefStats ref = reference(named[i].second.grad());
    CHECK(r.grad_norm == Approx(ref.norm).epsilon(1e-12));
    CHECK(r.grad_abs_max == Approx(ref.abs_max).epsilon(1e-15));
    CHECK(r.grad_abs_mean == Approx(ref.abs_mean).epsilon(1e-12));
    CHECK(r.grad_nan == ref.nan);
    CHECK(r.grad_inf == ref.inf);
  }
  CHECK(recs[0].grad_nan == 1);
  CHECK(recs[0].grad_inf == 2);
  CHECK_FALSE(recs.back().has_grad);
  CHECK(recs.back().weight_norm == Approx(std::sqrt(3.0)));
}

TEST_CASE("a complex gradient counts its real and imaginary parts", "[monitor]") {
  torch::manual_seed(3);
  // Real parts all zero, imaginary parts not: not an all-zero gradient (a cast to float kept
  // only the real parts and said it was), and the norm is sqrt(sum |z|^2).
  auto imag = torch::randn({4, 3});
  auto only_imag = torch::complex(torch::zeros({4, 3}), imag);
  auto im = torch::randn({5});
  im[1] = kNaN;
  im[2] = kInf;
  auto special = torch::complex(torch::randn({5}), im);
  auto conj = torch::complex(torch::randn({6}), torch::randn({6})).conj();  // lazy conj bit
  auto zero = torch::zeros({3}, torch::kComplexFloat);
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto [name, g] : {std::make_pair("only_imag", only_imag), std::make_pair("special", special),
                         std::make_pair("conj", conj), std::make_pair("zero", zero)}) {
    auto p = torch::complex(torch::randn(g.sizes()), torch::randn(g.sizes()));
    p.set_requires_grad(true);
    p.mutable_grad() = g;
    named.emplace_back(name, p);
  }
  GradMonitor m(named);
  const auto recs = m.observe(0);
  REQUIRE(recs.size() == named.size());
  for (size_t i = 0; i < named.size(); ++i) {
    INFO(named[i].first);
    const auto& r = recs[i];
    const RefStats ref = reference(torch::view_as_real(named[i].second.grad().resolve_conj()));
    CHECK(r.grad_norm == Approx(ref.norm).epsilon(1e-12));
    CHECK(r.grad_abs_max == Approx(ref.abs_max).epsilon(1e-15));
    CHECK(r.grad_nan == ref.nan);
    CHECK(r.grad_inf == ref.inf);
    const double w_norm = std::sqrt(torch::view_as_real(named[i].second.detach())
                                        .to(torch::kDouble)
                                        .square()
                                        .sum()
                                        .item<double>());
    CHECK(r.weight_norm == Approx(w_norm).epsilon(1e-12));
  }
  const double z_norm = std::sqrt(only_imag.abs().to(torch::kDouble).square().sum().item<double>());
  CHECK(recs[0].grad_norm == Approx(z_norm).epsilon(1e-6));
  CHECK(watches(recs[0]).count("grad_all_zero") == 0);
  CHECK(recs[1].grad_nan == 1);
  CHECK(recs[1].grad_inf == 1);
  CHECK(watches(recs[3]).count("grad_all_zero") == 1);  // both parts zero: it is
}

TEST_CASE("update ratio is ||w_t - w_(t-1)|| / ||w_(t-1)||", "[monitor]") {
  torch::manual_seed(2);
  auto a = torch::randn({4, 4});
  auto b = torch::randn({8}, torch::kDouble);
  auto c = torch::randn({3, 6}).t();  // a non-contiguous parameter
  GradMonitor m({{"a", a}, {"b", b}, {"c", c}});
  auto first = m.observe(0);
  for (const auto& r : first) CHECK(r.update_ratio == 0.0);  // nothing to compare with yet
  CHECK(m.extra_bytes() == 16 * 4 + 8 * 8 + 18 * 4);
  for (int step = 1; step < 4; ++step) {
    std::vector<torch::Tensor> before{a.to(torch::kDouble), b.clone(), c.to(torch::kDouble)};
    {
      torch::NoGradGuard ng;
      a.mul_(1.5).add_(0.25);
      b.add_(torch::randn({8}, torch::kDouble) * 0.01);
      c.add_(torch::ones_like(c) * step);
    }
    auto recs = m.observe(step);
    std::vector<torch::Tensor> now{a.to(torch::kDouble), b, c.to(torch::kDouble)};
    for (size_t i = 0; i < 3; ++i) {
      const double want =
          (now[i] - before[i]).norm().item<double>() / before[i].norm().item<double>();
      CHECK(recs[i].update_ratio == Approx(want).epsilon(1e-12));
      CHECK(recs[i].weight_norm == Approx(now[i].norm().item<double>()).epsilon(1e-12));
    }
  }
  GradMonitorOptions no_ratio;
  no_ratio.update_ratio = false;
  GradMonitor cheap({{"a", a}}, no_ratio);
  cheap.observe(0);
  {
    torch::NoGradGuard ng;
    a.mul_(2);
  }
  CHECK(cheap.observe(1)[0].update_ratio == 0.0);
  CHECK(cheap.extra_bytes() == 0);
}

TEST_CASE("a module's parameters are named as named_parameters() names them", "[monitor]") {
  torch::nn::Sequential model(torch::nn::Linear(3, 4), torch::nn::ReLU(), torch::nn::Linear(4, 1));
  GradMonitor m(*model);
  CHECK(m.size() == 4);
  model->forward(torch::randn({2, 3})).sum().backward();
  auto recs = m.observe(0);
  REQUIRE(recs.size() == 4);
  CHECK(recs[0].param == "0.weight");
  CHECK(recs[3].param == "2.bias");
  CHECK(recs[3].grad_norm == Approx(2.0));  // d(sum)/d(bias) = batch size
}

TEST_CASE("records submitted to a DumpWriter read back from grads.jsonl.zst", "[monitor]") {
  const std::string dir = std::string(PRECPROBE_BINARY_DIR) + "/test_out/monitor_log/rank0";
  std::filesystem::remove_all(dir);
  auto p = torch::ones({4}).set_requires_grad(true);
  GradMonitor m({{"w", p}});
  std::vector<GradRecord> sent;
  {
    precprobe::WriterOptions wo;
    wo.dir = dir;
    precprobe::DumpWriter w(wo);
    w.write_meta("{\"format_version\": 1}");
    for (int step = 0; step < 3; ++step) {
      p.mutable_grad() = torch::full({4}, step == 1 ? 0.0f : 0.5f);
      for (auto& r : m.observe(step, &w)) sent.push_back(r);
    }
    w.close();
  }
  auto got = precprobe::DumpReader(dir).grads();
  REQUIRE(got.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(got[i].step == sent[i].step);
    CHECK(got[i].param == "w");
    CHECK(got[i].grad_norm == sent[i].grad_norm);
    CHECK(got[i].weight_norm == sent[i].weight_norm);
    CHECK(got[i].watch == sent[i].watch);
  }
  CHECK(got[1].watch ==
        std::vector<std::string>{"grad_vanishing", "grad_all_zero", "weight_not_changed"});
}
