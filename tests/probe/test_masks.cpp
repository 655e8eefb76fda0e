// Masks under the probe's live checks (docs/debugger.md, "Masks"): a causal attention layer
// written as GPT-style code writes it (`scores.masked_fill(mask, -inf)`, softmax), trained
// with AdamW. Its -inf is the program's intent: "task": "overflow_check" writes nothing for it
// and is not used up by it; a padding mask that hides every key of one sequence from step 7
// (a fully masked row: NaN) is found at the softmax, with the rows counted, by the three
// ways of looking: `precprobe overflow` on a statistics dump, overflow_check's own dump, and
// "record": "on_anomaly"'s replay (class invalid). The same seeded run each time, so the
// three must name the same op, step and reason.
#include <torch/torch.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "debugger_fixture.h"
#include "frame_stream.h"
#include "precprobe/analysis.h"
#include "precprobe_catch.h"

using namespace precprobe;
using precprobe::test::options_in;
using precprobe::test::read_ops;
using precprobe::test::TempDir;

namespace {

constexpr int64_t kBatch = 4, kTime = 8, kDim = 16, kVocab = 11;

struct AttentionLmImpl : torch::nn::Module {
  AttentionLmImpl()
      : wte(register_module("wte", torch::nn::Embedding(kVocab, kDim))),
        qkv(register_module("qkv", torch::nn::Linear(kDim, 3 * kDim))),
        proj(register_module("proj", torch::nn::Linear(kDim, kDim))),
        head(register_module("head", torch::nn::Linear(kDim, kVocab))) {}

  // `pad`: [B, T] true where a key is padding.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& pad) {
    auto x = wte(tokens);
    auto parts = qkv(x).chunk(3, -1);
    auto scores = torch::matmul(parts[0], parts[1].transpose(-2, -1)) / std::sqrt(double(kDim));
    auto causal = torch::ones({kTime, kTime}, torch::kBool).triu(1);
    auto mask = causal.unsqueeze(0).logical_or(pad.unsqueeze(1));
    auto att = torch::softmax(scores.masked_fill(mask, -INFINITY), -1);
    return head(x + proj(torch::matmul(att, parts[2])));
  }
  torch::nn::Embedding wte;
  torch::nn::Linear qkv, proj, head;
};
TORCH_MODULE(AttentionLm);

constexpr int64_t kSteps = 10, kMaskedFrom = 7;

// The padding of step `step`: sequence 1 ends with 2 padding keys; from `masked_from` on, all
// of its keys are padding (every row of it fully masked).
torch::Tensor padding(int64_t step, int64_t masked_from) {
  auto pad = torch::zeros({kBatch, kTime}, torch::kBool);
  pad[1].slice(0, kTime - 2).fill_(true);
  if (masked_from >= 0 && step >= masked_from) pad[1].fill_(true);
  return pad;
}

struct MaskRun {
  std::vector<OpRecord> ops;
  std::vector<nlohmann::json> events;
  DebuggerCounters counters;
};

std::vector<nlohmann::json> anomaly_events(const TempDir& dir) {
  std::vector<nlohmann::json> out;
  FrameReader r;
  std::string err, content;
  if (!r.open((dir.path() / "rank0/events.jsonl.zst").string(), &err)) return out;
  while (r.next(content)) {
    size_t at = 0;
    while (at < content.size()) {
      size_t end = content.find('\n', at);
      if (end == std::string::npos) end = content.size();
      auto j = nlohmann::json::parse(content.substr(at, end - at));
      if (j.value("name", "") == "anomaly") out.push_back(j);
      at = end + 1;
    }
  }
  return out;
}

MaskRun train(const TempDir& dir, DebuggerOptions o, int64_t masked_from) {
  torch::manual_seed(5);
  AttentionLm net;
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(1e-2));
  auto tokens = torch::randint(kVocab, {kBatch, kTime});
  auto targets = torch::randint(kVocab, {kBatch, kTime});
  MaskRun out;
  {
    PrecisionDebugger dbg(o);
    dbg.start(net, opt);
    for (int64_t step = 0; step < kSteps; ++step) {
      const auto pad = padding(step, masked_from);
      auto body = [&] {
        opt.zero_grad();
        auto loss = torch::cross_entropy_loss(net->forward(tokens, pad).reshape({-1, kVocab}),
                                              targets.reshape({-1}));
        loss.backward();
        opt.step();
        return loss;
      };
      if (o.record == RecordMode::kOnAnomaly) {
        dbg.run_step(body);
      } else {
        body();
        dbg.step();
      }
    }
    dbg.stop();
    out.counters = dbg.counters();
  }
  out.ops = read_ops(dir);
  out.events = anomaly_events(dir);
  return out;
}

// Rows of step `step`'s attention that every key masks, and all rows: counted in float64 from
// the masks themselves, not from any record.
std::pair<int64_t, int64_t> fully_masked_rows(int64_t step) {
  auto causal = torch::ones({kTime, kTime}, torch::kBool).triu(1);
  auto mask = causal.unsqueeze(0).logical_or(padding(step, kMaskedFrom).unsqueeze(1));
  return {mask.all(-1).sum().item<int64_t>(), kBatch * kTime};
}

