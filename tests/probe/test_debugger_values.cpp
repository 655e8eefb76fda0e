// PrecisionDebugger: recorded values against float64 recomputation, in-place safety of the
// asynchronous statistics, overflow_check, the tensor task's .npy.zst files, and a dump
// read back after its writer was killed with SIGKILL.
#include <signal.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "precprobe_catch.h"
#include "probe/debugger_fixture.h"
#include "support/child_process.h"

using namespace precprobe;
using precprobe::test::options_in;
using precprobe::test::read_ops;
using precprobe::test::reference;
using precprobe::test::TempDir;
using precprobe::test::with_name;
namespace fs = std::filesystem;

namespace {

void check_stats(const TensorStats& s, const at::Tensor& t) {
  INFO("dtype " << s.dtype << " numel " << s.numel);
  auto r = reference(t);
  CHECK(s.numel == t.numel());
  CHECK(s.shape == t.sizes().vec());
  CHECK(s.nan == r.nan);
  CHECK(s.pinf == r.pinf);
  CHECK(s.ninf == r.ninf);
  CHECK(s.zero == r.zero);
  CHECK(s.neg == r.neg);
  CHECK(s.pos == r.pos);
  if (std::isnan(r.min)) {
    CHECK(std::isnan(s.min));
    CHECK(std::isnan(s.max));
    CHECK(std::isnan(s.mean));
    CHECK(std::isnan(s.norm));
  } else {
    CHECK(s.min == r.min);  // min and max are values of the tensor: exact
    CHECK(s.max == r.max);
    // Accumulated in float64 but written as float32 (docs/dump-format.md): one rounding.
    CHECK(s.mean == Approx(r.mean).epsilon(1.2e-7).margin(1e-300));
    CHECK(s.norm == Approx(r.norm).epsilon(1.2e-7).margin(1e-300));
  }
}

nlohmann::json read_meta(const TempDir& dir) {
  return nlohmann::json::parse(
      precprobe::test::read_bytes((dir.path() / "rank0/meta.json").string()));
}

}  // namespace

TEST_CASE("recorded statistics match a float64 recomputation", "[debugger][values]") {
  const bool async = GENERATE(true, false);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float denorm = std::numeric_limits<float>::denorm_min();
  torch::manual_seed(3);
  std::vector<at::Tensor> inputs{
      torch::tensor({1.5f, -0.0f, 0.0f, nan, inf, -inf, denorm, -denorm, 3.0f}),
      torch::empty({0}),
      torch::tensor({nan, nan}),
      torch::randn({64, 33}).t(),                   // non-contiguous
      torch::randn({50000}).slice(0, 1, 50000, 3),  // strided, large enough for async
      torch::randn({300, 200}).to(torch::kBFloat16),
      torch::tensor({1e30f, -1e30f, 1e-30f}).to(torch::kDouble),
      torch::arange(-5, 7, torch::kLong),
      torch::full({}, -2.5f).expand({2, 3}),  // one element read 6 times
  };
  TempDir dir("dbg_values");
  {
    PrecisionDebugger dbg(options_in(dir, async));
    dbg.start();
    for (const auto& t : inputs) auto c = t.clone();
    dbg.step();
    dbg.stop();
  }
  auto ops = with_name(read_ops(dir), "aten::clone");
  REQUIRE(ops.size() == inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    REQUIRE(ops[i].inputs.at(0).is_tensor());
    check_stats(*ops[i].inputs[0].tensor, inputs[i]);
    check_stats(*ops[i].outputs.at(0).tensor, inputs[i].clone());
  }
  CHECK(ops[5].inputs[0].tensor->dtype == "BFloat16");
  CHECK(ops[7].inputs[0].tensor->dtype == "Long");
}

