// "reuse_across_steps": statistics of a tensor unchanged since an earlier step are reused,
// and never those of a tensor that changed — through an op (its version), or through its
// memory without an op (a buffer refilled by memcpy: the fingerprint). Differential: the
// same program recorded with reuse on and off writes the same records, bit for bit.
#include <torch/torch.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "precprobe/precprobe.h"
#include "precprobe_catch.h"
#include "probe/debugger_fixture.h"
#include "stats/stats_engine.h"
#include "support/record_lines.h"

using namespace precprobe;
using precprobe::detail::EngineConfig;
using precprobe::detail::Slot;
using precprobe::detail::StatsEngine;
using precprobe::test::first_difference;
using precprobe::test::options_in;
using precprobe::test::read_ops;
using precprobe::test::record_lines;
using precprobe::test::reference;
using precprobe::test::TempDir;

namespace {

EngineConfig sync_config(bool carry = true) {
  EngineConfig cfg;
  cfg.async = false;
  cfg.carry = carry;
  cfg.emit = [](precprobe::detail::PendingOp&) {};
  return cfg;
}

void check_values(const TensorStats& s, const at::Tensor& t) {
  const auto r = reference(t);
  CHECK(s.numel == t.numel());
  CHECK(s.min == r.min);
  CHECK(s.max == r.max);
  CHECK(s.zero == r.zero);
  CHECK(s.mean == Approx(r.mean).epsilon(1.2e-7));
  CHECK(s.norm == Approx(r.norm).epsilon(1.2e-7));
}

uint64_t meta_counter(const TempDir& dir, const char* key) {
  const auto meta =
      nlohmann::json::parse(precprobe::test::read_bytes((dir.path() / "rank0/meta.json").string()));
  return meta.at("counters").value(key, uint64_t{0});
}

}  // namespace

TEST_CASE("an unchanged tensor's statistics are carried into the next step", "[engine][reuse]") {
  StatsEngine engine(sync_config());
  auto t = torch::randn({64, 256});  // 64 KiB
  auto first = engine.capture(t);
  check_values(first->stats, t);
  engine.clear_cache();
  auto again = engine.capture(t);
  CHECK(again == first);
  CHECK(engine.counters().carried == 1);
  // Reused again within the step without a second check; a full view shares it too.
  CHECK(engine.capture(t) == first);
  CHECK(engine.capture(t.t())->base == first);
  CHECK(engine.counters().carried == 1);
}

TEST_CASE("a buffer refilled without an op is read again", "[engine][reuse]") {
  StatsEngine engine(sync_config());
  auto t = torch::zeros({64, 256});
  auto first = engine.capture(t);
  engine.clear_cache();
  // A data loader's memcpy into a reused buffer: no op, no version bump.
  const auto fresh = torch::randn({64, 256});
  std::memcpy(t.data_ptr<float>(), fresh.data_ptr<float>(), t.nbytes());
  REQUIRE(t._version() == 0);
  auto now = engine.capture(t);
  CHECK(now != first);
  CHECK(engine.counters().carry_mismatches == 1);
  check_values(now->stats, fresh);
  // So is a write that changes one element of one sampled line: the first.
  engine.clear_cache();
  t.data_ptr<float>()[0] += 1.0f;
  auto after = engine.capture(t);
  CHECK(after != now);
  check_values(after->stats, t);
}

TEST_CASE("a tensor written by an op, a small tensor and program memory are not carried",
          "[engine][reuse]") {
  StatsEngine engine(sync_config());
  auto t = torch::randn({64, 256});
  auto small = torch::randn({1000});  // 4 KB: cheaper to read than to check
  std::vector<float> mine(64 * 256, 1.0f);
  auto blob = torch::from_blob(mine.data(), {64, 256});
  auto a = engine.capture(t), b = engine.capture(small), c = engine.capture(blob);
  engine.clear_cache();
  t.add_(1.0f);  // an op: the version moves
  auto a2 = engine.capture(t);
  CHECK(a2 != a);
  check_values(a2->stats, t);
  CHECK(engine.capture(small) != b);
  CHECK(engine.capture(blob) != c);
  CHECK(engine.counters().carried == 0);
}

TEST_CASE("reuse_across_steps false reads every tensor every step", "[engine][reuse]") {
  StatsEngine engine(sync_config(/*carry=*/false));
  auto t = torch::randn({64, 256});
  auto first = engine.capture(t);
  engine.clear_cache();
  CHECK(engine.capture(t) != first);
  CHECK(engine.counters().carried == 0);
}

TEST_CASE("the memory fingerprint samples the same lines for the same size", "[engine][reuse]") {
  std::vector<unsigned char> a(1 << 20, 7), b(1 << 20, 7);
  CHECK(precprobe::detail::memory_fingerprint(a.data(), a.size()) ==
        precprobe::detail::memory_fingerprint(b.data(), b.size()));
  b.back() = 8;  // the last line is always sampled
  CHECK(precprobe::detail::memory_fingerprint(a.data(), a.size()) !=
        precprobe::detail::memory_fingerprint(b.data(), b.size()));
  // A different size is a different fingerprint even over equal bytes.
  CHECK(precprobe::detail::memory_fingerprint(a.data(), a.size()) !=
        precprobe::detail::memory_fingerprint(a.data(), a.size() - 64));
}

