// Every argument shape ATen hands a callback, under every task: TensorList inputs (stack,
// cat), Tensor?[] (index, index_put_), optional tensors left None (batch_norm without
// affine), scalar lists (_foreach_add_), tuple and list outputs with undefined tensors
// (native_batch_norm_backward with an output mask), empty and 0-dim tensors, NaN and ±Inf,
// and an op that throws. A TensorList input must be read at the op's start: the dispatcher
// frees the inputs after the start callbacks, and an overflow_check that read them after the
// op had returned crashed the program in aten::stack (issue 35 of the project's tracker).
//
// Each task runs the same ops; the test asserts no error was counted, the overflow origin,
// and the statistics of the list arguments against a float64 recomputation.
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "debugger_fixture.h"
#include "precprobe/debugger.h"
#include "precprobe_catch.h"

using precprobe::Direction;
using precprobe::OpRecord;
using precprobe::test::options_in;
using precprobe::test::read_ops;
using precprobe::test::reference;
using precprobe::test::with_name;

namespace {

struct Shapes {
  at::Tensor a, b, s, c;
};

// The program that crashed (torch::stack of temporaries), then every other argument shape. Returns
// the tensors the checks need.
Shapes run_ops() {
  Shapes r;
  r.a = at::ones({}) * 1e30;
  r.b = r.a * 1e30;  // inf: the origin
  r.s = at::stack({r.a.detach(), r.b.detach()});
  r.c = at::cat({r.a.view({1}), r.b.view({1})});

  auto x = at::arange(12, at::kFloat).reshape({3, 4});
  // Tensor?[]: a None before a tensor, and index_put_ with such a list.
  auto idx = at::tensor({2, 0}, at::kLong);
  c10::List<c10::optional<at::Tensor>> indices;
  indices.push_back(c10::nullopt);
  indices.push_back(idx);
  auto picked = at::index(x, indices);
  auto y = x.clone();
  y.index_put_(indices, at::full({3, 2}, -1.0f), /*accumulate=*/false);
  // Optional tensors left undefined.
  auto bn = at::batch_norm(x.view({3, 4, 1}), {}, {}, {}, {}, true, 0.1, 1e-5, false);
  // A tuple output with undefined tensors (only grad_input wanted).
  auto mean = x.mean(0);
  auto invstd = at::ones({4});
  auto grads = at::native_batch_norm_backward(at::ones({3, 4}), x, {}, {}, {}, mean, invstd, true,
                                              1e-5, {true, false, false});
  // Scalar lists and tensor lists written in place.
  std::vector<at::Tensor> list{at::zeros({2}), at::full({3}, std::nanf("")), at::empty({0})};
  at::_foreach_add_(list, std::vector<c10::Scalar>{1.0, 2.0, 3.0});
  // List outputs, empty and 0-dim tensors with non-finite values.
  auto parts = at::unbind(x, 0);
  auto chunks = at::split(at::full({5}, -std::numeric_limits<float>::infinity()), 2);
  auto e = at::empty({0, 3}) + 1;
  auto z = at::full({}, std::numeric_limits<float>::quiet_NaN()) * 2;
  auto zs = at::stack({z, z});
  // An op that throws: the end callback still runs, with no outputs.
  try {
    (void)at::mm(at::ones({2, 3}), at::ones({2, 3}));
  } catch (const c10::Error&) {
  }
  try {
    (void)at::stack(std::vector<at::Tensor>{});
  } catch (const c10::Error&) {
  }
  (void)picked;
  (void)bn;
  (void)grads;
  (void)parts;
  (void)chunks;
  (void)e;
  (void)zs;
  return r;
}

precprobe::DebuggerOptions options_for(const precprobe::test::TempDir& dir, precprobe::Task task,
                                       precprobe::Level level, bool async) {
  auto o = options_in(dir, async);
  o.task = task;
  o.level = level;
  o.overflow_nums = -1;
  if (task == precprobe::Task::kTensor) o.list = {"aten::stack", "aten::index"};
  return o;
}

// The statistics of a stack's two inputs and its output, against a float64 recomputation.
void check_stack(const std::vector<OpRecord>& ops, const Shapes& s) {
  auto stacks = with_name(ops, "aten::stack");
  REQUIRE(!stacks.empty());
  const OpRecord& st = stacks.front();
  REQUIRE(st.inputs.size() >= 2);
  REQUIRE(st.inputs[0].tensor);
  REQUIRE(st.inputs[1].tensor);
  CHECK(st.inputs[0].tensor->list_index == 0);
  CHECK(st.inputs[1].tensor->list_index == 1);
  CHECK(st.inputs[0].tensor->max == reference(s.a).max);
  CHECK(st.inputs[1].tensor->pinf == 1);
  REQUIRE(!st.outputs.empty());
  REQUIRE(st.outputs[0].tensor);
  const auto ref = reference(s.s);
  CHECK(st.outputs[0].tensor->pinf == ref.pinf);
  CHECK(st.outputs[0].tensor->max == ref.max);
  CHECK(st.outputs[0].tensor->min == ref.min);
}

}  // namespace