TEST_CASE("in-place ops never change a tensor before its statistics are taken",
          "[debugger][values]") {
  TempDir dir("dbg_inplace");
  auto x = torch::randn({1 << 20});
  auto opts = options_in(dir, /*async=*/true);
  {
    PrecisionDebugger dbg(opts);
    dbg.start();
    for (int i = 0; i < 12; ++i) {
      auto y = x * 2;  // the output is queued for the worker...
      y.add_(1);       // ... and must be summarised before this runs
      y.mul_(3);
      auto z = y.sum();
      y.zero_();
      dbg.step();
    }
    dbg.stop();
  }
  auto ops = read_ops(dir);
  CHECK(ops.size() == 12 * 5);
  auto y0 = x * 2, y1 = x * 2 + 1, y2 = (x * 2 + 1) * 3;
  auto mul = with_name(ops, "aten::mul");
  auto add_ = with_name(ops, "aten::add_");
  auto mul_ = with_name(ops, "aten::mul_");
  auto zero_ = with_name(ops, "aten::zero_");
  REQUIRE(mul.size() == 12);
  REQUIRE(add_.size() == 12);
  REQUIRE(mul_.size() == 12);
  REQUIRE(zero_.size() == 12);
  for (int i = 0; i < 12; ++i) {
    check_stats(*mul[i].outputs[0].tensor, y0);
    check_stats(*add_[i].inputs[0].tensor, y0);
    check_stats(*add_[i].outputs[0].tensor, y1);
    check_stats(*mul_[i].inputs[0].tensor, y1);
    check_stats(*mul_[i].outputs[0].tensor, y2);
    check_stats(*zero_[i].inputs[0].tensor, y2);
    CHECK(zero_[i].outputs[0].tensor->zero == x.numel());
  }
  auto meta = read_meta(dir);
  CHECK(meta["counters"]["stale"] == 0);
  CHECK(meta["counters"]["errors"] == 0);
}

TEST_CASE("overflow_check records only the op where non-finite values start",
          "[debugger][overflow]") {
  auto run = [](int64_t nums, TempDir& dir) {
    auto o = options_in(dir);
    o.task = Task::kOverflowCheck;
    o.overflow_nums = nums;
    PrecisionDebugger dbg(o);
    dbg.start();
    auto x = torch::tensor({1.0f, -2.0f, 3.0f});
    auto a = x * 2;                               // finite
    auto b = at::log(a);                          // NaN from log(-4): an origin
    auto c = b * 3;                               // NaN in, NaN out: not an origin
    auto d = at::exp(torch::full({2}, 1000.f));   // +Inf: an origin
    auto e = torch::sqrt(torch::tensor({-1.f}));  // NaN: an origin
    dbg.step();
    dbg.stop();
    return read_ops(dir);
  };
  TempDir d1("dbg_ovf1"), d2("dbg_ovf2"), d3("dbg_ovf3");
  auto one = run(1, d1);
  REQUIRE(one.size() == 1);
  CHECK(one[0].name() == "aten::log.0.forward");
  CHECK(one[0].outputs[0].tensor->nan == 1);
  CHECK(one[0].inputs[0].tensor->all_finite());
  auto two = run(2, d2);
  REQUIRE(two.size() == 2);
  CHECK(two[1].name() == "aten::exp.0.forward");
  CHECK(two[1].outputs[0].tensor->pinf == 2);
  auto all = run(-1, d3);
  REQUIRE(all.size() == 3);
  CHECK(all[2].op == "aten::sqrt");
}

TEST_CASE("overflow_check: in-place ops, propagation and outputs of empty",
          "[debugger][overflow]") {
  TempDir dir("dbg_ovf_inplace");
  auto o = options_in(dir);
  o.task = Task::kOverflowCheck;
  o.overflow_nums = -1;
  {
    PrecisionDebugger dbg(o);
    dbg.start();
    auto w = torch::full({64}, 2.0f);
    for (int i = 0; i < 3; ++i) w.mul_(1.5f);  // finite chain of in-place updates
    auto big = torch::full({8, 8}, 3e38f);
    big.mul_(10.0f);                // +Inf in place from a finite tensor: an origin
    big.add_(1.0f);                 // Inf in, Inf out: not an origin
    auto e = torch::empty({1000});  // garbage is never read as NaN/Inf
    e.fill_(1.0f);
    auto t = big.t().contiguous();  // Inf propagated through a view: not an origin
    auto h = torch::tensor({1.0f, 2.0f}, torch::kHalf) * 60000;  // Half overflow: an origin
    dbg.step();
    dbg.stop();
  }
  auto ops = read_ops(dir);
  REQUIRE(ops.size() == 2);
  CHECK(ops[0].name() == "aten::mul_.3.forward");
  CHECK(ops[0].outputs[0].tensor->pinf == 64);
  CHECK(ops[0].inputs[0].tensor->all_finite());  // its values before the write are gone
  CHECK(ops[0].inputs[0].tensor->shape == std::vector<int64_t>{8, 8});
  CHECK(ops[1].op == "aten::mul");
  CHECK(ops[1].outputs[0].tensor->dtype == "Half");
  CHECK(ops[1].outputs[0].tensor->pinf == 1);
  CHECK(ops[1].inputs[0].tensor->all_finite());
}

