// Writes a synthetic dump with the real DumpWriter, for the report's browser test and for
// sizing the report on long runs. Torch-free: the values are made up, the files are real.
//
//   precprobe_make_dump DIR [--steps N] [--op-steps N] [--params N] [--overflow-step S]
//                           [--perturb X] [--diverge-seq K]
//
// Each step runs a tiny MLP's ops (forward, then backward) on rank 0; at --overflow-step
// (only), aten::mul at seq 4 (scope "model/head") produces +Inf from finite inputs and every
// later op of that step carries NaN. The scaler backs off on that step and grows every 2000
// clean steps; the gradient monitor's norms go non-finite on that step and a watchpoint
// fires every 5000 steps. --perturb multiplies the output mean of ops from seq --diverge-seq
// on by (1 + X·(seq - K + 1)), making a "second run" whose first divergent op is seq K.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "precprobe/writer.h"

namespace {

struct Args {
  std::string dir;
  int64_t steps = 50;
  int64_t op_steps = -1;  // steps that get op records (-1: all)
  int params = 4;
  int64_t overflow_step = 30;
  double perturb = 0;
  int64_t diverge_seq = 6;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--steps"))
      a.steps = std::atoll(next());
    else if (!std::strcmp(argv[i], "--op-steps"))
      a.op_steps = std::atoll(next());
    else if (!std::strcmp(argv[i], "--params"))
      a.params = std::atoi(next());
    else if (!std::strcmp(argv[i], "--overflow-step"))
      a.overflow_step = std::atoll(next());
    else if (!std::strcmp(argv[i], "--perturb"))
      a.perturb = std::atof(next());
    else if (!std::strcmp(argv[i], "--diverge-seq"))
      a.diverge_seq = std::atoll(next());
    else if (argv[i][0] != '-' && a.dir.empty())
      a.dir = argv[i];
    else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      std::exit(2);
    }
  }
  if (a.dir.empty()) {
    std::fprintf(stderr, "usage: precprobe_make_dump DIR [options]\n");
    std::exit(2);
  }
  return a;
}

precprobe::TensorStats stats(std::vector<int64_t> shape, double center, double spread, bool inf,
                             bool nan) {
  precprobe::TensorStats t;
  t.dtype = "Float";
  t.shape = std::move(shape);
  t.numel = 1;
  for (int64_t d : t.shape) t.numel *= d;
  t.min = center - spread;
  t.max = center + spread;
  t.mean = center;
  t.norm = std::sqrt(static_cast<double>(t.numel)) * (std::fabs(center) + spread / 2);
  t.pinf = inf ? 3 : 0;
  t.nan = nan ? t.numel / 2 : 0;
  t.pos = t.numel / 2;
  t.neg = t.numel - t.pos - t.pinf - t.nan;
  return t;
}

precprobe::Arg targ(precprobe::TensorStats t) {
  precprobe::Arg a;
  a.tensor = std::move(t);
  return a;
}

struct OpSpec {
  const char* op;
  precprobe::Direction dir;
  const char* scope;
  const char* node;
};

const OpSpec kOps[] = {
    {"aten::linear", precprobe::Direction::kForward, "model/fc1", ""},
    {"aten::relu", precprobe::Direction::kForward, "model/fc1", ""},
    {"aten::linear", precprobe::Direction::kForward, "model/fc2", ""},
    {"aten::relu", precprobe::Direction::kForward, "model/fc2", ""},
    {"aten::mul", precprobe::Direction::kForward, "model/head", ""},
    {"aten::log_softmax", precprobe::Direction::kForward, "model/head", ""},
    {"aten::nll_loss", precprobe::Direction::kForward, "loss", ""},
    {"aten::nll_loss_backward", precprobe::Direction::kBackward, "", "NllLossBackward0"},
    {"aten::_log_softmax_backward_data", precprobe::Direction::kBackward, "",
     "LogSoftmaxBackward0"},
    {"aten::mul", precprobe::Direction::kBackward, "", "MulBackward0"},
    {"aten::threshold_backward", precprobe::Direction::kBackward, "", "ReluBackward0"},
    {"aten::mm", precprobe::Direction::kBackward, "", "AddmmBackward0"},
    {"aten::threshold_backward", precprobe::Direction::kBackward, "", "ReluBackward0"},
    {"aten::mm", precprobe::Direction::kBackward, "", "AddmmBackward0"},
};

