// Writes a synthetic dump for the reading benchmarks with the core's DumpWriter,
// torch-free: the records of bench_dump_model.h, one flush per step as the debugger does.
//
//   make_bench_dump DIR [--records N] [--noise X] [--overflow-step S [--diverge 1]] [--seed S]
//                   [--level L] [--digests 0|1] [--encoding json|binary]
//
// DIR/rank0/ gets meta.json and the ops, grads and events streams. --records is the number of
// op records (whole steps: rounded up to the end of the step that reaches it). --noise
// perturbs the statistics relatively (the second run of a compare); --overflow-step makes one
// op of that step overflow, and --diverge 1 every later step NaN (a diverged run). Prints what
// it wrote.
#include <precprobe/core.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "bench_dump_model.h"

namespace fs = std::filesystem;
using namespace precprobe;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(
        stderr,
        "usage: make_bench_dump DIR [--records N] [--noise X] [--overflow-step S "
        "[--diverge 1]] [--seed S] [--level L] [--digests 0|1] [--encoding json|binary]\n");
    return 2;
  }
  const std::string dir = argv[1];
  int64_t records = 10'000'000;
  int level = 3;
  bool digests = true;
  OpsEncoding encoding = OpsEncoding::kJsonLines;
  bench::Variant v;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const char* val = argv[i + 1];
    if (a == "--records") {
      records = std::atoll(val);
    } else if (a == "--noise") {
      v.noise = std::atof(val);
    } else if (a == "--overflow-step") {
      v.overflow_step = std::atoll(val);
    } else if (a == "--digests") {
      digests = std::atoi(val) != 0;
    } else if (a == "--diverge") {
      v.diverge = std::atoi(val) != 0;
    } else if (a == "--seed") {
      v.seed = std::strtoull(val, nullptr, 10);
    } else if (a == "--encoding") {
      encoding = std::string(val) == "binary" ? OpsEncoding::kBinary : OpsEncoding::kJsonLines;
    } else if (a == "--level") {
      level = std::atoi(val);
    } else {
      std::fprintf(stderr, "make_bench_dump: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  WriterOptions o;
  o.dir = (fs::path(dir) / "rank0").string();
  o.overwrite = true;
  o.zstd_level = level;
  o.frame_digests = digests;
  o.ops_encoding = encoding;
  DumpWriter w(o);
  RunMeta meta;
  meta.format_version = dump_format_version(encoding);
  meta.producer = "make_bench_dump";
  meta.rank = 0;
  meta.world_size = 1;
  meta.task = "statistics";
  meta.level = "L2";
  meta.device = "cpu";
  meta.ops_grad_mode = true;
  meta.state = "running";
  w.write_meta(meta);
  bench::RunModel model(v);
  int64_t written = 0, step = 0, grads = 0;
  std::vector<OpRecord> ops;
  std::vector<GradRecord> grad_records;
  std::vector<ScalarRecord> scalars;
  while (written < records) {
    ops.clear();
    grad_records.clear();
    scalars.clear();
    model.step(step++, ops, grad_records, scalars);
    for (OpRecord& r : ops) w.submit(std::move(r));
    for (GradRecord& g : grad_records) w.submit(std::move(g));
    for (ScalarRecord& s : scalars) w.submit(std::move(s));
    written += static_cast<int64_t>(ops.size());
    grads += static_cast<int64_t>(grad_records.size());
    w.flush();
  }
  w.flush(true);
  meta.state = "stopped";
  meta.step = step;
  meta.writer = w.counters();
  w.write_meta(meta);
  w.close();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string ops_name(encoding == OpsEncoding::kBinary ? kBinaryOpsFile
                                                              : stream_file_name(StreamKind::kOps));
  const auto size = fs::file_size(fs::path(o.dir) / ops_name);
  const WriterCounters c = w.counters();
  std::printf(
      "%s: %lld steps, %lld op records (%.0f a step), %lld grad records; %s %.1f MB "
      "(%.1f B/record; %.0f B/record uncompressed); %.1f s\n",
      dir.c_str(), static_cast<long long>(step), static_cast<long long>(written),
      static_cast<double>(written) / static_cast<double>(step), static_cast<long long>(grads),
      ops_name.c_str(), static_cast<double>(size) / 1e6,
      static_cast<double>(size) / static_cast<double>(written),
      static_cast<double>(c.bytes_uncompressed) / static_cast<double>(written + grads + step), s);
  return 0;
}