TEST_CASE("statistics of a full view are its base's, with its own shape", "[debugger][cache]") {
  TempDir dir("dbg_views");
  auto o = options_in(dir);
  auto x = torch::randn({48, 80});
  x.view(-1)[7] = -1e30f;  // a distinct extreme that the view must show too
  {
    PrecisionDebugger dbg(o);
    dbg.start();
    auto y = x * 3;     // y summarised
    auto a = y.t();     // a full view: reused
    auto b = a.sum(0);  // reads the transposed view
    auto c = y.reshape({80, 48}).mul(2);
    auto z = y.narrow(0, 0, 10).sum();  // a partial view: summarised itself
    dbg.step();
    dbg.stop();
  }
  auto ops = read_ops(dir);
  const at::Tensor y = x * 3;
  for (const auto& r : ops) {
    INFO(r.name());
    if (r.op == "aten::t") {
      check_stats(*r.inputs[0].tensor, y);
      check_stats(*r.outputs[0].tensor, y.t());
    } else if (r.op == "aten::sum" && r.call == 0) {
      check_stats(*r.inputs[0].tensor, y.t());
    } else if (r.op == "aten::reshape") {
      check_stats(*r.outputs[0].tensor, y.reshape({80, 48}));
    } else if (r.op == "aten::sum" && r.call == 1) {
      check_stats(*r.inputs[0].tensor, y.narrow(0, 0, 10));
    }
  }
  auto meta = read_meta(dir);
  CHECK(meta["counters"]["errors"] == 0);
}

TEST_CASE("a negative view's statistics are its values', not its base's", "[debugger][cache]") {
  // _neg_view shares its base's memory, geometry and version; only a bit says its values are
  // negated (the OpInfo sweep found it given its base's statistics from the cache).
  TempDir dir("dbg_neg_view");
  auto o = options_in(dir);
  auto x = torch::tensor({1.f, 2.f, -3.f, 0.5f});
  {
    PrecisionDebugger dbg(o);
    dbg.start();
    auto y = x * 1;  // y summarised
    auto n = at::_neg_view(y);
    auto s = n.sum();  // reads the view
    dbg.step();
    dbg.stop();
  }
  const at::Tensor y = x * 1;
  int checked = 0;
  for (const auto& r : read_ops(dir)) {
    INFO(r.name());
    if (r.op == "aten::_neg_view") {
      check_stats(*r.inputs[0].tensor, y);
      check_stats(*r.outputs[0].tensor, -y);
      ++checked;
    } else if (r.op == "aten::sum") {
      check_stats(*r.inputs[0].tensor, -y);
      ++checked;
    }
  }
  CHECK(checked == 2);
}

TEST_CASE("task tensor writes autograd's zero tensors and negative views as their values",
          "[debugger][tensor]") {
  // SgnBackward0 of a real input hands autograd a ZeroTensor, which has no memory (the sweep
  // found the tensor task crashing on its null data_ptr()).
  TempDir dir("dbg_tensor_zero");
  auto o = options_in(dir);
  o.task = Task::kTensor;
  o.list = {"."};  // every op's tensors, the backward's included
  auto x = torch::tensor({1.f, -2.f, 3.f}, torch::requires_grad());
  {
    PrecisionDebugger dbg(o);
    dbg.start();
    torch::sgn(x).sum().backward();
    auto n = at::_neg_view(x.detach() * 1);
    dbg.step();
    dbg.stop();
  }
  CHECK(read_meta(dir)["counters"]["errors"] == 0);
  const fs::path file = dir.path() / "rank0/tensors/step0/aten::_neg_view.0.forward.out0.npy.zst";
  REQUIRE(fs::exists(file));
  std::string header;
  CHECK(precprobe::test::read_npy_zst(file, &header) == std::vector<float>{-1, 2, -3});
}

