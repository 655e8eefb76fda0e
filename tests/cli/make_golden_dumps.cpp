// Writes the small synthetic dumps under tests/data/cli/ that the CLI tests read:
//   precprobe_make_golden_dumps <tests/data/cli>
// They are written with the real DumpWriter, so the format is real; the records are made
// up (a 3-op MLP step) until dumps from the real probe replace them. Deterministic.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "core/analysis_fixtures.h"
#include "precprobe/writer.h"

using namespace precprobe;
using precprobe::test::kInf;
using precprobe::test::kNaN;
using precprobe::test::scaled;
using precprobe::test::targ;
namespace fs = std::filesystem;

namespace {

std::string meta(int rank, int world) {
  return R"({"format_version":1,"rank":)" + std::to_string(rank) + R"(,"world_size":)" +
         std::to_string(world) +
         R"(,"versions":{"precprobe":"0.1.0","torch":"synthetic"},)"
         R"("generator":"tests/cli/make_golden_dumps.cpp",)"
         R"("seed":{"seed":1234,"deterministic":true},)"
         R"("config":{"task":"statistics","level":"L2"},)"
         R"("writer":{"records_written":0,"records_dropped":0}})";
}

OpRecord op(int64_t step, int64_t seq, const char* name, int64_t call, std::vector<Arg> in,
            std::vector<Arg> out, int32_t depth = 0, Direction dir = Direction::kForward) {
  OpRecord r;
  r.step = step;
  r.seq = seq;
  r.op = name;
  r.call = call;
  r.depth = depth;
  r.dir = dir;
  r.thread = dir == Direction::kBackward ? 1 : 0;
  r.scope = dir == Direction::kForward ? "mlp/fc1" : "";
  r.inputs = std::move(in);
  r.outputs = std::move(out);
  return r;
}

Arg param(const std::vector<double>& v, const char* name) {
  Arg a = targ(v);
  a.tensor->param = name;
  a.tensor->requires_grad = true;
  return a;
}

struct Variant {
  double mm_factor_step1 = 1.0;  ///< scales aten::mm's output at step 1 (and what follows)
  bool extra_op = false;         ///< inserts an aten::clone in step 0
  bool overflow = false;         ///< aten::addmm inside aten::linear overflows at step 1
};

// One training step of a tiny MLP: linear(addmm), relu, sum; backward mul.
void write_step(DumpWriter& w, int64_t step, const Variant& v) {
  const Arg x = targ({1, -2, 3, 0.5}), wt = param({0.5, -1, 2, 0.25}, "fc1.weight");
  const Arg b = param({0.1, 0.1}, "fc1.bias");
  Arg y = targ({0.6 + step, -2.1, 6.1, 0.35});
  const double f = step == 1 ? v.mm_factor_step1 : 1.0;
  int64_t seq = 0;
  if (v.extra_op && step == 0) w.submit(op(step, seq++, "aten::clone", 0, {x}, {x}));
  const bool bad = v.overflow && step >= 1;
  Arg h = bad ? targ({kInf, -2.1, 6.1, 0.35}) : scaled(y, f);
  // L2 nesting: aten::linear (depth 0) runs aten::t and aten::addmm (depth 1). Records are
  // in seq (start) order, as the probe writes them.
  const Arg in_x = step >= 2 && v.overflow ? targ({kNaN, -2, 3, 0.5}) : x;
  w.submit(op(step, seq++, "aten::linear", 0, {in_x, wt, b}, {h}, 0));
  w.submit(op(step, seq++, "aten::t", 0, {wt}, {targ({0.5, 2, -1, 0.25})}, 1));
  w.submit(op(step, seq++, "aten::addmm", 0, {b, in_x, wt}, {h}, 1));
  Arg r = bad ? targ({kInf, 0, 6.1, 0.35}) : scaled(targ({0.6 + step, 0, 6.1, 0.35}), f);
  w.submit(op(step, seq++, "aten::relu", 0, {h}, {r}));
  Arg s = bad ? targ({kInf}) : scaled(targ({7.05 + step}), f);
  w.submit(op(step, seq++, "aten::sum", 0, {r}, {s}));
  Arg g = bad ? targ({kNaN, 0, 1, 1}) : targ({1, 0, 1, 1});
  w.submit(op(step, seq++, "aten::mul", 0, {targ({1, 0, 1, 1}), targ({1})}, {g}, 0,
              Direction::kBackward));
}

void write_aux(DumpWriter& w, int64_t step, const Variant& v) {
  ScalerRecord sc;
  sc.step = step;
  sc.scale_before = step == 0 ? 65536 : 32768;
  sc.found_inf = step == 0 || (v.overflow && step >= 1);
  sc.skipped = sc.found_inf;
  sc.scale_after = sc.found_inf ? sc.scale_before / 2 : sc.scale_before;
  sc.event = sc.found_inf ? "backoff" : "";
  sc.nonfinite_params = sc.found_inf ? 1 : 0;
  if (sc.found_inf) sc.bad_params = {"fc1.weight"};
  w.submit(std::move(sc));
  for (const char* name : {"fc1.weight", "fc1.bias"}) {
    GradRecord g;
    g.step = step;
    g.param = name;
    g.grad_norm = 0.5 * (step + 1);
    g.grad_abs_max = 0.4 * (step + 1);
    g.grad_abs_mean = 0.1;
    g.weight_norm = 2.3;
    g.update_ratio = step == 0 ? 0 : 1e-3;
    if (v.overflow && step >= 1 && std::string(name) == "fc1.weight") {
      g.grad_nan = 2;
      g.watch = {"nonfinite"};
    }
    w.submit(std::move(g));
  }
  ScalarRecord loss;
  loss.step = step;
  loss.name = "loss";
  loss.value = 1.0 / (step + 1);
  w.submit(std::move(loss));
}

void write_dump(const fs::path& dir, const Variant& v, int world = 1) {
  fs::remove_all(dir);
  for (int rank = 0; rank < world; ++rank) {
    WriterOptions o;
    o.dir = (dir / ("rank" + std::to_string(rank))).string();
    DumpWriter w(o);
    w.write_meta(meta(rank, world));
    Variant mine = v;
    mine.overflow = v.overflow && rank == 0;  // only rank 0 overflows
    for (int64_t step = 0; step < 3; ++step) {
      write_step(w, step, mine);
      write_aux(w, step, mine);
      w.flush();
    }
    w.close();
  }
}

void write_text(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: precprobe_make_golden_dumps <out dir>\n";
    return 2;
  }
  const fs::path out = argv[1];
  write_dump(out / "clean", Variant{});
  write_dump(out / "overflow", Variant{1.0, false, true}, 2);
  write_dump(out / "diverged_1pct", Variant{1.01, false, false});
  write_dump(out / "extra_op", Variant{1.0, true, false});
  // A copy of `clean` whose ops stream lost its tail (a process killed mid-write).
  write_dump(out / "truncated", Variant{});
  const fs::path ops = out / "truncated/rank0/ops.jsonl.zst";
  fs::resize_file(ops, fs::file_size(ops) - 7);
  fs::remove_all(out / "corrupt_meta");
  write_text(out / "corrupt_meta/rank0/meta.json", "{\"format_version\": 1, \"rank\": ");
  fs::remove_all(out / "future_version");
  write_text(out / "future_version/rank0/meta.json", R"({"format_version":99,"rank":0})");
  std::cout << "wrote golden dumps under " << out.string() << '\n';
  return 0;
}
