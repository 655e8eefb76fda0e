// A small dump written by hand as the debugger writes one with "record": "on_anomaly": the
// op records of the replayed step 37, the saved inputs of some of them, the loss scalars and
// one "anomaly" event. Used by test_repro (core/CLI) and precprobe_make_anomaly_dump (the
// LibTorch end-to-end test, which compiles the program `precprobe repro` writes).
//
// Step 37 on rank 0, in seq order:
//   0 aten::mul.0.forward   finite in, finite out (no files)
//   1 aten::exp.0.forward   in0 Float [2, 2] {1, 100, -3, 0.5}: exp(100) is +Inf in float32
//                           (the origin; in0 saved)
//   2 aten::sum.0.forward   inherits the Inf; value args [1], false, null (no files saved)
//   3 aten::add.0.forward   BFloat16 inputs (saved as <f4) and alpha 1
//   4 aten::cat.0.forward   a Tensor[] of two Long tensors (li 0, 1) and dim 0
#pragma once

#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "precprobe/records.h"
#include "precprobe/writer.h"

namespace precprobe::test {

// A .npy v1.0 file, as the probe's npy_file.cpp lays it out.
inline std::string npy_bytes(const std::string& descr, const std::vector<int64_t>& shape,
                             const void* data, size_t bytes) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dict += ',';
  dict += "), }";
  const size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string h("\x93NUMPY\x01\x00", 8);
  h += static_cast<char>(dict.size() & 0xff);
  h += static_cast<char>((dict.size() >> 8) & 0xff);
  h += dict;
  h.append(static_cast<const char*>(data), bytes);
  return h;
}

inline void write_zst(const std::filesystem::path& path, const std::string& raw) {
  std::string packed(ZSTD_compressBound(raw.size()), '\0');
  const size_t n = ZSTD_compress(&packed[0], packed.size(), raw.data(), raw.size(), 3);
  if (ZSTD_isError(n)) throw std::runtime_error("zstd failed");
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary).write(packed.data(), static_cast<std::streamsize>(n));
}

inline TensorStats stats(const std::string& dtype, std::vector<int64_t> shape,
                         const std::vector<double>& v, int64_t li = -1) {
  TensorStats t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.numel = static_cast<int64_t>(v.size());
  t.list_index = li;
  bool any = false;
  double sum = 0, sq = 0;
  for (double x : v) {
    if (std::isnan(x)) {
      ++t.nan;
      continue;
    }
    if (std::isinf(x)) {
      ++(x > 0 ? t.pinf : t.ninf);
      continue;
    }
    t.zero += x == 0;
    t.neg += x < 0;
    t.pos += x > 0;
    t.min = any ? std::min(t.min, x) : x;
    t.max = any ? std::max(t.max, x) : x;
    any = true;
    sum += x;
    sq += x * x;
  }
  const int64_t finite = t.numel - t.non_finite();
  t.mean = finite ? sum / static_cast<double>(finite) : NAN;
  t.norm = std::sqrt(sq);
  if (!any) t.min = t.max = NAN;
  return t;
}

inline Arg tensor(TensorStats t) {
  Arg a;
  a.tensor = std::move(t);
  return a;
}
inline Arg value(const std::string& json) {
  Arg a;
  a.value = json;
  return a;
}

inline OpRecord op(int64_t seq, const std::string& name, const std::string& ovl,
                   std::vector<Arg> in, std::vector<Arg> out) {
  OpRecord r;
  r.step = 37;
  r.seq = seq;
  r.op = name;
  r.overload = ovl;
  r.inputs = std::move(in);
  r.outputs = std::move(out);
  return r;
}

/// The raw .npy bytes of the saved inputs (file name -> bytes), to compare with repro's.
struct AnomalyDumpFiles {
  std::string exp_in0, add_in0, add_in1, cat_in0, cat_in1;
};