TEST_CASE("task tensor writes the selected ops' tensors as .npy.zst", "[debugger][tensor]") {
  TempDir dir("dbg_tensor");
  auto o = options_in(dir);
  o.task = Task::kTensor;
  o.list = {"aten::mul.0.forward"};
  o.max_tensor_bytes = 1000;
  auto x = torch::arange(6, torch::kFloat).reshape({2, 3});
  auto big = torch::randn({1000});
  {
    PrecisionDebugger dbg(o);
    dbg.start();
    auto y = x * 2;
    auto z = big * 2;  // mul.1: not listed
    auto w = big + 1;  // recorded with statistics, no files
    dbg.step();
    dbg.stop();
  }
  CHECK(read_ops(dir).size() == 3);
  const fs::path files = dir.path() / "rank0/tensors/step0";
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(files)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"aten::mul.0.forward.in0.npy.zst",
                                          "aten::mul.0.forward.out0.npy.zst"});
  std::string packed = precprobe::test::read_bytes((files / names[1]).string());
  const auto size = ZSTD_getFrameContentSize(packed.data(), packed.size());
  REQUIRE(size != ZSTD_CONTENTSIZE_ERROR);
  REQUIRE(size != ZSTD_CONTENTSIZE_UNKNOWN);
  std::string raw(size, '\0');
  REQUIRE(ZSTD_decompress(&raw[0], raw.size(), packed.data(), packed.size()) == size);
  REQUIRE(raw.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)) == 0);
  const size_t header_len = static_cast<uint8_t>(raw[8]) | (static_cast<uint8_t>(raw[9]) << 8);
  CHECK((10 + header_len) % 64 == 0);
  const std::string header = raw.substr(10, header_len);
  CHECK(header.find("'descr': '<f4'") != std::string::npos);
  CHECK(header.find("'shape': (2, 3)") != std::string::npos);
  CHECK(header.find("'fortran_order': False") != std::string::npos);
  REQUIRE(raw.size() == 10 + header_len + 6 * sizeof(float));
  std::vector<float> values(6);
  std::memcpy(values.data(), raw.data() + 10 + header_len, sizeof(float) * 6);
  CHECK(values == std::vector<float>{0, 2, 4, 6, 8, 10});
}

namespace {

[[noreturn]] void train_forever(const std::string& dump, int progress_fd) {
  DebuggerOptions o;
  o.dump_path = dump;
  o.keep_dropout = true;
  PrecisionDebugger dbg(o);
  auto x = torch::linspace(-1, 1, 64);
  dbg.start();
  for (int64_t step = 0;; ++step) {
    auto y = x * 2;
    auto z = torch::tanh(y);
    dbg.step();
    if (::write(progress_fd, &step, sizeof step) != sizeof step) ::_exit(3);
  }
}

}  // namespace

TEST_CASE("a dump stays readable after its process is killed with SIGKILL", "[debugger][kill]") {
  TempDir dir("dbg_kill");
  const std::string path = dir.path().string();
  precprobe::test::ProgressChild child([&path](int fd) { train_forever(path, fd); });
  const int64_t step = child.wait_for(20, -1);
  // The writer closes a frame per step; give it a moment to write the early ones.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int status = child.kill();
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(step >= 20);

  DumpReader reader(dir.path().string());
  auto ops = reader.ops();
  REQUIRE(ops.size() >= 2 * 10);
  const auto y = torch::linspace(-1, 1, 64) * 2;
  int64_t last_step = 0;
  for (const auto& r : ops) {
    CHECK(r.step >= last_step);  // complete frames, in order
    last_step = r.step;
    if (r.op == "aten::tanh") check_stats(*r.inputs.at(0).tensor, y);
  }
  CHECK(last_step >= 10);
  auto meta =
      nlohmann::json::parse(precprobe::test::read_bytes((dir.path() / "rank0/meta.json").string()));
  CHECK(meta["state"] == "running");
  // The default: binary op records, format_version 3.
  CHECK(meta["format_version"] == dump_format_version(OpsEncoding::kBinary));
  CHECK(std::filesystem::exists(dir.path() / "rank0/ops.bin.zst"));
}