TEST_CASE("statistics, L1 and L2, async and sync: every argument shape", "[arg_shapes]") {
  for (auto level : {precprobe::Level::kL1, precprobe::Level::kL2}) {
    for (bool async : {true, false}) {
      CAPTURE(static_cast<int>(level), async);
      precprobe::test::TempDir dir("arg_shapes");
      precprobe::PrecisionDebugger dbg(
          options_for(dir, precprobe::Task::kStatistics, level, async));
      dbg.start();
      Shapes s = run_ops();
      dbg.step();
      dbg.stop();
      CHECK(dbg.counters().errors == 0);
      auto ops = read_ops(dir);
      check_stack(ops, s);
      // index: the None of the Tensor?[] stays a null argument beside the tensor.
      auto index = with_name(ops, "aten::index");
      REQUIRE(!index.empty());
      REQUIRE(index.front().inputs.size() == 3);
      CHECK(!index.front().inputs[1].tensor);
      REQUIRE(index.front().inputs[2].tensor);
      CHECK(index.front().inputs[2].tensor->list_index == 1);
      CHECK(index.front().inputs[2].tensor->max == 2);
      // native_batch_norm_backward: one defined output, two undefined ones.
      auto nbb = with_name(ops, "aten::native_batch_norm_backward");
      REQUIRE(!nbb.empty());
      REQUIRE(nbb.front().outputs.size() == 3);
      CHECK(nbb.front().outputs[0].tensor);
      CHECK(!nbb.front().outputs[1].tensor);
      CHECK(!nbb.front().outputs[2].tensor);
    }
  }
}

TEST_CASE("overflow_check: TensorList inputs and outputs, the origin found", "[arg_shapes]") {
  for (auto level : {precprobe::Level::kL1, precprobe::Level::kL2}) {
    CAPTURE(static_cast<int>(level));
    precprobe::test::TempDir dir("arg_shapes");
    precprobe::PrecisionDebugger dbg(
        options_for(dir, precprobe::Task::kOverflowCheck, level, true));
    dbg.start();
    for (int i = 0; i < 3; ++i) {  // several runs: the crash depended on freed memory
      (void)run_ops();
      dbg.step();
    }
    dbg.stop();
    CHECK(dbg.counters().errors == 0);
    auto ops = read_ops(dir);
    // The origin of each step is the mul that overflowed; stack and cat only carried the Inf
    // (their inputs held it), the foreach NaN was there before the op.
    REQUIRE(ops.size() >= 3);
    for (const auto& r : ops) {
      CAPTURE(r.op, r.step);
      CHECK(r.inputs_non_finite() == false);
      CHECK(r.outputs_non_finite());
    }
    auto muls = with_name(ops, "aten::mul");
    CHECK(muls.size() >= 3);
    CHECK(with_name(ops, "aten::stack").empty());
    CHECK(with_name(ops, "aten::cat").empty());
  }
}

TEST_CASE("tensor task: list arguments saved and summarised", "[arg_shapes]") {
  precprobe::test::TempDir dir("arg_shapes");
  precprobe::PrecisionDebugger dbg(
      options_for(dir, precprobe::Task::kTensor, precprobe::Level::kL1, true));
  dbg.start();
  Shapes s = run_ops();
  dbg.step();
  dbg.stop();
  CHECK(dbg.counters().errors == 0);
  check_stack(read_ops(dir), s);
}

TEST_CASE("overflow_check: torch::stack of temporaries, as a program writes it", "[arg_shapes]") {
  // torch:: calls (through autograd's kernels), TensorList temporaries, every run of it.
  for (int run = 0; run < 5; ++run) {
    precprobe::test::TempDir dir("arg_shapes");
    auto o = options_in(dir, true);
    o.task = precprobe::Task::kOverflowCheck;
    o.overflow_nums = -1;
    precprobe::PrecisionDebugger dbg(o);
    dbg.start();
    auto a = torch::ones({}) * 1e30;
    auto b = a * 1e30;                                // inf: the origin
    auto s = torch::stack({a.detach(), b.detach()});  // TensorList input, non-finite output
    auto c = torch::cat({a.view({1}), b.view({1})});
    dbg.step();
    dbg.stop();
    CHECK(dbg.counters().errors == 0);
    auto ops = read_ops(dir);
    REQUIRE(ops.size() == 1);
    CHECK(ops[0].op == "aten::mul");
    CHECK(ops[0].outputs[0].tensor->pinf == 1);
    (void)s;
    (void)c;
  }
}

TEST_CASE("overflow_check: a TensorList's inputs are not read after the op returns",
          "[arg_shapes]") {
  // The dispatcher boxes an unboxed call's arguments on its own stack and destroys them right
  // after the start callbacks; this call is dispatched from this file, so a sanitizer build of
  // the tests sees the dispatcher's frame (the old overflow_end read the destroyed TensorList).
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("aten::stack", "")
                       .typed<at::Tensor(at::TensorList, int64_t)>();
  precprobe::test::TempDir dir("arg_shapes");
  auto o = options_in(dir, true);
  o.task = precprobe::Task::kOverflowCheck;
  o.overflow_nums = -1;
  precprobe::PrecisionDebugger dbg(o);
  dbg.start();
  auto a = at::full({2}, 1e30f);
  auto b = a * 1e30;  // inf
  for (int i = 0; i < 20; ++i) {
    auto s = op.call(std::vector<at::Tensor>{a.clone(), b.clone()}, 0);
    CHECK(s.size(0) == 2);
  }
  dbg.step();
  dbg.stop();
  CHECK(dbg.counters().errors == 0);
  auto ops = read_ops(dir);
  REQUIRE(ops.size() == 1);
  CHECK(ops[0].op == "aten::mul");
}
