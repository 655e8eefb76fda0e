// Memory an aten::empty* hands out is garbage until written, and is recorded as unread
// (counts 0, statistics NaN) rather than read as data. A program may fill it through
// data_ptr() with no op (at::tensor({...}), a data loader's memcpy, numpy in Python): the
// next op must then read it as data, also when the bytes written are those it held (zeros
// into fresh pages), and overflow_check must see NaN/Inf written that way.
#include <torch/torch.h>

#include <cstring>
#include <limits>

#include "precprobe_catch.h"
#include "probe/debugger_fixture.h"

using namespace precprobe;
using precprobe::test::options_in;
using precprobe::test::read_ops;
using precprobe::test::TempDir;
using precprobe::test::with_name;

namespace {

// 64 MiB: above glibc's largest mmap threshold (32 MiB), so every allocation of it is a
// fresh mapping, all zeros.
constexpr int64_t kFreshPages = int64_t{16} << 20;

bool all_zero(const at::Tensor& t) {
  const auto* b = static_cast<const unsigned char*>(t.data_ptr());
  const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
  for (size_t i = 0; i < n; ++i)
    if (b[i] != 0) return false;
  return true;
}

}  // namespace

TEST_CASE("memory filled through data_ptr() after empty() is read as data, whatever it held",
          "[debugger][values][unread]") {
  // The premise of the first case with glibc's malloc: without the debugger, such an
  // empty() is all zeros, so writing zeros into it leaves every byte as it was. (ASan's
  // allocator fills a block's first 4 KiB: there the case passes without the marker too.)
  const bool fresh_zeros = all_zero(torch::empty({kFreshPages}));
  INFO("a fresh empty() of 64 MiB held only zeros: " << fresh_zeros);
  TempDir dir("dbg_unread_filled");
  {
    PrecisionDebugger dbg(options_in(dir));
    dbg.start();
    auto zeros = torch::empty({kFreshPages});
    std::memset(zeros.data_ptr(), 0, static_cast<size_t>(kFreshPages) * sizeof(float));
    auto zero_sum = zeros.sum();
    const float values[] = {1.5f, -2.0f, 4.0f};
    auto small = torch::empty({3});
    std::memcpy(small.data_ptr(), values, sizeof(values));
    auto small_max = small.max();
    auto kept = torch::empty({64});  // written by an op: its input stays unread
    kept.fill_(3.0f);
    dbg.step();
    dbg.stop();
  }
  auto ops = read_ops(dir);
  auto sums = with_name(ops, "aten::sum");
  REQUIRE(sums.size() == 1);
  const TensorStats& z = *sums[0].inputs.at(0).tensor;
  CHECK(z.numel == kFreshPages);
  CHECK(z.zero == kFreshPages);
  CHECK(z.min == 0.0);
  CHECK(z.max == 0.0);
  CHECK(z.norm == 0.0);
  auto maxes = with_name(ops, "aten::max");
  REQUIRE(maxes.size() == 1);
  const TensorStats& m = *maxes[0].inputs.at(0).tensor;
  CHECK(m.neg + m.pos == 3);
  CHECK(m.min == -2.0);
  CHECK(m.max == 4.0);
  // The empty() outputs themselves, and fill_'s "before", are garbage: nothing counted.
  auto empties = with_name(ops, "aten::empty");
  REQUIRE(empties.size() == 3);
  for (const auto& e : empties) {
    const TensorStats& s = *e.outputs.at(0).tensor;
    CHECK(s.zero + s.neg + s.pos + s.non_finite() == 0);
    CHECK(std::isnan(s.min));
  }
  auto fill = with_name(ops, "aten::fill_");
  REQUIRE(fill.size() == 1);
  const TensorStats& before = *fill[0].inputs.at(0).tensor;
  CHECK(before.zero + before.neg + before.pos + before.non_finite() == 0);
  CHECK(fill[0].outputs.at(0).tensor->min == 3.0);
}

TEST_CASE("overflow_check: NaN written through data_ptr() after empty() is not an op's origin",
          "[debugger][overflow][unread]") {
  TempDir dir("dbg_unread_overflow");
  auto o = options_in(dir);
  o.task = Task::kOverflowCheck;
  o.overflow_nums = -1;
  {
    PrecisionDebugger dbg(o);
    dbg.start();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float loaded[] = {1.0f, nan, 2.0f, 3.0f};  // a sample as a loader reads it
    auto batch = torch::empty({4});
    std::memcpy(batch.data_ptr(), loaded, sizeof(loaded));
    auto scaled = batch * 2.0f;                   // NaN in, NaN out: not an origin
    batch.mul_(3.0f);                             // in place, NaN before: not an origin either
    auto e = torch::sqrt(torch::tensor({-1.f}));  // NaN from finite input: the origin
    dbg.step();
    dbg.stop();
  }
  auto ops = read_ops(dir);
  REQUIRE(ops.size() == 1);
  CHECK(ops[0].op == "aten::sqrt");
  CHECK(ops[0].outputs.at(0).tensor->nan == 1);
}