TEST_CASE("uninitialized memory (aten::empty*) is never read as NaN/Inf", "[debugger][values]") {
  TempDir dir("dbg_empty");
  {
    // A freed block full of NaN is likely to come back to the next allocation of its size,
    // so empty_like's garbage would often hold NaN; whatever it holds must not be read.
    { auto nan = torch::full({64}, std::numeric_limits<float>::quiet_NaN()); }
    PrecisionDebugger dbg(options_in(dir));
    dbg.start();
    auto x = torch::ones({64});
    auto y = torch::empty_like(x);
    y.fill_(2.0);
    dbg.step();
    dbg.stop();
  }
  auto ops = read_ops(dir);
  auto empty = with_name(ops, "aten::empty_like");
  REQUIRE(empty.size() == 1);
  const TensorStats& out = *empty[0].outputs.at(0).tensor;
  CHECK(out.numel == 64);
  CHECK(out.shape == std::vector<int64_t>{64});
  CHECK(out.dtype == "Float");
  CHECK(out.non_finite() == 0);
  CHECK(out.zero + out.neg + out.pos == 0);  // nothing was counted
  CHECK(std::isnan(out.min));
  CHECK(std::isnan(out.max));
  // fill_ overwrites it: its "before" input is the same unread tensor (a cache hit).
  auto fill = with_name(ops, "aten::fill_");
  REQUIRE(fill.size() == 1);
  CHECK_FALSE(fill[0].inputs_non_finite());
  CHECK(fill[0].outputs.at(0).tensor->min == Approx(2.0));
}

TEST_CASE("L2: ops nested in a kernel never leave it stale or uninitialized statistics",
          "[debugger][values]") {
  // CPU kernels call ops on the buffer they are about to fill: addmm copy_s the bias into
  // its result and passes it to resolve_conj, mm passes its unwritten result to
  // resolve_conj, sum fill_s its result with 0. Those calls run below autograd, where writes
  // bump no version counter, so each op's final output must be summarised again at its end;
  // and an unwritten buffer (garbage, often NaN from a freed block) must never be read.
  const bool async = GENERATE(true, false);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  torch::manual_seed(4);
  auto a = torch::randn({64, 32}), b = torch::randn({32, 48}), bias = torch::randn({48});
  at::Tensor mm, addmm, sum;
  TempDir dir("dbg_l2_kernels");
  {
    auto o = options_in(dir, async);
    o.level = Level::kL2;
    PrecisionDebugger dbg(o);
    // Freed blocks of every output's size, full of NaN: what the kernels get to fill.
    for (int i = 0; i < 8; ++i) {
      auto g1 = torch::full({64, 48}, nan), g2 = torch::full({32}, nan);
    }
    dbg.start();
    mm = torch::mm(a, b);
    addmm = torch::addmm(bias, a, b);
    sum = a.sum(0);
    dbg.step();
    dbg.stop();
  }
  auto ops = read_ops(dir);
  auto check_op = [&](const char* name, const at::Tensor& value) {
    auto calls = with_name(ops, name);
    REQUIRE_FALSE(calls.empty());
    INFO(name);
    check_stats(*calls[0].outputs.at(0).tensor, value);
  };
  check_op("aten::mm", mm);
  check_op("aten::addmm", addmm);
  check_op("aten::sum", sum);
  for (const auto& r : ops) {
    INFO(r.name() << " depth " << r.depth);
    CHECK_FALSE(r.inputs_non_finite());
    CHECK_FALSE(r.outputs_non_finite());
  }
  // sum views its unwritten result (as_strided) and fill_s it with 0: the view of
  // uninitialized memory is not read either; fill_'s output is the 32 zeros.
  auto sums = with_name(ops, "aten::sum");
  REQUIRE(sums.size() == 1);
  std::vector<OpRecord> inside;
  for (const auto& r : ops)
    if (r.seq > sums[0].seq && r.seq <= sums[0].seq + 2) inside.push_back(r);
  std::sort(inside.begin(), inside.end(),
            [](const OpRecord& x, const OpRecord& y) { return x.seq < y.seq; });
  REQUIRE(inside.size() == 2);
  CHECK(inside[0].op == "aten::as_strided");
  const TensorStats& view = *inside[0].outputs.at(0).tensor;
  CHECK(view.zero + view.neg + view.pos == 0);
  CHECK(inside[1].op == "aten::fill_");
  CHECK(inside[1].outputs.at(0).tensor->zero == 32);
  // addmm's copy_ of the bias into its result: the copied values, not what was there.
  auto copy = with_name(ops, "aten::copy_");
  REQUIRE_FALSE(copy.empty());
  CHECK(copy[0].depth > 0);
  check_stats(*copy[0].outputs.at(0).tensor, bias.expand({64, 48}));
  CHECK(read_meta(dir)["counters"]["stale"] == 0);
}

