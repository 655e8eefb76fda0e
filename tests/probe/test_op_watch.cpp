// The op watchpoints on a real LibTorch training loop (docs/watchpoints.md): a planted slow
// blow-up (an activation scaled x1.5 a step until it overflows; fp32 and bf16 autocast) warns
// before the first NaN/Inf; a planted dead layer (a bias set to -100 before a ReLU) is named at
// its step and module; a healthy loop has no hit. In each, the hits delivered live (on_watch),
// the events the run wrote and the hits recomputed from the records read back are the same.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "precprobe/checklist.h"
#include "precprobe/op_watch.h"
#include "probe/debugger_fixture.h"

using namespace precprobe;
using namespace precprobe::test;

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(8, 32))),
        fc2(register_module("fc2", torch::nn::Linear(32, 4))) {}
  torch::Tensor forward(const torch::Tensor& x, double scale) {
    return fc2(torch::relu(fc1(x)) * scale);
  }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

// CPU autocast to bfloat16 (LibTorch 2.4 made the API device-generic).
void set_cpu_autocast_bf16(bool on) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, on);
#else
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  at::autocast::set_cpu_enabled(on);
#endif
}

struct Run {
  std::vector<OpWatchHit> live;  // through on_watch
  std::vector<OpWatchHit> written;
  WatchReport report;
  CheckItem check;  // precprobe check's num.op_watch
  std::optional<int64_t> first_bad_loss_step;
};

// `grow`: the hidden activation is scaled by grow^step (1: healthy); `dead_at`: fc1.bias is
// set to -100 before that step (-1: never).
Run train(const TempDir& dir, double grow, int64_t dead_at, bool bf16, int64_t steps) {
  torch::manual_seed(7);
  Net net;
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(grow > 1 ? 0.0 : 0.05));
  const auto x = torch::randn({64, 8});
  const auto y = torch::randn({64, 4});
  DebuggerOptions o = options_in(dir);
  Run run;
  PrecisionDebugger dbg(o);
  dbg.on_watch([&](const OpWatchHit& h) { run.live.push_back(h); });
  dbg.start(net);
  for (int64_t step = 0; step < steps; ++step) {
    if (step == dead_at) {
      torch::NoGradGuard no_grad;
      net->fc1->bias.fill_(-100.0);
    }
    if (bf16) set_cpu_autocast_bf16(true);
    const auto out = net->forward(x, std::pow(grow, static_cast<double>(step)));
    if (bf16) {
      set_cpu_autocast_bf16(false);
      at::autocast::clear_cache();
    }
    const torch::Tensor loss = torch::mse_loss(out.to(at::kFloat), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    dbg.step();
    if (!std::isfinite(loss.item<float>()) && !run.first_bad_loss_step)
      run.first_bad_loss_step = step;
  }
  dbg.stop();
  run.written = dbg.watch_hits();
  DumpReader reader(dir.path().string());
  run.report = watch_report(reader);
  run.check = *run_checklist(reader).find("num.op_watch");
  return run;
}

const OpWatchHit* first_of(const std::vector<OpWatchHit>& hits, const std::string& watch) {
  for (const OpWatchHit& h : hits)
    if (h.watch == watch) return &h;
  return nullptr;
}

std::string text(const std::vector<OpWatchHit>& hits) {
  std::string t;
  for (const OpWatchHit& h : hits)
    t += "{step " + std::to_string(h.step) + ", " + h.module + ", " + h.watch + ", " + h.record +
         "} ";
  return t;
}

