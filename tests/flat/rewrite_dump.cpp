// precprobe_rewrite_dump IN OUT [--extra]: reads the dump IN (any format version the reader
// reads) and writes every rank again with the current DumpWriter to OUT, meta.json
// included with its format_version set to the writer's. The records are those the probe
// wrote into IN, field for field; only their encoding changes (format_version 1 -> 2).
//
// --extra appends, to every rank, one record per stream whose numeric fields hold +-Inf
// and NaN where the probe's own runs rarely do (a tensor norm that overflowed, an infinite
// loss scale, a NaN loss, an infinite scalar argument), so the flat readers' tests see
// every kind of non-finite value.
//
// Used by the flat-reading tests (tests/flat/tests.cmake) and to convert a real epoch's
// dump for timing pandas, DuckDB and `precprobe export` on format_version 2.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "precprobe/reader.h"
#include "precprobe/writer.h"

namespace fs = std::filesystem;
using namespace precprobe;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void add_extra(DumpWriter& w, int64_t step) {
  OpRecord r;
  r.step = step;
  r.seq = 1000000;
  r.op = "aten::clamp";
  TensorStats t;
  t.dtype = "Double";
  t.shape = {4};
  t.numel = 4;
  t.pos = 3;
  t.pinf = 1;
  t.min = 1e300;
  t.max = 1.7e308;
  t.mean = kInf;  // float64 overflow of the sum of the finite values
  t.norm = kInf;
  r.inputs.push_back(Arg{t, {}});
  r.inputs.push_back(Arg{std::nullopt, "\"-inf\""});  // clamp(min=-inf)
  r.inputs.push_back(Arg{std::nullopt, "\"inf\""});   // clamp(max=inf)
  TensorStats nan = t;
  nan.pos = 0;
  nan.pinf = 0;
  nan.nan = 4;
  nan.min = nan.max = nan.mean = nan.norm = kNaN;  // no finite element: undefined
  r.outputs.push_back(Arg{nan, {}});
  w.submit(std::move(r));

  ScalerRecord s;
  s.step = step;
  s.found_inf = true;
  s.nonfinite_params = 1;
  s.bad_params = {"fc1.weight"};
  s.grad_norm_scaled = kInf;
  s.grad_norm = kNaN;
  s.scale_before = kInf;
  s.scale_after = -kInf;
  s.skipped = true;
  s.event = "backoff";
  w.submit(std::move(s));

  GradRecord g;
  g.step = step;
  g.param = "fc1.weight";
  g.grad_norm = kInf;
  g.grad_abs_max = kInf;
  g.grad_abs_mean = kNaN;
  g.grad_nan = 1;
  g.grad_inf = 1;
  g.weight_norm = -kInf;
  g.update_ratio = kNaN;
  w.submit(std::move(g));

  ScalarRecord v;
  v.step = step;
  v.name = "loss";
  v.value = kNaN;
  w.submit(std::move(v));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4 || (argc == 4 && std::string(argv[3]) != "--extra")) {
    std::cerr << "usage: precprobe_rewrite_dump IN OUT [--extra]\n";
    return 2;
  }
  const bool extra = argc == 4;
  try {
    DumpReader reader(argv[1]);
    for (const RankInfo& rank : reader.ranks()) {
      WriterOptions o;
      o.dir = (fs::path(argv[2]) / ("rank" + std::to_string(rank.rank))).string();
      o.overwrite = true;
      DumpWriter w(o);
      nlohmann::json meta =
          rank.meta_json.empty() ? nlohmann::json::object() : nlohmann::json::parse(rank.meta_json);
      meta["format_version"] = dump_format_version(OpsEncoding::kJsonLines);
      meta["rank"] = rank.rank;
      meta["world_size"] = rank.world_size;
      w.write_meta(meta.dump(1));
      RecordFilter only;
      only.ranks = {rank.rank};
      int64_t last_step = 0;
      reader.for_each_op(only, [&](const OpRecord& r) {
        last_step = r.step;
        w.submit(OpRecord(r));
        return true;
      });
      reader.for_each_scaler(only, [&](const ScalerRecord& r) {
        w.submit(ScalerRecord(r));
        return true;
      });
      reader.for_each_grad(only, [&](const GradRecord& r) {
        w.submit(GradRecord(r));
        return true;
      });
      reader.for_each_scalar(only, [&](const ScalarRecord& r) {
        w.submit(ScalarRecord(r));
        return true;
      });
      if (extra) add_extra(w, last_step + 1);
      w.close();
    }
  } catch (const std::exception& e) {
    std::cerr << "precprobe_rewrite_dump: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