TEST_CASE("statistics of .grad read through .data() are those of the gradient at that moment",
          "[debugger][values]") {
  // clip_grad_norm_ and SGD read and write p.grad() through p.grad().data(): a tensor on the
  // gradient's storage with a fresh version counter, at version 0 every time. Equal storage,
  // geometry and version number must not make the probe reuse the statistics of another
  // such tensor, or of the gradient itself, taken before an in-place write.
  const bool async = GENERATE(true, false);
  torch::manual_seed(5);
  torch::nn::Linear lin(128, 64);  // weight: 8192 elements, summarised by the worker
  torch::optim::SGD opt(lin->parameters(), torch::optim::SGDOptions(0.1));
  std::vector<at::Tensor> batches{torch::randn({16, 128}), torch::randn({16, 128})};
  std::vector<std::vector<at::Tensor>> pre(2), post(2);  // per step, per parameter
  auto snapshot = [&](std::vector<at::Tensor>& into) {
    at::RecordFunctionGuard off(false);
    for (const auto& p : lin->parameters()) into.push_back(p.grad().clone());
  };
  TempDir dir("dbg_grad_data");
  {
    PrecisionDebugger dbg(options_in(dir, async));
    dbg.start();
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      auto loss = lin->forward(batches[static_cast<size_t>(step)]).pow(2).sum() * (step + 1);
      loss.backward();
      snapshot(pre[static_cast<size_t>(step)]);
      torch::nn::utils::clip_grad_norm_(lin->parameters(), 0.5);  // scales every gradient
      snapshot(post[static_cast<size_t>(step)]);
      opt.step();
      dbg.step();
    }
    dbg.stop();
  }
  auto ops = read_ops(dir);
  auto mul_ = with_name(ops, "aten::mul_");
  std::vector<OpRecord> add_;
  for (const auto& r : with_name(ops, "aten::add_"))
    if (r.depth == 0 && r.inputs.size() >= 2 && r.inputs[1].is_tensor()) add_.push_back(r);
  REQUIRE(mul_.size() == 4);  // clip: weight, bias per step
  REQUIRE(add_.size() == 4);  // SGD: p.add_(grad, -lr)
  for (size_t i = 0; i < 4; ++i) {
    INFO("step " << i / 2 << " parameter " << i % 2);
    const at::Tensor& before = pre[i / 2][i % 2];
    const at::Tensor& after = post[i / 2][i % 2];
    REQUIRE(!at::equal(before, after));
    check_stats(*mul_[i].inputs.at(0).tensor, before);
    check_stats(*mul_[i].outputs.at(0).tensor, after);
    check_stats(*add_[i].inputs.at(1).tensor, after);
  }
  auto meta = read_meta(dir);
  CHECK(meta["counters"]["stale"] == 0);
  CHECK(meta["counters"]["errors"] == 0);
}
