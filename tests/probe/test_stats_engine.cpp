// The statistics engine never changes what the program does, and reads the values the op
// saw: the worker holds no reference to the tensors it reads (autograd's gradient stealing
// and in-place accumulation decide on reference counts), and precprobe's own writes outside
// an op (GradScaler's fused unscale) are seen before they happen.
#include <torch/torch.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "precprobe/grad_scaler.h"
#include "precprobe/precprobe.h"
#include "precprobe_catch.h"
#include "probe/debugger_fixture.h"
#include "stats/borrowed_memory.h"
#include "stats/stats_engine.h"
#include "support/record_lines.h"

using namespace precprobe;
using precprobe::test::first_difference;
using precprobe::test::options_in;
using precprobe::test::read_ops;
using precprobe::test::record_lines;
using precprobe::test::reference;
using precprobe::test::TempDir;

namespace {

// The op sequence: "step dir op" per record.
std::vector<std::string> sequence_of(const std::vector<OpRecord>& ops) {
  std::vector<std::string> out;
  for (const auto& r : ops)
    out.push_back(std::to_string(r.step) + " " + std::string(to_string(r.dir)) + " " + r.op);
  return out;
}

}  // namespace

TEST_CASE("a queued statistics job holds no reference to its tensor, and outlives its free",
          "[engine][borrow]") {
  using precprobe::detail::EngineConfig;
  using precprobe::detail::Slot;
  // The worker is held inside a save job, so the capture below stays queued (deterministic).
  std::mutex m;
  std::condition_variable cv;
  bool go = false;
  std::atomic<bool> blocked{false};
  EngineConfig cfg;
  cfg.async = true;
  cfg.inline_numel = 16;
  cfg.save_tensor = [&](const at::Tensor&, const std::string&) {
    blocked = true;
    std::unique_lock<std::mutex> lk(m);
    cv.wait(lk, [&] { return go; });
    return std::string();
  };
  cfg.emit = [](precprobe::detail::PendingOp&) {};
  const auto before = precprobe::detail::borrow_counts();
  precprobe::detail::StatsEngine engine(cfg);
  const at::Tensor held = at::ones({64});
  engine.capture_for_save(held, "held");
  while (!blocked) std::this_thread::yield();

  at::Tensor t = at::randn({1 << 16});
  t.index_put_({0}, -7.5f);
  const auto ref = reference(t);
  auto slot = engine.capture(t);
  REQUIRE(slot->state.load() == Slot::kQueued);
  // What AccumulateGrad and InputBuffer look at before stealing or accumulating in place.
  CHECK(t.use_count() == 1);
  CHECK(t.unsafeGetTensorImpl()->unsafe_storage().use_count() == 1);
  CHECK(precprobe::detail::borrow_counts().outstanding ==
        before.outstanding + 2);  // the save job too

  t.reset();  // the program lets go of it: the memory must stay until the job has read it
  CHECK(precprobe::detail::borrow_counts().deferred_frees == before.deferred_frees + 1);
  {
    std::lock_guard<std::mutex> lk(m);
    go = true;
  }
  cv.notify_all();
  engine.drain();
  REQUIRE(slot->state.load() == Slot::kDone);
  CHECK(slot->stats.numel == (1 << 16));
  CHECK(slot->stats.min == ref.min);
  CHECK(slot->stats.max == ref.max);
  CHECK(slot->stats.neg == ref.neg);
  CHECK(slot->stats.mean == Approx(ref.mean).epsilon(1e-12).margin(1e-15));
  CHECK(slot->stats.norm == Approx(ref.norm).epsilon(1e-12));
  const auto after = precprobe::detail::borrow_counts();
  CHECK(after.outstanding == before.outstanding);
  CHECK(after.deferred_frees == before.deferred_frees);
}

