// The op sequences of test_modules.cpp and test_modules_sequential.cpp: one op of a step with
// the module it must be placed in, written out by hand, its record, and the check that both
// the batch and the streaming attribution place each op there.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "analysis/modules.h"
#include "core/analysis_fixtures.h"
#include "precprobe_catch.h"

namespace precprobe::test::modules {

using analysis_detail::attribute_modules;
using analysis_detail::ModuleAttributor;
using analysis_detail::ModuleOrder;

// One op of a step and the module it must be placed in.
struct Op {
  std::string op;
  std::string param;  // the parameter it reads, if any
  std::string want;   // its module
  Direction dir = Direction::kForward;
  int64_t sn = -1;
  std::optional<bool> grad;  // the grad mode it ran under (nullopt: on, as a dump says it)
  bool self_param = false;   // the parameter is its first tensor input (p.add_(...))
  int32_t depth = 0;
  uint32_t thread = 0;
  bool background = false;
  bool optimizer = false;  // in an optimizer's step, as the program told (OpRecord::optimizer)
  std::string placed;      // the module the probe wrote (OpRecord::module)
};

inline Op make(std::string op, std::string want, std::string param) {
  Op o;
  o.op = std::move(op);
  o.param = std::move(param);
  o.want = std::move(want);
  return o;
}

inline Op bwd(std::string op, int64_t sn, std::string want, std::string param = "") {
  Op o = make(std::move(op), std::move(want), std::move(param));
  o.dir = Direction::kBackward;
  o.sn = sn;
  return o;
}

inline Op fwd(std::string op, std::string want, int64_t sn = -1, std::string param = "") {
  Op o = make(std::move(op), std::move(want), std::move(param));
  o.sn = sn;
  return o;
}

// An optimizer's op: grad mode off; `param` updated in place when `self_param`.
inline Op opt(std::string op, std::string want, std::string param = "", bool self_param = true) {
  Op o = make(std::move(op), std::move(want), std::move(param));
  o.grad = false;
  o.self_param = self_param && !o.param.empty();
  return o;
}

inline OpRecord record(const Op& o, int64_t step, int64_t seq) {
  OpRecord r;
  r.step = step;
  r.seq = seq;
  r.op = o.op;
  r.dir = o.dir;
  r.seqnr = o.sn;
  r.depth = o.depth;
  r.thread = o.thread;
  r.background = o.background;
  r.optimizer = o.optimizer;
  r.module = o.placed;
  if (o.dir == Direction::kForward) r.grad = o.grad.value_or(true);
  Arg act = targ({0.5, -0.25});
  act.tensor->requires_grad = true;
  Arg par = targ({0.125, 0.75});
  par.tensor->param = o.param;
  par.tensor->requires_grad = true;
  if (o.param.empty())
    r.inputs = {act};
  else if (o.self_param)
    r.inputs = {par, act};
  else
    r.inputs = {act, par};
  r.outputs = {act};
  return r;
}

inline std::vector<OpRecord> records(const std::vector<Op>& ops, int64_t step = 0) {
  std::vector<OpRecord> out;
  for (size_t k = 0; k < ops.size(); ++k) out.push_back(record(ops[k], step, int64_t(k)));
  return out;
}

// Every op's module, by attribute_modules() and by a stream taken as soon as each is known,
// against the hand-written ones.
inline void check_places(const std::vector<Op>& ops, const ModuleOrder* order = nullptr) {
  std::vector<ModuleOp> in;
  for (const OpRecord& r : records(ops)) in.push_back(analysis_detail::module_op(r));
  const std::vector<std::string> got = attribute_modules(in, order);
  REQUIRE(got.size() == ops.size());
  for (size_t k = 0; k < ops.size(); ++k) {
    INFO("op " << k << " " << ops[k].op);
    CHECK(got[k] == ops[k].want);
  }
  ModuleAttributor stream(order);
  std::vector<std::string> streamed;
  for (const ModuleOp& p : in) {
    stream.add(p);
    while (stream.ready()) streamed.push_back(stream.take());
  }
  stream.end_step();
  while (stream.ready()) streamed.push_back(stream.take());
  CHECK(streamed == got);
  CHECK(stream.waiting() == 0);
}

}  // namespace precprobe::test::modules
