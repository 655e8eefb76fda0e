// `precprobe compare --exact` of two seeded CUDA runs: seed_all(1234, deterministic) and the
// same training (an MLP with LayerNorm, GELU, cross-entropy and AdamW on the GPU, 4 steps)
// twice, each under an L1 debugger; the dumps must be bitwise identical (every statistic of
// every op, forward and backward), through compare_dumps and through the CLI.
// A file of its own: seed_all() must set CUBLAS_WORKSPACE_CONFIG before cuBLAS starts in the
// process, which another test case of the same executable would do first.
// Built only with PRECPROBE_WITH_CUDA; needs a GPU (cuda_or_skip()). Written without a GPU:
// scripts/gpu-check.sh runs it on one.
#include <sys/wait.h>
#include <torch/torch.h>

// probe/debugger_fixture.h compares floats exactly (its float64 reference).
#pragma GCC diagnostic ignored "-Wfloat-equal"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "cuda_test_util.h"
#include "precprobe/analysis.h"
#include "precprobe/debugger.h"
#include "precprobe/reader.h"
#include "precprobe/seed.h"
#include "probe/debugger_fixture.h"

using namespace precprobe;
using precprobe::test::cuda_or_skip;
using precprobe::test::options_in;
using precprobe::test::TempDir;

namespace {

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(64, 128))),
        ln(register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({128})))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::gelu(ln(fc1(x)))); }
  torch::nn::Linear fc1;
  torch::nn::LayerNorm ln;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Mlp);

void seeded_run(const TempDir& dir) {
  const SeedReport report = seed_all(1234, /*deterministic=*/true);
  INFO(report.to_string());
  Mlp model;
  model->to(at::kCUDA);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  const auto x = torch::randn({256, 64}).to(at::kCUDA);
  const auto y = torch::randint(0, 10, {256}).to(at::kCUDA);
  auto o = options_in(dir);
  o.level = Level::kL1;
  PrecisionDebugger dbg(o);
  dbg.start(model);
  for (int step = 0; step < 4; ++step) {
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    dbg.step();
  }
  dbg.stop();
  CHECK(dbg.counters().errors == 0);
}

}  // namespace

TEST_CASE("CUDA: two seeded deterministic runs compare --exact identical", "[cuda][compare]") {
  if (!cuda_or_skip()) return;
  TempDir a("cuda_exact_a"), b("cuda_exact_b");
  seeded_run(a);
  seeded_run(b);
  DumpReader ra(a.path().string()), rb(b.path().string());
  CompareOptions co;
  co.exact = true;
  const CompareResult r = compare_dumps(ra, rb, co);
  CHECK(r.ops_a > 0);
  CHECK(r.ops_a == r.ops_b);
  CHECK(r.unmatched.empty());
  CHECK(r.identical);
  if (r.first) WARN("first difference: " << r.first->name << " step " << r.first->step);
  CHECK_FALSE(r.differs());

  // The device really was used: some recorded tensor lives on cuda:0.
  int64_t on_device = 0;
  for (const auto& op : precprobe::test::read_ops(a))
    for (const auto& arg : op.outputs)
      if (arg.tensor && arg.tensor->device == "cuda:0") ++on_device;
  CHECK(on_device > 0);

  // And the command line tool says the same (exit status 0: nothing differs).
  const std::string cli = std::string(PRECPROBE_BINARY_DIR) + "/bin/precprobe";
  if (std::filesystem::exists(cli)) {
    const std::string cmd = "'" + cli + "' compare '" + a.path().string() + "' '" +
                            b.path().string() + "' --exact >/dev/null";
    const int status = std::system(cmd.c_str());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  } else {
    WARN("no CLI at " << cli << ": compare_dumps only");
  }
}
