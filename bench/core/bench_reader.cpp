// Dump I/O speed and size: encoding, compression, decompression and parsing of a realistic
// ops stream (200k op records with 2-3 tensors each, statistics of float32/bf16 tensors).
//
// Counters: records/s (items_per_second), bytes/s, and for the written stream
// `B/record` and `B/tensor` (compressed bytes per op record and per tensor record).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "frame_stream.h"
#include "precprobe/reader.h"
#include "precprobe/records.h"
#include "precprobe/writer.h"
#include "records_binary.h"

namespace fs = std::filesystem;
using namespace precprobe;

namespace {

constexpr int kRecords = 200000;
constexpr int kOpsPerStep = 2000;

// Statistics as the probe computes them for a tensor of `numel` values of dtype `dtype`:
// min/max are values of that dtype, mean/norm float64 accumulations.
TensorStats make_tensor(std::mt19937_64& rng, const char* dtype, std::vector<int64_t> shape) {
  std::normal_distribution<double> normal(0.0, 1.0);
  TensorStats t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.numel = 1;
  for (int64_t d : t.shape) t.numel *= d;
  t.zero = t.numel / 50;
  t.neg = (t.numel - t.zero) / 2;
  t.pos = t.numel - t.zero - t.neg;
  auto as_dtype = [&](double v) {
    auto f = static_cast<float>(v);
    if (dtype[0] == 'B') {  // bfloat16: keep the top 16 bits of the float
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      bits &= 0xffff0000u;
      std::memcpy(&f, &bits, 4);
    }
    return static_cast<double>(f);
  };
  t.min = as_dtype(-std::fabs(normal(rng)) * 3);
  t.max = as_dtype(std::fabs(normal(rng)) * 3);
  t.mean = normal(rng) * 0.05;
  t.norm = std::fabs(normal(rng)) * std::sqrt(static_cast<double>(t.numel));
  return t;
}

std::vector<OpRecord> make_ops(int n) {
  std::mt19937_64 rng(2024);
  std::vector<OpRecord> ops;
  ops.reserve(n);
  int64_t calls[3] = {0, 0, 0};
  for (int i = 0; i < n; ++i) {
    OpRecord r;
    r.step = i / kOpsPerStep;
    r.seq = i % kOpsPerStep;
    if (r.seq == 0) calls[0] = calls[1] = calls[2] = 0;
    int kind = static_cast<int>(rng() % 3);
    const char* dtype = (rng() % 4 == 0) ? "BFloat16" : "Float";
    r.dir = (r.seq >= kOpsPerStep / 2) ? Direction::kBackward : Direction::kForward;
    r.call = calls[kind]++;
    r.seqnr = 5000 + r.seq;
    r.depth = 0;
    std::vector<int64_t> act = {64, 256};
    switch (kind) {
      case 0:  // relu: 1 in, 1 out
        r.op = "aten::relu";
        r.inputs.push_back(Arg{make_tensor(rng, dtype, act), {}});
        r.outputs.push_back(Arg{make_tensor(rng, dtype, act), {}});
        break;
      case 1: {  // mul by a parameter: 2 in, 1 out
        r.op = "aten::mul";
        r.overload = "Tensor";
        TensorStats w = make_tensor(rng, dtype, {256});
        w.requires_grad = true;
        w.param = "blocks." + std::to_string(r.seq % 12) + ".norm.weight";
        r.inputs.push_back(Arg{make_tensor(rng, dtype, act), {}});
        r.inputs.push_back(Arg{w, {}});
        r.outputs.push_back(Arg{make_tensor(rng, dtype, act), {}});
        break;
      }
      default:  // add with alpha: 2 tensors in, 1 value, 1 out
        r.op = "aten::add";
        r.overload = "Tensor";
        r.inputs.push_back(Arg{make_tensor(rng, dtype, act), {}});
        r.inputs.push_back(Arg{make_tensor(rng, dtype, act), {}});
        r.inputs.push_back(Arg{std::nullopt, "1"});
        r.outputs.push_back(Arg{make_tensor(rng, dtype, act), {}});
        break;
    }
    if (r.dir == Direction::kBackward) r.node = "MulBackward0";
    ops.push_back(std::move(r));
  }
  return ops;
}

const std::vector<OpRecord>& ops() {
  static const std::vector<OpRecord> v = make_ops(kRecords);
  return v;
}

size_t tensor_count() {
  size_t n = 0;
  for (const OpRecord& r : ops()) {
    for (const auto* args : {&r.inputs, &r.outputs}) {
      for (const Arg& a : *args) n += a.is_tensor();
    }
  }
  return n;
}

std::string bench_dir(const std::string& tag) {
  return (fs::temp_directory_path() / ("precprobe_bench_" + tag + "_" + std::to_string(getpid())))
      .string();
}

OpsEncoding encoding_of(int64_t arg) {
  return arg == 1 ? OpsEncoding::kBinary : OpsEncoding::kJsonLines;
}
std::string ops_file(OpsEncoding e) {
  return e == OpsEncoding::kBinary ? "/rank0/ops.bin.zst" : "/rank0/ops.jsonl.zst";
}

// Writes the ops stream once per zstd level and encoding, with the writer's defaults otherwise.
const std::string& written_dump(int level, OpsEncoding encoding = OpsEncoding::kJsonLines) {
  static std::string dirs[2][23];
  const int e = encoding == OpsEncoding::kBinary ? 1 : 0;
  std::string& dir = dirs[e][level];
  if (dir.empty()) {
    dir = bench_dir("dump" + std::to_string(level) + (e == 1 ? "b" : ""));
    fs::remove_all(dir);
    WriterOptions o;
    o.dir = dir + "/rank0";
    o.zstd_level = level;
    o.ops_encoding = encoding;
    DumpWriter w(o);
    for (const OpRecord& r : ops()) w.submit(OpRecord(r));
    w.close();
  }
  return dir;
}

void BM_Encode(benchmark::State& state) {
  ops();  // generated outside the timing
  std::string out;
  size_t bytes = 0;
  for (auto _ : state) {
    for (const OpRecord& r : ops()) {
      out.clear();
      append_json(r, out);
      bytes += out.size();
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kRecords);
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["B/record_json"] = static_cast<double>(bytes) / state.iterations() / kRecords;
}
BENCHMARK(BM_Encode)->Unit(benchmark::kMillisecond);

void BM_EncodeBinary(benchmark::State& state) {
  ops();
  std::string out;
  size_t bytes = 0;
  BinaryOpEncoder enc;
  for (auto _ : state) {
    out.clear();
    int n = 0;
    for (const OpRecord& r : ops()) {
      enc.append(r, out);
      if (++n % 4096 == 0) {  // a frame, as the writer closes them
        bytes += out.size();
        out.clear();
      }
    }
    bytes += out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kRecords);
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["B/record_binary"] = static_cast<double>(bytes) / state.iterations() / kRecords;
}
BENCHMARK(BM_EncodeBinary)->Unit(benchmark::kMillisecond);

// What the writer thread does per record: encode into the frame, compress every 4096.
void BM_EncodeCompressWrite(benchmark::State& state) {
  int level = static_cast<int>(state.range(0));
  const OpsEncoding encoding = encoding_of(state.range(1));
  ops();
  std::string path = bench_dir("enc") + ".zst";
  BinaryOpEncoder enc;
  uint64_t out_bytes = 0;
  for (auto _ : state) {
    FrameWriter w;
    std::string error;
    if (!w.open(path, level, &error)) state.SkipWithError(error.c_str());
    int n = 0;
    for (const OpRecord& r : ops()) {
      if (encoding == OpsEncoding::kBinary) {
        enc.append(r, w.buffer());
      } else {
        append_json(r, w.buffer());
      }
      if (++n % 4096 == 0) w.end_frame(&error);
    }
    w.close(&error);
    out_bytes = w.bytes_out();
  }
  fs::remove(path);
  state.SetItemsProcessed(state.iterations() * kRecords);
  state.counters["B/record"] = static_cast<double>(out_bytes) / kRecords;
  state.counters["B/tensor"] = static_cast<double>(out_bytes) / tensor_count();
}
// Args: zstd level, encoding (0 JSON Lines, 1 binary).
BENCHMARK(BM_EncodeCompressWrite)
    ->Args({1, 0})
    ->Args({3, 0})
    ->Args({3, 1})
    ->Unit(benchmark::kMillisecond);

// DumpWriter end to end, as the probe uses it: submit() from the producer thread, the
// writer thread encodes, compresses and writes; the time ends when flush(wait) returns.
// Copying each record for submit() is included (the probe builds new ones instead).
void BM_WriterEndToEnd(benchmark::State& state) {
  int level = static_cast<int>(state.range(0));
  const OpsEncoding encoding = encoding_of(state.range(1));
  ops();
  std::string dir = bench_dir("writer");
  for (auto _ : state) {
    state.PauseTiming();
    fs::remove_all(dir);
    WriterOptions o;
    o.dir = dir;
    o.zstd_level = level;
    o.ops_encoding = encoding;
    DumpWriter w(o);
    state.ResumeTiming();
    for (const OpRecord& r : ops()) w.submit(OpRecord(r));
    w.flush(true);
    state.PauseTiming();
    w.close();
    state.ResumeTiming();
  }
  fs::remove_all(dir);
  state.SetItemsProcessed(state.iterations() * kRecords);
}
BENCHMARK(BM_WriterEndToEnd)
    ->Args({1, 0})
    ->Args({3, 0})
    ->Args({3, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The reader end to end: open the dump, decompress every frame, parse every line.
void BM_ReadOps(benchmark::State& state) {
  int level = static_cast<int>(state.range(0));
  const OpsEncoding encoding = encoding_of(state.range(1));
  const std::string& dir = written_dump(level, encoding);
  size_t n = 0;
  for (auto _ : state) {
    DumpReader reader(dir);
    n = 0;
    reader.for_each_op({}, [&](const OpRecord& r) {
      benchmark::DoNotOptimize(r.seq);
      ++n;
      return true;
    });
  }
  if (n != static_cast<size_t>(kRecords)) state.SkipWithError("record count mismatch");
  auto file = fs::file_size(dir + ops_file(encoding));
  state.SetItemsProcessed(state.iterations() * kRecords);
  state.counters["B/record"] = static_cast<double>(file) / kRecords;
  state.counters["B/tensor"] = static_cast<double>(file) / tensor_count();
}
BENCHMARK(BM_ReadOps)->Args({1, 0})->Args({3, 0})->Args({3, 1})->Unit(benchmark::kMillisecond);

// The same records after a divergence: 7 in 10 records hold only NaN tensors (counts
// say so, min/max/mean/norm undefined), as in the dump of a run that went to NaN.
std::vector<OpRecord> diverged_ops() {
  std::vector<OpRecord> v = ops();
  const double nan = std::nan("");
  for (size_t i = 0; i < v.size(); ++i) {
    if (i % 10 >= 7) continue;
    for (auto* args : {&v[i].inputs, &v[i].outputs}) {
      for (Arg& a : *args) {
        if (!a.tensor) continue;
        TensorStats& t = *a.tensor;
        t.nan = t.numel;
        t.zero = t.neg = t.pos = 0;
        t.min = t.max = t.mean = t.norm = nan;
      }
    }
  }
  return v;
}

// Parsing alone, from lines already in memory; Arg(1): the diverged records.
void BM_Parse(benchmark::State& state) {
  std::string text;
  for (const OpRecord& r : state.range(0) == 1 ? diverged_ops() : ops()) append_json(r, text);
  written_dump(3);
  OpRecord out;
  for (auto _ : state) {
    for_each_line(text, [&](std::string_view line) {
      if (!parse_record(line, out)) std::abort();
      return true;
    });
  }
  state.SetItemsProcessed(state.iterations() * kRecords);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(text.size()));
}
BENCHMARK(BM_Parse)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// Decoding binary frames alone, from frames already in memory; Arg(1): the diverged records.
void BM_DecodeBinary(benchmark::State& state) {
  std::vector<std::string> frames(1);
  BinaryOpEncoder enc;
  int n = 0;
  for (const OpRecord& r : state.range(0) == 1 ? diverged_ops() : ops()) {
    enc.append(r, frames.back());
    if (++n % 4096 == 0) frames.emplace_back();
  }
  OpRecord out;
  int64_t bytes = 0;
  for (const std::string& f : frames) bytes += static_cast<int64_t>(f.size());
  BinaryOpDecoder d;  // as the reader's: one for every frame
  for (auto _ : state) {
    size_t records = 0;
    for (const std::string& f : frames) {
      if (f.empty()) continue;
      if (!d.open(f, nullptr)) std::abort();
      BinaryOpDecoder::Next next;
      while ((next = d.next(out, nullptr)) == BinaryOpDecoder::Next::kRecord) ++records;
      if (next != BinaryOpDecoder::Next::kEnd) std::abort();
    }
    if (records != static_cast<size_t>(kRecords)) std::abort();
  }
  state.SetItemsProcessed(state.iterations() * kRecords);
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_DecodeBinary)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// Decompression alone.
void BM_Decompress(benchmark::State& state) {
  const OpsEncoding encoding = encoding_of(state.range(0));
  std::string path = written_dump(3, encoding) + ops_file(encoding);
  std::string content;
  int64_t bytes = 0;
  for (auto _ : state) {
    FrameReader r;
    std::string error;
    r.open(path, &error);
    while (r.next(content)) bytes += static_cast<int64_t>(content.size());
  }
  state.SetItemsProcessed(state.iterations() * kRecords);
  state.SetBytesProcessed(bytes);
}
BENCHMARK(BM_Decompress)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  for (int level : {1, 3}) {
    fs::remove_all(bench_dir("dump" + std::to_string(level)));
    fs::remove_all(bench_dir("dump" + std::to_string(level) + "b"));
  }
  return 0;
}