/// The anomaly event the dump holds.
inline AnomalyEvent anomaly_event() {
  AnomalyEvent a;
  a.step = 37;
  a.name = std::string(kAnomalyEventName);
  a.trigger = "loss_nonfinite";
  a.reproduced = true;
  a.origin = "aten::exp";
  a.origin_record = "aten::exp.0.forward";
  a.classification = "range";
  a.why = "float64 result reaches 1.2e+39, beyond float32's max";
  a.trigger_detail = "loss = nan";
  a.replay = 1;
  return a;
}

/// Writes the dump into `dir` (created; must not exist or be empty). With `with_anomaly`
/// false the events hold only the loss (a dump without a replay).
inline AnomalyDumpFiles write_anomaly_dump(const std::string& dir, bool with_anomaly = true) {
  namespace fs = std::filesystem;
  const fs::path rank = fs::path(dir) / "rank0";
  const double inf = INFINITY;
  {
    WriterOptions wo;
    wo.dir = rank.string();
    DumpWriter w(wo);
    w.write_meta(R"({"format_version":2,"rank":0,"world_size":1,"task":"statistics","level":"L1",)"
                 R"("torch_version":"1.13.1","config":{"record":"on_anomaly"}})");
    const std::vector<double> x{1, 100, -3, 0.5};
    const std::vector<double> ex{std::exp(1.0), inf, std::exp(-3.0), std::exp(0.5)};
    w.submit(op(0, "aten::mul", "Tensor",
                {tensor(stats("Float", {2, 2}, {0.5, 50, -1.5, 0.25})), value("2.0")},
                {tensor(stats("Float", {2, 2}, x))}));
    w.submit(op(1, "aten::exp", "", {tensor(stats("Float", {2, 2}, x))},
                {tensor(stats("Float", {2, 2}, ex))}));
    w.submit(op(2, "aten::sum", "dim_IntList",
                {tensor(stats("Float", {2, 2}, ex)), value("[1]"), value("false"), value("null")},
                {tensor(stats("Float", {2}, {inf, std::exp(-3.0) + std::exp(0.5)}))}));
    w.submit(op(3, "aten::add", "Tensor",
                {tensor(stats("BFloat16", {3}, {1, 2, 3})),
                 tensor(stats("BFloat16", {3}, {4, 5, 6})), value("1")},
                {tensor(stats("BFloat16", {3}, {5, 7, 9}))}));
    w.submit(
        op(4, "aten::cat", "",
           {tensor(stats("Long", {2}, {1, 2}, 0)), tensor(stats("Long", {1}, {3}, 1)), value("0")},
           {tensor(stats("Long", {3}, {1, 2, 3}))}));
    w.close();
  }
  AnomalyDumpFiles f;
  const fs::path t = rank / "tensors" / "step37";
  const float xf[4] = {1.0f, 100.0f, -3.0f, 0.5f};
  f.exp_in0 = npy_bytes("<f4", {2, 2}, xf, sizeof xf);
  write_zst(t / "aten::exp.0.forward.in0.npy.zst", f.exp_in0);
  const float a0[3] = {1, 2, 3}, a1[3] = {4, 5, 6};
  f.add_in0 = npy_bytes("<f4", {3}, a0, sizeof a0);
  f.add_in1 = npy_bytes("<f4", {3}, a1, sizeof a1);
  write_zst(t / "aten::add.0.forward.in0.npy.zst", f.add_in0);
  write_zst(t / "aten::add.0.forward.in1.npy.zst", f.add_in1);
  const int64_t c0[2] = {1, 2}, c1[1] = {3};
  f.cat_in0 = npy_bytes("<i8", {2}, c0, sizeof c0);
  f.cat_in1 = npy_bytes("<i8", {1}, c1, sizeof c1);
  write_zst(t / "aten::cat.0.forward.in0.npy.zst", f.cat_in0);
  write_zst(t / "aten::cat.0.forward.in1.npy.zst", f.cat_in1);

  std::string events;
  ScalarRecord loss;
  loss.name = "loss";
  loss.step = 36;
  loss.value = 0.75;
  append_json(loss, events);
  loss.step = 37;
  loss.value = NAN;
  append_json(loss, events);
  if (with_anomaly) append_json(anomaly_event(), events);
  write_zst(rank / "events.jsonl.zst", events);
  return f;
}

}  // namespace precprobe::test
