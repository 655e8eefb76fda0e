// The op watchpoints' cost per record (docs/watchpoints.md): OpWatcher::observe on
// the records of a synthetic L2 run of a residual MLP (bench_dump_model.h: forward ops whose
// outputs require grad, backward nodes, the optimizer), one thread, against encoding the same
// records (append_json, which the writer thread does to every record anyway). Watched records
// are those of the forward pass; the rest return after the module attribution.
//
//     build/bin/bench_op_watch [--benchmark_repetitions=3]
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "bench_dump_model.h"
#include "precprobe/op_watch.h"
#include "precprobe/records.h"

namespace {

using namespace precprobe;

constexpr int64_t kSteps = 200;

const std::vector<OpRecord>& run_ops() {
  static const std::vector<OpRecord> ops = [] {
    bench::RunModel m(bench::Variant{});
    std::vector<OpRecord> out;
    std::vector<GradRecord> grads;
    std::vector<ScalarRecord> scalars;
    for (int64_t s = 0; s < kSteps; ++s) m.step(s, out, grads, scalars);
    return out;
  }();
  return ops;
}

void BM_OpWatch(benchmark::State& state) {
  const auto& ops = run_ops();
  size_t hits = 0;
  for (auto _ : state) {
    OpWatcher w;  // a run's history from nothing, as the writer's
    std::vector<OpWatchHit> found;
    for (const OpRecord& r : ops) w.observe(r, found);
    hits += found.size();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(ops.size()));
  state.counters["hits"] = static_cast<double>(hits) / static_cast<double>(state.iterations());
  state.counters["records/step"] = static_cast<double>(ops.size()) / kSteps;
}
BENCHMARK(BM_OpWatch)->Unit(benchmark::kMillisecond);

void BM_EncodeSameRecords(benchmark::State& state) {
  const auto& ops = run_ops();
  std::string out;
  for (auto _ : state) {
    for (const OpRecord& r : ops) {
      out.clear();
      append_json(r, out);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(ops.size()));
}
BENCHMARK(BM_EncodeSameRecords)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
