// A large tensor's statistics computed in parts by several threads (SplitSummary,
// src/probe/stats/split_stats.h) are bit for bit summarize()'s, whoever computed which part;
// and the statistics engine's claimed and shared jobs give the records one thread gives.
#include <torch/torch.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "precprobe_catch.h"
#include "stats/split_stats.h"
#include "stats/stats.h"
#include "stats/stats_engine.h"

using precprobe::TensorStats;
using precprobe::detail::SplitSummary;
using precprobe::detail::summarize;

namespace {

uint64_t bits(double x) {
  uint64_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// Every field, the doubles compared by their bits (NaN included).
std::string difference(const TensorStats& a, const TensorStats& b) {
  if (a.dtype != b.dtype) return "dtype " + a.dtype + " / " + b.dtype;
  if (a.shape != b.shape) return "shape";
  if (a.device != b.device) return "device";
  if (a.numel != b.numel) return "numel";
  const int64_t ca[] = {a.nan, a.pinf, a.ninf, a.zero, a.neg, a.pos};
  const int64_t cb[] = {b.nan, b.pinf, b.ninf, b.zero, b.neg, b.pos};
  for (int i = 0; i < 6; ++i)
    if (ca[i] != cb[i]) return "count " + std::to_string(i);
  const double da[] = {a.min, a.max, a.mean, a.norm};
  const double db[] = {b.min, b.max, b.mean, b.norm};
  for (int i = 0; i < 4; ++i)
    if (bits(da[i]) != bits(db[i]))
      return "statistic " + std::to_string(i) + ": " + std::to_string(da[i]) + " / " +
             std::to_string(db[i]);
  if (a.has_range != b.has_range || a.range != b.range) return "range";
  if (a.hash != b.hash || a.hist != b.hist) return "hash or hist";
  return "";
}

// `t` computed by `threads` threads at once, each running work() from the same start.
TensorStats split(const at::Tensor& t, bool range, int threads) {
  SplitSummary s(t, range);
  std::atomic<int> ready{0};
  std::vector<std::thread> helpers;
  for (int i = 1; i < threads; ++i)
    helpers.emplace_back([&] {
      ++ready;
      while (ready.load() < threads) {
      }
      s.work(false);
    });
  ++ready;
  while (ready.load() < threads) {
  }
  s.work(true);
  s.wait_done();
  TensorStats out;
  s.finish(out);
  for (auto& h : helpers) h.join();
  return out;
}

// Values that make the sums' order show: magnitudes over many binades, signed zeros,
// subnormals, and (with `specials`) NaN and +-Inf in some blocks only.
at::Tensor awkward(int64_t n, at::ScalarType dtype, bool specials) {
  at::manual_seed(static_cast<uint64_t>(n) + static_cast<uint64_t>(dtype));
  at::Tensor x = at::randn({n}, at::kDouble) * at::exp(at::randn({n}, at::kDouble) * 6);
  x.index_put_({at::indexing::Slice(0, n, 97)}, 0.0);
  x.index_put_({at::indexing::Slice(5, n, 131)}, -0.0);
  x.index_put_({at::indexing::Slice(7, n, 1009)}, 1e-310);
  if (specials) {
    x.index_put_({at::indexing::Slice(11, n, 40000)}, std::nan(""));
    x.index_put_({at::indexing::Slice(13, n, 70001)}, INFINITY);
    x.index_put_({at::indexing::Slice(17, n / 2, 90001)}, -INFINITY);
  }
  return x.to(dtype);
}

}  // namespace

TEST_CASE("a large tensor computed by several threads is bit for bit summarize()'s",
          "[stats][split]") {
  const int64_t block = precprobe::detail::kStatsBlock;
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf}) {
    // Exactly the minimum, a whole number of chunks, and a last block and chunk cut short.
    for (int64_t n : {SplitSummary::kMinNumel, SplitSummary::kMinNumel * 3,
                      SplitSummary::kMinNumel + SplitSummary::kChunkBlocks * block * 5 + 77}) {
      for (bool specials : {false, true}) {
        const at::Tensor flat = awkward(n, dtype, specials);
        const at::Tensor t = n % 2 == 0 ? flat.reshape({2, -1}) : flat;
        REQUIRE(SplitSummary::eligible(t, false));
        for (bool range : {false, true}) {
          TensorStats one;
          summarize(t, one, false, range);
          if (specials) REQUIRE(one.nan > 0);
          for (int threads : {1, 2, 4}) {
            INFO(c10::toString(dtype) << " n=" << n << " specials=" << specials
                                      << " range=" << range << " threads=" << threads);
            CHECK(difference(split(t, range, threads), one).empty());
          }
        }
      }
    }
  }
}

TEST_CASE("the blocks' sums are added in block order, where the order shows", "[stats][split]") {
  // float64 values near the top of the range: the running sum of the first half's blocks
  // overflows to +inf, which the second half cannot bring back; added in another order
  // (the second half first, or halves interleaved) the mean would be -inf or NaN. So
  // this fails for any order but summarize()'s.
  const int64_t n = SplitSummary::kMinNumel;
  at::Tensor t = at::full({n}, 1e304, at::kDouble);
  t.slice(0, n / 2, n).fill_(-1e304);
  TensorStats one;
  summarize(t, one, false, false);
  REQUIRE(std::isinf(one.mean));
  REQUIRE(one.mean > 0);
  for (int threads : {1, 2, 4}) {
    INFO("threads=" << threads);
    CHECK(difference(split(t, false, threads), one).empty());
  }
}

