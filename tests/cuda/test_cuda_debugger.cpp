// The PrecisionDebugger on CUDA models: a planted float32 overflow found at its origin op
// (overflow_check and L1 statistics, read back through find_overflow as `precprobe overflow`
// does), and "record": "on_anomaly" replaying an anomalous CUDA step from its device
// snapshot (reproduced, origin, classification). Built only with PRECPROBE_WITH_CUDA; needs a
// GPU (cuda_or_skip()). Written without a GPU: scripts/gpu-check.sh runs it on one.
#include <torch/torch.h>

// probe/debugger_fixture.h compares floats exactly (its float64 reference).
#pragma GCC diagnostic ignored "-Wfloat-equal"

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "frame_stream.h"
#include "precprobe/analysis.h"
#include "precprobe/debugger.h"
#include "precprobe/reader.h"
#include "probe/debugger_fixture.h"

using namespace precprobe;
using precprobe::test::cuda_or_skip;
using precprobe::test::options_in;
using precprobe::test::TempDir;

namespace {

// out = f(fc(x) + shift): f can be pushed out of range at one step.
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
      if (end > at) {
        auto j = nlohmann::ordered_json::parse(content.substr(at, end - at));
        if (j.value("name", "") == "anomaly") out.push_back(j);
      }
      at = end + 1;
    }
  }
  return out;
}

// 10 steps of Adam on a CUDA Plant under `o`; at `bad_step` the shift is `shift`.
DebuggerCounters train_plant(const DebuggerOptions& o, int64_t bad_step, double shift,
                             bool on_anomaly) {
  torch::manual_seed(11);
  Plant net([](const torch::Tensor& t) { return torch::exp(t); });
  net->to(at::kCUDA);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  auto x = torch::rand({16, 4}).to(at::kCUDA), y = torch::rand({16, 1}).to(at::kCUDA);
  PrecisionDebugger dbg(o);
  if (on_anomaly) {
    dbg.start(net, opt);
  } else {
    dbg.start(net);
  }
  for (int64_t step = 0; step < 10; ++step) {
    net->shift = step == bad_step ? shift : 0.0;
    auto f = [&] {
      opt.zero_grad();
      auto l = torch::mse_loss(net->forward(x), y);
      l.backward();
      opt.step();
      return l;
    };
    if (on_anomaly) {
      dbg.run_step(f);
    } else {
      f();
      dbg.step();
    }
  }
  dbg.stop();
  return dbg.counters();
}

}  // namespace

TEST_CASE("CUDA: overflow_check records the planted exp overflow and find_overflow names it",
          "[cuda][debugger][overflow]") {
  if (!cuda_or_skip()) return;
  TempDir dir("cuda_overflow_check");
  auto o = options_in(dir);
  o.task = Task::kOverflowCheck;
  o.overflow_nums = -1;
  const auto c = train_plant(o, 4, 100.0, false);
  CHECK(c.errors == 0);
  const auto ops = precprobe::test::read_ops(dir);
  REQUIRE_FALSE(ops.empty());
  CHECK(ops[0].step == 4);
  CHECK(ops[0].op == "aten::exp");
  REQUIRE_FALSE(ops[0].outputs.empty());
  CHECK(ops[0].outputs[0].tensor->device == "cuda:0");
  CHECK(ops[0].outputs[0].tensor->pinf == 16);
  CHECK(ops[0].inputs[0].tensor->all_finite());
  DumpReader reader(dir.path().string());
  const OverflowResult r = find_overflow(reader);
  REQUIRE(r.found);
  CHECK(r.origin.op == "aten::exp");
  CHECK(r.origin.step == 4);
}

TEST_CASE("CUDA: L1 statistics of a run with a planted overflow: the origin is the exp",
          "[cuda][debugger][overflow]") {
  if (!cuda_or_skip()) return;
  TempDir dir("cuda_overflow_l1");
  auto o = options_in(dir);
  o.level = Level::kL1;
  const auto c = train_plant(o, 6, 100.0, false);
  CHECK(c.errors == 0);
  CHECK(c.ops_recorded > 0);
  const auto ops = precprobe::test::read_ops(dir);
  int64_t on_device = 0;
  for (const auto& r : ops)
    for (const auto& a : r.outputs)
      if (a.tensor && a.tensor->device == "cuda:0") ++on_device;
  CHECK(on_device > 0);
  DumpReader reader(dir.path().string());
  const OverflowResult r = find_overflow(reader);
  REQUIRE(r.found);
  CHECK(r.origin.op == "aten::exp");
  CHECK(r.origin.step == 6);
  CHECK(r.origin.direction == "forward");
}

TEST_CASE("CUDA: on_anomaly replays the overflowing step from a device snapshot",
          "[cuda][debugger][replay]") {
  if (!cuda_or_skip()) return;
  TempDir dir("cuda_replay");
  auto o = options_in(dir);
  o.level = Level::kL2;
  o.record = RecordMode::kOnAnomaly;
  const auto c = train_plant(o, 7, 100.0, true);
  CHECK(c.errors == 0);
  CHECK(c.replays == 1);
  // Parameters (4 + 1 floats) and Adam's two moments: the snapshot holds them all.
  CHECK(c.snapshot_bytes >= 3 * 5 * 4);
  const auto ops = precprobe::test::read_ops(dir);
  REQUIRE_FALSE(ops.empty());
  for (const auto& op : ops) REQUIRE(op.step == 7);
  const auto events = anomaly_events(dir);
  REQUIRE(events.size() == 1);
  const auto& e = events[0];
  CHECK(e["trigger"] == "loss_nonfinite");
  CHECK(e["reproduced"] == true);
  CHECK(e["origin"] == "aten::exp");
  CHECK(e["classification"] == "range");
  auto exps = precprobe::test::with_name(ops, "aten::exp");
  REQUIRE(exps.size() == 1);
  CHECK(exps[0].outputs[0].tensor->device == "cuda:0");
  CHECK(exps[0].outputs[0].tensor->pinf == 16);
  CHECK(exps[0].inputs[0].tensor->all_finite());
}