std::string rows_reason(int64_t step) {
  auto [masked, rows] = fully_masked_rows(step);
  return "every element of " + std::to_string(masked) + " of its " + std::to_string(rows) +
         " rows was -inf: fully masked rows";
}

}  // namespace

TEST_CASE("masks: the healthy run's -inf is no overflow for the live check or the analyses",
          "[masks][overflow]") {
  REQUIRE(fully_masked_rows(0).first == 0);  // the healthy padding leaves a key to every row
  TempDir stats_dir("masks_healthy_stats"), check_dir("masks_healthy_check");
  const MaskRun stats = train(stats_dir, options_in(stats_dir), -1);
  // The statistics dump holds the masks: one masked_fill a step, its output with -inf.
  int64_t writers = 0;
  for (const OpRecord& r : stats.ops)
    if (r.op == "aten::masked_fill" && r.dir == Direction::kForward) {
      ++writers;
      CHECK(r.outputs[0].tensor->ninf > 0);
    }
  CHECK(writers == kSteps);
  DumpReader reader(stats_dir.path().string());
  const OverflowResult ovf = find_overflow(reader);
  CHECK_FALSE(ovf.found);
  CHECK(ovf.masking.writers == kSteps);

  auto o = options_in(check_dir);
  o.task = Task::kOverflowCheck;
  const MaskRun check = train(check_dir, o, -1);
  CHECK(check.ops.empty());  // masks held back, not written
  CHECK(check.counters.errors == 0);
}

TEST_CASE(
    "masks: a fully masked row is named at the softmax by overflow, overflow_check and "
    "on_anomaly alike",
    "[masks][overflow][replay]") {
  TempDir stats_dir("masks_planted_stats"), check_dir("masks_planted_check"),
      replay_dir("masks_planted_replay");
  const MaskRun stats = train(stats_dir, options_in(stats_dir), kMaskedFrom);
  DumpReader stats_reader(stats_dir.path().string());
  const OverflowResult a = find_overflow(stats_reader);
  REQUIRE(a.found);
  CHECK(a.origin.op == "aten::softmax");
  CHECK(a.origin.step == kMaskedFrom);
  REQUIRE(a.reason);
  CHECK(*a.reason == rows_reason(kMaskedFrom));
  REQUIRE(a.masked_by);
  CHECK(a.masked_by->op == "aten::masked_fill");
  CHECK(a.masked_by->step == kMaskedFrom);
  // Between qkv and proj, in the model's own forward: its top module.
  CHECK(a.origin_module == std::optional<std::string>("(root)"));
  CHECK(a.masked_by->module == a.origin_module);

  // overflow_check, with its default of one origin: the masks of steps 0-6 do not use it up.
  auto o = options_in(check_dir);
  o.task = Task::kOverflowCheck;
  const MaskRun check = train(check_dir, o, kMaskedFrom);
  CHECK(check.counters.errors == 0);
  REQUIRE(check.ops.size() == 2);  // the mask that made it, then the NaN's origin
  CHECK(check.ops[0].name() == a.masked_by->name);
  CHECK(check.ops[1].name() == a.origin.name);
  for (const OpRecord& r : check.ops) {
    CHECK(r.step == kMaskedFrom);
    CHECK(r.module == "(root)");  // placed by the probe while the program ran
  }
  DumpReader check_reader(check_dir.path().string());
  const OverflowResult b = find_overflow(check_reader);
  REQUIRE(b.found);
  CHECK(b.origin.name == a.origin.name);
  CHECK(b.origin.step == a.origin.step);
  CHECK(b.origin_module == a.origin_module);
  CHECK(b.reason == a.reason);
  REQUIRE(b.masked_by);
  CHECK(b.masked_by->name == a.masked_by->name);
  CHECK(b.masked_by->module == a.masked_by->module);

  auto r = options_in(replay_dir);
  r.record = RecordMode::kOnAnomaly;
  const MaskRun replay = train(replay_dir, r, kMaskedFrom);
  REQUIRE_FALSE(replay.events.empty());
  const nlohmann::json& e = replay.events[0];
  CHECK(e["step"] == kMaskedFrom);
  CHECK(e["reproduced"] == true);
  CHECK(e["origin"] == "aten::softmax");
  CHECK(e["origin_record"] == a.origin.name);
  CHECK(e["classification"] == "invalid");
  const std::string why = e["why"].get<std::string>();
  CHECK_THAT(why, Catch::Matchers::ContainsSubstring(rows_reason(kMaskedFrom)));
  CHECK_THAT(why, Catch::Matchers::ContainsSubstring(a.masked_by->name));
  DumpReader replay_reader(replay_dir.path().string());
  const OverflowResult c = find_overflow(replay_reader);
  REQUIRE(c.found);
  CHECK(c.origin.name == a.origin.name);
  CHECK(c.origin_module == a.origin_module);
}