TEST_CASE("a summary its owner interrupts after every chunk ends with the same statistics",
          "[stats][split]") {
  // The statistics worker computes its own large tensor this way, helping a thread that
  // claimed another one between its chunks.
  const int64_t n = SplitSummary::kMinNumel * 2 + 5;  // 129 blocks: 17 chunks, the last of 1
  for (bool range : {false, true}) {
    const at::Tensor t = awkward(n, at::kFloat, true);
    SplitSummary s(t, range);
    std::atomic<int> interrupt{1};
    int calls = 1;
    while (s.work(true, &interrupt)) ++calls;
    CHECK(calls == 17);
    CHECK_FALSE(s.shared());
    s.wait_done();
    TensorStats split, one;
    s.finish(split);
    summarize(t, one, false, range);
    CHECK(difference(split, one).empty());
  }
}

TEST_CASE("only tensors whose summary is one ordered pass over blocks are split",
          "[stats][split]") {
  const int64_t n = SplitSummary::kMinNumel;
  const at::Tensor f = at::randn({n});
  CHECK(SplitSummary::eligible(f, false));
  CHECK_FALSE(SplitSummary::eligible(f, true));  // the hash is one stream
  CHECK_FALSE(SplitSummary::eligible(at::randn({n - 1}), false));
  CHECK_FALSE(SplitSummary::eligible(at::randn({512, n / 256}).t(), false));  // transposed
  CHECK_FALSE(SplitSummary::eligible(at::randn({2 * n}).slice(0, 0, 2 * n, 2), false));
  CHECK_FALSE(SplitSummary::eligible(at::randint(0, 9, {n}), false));
  CHECK_FALSE(SplitSummary::eligible(at::randn({n}, at::kComplexFloat), false));
  CHECK_FALSE(SplitSummary::eligible(at::Tensor(), false));
  CHECK_FALSE(SplitSummary::eligible(at::empty({n}, at::device(at::kMeta)), false));
}

TEST_CASE("a claimed large tensor is computed in parts, with one thread's statistics",
          "[stats][split][engine]") {
  using precprobe::detail::EngineConfig;
  using precprobe::detail::StatsEngine;
  // The worker is held inside a save job so that the captures below stay queued; before_write
  // then claims them on this thread, which computes them as SplitSummaries alone.
  std::mutex m;
  std::condition_variable cv;
  bool go = false;
  std::atomic<bool> blocked{false};
  EngineConfig cfg;
  cfg.async = true;
  cfg.save_tensor = [&](const at::Tensor&, const std::string&) {
    blocked = true;
    std::unique_lock<std::mutex> lk(m);
    cv.wait(lk, [&] { return go; });
    return std::string();
  };
  cfg.emit = [](precprobe::detail::PendingOp&) {};
  for (bool range : {false, true}) {
    INFO("range=" << range);
    StatsEngine engine(cfg);
    // Kept alive: a freed StorageImpl's address may come back for a tensor below, which
    // before_write() would then find running (the held job) and wait for.
    const at::Tensor held = at::zeros({4});
    engine.capture_for_save(held, "held");
    while (!blocked) std::this_thread::yield();
    std::vector<at::Tensor> ts;
    std::vector<TensorStats> expected;
    std::vector<std::shared_ptr<precprobe::detail::Slot>> slots;
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kDouble}) {
      ts.push_back(awkward(SplitSummary::kMinNumel * 2 + 5, dtype, true));
      expected.emplace_back();
      summarize(ts.back(), expected.back(), false, range);
      precprobe::detail::CaptureOptions how;
      how.range = range;
      slots.push_back(engine.capture(ts.back(), how));
    }
    for (size_t i = 0; i < ts.size(); ++i) {
      engine.before_write(ts[i]);  // claimed here: computed before the write
      REQUIRE(slots[i]->state.load() == precprobe::detail::Slot::kDone);
      ts[i].fill_(7);  // the write: the statistics are those from before it
      CHECK(difference(precprobe::detail::stats_of(*slots[i]), expected[i]).empty());
    }
    CHECK(engine.counters().split == ts.size());
    CHECK(engine.counters().claimed_for_write == ts.size());
    {
      std::lock_guard<std::mutex> lk(m);
      go = true;
    }
    cv.notify_all();
    engine.drain();
    go = false;
    blocked = false;
  }
}

TEST_CASE("with the worker free, large tensors claimed at once are shared and still exact",
          "[stats][split][engine]") {
  using precprobe::detail::EngineConfig;
  using precprobe::detail::StatsEngine;
  // No assumption about who computes what: the worker may take a job first (the writer then
  // joins it), help with a claimed one, or be asleep. Every slot must hold one thread's
  // statistics of the values before the write.
  EngineConfig cfg;
  cfg.async = true;
  cfg.emit = [](precprobe::detail::PendingOp&) {};
  StatsEngine engine(cfg);
  for (int round = 0; round < 20; ++round) {
    std::vector<at::Tensor> ts;
    std::vector<TensorStats> expected;
    std::vector<std::shared_ptr<precprobe::detail::Slot>> slots;
    for (int i = 0; i < 4; ++i) {
      ts.push_back(awkward(SplitSummary::kMinNumel * (1 + i), at::kFloat, i % 2 == 1));
      expected.emplace_back();
      summarize(ts.back(), expected.back(), false, false);
      slots.push_back(engine.capture(ts.back()));
    }
    for (size_t i = 0; i < ts.size(); ++i) {
      engine.before_write(ts[i]);
      REQUIRE(slots[i]->state.load() == precprobe::detail::Slot::kDone);
      ts[i].mul_(3);
      INFO("round " << round << " tensor " << i);
      CHECK(difference(precprobe::detail::stats_of(*slots[i]), expected[i]).empty());
    }
    engine.drain();
    engine.clear_cache();
  }
  const auto c = engine.counters();
  CHECK(c.split > 0);
  CHECK(c.stale == 0);
}
