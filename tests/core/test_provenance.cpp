// Provenance (src/core/analysis/provenance.h): which earlier op of a group made the tensor an
// op reads, recognised by its statistics. Where several earlier ops made tensors of the same
// statistics, the latest before the reader is the one; an op's own or a later op's outputs,
// an uninitialized output, and statistics that share a digest but differ are never it.
#include "analysis/provenance.h"
#include "precprobe_catch.h"

using namespace precprobe;  // NOLINT(google-build-using-namespace): test file
using precprobe::analysis_detail::Provenance;

namespace {

TensorStats stats(double max, int64_t zero = 0) {
  TensorStats t;
  t.dtype = "Float";
  t.device = "cpu";
  t.shape = {2, 3};
  t.numel = 6;
  t.zero = zero;
  t.pos = 6 - zero;
  t.min = 0.5;
  t.max = max;
  t.mean = 1;
  t.norm = 2.5;
  return t;
}

OpRecord op(const char* name, std::vector<TensorStats> in, std::vector<TensorStats> out) {
  OpRecord r;
  r.op = name;
  for (TensorStats& t : in) r.inputs.push_back(Arg{std::move(t), ""});
  r.inputs.push_back(Arg{std::nullopt, "1"});  // a value: never made by an op
  for (TensorStats& t : out) r.outputs.push_back(Arg{std::move(t), ""});
  return r;
}

}  // namespace

TEST_CASE("provenance names the latest earlier op that made the statistics read", "[compare]") {
  const TensorStats x = stats(4), y = stats(7);
  TensorStats x_hashed = x, x_other_hash = x;
  x_hashed.hash = 11;
  x_other_hash.hash = 12;
  const std::vector<OpRecord> ops{
      op("aten::relu", {x}, {x}),    // 0: reads x (made before the group), makes x
      op("aten::mul", {x}, {y, x}),  // 1: reads 0's x, makes y and x again
      op("aten::empty", {}, {x}),    // 2: x's statistics, but uninitialized memory
      op("aten::add", {x, y, stats(4, 1)}, {stats(9)}),       // 3
      op("aten::sub", {stats(9), x_hashed}, {x_other_hash}),  // 4
      op("aten::neg", {x_other_hash, x_hashed}, {}),          // 5
  };
  const Provenance p(ops);
  CHECK(p.producer(0, 0) == -1);  // nothing before it; its own output does not count
  CHECK(p.producer(1, 0) == 0);
  CHECK(p.producer(3, 0) == 1);  // 0 and 1 made x: the latest; 2's x is not a tensor's values
  CHECK(p.producer(3, 1) == 1);
  CHECK(p.producer(3, 2) == -1);  // the digest of x (counts are not in it), not its statistics
  CHECK(p.producer(3, 3) == -1);  // a value
  CHECK(p.producer(3, 9) == -1);  // no such input
  CHECK(p.producer(4, 0) == 3);
  CHECK(p.producer(4, 1) == 1);  // a hash on one side only: the statistics decide
  CHECK(p.producer(5, 0) == 4);
  CHECK(p.producer(5, 1) == 1);  // 4's output has another hash: not it
}