TEST_CASE("every sampled line counts in the fingerprint, one line in 16", "[engine][reuse]") {
  // Changing one 64-byte line at a time changes the fingerprint for exactly the sampled
  // lines: one per stride of 16 lines (16 to 256 of them), plus the first and the last
  // (which a stride may also pick). A hash that dropped a lane, a word or a line would
  // count fewer.
  for (size_t lines : {size_t{1024}, size_t{4096}, size_t{16384}}) {
    std::vector<unsigned char> a(lines * 64);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<unsigned char>(i * 131 + 7);
    const uint64_t clean = precprobe::detail::memory_fingerprint(a.data(), a.size());
    size_t seen = 0;
    for (size_t line = 0; line < lines; ++line) {
      const size_t at = line * 64 + (line * 8) % 64;  // a different word of each line
      a[at] ^= 0x5a;
      seen += precprobe::detail::memory_fingerprint(a.data(), a.size()) != clean;
      a[at] ^= 0x5a;
    }
    const size_t k = std::min<size_t>(lines / 16, 256);
    INFO(lines << " lines, " << seen << " seen");
    CHECK(seen >= k);
    CHECK(seen <= k + 2);
  }
  // Two sampled lines swapped: the order of the lines counts too.
  std::vector<unsigned char> a(1024 * 64);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<unsigned char>(i / 64);
  std::vector<unsigned char> b = a;
  std::swap_ranges(b.begin(), b.begin() + 64, b.end() - 64);
  CHECK(precprobe::detail::memory_fingerprint(a.data(), a.size()) !=
        precprobe::detail::memory_fingerprint(b.data(), b.size()));
}

// The house method: the same seeded program, recorded with reuse on and off, writes the
// same records. The program reads an in-memory dataset per sample (select), refills an
// input buffer every step (sync: through data_ptr(), no op; async: copy_), keeps a frozen
// layer, and trains the rest with Adam (its moments are read at the start of each
// optimizer step).
TEST_CASE("records are the same with and without reuse across steps", "[debugger][reuse]") {
  auto run = [](bool reuse, bool async) {
    TempDir dir(std::string("reuse_") + (reuse ? "on" : "off") + (async ? "_async" : "_sync"));
    torch::manual_seed(11);
    torch::nn::Sequential model(torch::nn::Linear(128, 128), torch::nn::ReLU(),
                                torch::nn::Linear(128, 128), torch::nn::ReLU(),
                                torch::nn::Linear(128, 10));
    auto frozen = model->parameters()[0];
    frozen.set_requires_grad(false);
    std::vector<at::Tensor> trained;
    for (auto& p : model->parameters())
      if (p.requires_grad()) trained.push_back(p);
    torch::optim::Adam opt(trained, torch::optim::AdamOptions(1e-2));
    const auto dataset = torch::randn({256, 128});
    auto buffer = torch::zeros({32, 128});  // refilled every step
    auto o = options_in(dir, async);
    o.level = Level::kL1;
    o.reuse_across_steps = reuse;
    PrecisionDebugger dbg(o);
    dbg.start(model);
    for (int step = 0; step < 5; ++step) {
      const auto fill = torch::randn({32, 128});
      if (async) {
        // A write without an op races the worker's read of the last step's slots
        // (docs/debugger.md, "Not detected"); through an op it waits for them.
        buffer.copy_(fill);
      } else {
        std::memcpy(buffer.data_ptr<float>(), fill.data_ptr<float>(), buffer.nbytes());
      }
      std::vector<at::Tensor> rows;
      for (int k = 0; k < 8; ++k) rows.push_back(dataset[(step * 8 + k) % 256]);
      auto x = torch::cat({torch::stack(rows), buffer});
      opt.zero_grad();
      auto loss = model->forward(x).square().mean();
      loss.backward();
      opt.step();
      dbg.step();
      // Async, a slot serves the next step only once the worker has computed it. Without a
      // pause, a loaded machine (ctest -j2) can leave every one unfinished at the next
      // step and nothing carried; the pause makes "some are carried" hold, not the pace.
      if (async) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    dbg.stop();
    return std::make_pair(read_ops(dir), std::make_pair(meta_counter(dir, "tensors_carried"),
                                                        meta_counter(dir, "carry_mismatches")));
  };
  for (bool async : {false, true}) {
    INFO((async ? "async" : "sync"));
    const auto [off, off_counts] = run(false, async);
    const auto [on, on_counts] = run(true, async);
    CHECK(off_counts.first == 0);
    // Carried in each of the 4 later steps: the dataset (128 KiB), the frozen and the
    // trained 128 x 128 weights (64 KiB), Adam's two moments of the latter (24 on LibTorch
    // 1.13, sync). Async, a slot the worker has not finished when the next step meets its
    // tensor is read again (20 of 24 on an idle machine without the pause above). The buffer (16
    // KiB) refilled by memcpy is caught by its fingerprint; by copy_, by its version.
    INFO("carried " << on_counts.first << ", mismatches " << on_counts.second);
    if (async) {
      CHECK(on_counts.first > 0);  // how many: the worker's pace (sanitizers, load)
    } else {
      CHECK(on_counts.first >= 5 * 4);
    }
    CHECK(on_counts.second == (async ? 0 : 4));
    const auto a = record_lines(off), b = record_lines(on);
    INFO("records differ " << first_difference(a, b));
    CHECK(a == b);
  }
}