TEST_CASE("memory that cannot be borrowed is read at once", "[engine][borrow]") {
  std::vector<float> user(8192, 2.0f);
  at::Tensor blob = at::from_blob(user.data(), {8192});  // the caller owns this memory
  CHECK_FALSE(precprobe::detail::borrow(blob).defined());
  at::Tensor neg_view = at::_neg_view(at::randn({4096}));
  CHECK_FALSE(precprobe::detail::borrow(neg_view).defined());

  precprobe::detail::EngineConfig cfg;
  cfg.async = true;
  cfg.inline_numel = 16;
  cfg.emit = [](precprobe::detail::PendingOp&) {};
  precprobe::detail::StatsEngine engine(cfg);
  auto slot = engine.capture(blob);
  CHECK(slot->state.load() == precprobe::detail::Slot::kDone);  // computed inline, nothing held
  CHECK(slot->stats.max == 2.0);
  CHECK(slot->stats.pos == 8192);
  auto neg = engine.capture(neg_view);
  CHECK(neg->state.load() == precprobe::detail::Slot::kDone);
}

// Gradients that start as None each step: AccumulateGrad takes the incoming gradient over
// (aten::detach) when nothing else holds it, and copies it (new_empty_strided + copy_)
// otherwise. The worker's reference used to decide which, depending on thread timing.
TEST_CASE("the statistics worker never changes which ops autograd runs", "[engine][path]") {
  auto run = [](bool async) {
    TempDir dir(async ? "engine_path_async" : "engine_path_sync");
    torch::manual_seed(7);
    // ConvolutionBackward0 hands its weight gradients (36 864 elements: the worker's, not
    // computed inline) straight to AccumulateGrad; so does AddmmBackward0's mm through t().
    torch::nn::Sequential model(torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 64, 3)),
                                torch::nn::ReLU(),
                                torch::nn::Conv2d(torch::nn::Conv2dOptions(64, 64, 3)),
                                torch::nn::Flatten(), torch::nn::Linear(64 * 12 * 12, 10));
    auto o = options_in(dir, async);
    o.level = Level::kL1;
    PrecisionDebugger dbg(o);
    dbg.start(model);
    for (int step = 0; step < 4; ++step) {
      for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();  // set to None
      auto x = torch::randn({8, 8, 16, 16});
      auto loss = model->forward(x).square().mean();
      loss.backward();
      dbg.step();
    }
    dbg.stop();
    return read_ops(dir);
  };
  const auto sync_ops = run(false);
  for (int trial = 0; trial < 3; ++trial) {
    const auto async_ops = run(true);
    const auto a = sequence_of(sync_ops), b = sequence_of(async_ops);
    INFO("sync vs async op sequence differs " << first_difference(a, b));
    REQUIRE(a == b);
    const auto la = record_lines(sync_ops), lb = record_lines(async_ops);
    INFO("sync vs async records differ " << first_difference(la, lb));
    CHECK(la == lb);
  }
}

// GradScaler's fused unscale (LibTorch < 2.3) writes the gradients through raw pointers:
// the records of the ops that produced them must hold the values those ops produced.
TEST_CASE("records of gradients the GradScaler unscales hold the scaled values the ops produced",
          "[engine][scaler]") {
  auto run = [](bool async) {
    TempDir dir(async ? "engine_scaler_async" : "engine_scaler_sync");
    torch::manual_seed(11);
    torch::nn::Sequential model(torch::nn::Linear(256, 512), torch::nn::Tanh(),
                                torch::nn::Linear(512, 64));
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    GradScaler scaler;
    PrecisionDebugger dbg(options_in(dir, async));
    dbg.start(model);
    for (int step = 0; step < 4; ++step) {
      opt.zero_grad();
      auto loss = model->forward(torch::randn({128, 256})).square().mean();
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
      dbg.step();
    }
    dbg.stop();
    return read_ops(dir);
  };
  const auto sync_ops = record_lines(run(false));
  for (int trial = 0; trial < 3; ++trial) {
    const auto async_ops = record_lines(run(true));
    INFO("sync vs async records differ " << first_difference(sync_ops, async_ops));
    CHECK(sync_ops == async_ops);
  }
}