void write_ops(precprobe::DumpWriter& w, const Args& a, int64_t step) {
  const bool overflow = step == a.overflow_step;
  bool poisoned = false;
  std::map<std::pair<std::string, int>, int64_t> calls;
  precprobe::TensorStats prev_out;
  for (int64_t seq = 0; seq < static_cast<int64_t>(std::size(kOps)); ++seq) {
    const OpSpec& spec = kOps[seq];
    precprobe::OpRecord r;
    r.step = step;
    r.seq = seq;
    r.op = spec.op;
    r.dir = spec.dir;
    r.scope = spec.scope;
    r.node = spec.node;
    r.seqnr = seq < 7 ? seq : 13 - seq;
    r.call = calls[{r.op, static_cast<int>(r.dir)}]++;
    // Each op's input is the previous op's output (the first op reads fresh data), so a
    // perturbation introduced at --diverge-seq is inherited by every later op.
    const double center =
        0.1 * static_cast<double>(seq + 1) + 0.001 * static_cast<double>(step % 97);
    const double factor =
        seq >= a.diverge_seq ? 1 + a.perturb * static_cast<double>(seq - a.diverge_seq + 1) : 1;
    const bool makes_inf = overflow && seq == 4;
    precprobe::TensorStats in = seq == 0 ? stats({64, 128}, 0.05, 0.5, false, false) : prev_out;
    in.param = seq == 0 ? "fc1.weight" : (seq == 2 ? "fc2.weight" : "");
    r.inputs.push_back(targ(std::move(in)));
    r.inputs.push_back({std::nullopt, "2"});
    prev_out = stats({64, 128}, center * factor, 1.0 + 10.0 * static_cast<double>(seq), makes_inf,
                     poisoned);
    r.outputs.push_back(targ(prev_out));
    // The forward ops' outputs are the model's activations, which the op watchpoints judge.
    r.outputs.back().tensor->requires_grad = spec.dir == precprobe::Direction::kForward;
    w.submit(std::move(r));
    poisoned = poisoned || makes_inf;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  precprobe::WriterOptions wo;
  wo.dir = a.dir + "/rank0";
  wo.overwrite = true;
  precprobe::DumpWriter w(wo);
  // The fields PrecisionDebugger writes (src/probe/debugger/debugger.cpp), with made-up values.
  w.write_meta(
      R"({"format_version":2,"precprobe_version":"synthetic","torch_version":"none",)"
      R"("rank":0,"world_size":1,"task":"statistics","level":"L1","device":"cpu",)"
      R"("host":"make_dump","state":"stopped","step":)" +
      std::to_string(a.steps) +
      R"(,"config":{"task":"statistics","level":"L1","step":[],"summary_mode":"statistics"},)"
      R"("seed_report":{"seed":1234,"deterministic":true,"set":["std::mt19937","torch"]},)"
      R"("writer":{"records_written":0,"records_dropped":0}})");
  double scale = 65536.0;
  int64_t clean = 0;
  for (int64_t step = 0; step < a.steps; ++step) {
    if (a.op_steps < 0 || step < a.op_steps || step == a.overflow_step) write_ops(w, a, step);
    const bool inf = step == a.overflow_step || (step > 0 && step % 7919 == 0);
    for (int p = 0; p < a.params; ++p) {
      precprobe::GradRecord g;
      g.step = step;
      g.param = "layer" + std::to_string(p / 2) + (p % 2 ? ".bias" : ".weight");
      g.grad_norm = std::exp(-0.00003 * static_cast<double>(step)) * (1.0 + p) *
                    (1.0 + 0.2 * std::sin(0.01 * static_cast<double>(step) + p));
      g.grad_abs_max = g.grad_norm / 3;
      g.grad_inf = inf && p == 0 ? 5 : 0;
      g.grad_nan = inf && p == 1 ? 7 : 0;
      g.weight_norm = 10.0 + p;
      if (step > 0 && step % 5000 == 0 && p == 0) g.watch = {"grad_norm>limit"};
      w.submit(std::move(g));
    }
    precprobe::ScalerRecord s;
    s.step = step;
    s.found_inf = inf;
    s.nonfinite_params = inf ? 2 : 0;
    if (inf) s.bad_params = {"layer0.weight", "layer0.bias"};
    s.scale_before = scale;
    s.skipped = inf;
    if (inf) {
      scale /= 2;
      clean = 0;
      s.event = "backoff";
    } else if (++clean == 2000) {
      scale *= 2;
      clean = 0;
      s.event = "growth";
    }
    s.scale_after = scale;
    s.growth_tracker = clean;
    w.submit(std::move(s));
    precprobe::ScalarRecord loss;
    loss.step = step;
    loss.name = "loss";
    loss.value = 2.3 * std::exp(-0.0005 * static_cast<double>(step)) + 0.1 +
                 (step == a.overflow_step ? 5.0 : 0.0);
    w.submit(std::move(loss));
    // A second scalar the report must chart too: a learning rate halved every 20 steps.
    precprobe::ScalarRecord lr;
    lr.step = step;
    lr.name = "lr";
    lr.value = 1e-3 * std::pow(0.5, static_cast<double>(step / 20));
    w.submit(std::move(lr));
  }
  w.close();
  const auto c = w.counters();
  std::printf("%s: %llu records, %llu dropped, %llu bytes\n", a.dir.c_str(),
              static_cast<unsigned long long>(c.records_written),
              static_cast<unsigned long long>(c.records_dropped),
              static_cast<unsigned long long>(c.bytes_compressed));
  return c.failed || c.records_dropped ? 1 : 0;
}