void require_same_live_and_after(const Run& run) {
  INFO("live: " << text(run.live) << "\nwritten: " << text(run.written) << "\nrecorded: "
                << text(run.report.recorded) << "\nrecomputed: " << text(run.report.hits));
  CHECK(run.report.live);
  CHECK((run.live == run.written));
  CHECK((run.report.recorded == run.written));
  CHECK((run.report.hits == run.written));
  CHECK(run.report.same_as_live());
  // check judges in its own pass what `precprobe watch` judges.
  CHECK(run.check.verdict == Verdict::kProblem);
  CHECK(run.check.figure("hits").value_or(-1) == double(run.report.hits.size()));
  const OpWatchHit& first = run.report.early ? *run.report.early : run.report.hits.front();
  CHECK(run.check.figure("first_step").value_or(-1) == double(first.step));
  CHECK_THAT(run.check.evidence,
             Catch::Matchers::ContainsSubstring(" in " + first.module + " at step " +
                                                std::to_string(first.step) + ": " + first.record));
  if (run.report.early && run.report.first_nonfinite_step)
    CHECK(run.check.figure("steps_before_nonfinite").value_or(-1) ==
          double(run.report.steps_earlier()));
}

}  // namespace

TEST_CASE("op watch: a slow blow-up warns before the first NaN/Inf", "[op_watch]") {
  const bool bf16 = GENERATE(false, true);
  CAPTURE(bf16);
  TempDir dir("op_watch_blowup");
  // x1.5 a step from ~1: float32's and bfloat16's 3.4e38 in about 220 steps.
  const Run run = train(dir, 1.5, -1, bf16, 240);
  require_same_live_and_after(run);
  INFO("hits: " << text(run.report.hits));
  REQUIRE(run.report.first_nonfinite_step);
  // The scaled ReLU output (the Net's own forward between fc1 and fc2: "(root)") and the loss
  // after fc2, which squares it, each warn long before the first NaN/Inf (the loss's square
  // overflows float32 at about 1.5^107).
  const OpWatchHit* fc1 = nullptr;
  for (const OpWatchHit& h : run.report.hits)
    if (h.watch == "tensor_too_large" && h.module == "(root)" && !fc1) fc1 = &h;
  REQUIRE(fc1 != nullptr);
  CHECK(fc1->op == "aten::mul");
  // The median of a history of n values of x1.5 a step lags by n/2 steps: 10x once
  // 1.5^(n/2) > 10, at a history of 12 or less.
  CHECK(fc1->step <= 12);
  REQUIRE(run.report.early);
  CHECK(run.report.early->watch == "tensor_too_large");
  CHECK(run.report.early->step <= fc1->step);
  CHECK(run.report.steps_earlier() > 90);
  const OpWatchHit* overflow = first_of(run.report.hits, "tensor_overflow");
  REQUIRE(overflow != nullptr);
  CHECK(overflow->step == *run.report.first_nonfinite_step);
  // Few hits: each (module, watchpoint) once while it lasts.
  CHECK(run.report.hits.size() <= 8);
}

TEST_CASE("op watch: a dead layer is named at its step and module", "[op_watch]") {
  TempDir dir("op_watch_dead");
  const int64_t k = 20;
  const Run run = train(dir, 1.0, k, false, k + 8);
  require_same_live_and_after(run);
  const OpWatchHit* zero = first_of(run.report.hits, "tensor_all_zero");
  REQUIRE(zero != nullptr);
  CHECK(zero->step == k);
  CHECK(zero->module == "(root)");  // the relu between fc1 and fc2: the Net's own forward
  CHECK(zero->op == "aten::relu");
  const OpWatchHit* dead = first_of(run.report.hits, "activation_dead_fraction");
  REQUIRE(dead != nullptr);
  CHECK(dead->module == "(root)");
  CHECK(dead->step == k + 4);  // 5 steps in a row at >= 95 % zeros
  for (const OpWatchHit& h : run.report.hits) CHECK(h.step >= k);
}

TEST_CASE("op watch: a healthy loop has no hit", "[op_watch]") {
  TempDir dir("op_watch_healthy");
  const Run run = train(dir, 1.0, -1, false, 80);
  CHECK(run.report.hits.empty());
  CHECK(run.written.empty());
  CHECK(run.live.empty());
  CHECK(run.check.verdict == Verdict::kOk);
}
