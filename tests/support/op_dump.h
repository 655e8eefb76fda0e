// Op records for the compare tests, written to a dump directory with the real DumpWriter
// (core and CLI tests): a step is a list of OpLines; seq and the per-(op, direction) call
// index are numbered as the probe numbers them.
#pragma once

#include <cstdint>
#include <map>
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
