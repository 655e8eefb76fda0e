// compare when the runs ran different ops: ops pair by content (op, direction, shapes,
// parameter), never by position, and the places where the sequences differ are reported.
// Dumps are written with the real DumpWriter (support/op_dump.h) and read back.
#include <set>

#include "core/temp_dir.h"
#include "precprobe/analysis.h"
#include "precprobe/reader.h"
#include "precprobe_catch.h"
#include "support/op_dump.h"

using namespace precprobe;        // NOLINT(google-build-using-namespace): test file
using namespace precprobe::test;  // NOLINT(google-build-using-namespace): test helpers

namespace {

const std::vector<int64_t> kAct = {8, 64, 4, 4}, kWeight = {64, 64, 3, 3}, kChannels = {64};

// The backward of one ResNet block as LibTorch runs it: each parameter's gradient reaches
// AccumulateGrad, which takes the incoming gradient over (aten::detach) when nothing else
// holds it and copies it (aten::new_empty_strided + aten::copy_) otherwise. `copied` names
// the parameters whose gradient was copied. Each gradient has its own values (tags).
std::vector<OpLine> block_backward(const std::set<std::string>& copied) {
  std::vector<OpLine> ops;
  auto accumulate = [&](const std::string& param, const std::vector<int64_t>& shape, double tag) {
    if (copied.count(param)) {
      ops.push_back(bwd("aten::new_empty_strided", {tensor(shape, tag)}, {tensor(shape, 0)}));
      ops.push_back(
          bwd("aten::copy_", {tensor(shape, 0), tensor(shape, tag)}, {tensor(shape, tag)}));
    } else {
      ops.push_back(bwd("aten::detach", {tensor(shape, tag)}, {tensor(shape, tag)}));
    }
  };
  ops.push_back(
      bwd("aten::threshold_backward", {tensor(kAct, 1), tensor(kAct, 2)}, {tensor(kAct, 3)}));
  ops.push_back(bwd("aten::native_batch_norm_backward",
                    {tensor(kAct, 3), tensor(kAct, 4), tensor(kChannels, 5, "bn2.weight")},
                    {tensor(kAct, 6), tensor(kChannels, 7), tensor(kChannels, 8)}));
  accumulate("bn2.weight", kChannels, 7);
  accumulate("bn2.bias", kChannels, 8);
  ops.push_back(bwd("aten::convolution_backward",
                    {tensor(kAct, 6), tensor(kAct, 9), tensor(kWeight, 10, "conv2.weight")},
                    {tensor(kAct, 11), tensor(kWeight, 12)}));
  accumulate("conv2.weight", kWeight, 12);
  ops.push_back(bwd("aten::native_batch_norm_backward",
                    {tensor(kAct, 11), tensor(kAct, 13), tensor(kChannels, 14, "bn1.weight")},
                    {tensor(kAct, 15), tensor(kChannels, 16), tensor(kChannels, 17)}));
  accumulate("bn1.weight", kChannels, 16);
  accumulate("bn1.bias", kChannels, 17);
  ops.push_back(bwd("aten::convolution_backward",
                    {tensor(kAct, 15), tensor(kAct, 18), tensor(kWeight, 19, "conv1.weight")},
                    {tensor(kAct, 20), tensor(kWeight, 21)}));
  accumulate("conv1.weight", kWeight, 21);
  return ops;
}

CompareResult compare_written(const std::map<int64_t, std::vector<OpLine>>& a,
                              const std::map<int64_t, std::vector<OpLine>>& b,
                              const CompareOptions& opt) {
  TempDir dir("compare_align");
  write_op_dump(dir / "a", a);
  write_op_dump(dir / "b", b);
  DumpReader ra(dir / "a"), rb(dir / "b");
  return compare_dumps(ra, rb, opt);
}

const OpCompare* paired_with_a_seq(const CompareResult& r, int64_t seq) {
  for (const OpCompare& o : r.ops) {
    if (o.seq_a == seq) return &o;
  }
  return nullptr;
}

}  // namespace

// The case: both runs hold the same ops, once each, in another order (run A copies
// conv2.weight's gradient and takes bn1.weight's over; run B the other way round). Paired by
// name (the k-th aten::detach of A with the k-th of B), conv2.weight's [64, 64, 3, 3]
// gradient was compared with bn1.weight's [64] one ("shape differs").
TEST_CASE("compare pairs the weight gradient with the weight gradient when the ops differ",
          "[compare][align]") {
  CompareOptions opt;
  opt.exact = true;
  const CompareResult r = compare_written({{0, block_backward({"conv2.weight"})}},
                                          {{0, block_backward({"bn1.weight"})}}, opt);
  // Every paired op is the same computation: same shapes, the same values.
  for (const OpCompare& o : r.ops) {
    INFO(o.name << " (A seq " << o.seq_a << ") paired with " << o.name_b << " (B seq " << o.seq_b
                << ")");
    CHECK(o.op == o.name_b.substr(0, o.op.size()));
    for (const ArgCompare& a : o.args) {
      CHECK(a.shape_n == a.shape_b);
      CHECK(a.note.empty());
      CHECK(a.exact);
    }
  }
  CHECK_FALSE(r.first);  // no paired op differs
  CHECK_FALSE(r.identical);
  CHECK(r.differs());  // the sequence difference is a difference
  REQUIRE(r.ops.size() == 9);
  // The weight gradients' ops: conv1's convolution_backward and its AccumulateGrad.
  const OpCompare* conv1 = paired_with_a_seq(r, 10);
  REQUIRE(conv1);
  CHECK(conv1->name == "aten::convolution_backward.1.backward");
  CHECK(conv1->seq_b == 10);
  const OpCompare* conv1_grad = paired_with_a_seq(r, 11);
  REQUIRE(conv1_grad);
  CHECK(conv1_grad->seq_b == 11);
  CHECK(conv1_grad->args[0].shape_n == kWeight);
  // bn1's backward sits one op earlier in B (one op instead of two before it).
  const OpCompare* bn1 = paired_with_a_seq(r, 7);
  REQUIRE(bn1);
  CHECK(bn1->name == "aten::native_batch_norm_backward.1.backward");
  CHECK(bn1->seq_b == 6);
  // The ops of one run only, at their places.
  using U = std::tuple<std::string, int64_t, std::string>;
  std::vector<U> unmatched;
  for (const UnmatchedOp& u : r.unmatched) unmatched.emplace_back(u.side, u.seq, u.name);
  CHECK(unmatched == std::vector<U>{{"a", 5, "aten::new_empty_strided.0.backward"},
                                    {"a", 6, "aten::copy_.0.backward"},
                                    {"b", 5, "aten::detach.2.backward"},
                                    {"a", 8, "aten::detach.2.backward"},
                                    {"b", 7, "aten::new_empty_strided.0.backward"},
                                    {"b", 8, "aten::copy_.0.backward"}});
}
