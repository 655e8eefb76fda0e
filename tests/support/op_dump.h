// Op records for the compare tests, written to a dump directory with the real DumpWriter
// (core and CLI tests): a step is a list of OpLines; seq and the per-(op, direction) call
// index are numbered as the probe numbers them.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "precprobe/records.h"
#include "precprobe/writer.h"

namespace precprobe::test {

/// Statistics of a float tensor of `shape` whose values are set by `tag`: distinct tags give
/// distinct statistics, equal tags equal ones. `param` names the parameter it is.
inline Arg tensor(std::vector<int64_t> shape, double tag, std::string param = "") {
  TensorStats t;
  t.dtype = "Float";
  t.numel = 1;
  for (int64_t d : shape) t.numel *= d;
  t.shape = std::move(shape);
  t.pos = t.numel;
  t.min = tag;
  t.max = 2 * tag + 1;
  t.mean = 1.5 * tag + 0.25;
  t.norm = t.mean * static_cast<double>(t.numel);
  t.param = std::move(param);
  return Arg{std::move(t), ""};
}

struct OpLine {
  std::string op;
  Direction dir = Direction::kForward;
  std::vector<Arg> in, out;
  uint32_t thread = 0;
};

inline OpLine fwd(std::string op, std::vector<Arg> in, std::vector<Arg> out) {
  return OpLine{std::move(op), Direction::kForward, std::move(in), std::move(out)};
}

inline OpLine bwd(std::string op, std::vector<Arg> in, std::vector<Arg> out) {
  return OpLine{std::move(op), Direction::kBackward, std::move(in), std::move(out)};
}

/// The records of one step of rank 0: seq in order, call index per (op, direction).
inline std::vector<OpRecord> step_records(int64_t step, const std::vector<OpLine>& lines) {
  std::map<std::pair<std::string, Direction>, int64_t> calls;
  std::vector<OpRecord> out;
  for (const OpLine& l : lines) {
    OpRecord r;
    r.step = step;
    r.seq = static_cast<int64_t>(out.size());
    r.op = l.op;
    r.dir = l.dir;
    r.call = calls[{l.op, l.dir}]++;
    r.thread = l.thread;
    r.inputs = l.in;
    r.outputs = l.out;
    out.push_back(std::move(r));
  }
  return out;
}

inline const std::vector<int64_t> kAct = {8, 64, 4, 4}, kWeight = {64, 64, 3, 3}, kChannels = {64};

// The backward of one ResNet block as LibTorch runs it: each parameter's gradient reaches
// AccumulateGrad, which takes the incoming gradient over (aten::detach) when nothing else
// holds it and copies it (aten::new_empty_strided + aten::copy_) otherwise. `copied` names
// the parameters whose gradient was copied. Each gradient has its own values (tags).
inline std::vector<OpLine> block_backward(const std::set<std::string>& copied) {
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

/// Writes a one-rank dump (rank0/ under `dir`) holding `steps`: step -> its ops in order.
inline void write_op_dump(const std::string& dir,
                          const std::map<int64_t, std::vector<OpLine>>& steps) {
  WriterOptions o;
  o.dir = dir + "/rank0";
  DumpWriter w(o);
  w.write_meta(R"({"format_version":1,"rank":0,"world_size":1})");
  for (const auto& [step, lines] : steps) {
    for (OpRecord& r : step_records(step, lines)) w.submit(std::move(r));
  }
  w.close();
}

}  // namespace precprobe::test