// Batch norm updates its running statistics in place in training mode, and its schema does
// not mark them written (no "a!", no version bump): the second call of a step used to be
// recorded with the running statistics from before the first call (a cache hit).
TEST_CASE("batch norm's running statistics are recorded as each call saw them",
          "[engine][values]") {
  for (const bool async : {false, true}) {
    TempDir dir(async ? "engine_bn_async" : "engine_bn_sync");
    torch::manual_seed(3);
    torch::nn::BatchNorm1d bn(64);
    auto x = torch::randn({128, 64}) * 3 + 1;
    std::vector<at::Tensor> seen_mean, seen_var;
    {
      PrecisionDebugger dbg(options_in(dir, async));
      dbg.start(bn);
      for (int call = 0; call < 3; ++call) {
        seen_mean.push_back(bn->running_mean.clone());
        seen_var.push_back(bn->running_var.clone());
        bn->forward(x + call);
      }
      dbg.step();
      dbg.stop();
    }
    const auto calls = precprobe::test::with_name(read_ops(dir), "aten::batch_norm");
    REQUIRE(calls.size() == 3);
    for (size_t c = 0; c < calls.size(); ++c) {
      INFO("async " << async << ", call " << c);
      const auto mean = reference(seen_mean[c]), var = reference(seen_var[c]);
      const TensorStats& m = *calls[c].inputs.at(3).tensor;
      const TensorStats& v = *calls[c].inputs.at(4).tensor;
      CHECK(m.min == mean.min);
      CHECK(m.max == mean.max);
      CHECK(v.min == var.min);
      CHECK(v.max == var.max);
      CHECK(v.mean == Approx(var.mean).epsilon(1.2e-7));
    }
  }
}

// The pool the op path takes its records from (block_pool.h): the training thread makes
// them, the worker and the writer free them.
namespace {
struct PooledRecord {
  std::array<uint64_t, 40> words{};
  explicit PooledRecord(uint64_t v) { words.fill(v); }
};
}  // namespace

TEST_CASE("records freed on another thread come back to the thread that makes them",
          "[engine][pool]") {
  using Alloc = precprobe::detail::PoolAllocator<PooledRecord>;
  if (PRECPROBE_POOL_BYPASS) {
    WARN("the pool is bypassed under AddressSanitizer (plain operator new/delete)");
    return;
  }
  std::vector<std::shared_ptr<PooledRecord>> made;
  std::set<const void*> addresses;
  for (int i = 0; i < 1000; ++i) {
    made.push_back(std::allocate_shared<PooledRecord>(Alloc(), static_cast<uint64_t>(i)));
    addresses.insert(made.back().get());
  }
  // Freed on a thread that exits: its blocks go to the shared list in batches.
  std::thread([&] { made.clear(); }).join();
  int reused = 0;
  for (int i = 0; i < 64; ++i) {
    made.push_back(std::allocate_shared<PooledRecord>(Alloc(), 7));
    reused += addresses.count(made.back().get()) != 0 ? 1 : 0;
    CHECK(made.back()->words.front() == 7);
    CHECK(made.back()->words.back() == 7);
  }
  CHECK(reused == 64);
}

TEST_CASE("the pool hands records between threads that make and free them at once",
          "[engine][pool]") {
  // A producer makes records and queues them; a consumer frees them; both run at once
  // (ThreadSanitizer checks the hand-over in CI). Every record keeps its value until freed.
  using Alloc = precprobe::detail::PoolAllocator<PooledRecord>;
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::shared_ptr<PooledRecord>> queue;
  bool done = false;
  std::atomic<int> bad{0};
  std::thread consumer([&] {
    for (;;) {
      std::unique_lock<std::mutex> lk(m);
      cv.wait(lk, [&] { return !queue.empty() || done; });
      if (queue.empty()) return;
      auto r = std::move(queue.front());
      queue.pop_front();
      lk.unlock();
      if (r->words.front() != r->words.back()) ++bad;
    }
  });
  for (uint64_t i = 0; i < 50000; ++i) {
    auto r = std::allocate_shared<PooledRecord>(Alloc(), i);
    {
      std::lock_guard<std::mutex> lk(m);
      queue.push_back(std::move(r));
    }
    cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lk(m);
    done = true;
  }
  cv.notify_one();
  consumer.join();
  CHECK(bad.load() == 0);
}
