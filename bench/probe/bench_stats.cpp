// Speed of the single-pass statistics kernel (src/probe/stats.*) against the memory limits:
// memcpy of the same bytes and a plain vectorised read (sum) of them.
//
//   bench_stats --benchmark_counters_tabular=true
// Bytes/s counts the bytes of the tensor read once (for memcpy: the bytes copied).
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "precprobe/hash.h"
#include "stats/borrowed_memory.h"
#include "stats/stats.h"
#include "support/grad_loops.h"

namespace {

constexpr int64_t kBytes = int64_t(64) << 20;

const at::Tensor& big(at::ScalarType dtype) {
  static const at::Tensor f32 = [] {
    at::manual_seed(0);
    return at::randn({kBytes / 4});
  }();
  static const at::Tensor bf16 = at::randn({kBytes / 2}).to(at::kBFloat16);
  static const at::Tensor f16 = at::randn({kBytes / 2}).to(at::kHalf);
  static const at::Tensor f64 = at::randn({kBytes / 8}, at::kDouble);
  switch (dtype) {
    case at::kBFloat16:
      return bf16;
    case at::kHalf:
      return f16;
    case at::kDouble:
      return f64;
    default:
      return f32;
  }
}

void set_bytes(benchmark::State& state, int64_t bytes) {
  state.SetBytesProcessed(state.iterations() * bytes);
}

void BM_Memcpy(benchmark::State& state) {
  std::vector<char> src(kBytes, 1), dst(kBytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kBytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kBytes);
}
BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond);

// The read-bandwidth roof: a float sum with 8 independent lanes.
void BM_ReadSum(benchmark::State& state) {
  const float* p = big(at::kFloat).data_ptr<float>();
  const int64_t n = kBytes / 4;
  for (auto _ : state) {
    float acc[8] = {};
    for (int64_t i = 0; i < n; i += 8) {
      for (int j = 0; j < 8; ++j) acc[j] += p[i + j];
    }
    benchmark::DoNotOptimize(acc);
  }
  set_bytes(state, kBytes);
}
BENCHMARK(BM_ReadSum)->Unit(benchmark::kMillisecond);

void BM_Summarize(benchmark::State& state, at::ScalarType dtype, bool with_hash) {
  const at::Tensor& t = big(dtype);
  precprobe::TensorStats s;
  for (auto _ : state) {
    precprobe::detail::summarize(t, s, with_hash);
    benchmark::DoNotOptimize(s.mean);
  }
  set_bytes(state, t.numel() * t.element_size());
  state.counters["Melem/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * t.numel()) / 1e6, benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_Summarize, f32, at::kFloat, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Summarize, f32_hash, at::kFloat, true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Summarize, bf16, at::kBFloat16, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Summarize, f16, at::kHalf, false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Summarize, f64, at::kDouble, false)->Unit(benchmark::kMillisecond);

// Range statistics (the exponent histogram) on top of the statistics: float32 of
// state.range(0) elements (32768 = an activation of the reference model at h=256, in L2;
// 16M = 64 MB, from memory), state.range(1) = 1 with range, and the 64 MB bf16 tensor.
void BM_SummarizeRange(benchmark::State& state) {
  const int64_t n = state.range(0);
  const at::Tensor t = big(at::kFloat).slice(0, 0, n);
  const bool with_range = state.range(1) != 0;
  precprobe::TensorStats s;
  for (auto _ : state) {
    precprobe::detail::summarize(t, s, false, with_range);
    benchmark::DoNotOptimize(s.mean);
  }
  set_bytes(state, n * 4);
  state.counters["Melem/s"] = benchmark::Counter(static_cast<double>(state.iterations() * n) / 1e6,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SummarizeRange)
    ->Args({32768, 0})
    ->Args({32768, 1})
    ->Args({kBytes / 4, 0})
    ->Args({kBytes / 4, 1});

// Values spread over many binades, as an optimizer's second moment: (randn^2 * 1e-3)^2, 32768.
void BM_SummarizeRangeWide(benchmark::State& state) {
  const at::Tensor t = at::randn({32768}).square().mul(1e-3).square();
  const bool with_range = state.range(0) != 0;
  precprobe::TensorStats s;
  for (auto _ : state) {
    precprobe::detail::summarize(t, s, false, with_range);
    benchmark::DoNotOptimize(s.mean);
  }
  set_bytes(state, t.numel() * 4);
}
BENCHMARK(BM_SummarizeRangeWide)->Arg(0)->Arg(1);

void BM_SummarizeRangeBf16(benchmark::State& state) {
  const at::Tensor& t = big(at::kBFloat16);
  const bool with_range = state.range(0) != 0;
  precprobe::TensorStats s;
  for (auto _ : state) {
    precprobe::detail::summarize(t, s, false, with_range);
    benchmark::DoNotOptimize(s.mean);
  }
  set_bytes(state, t.numel() * 2);
}
BENCHMARK(BM_SummarizeRangeBf16)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// Same 64 MB float32 with NaN in every block: the careful pass runs everywhere.
void BM_SummarizeAllBlocksNaN(benchmark::State& state) {
  at::Tensor t = big(at::kFloat).clone();
  t.view({-1, 4096}).select(1, 100).fill_(NAN);
  precprobe::TensorStats s;
  for (auto _ : state) {
    precprobe::detail::summarize(t, s, false);
    benchmark::DoNotOptimize(s.mean);
  }
  set_bytes(state, kBytes);
}
BENCHMARK(BM_SummarizeAllBlocksNaN)->Unit(benchmark::kMillisecond);

void BM_TensorHash(benchmark::State& state) {
  const at::Tensor& t = big(at::kFloat);
  for (auto _ : state) benchmark::DoNotOptimize(precprobe::tensor_hash(t));
  set_bytes(state, kBytes);
}
BENCHMARK(BM_TensorHash)->Unit(benchmark::kMillisecond);

// Non-contiguous 64 MB float32 views: 0 = transpose (read in memory order), 1 = every
// other column of a 4096x8192 matrix (32 MB read through a stride-2 gather), 2 = the
// transpose with hash (logical order: column gathers).
void BM_SummarizeView(benchmark::State& state) {
  const at::Tensor& base = big(at::kFloat);
  at::Tensor v;
  if (state.range(0) == 0 || state.range(0) == 2) v = base.view({4096, 4096}).t();
  if (state.range(0) == 1) v = base.view({2048, 8192}).slice(1, 0, 8192, 2);
  const bool with_hash = state.range(0) == 2;
  precprobe::TensorStats s;
  for (auto _ : state) {
    precprobe::detail::summarize(v, s, with_hash);
    benchmark::DoNotOptimize(s.mean);
  }
  set_bytes(state, v.numel() * 4);
}
BENCHMARK(BM_SummarizeView)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

// Fixed cost per call.
void BM_SummarizeTiny(benchmark::State& state) {
  const at::Tensor t = at::randn({state.range(0)});
  precprobe::TensorStats s;
  for (auto _ : state) {
    precprobe::detail::summarize(t, s, false);
    benchmark::DoNotOptimize(s.mean);
  }
}
BENCHMARK(BM_SummarizeTiny)->Arg(1)->Arg(16)->Arg(1024);

// The same with range statistics: what "range" adds to the small tensors (biases, losses,
// scalars) that the training thread summarises itself.
void BM_SummarizeTinyRange(benchmark::State& state) {
  const at::Tensor t = at::randn({state.range(0)});
  precprobe::TensorStats s;
  for (auto _ : state) {
    precprobe::detail::summarize(t, s, false, /*with_range=*/true);
    benchmark::DoNotOptimize(s.mean);
  }
}
BENCHMARK(BM_SummarizeTinyRange)->Arg(1)->Arg(16)->Arg(100)->Arg(1024);

void BM_SummarizeTinyView(benchmark::State& state) {
  const at::Tensor t = at::randn({8, 16}).t();
  precprobe::TensorStats s;
  for (auto _ : state) {
    precprobe::detail::summarize(t, s, true);
    benchmark::DoNotOptimize(s.mean);
  }
}
BENCHMARK(BM_SummarizeTinyView);

void BM_MakeKey(benchmark::State& state) {
  const at::Tensor t = at::randn({64, 64}).t();
  for (auto _ : state) benchmark::DoNotOptimize(precprobe::detail::make_key(t));
}
BENCHMARK(BM_MakeKey);

// For comparison: the same statistics by ATen reductions (the CUDA path run on CPU), 4M.
void BM_AtenReductions(benchmark::State& state) {
  const at::Tensor t = big(at::kFloat).slice(0, 0, int64_t(1) << 22);
  precprobe::TensorStats s;
  for (auto _ : state) {
    precprobe::detail::summarize_with_aten(t, s, false);
    benchmark::DoNotOptimize(s.mean);
  }
  set_bytes(state, t.numel() * 4);
}
BENCHMARK(BM_AtenReductions)->Unit(benchmark::kMillisecond);

// What the statistics worker's borrow of a tensor's memory costs the capturing thread
// (borrowed_memory.h): the borrow (a table lookup, the first time a deleter swap) and its
// end (the borrowed tensor freed). Arg 1: the storage is freed while borrowed (a deferred
// free), as an activation freed before the worker reads it.
void BM_BorrowMemory(benchmark::State& state) {
  const bool free_first = state.range(0) == 1;
  at::Tensor t = at::randn({128, 256});
  for (auto _ : state) {
    if (free_first) {
      state.PauseTiming();
      t = at::randn({128, 256});
      state.ResumeTiming();
    }
    at::Tensor b = precprobe::detail::borrow(t);
    if (free_first) t.reset();
    b.reset();
    benchmark::DoNotOptimize(b);
  }
}
BENCHMARK(BM_BorrowMemory)->Arg(0)->Arg(1);

// The gradient monitor's pass over one gradient (support/grad_loops.h) on 650 000 floats (the
// VAE of bench_programs: 2.6 MB, cache-resident as a gradient just written is) and 4 M.
// Arg 0: grad_stats_span, vectorised for this machine (the clone picked at load time); 1: the
// same fixed-lane order as a plain loop (the baseline build's reference); 2: the loop before
// fixed lanes (one running float64 sum per statistic, NaN tests in the loop), kept here to
// show what the change bought.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wfloat-equal"
void single_sum_grad_stats(const float* p, int64_t n, precprobe::detail::GradAcc& acc) {
  double ss = 0, as = 0, am = 0;
  int64_t nan = 0, inf = 0, zero = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float x = p[i];
    const bool fin = std::isfinite(x);
    const bool is_nan = x != x;
    const double a = fin ? std::fabs(static_cast<double>(x)) : 0.0;
    ss += a * a;
    as += a;
    am = a > am ? a : am;
    nan += is_nan ? 1 : 0;
    inf += (!fin && !is_nan) ? 1 : 0;
    zero += (x == 0.0f) ? 1 : 0;
  }
  acc.sumsq += ss;
  acc.abs_sum += as;
  acc.abs_max = std::max(acc.abs_max, am);
  acc.nan += nan;
  acc.inf += inf;
  acc.zero += zero;
}
#pragma GCC diagnostic pop

void BM_GradStats(benchmark::State& state) {
  const int64_t n = state.range(1);
  const float* p = big(at::kFloat).data_ptr<float>();
  for (auto _ : state) {
    precprobe::detail::GradAcc acc;
    if (state.range(0) == 0) {
      precprobe::detail::grad_stats_span(p, n, 1, acc);
    } else if (state.range(0) == 1) {
      precprobe::detail::careful_grad_stats(p, n, 1, acc);
    } else {
      single_sum_grad_stats(p, n, acc);
    }
    benchmark::DoNotOptimize(acc);
  }
  set_bytes(state, n * 4);
}
BENCHMARK(BM_GradStats)
    ->ArgsProduct({{0, 1, 2}, {650000, int64_t{1} << 22}})
    ->Unit(benchmark::kMillisecond);

// The weight-update pass (||w||, ||w_prev||, ||w - w_prev||, prev refreshed), 650 000 floats.
// Arg 0: vectorised; 1: the plain fixed-lane loop.
void BM_WeightUpdate(benchmark::State& state) {
  const int64_t n = 650000;
  const float* w = big(at::kFloat).data_ptr<float>();
  std::vector<float> prev(w + n, w + 2 * n);
  for (auto _ : state) {
    precprobe::detail::WeightAcc acc;
    if (state.range(0) == 0) {
      precprobe::detail::weight_update_span(w, prev.data(), n, acc);
    } else {
      precprobe::detail::Lanes s, sp, sd;
      int64_t zero = 0;
      precprobe::detail::weight_update_lanes(w, prev.data(), n, s, sp, sd, zero);
      acc.sumsq = s.total();
    }
    benchmark::DoNotOptimize(acc);
  }
  set_bytes(state, n * 8);
}
BENCHMARK(BM_WeightUpdate)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// The same two passes on bfloat16 (650 000 values). Arg 0: vectorised; 1: the plain loops.
void BM_Bf16GradAndWeight(benchmark::State& state) {
  const int64_t n = 650000;
  const at::Tensor t = big(at::kBFloat16).slice(0, 0, 2 * n);
  const auto* g = t.data_ptr<at::BFloat16>();
  std::vector<at::BFloat16> prev(g + n, g + 2 * n);
  for (auto _ : state) {
    precprobe::detail::GradAcc acc;
    precprobe::detail::WeightAcc wacc;
    if (state.range(0) == 0) {
      precprobe::detail::grad_stats_span(g, n, 1, acc);
      precprobe::detail::weight_update_span(g, prev.data(), n, wacc);
    } else {
      precprobe::detail::careful_grad_stats(g, n, 1, acc);
      precprobe::detail::Lanes s, sp, sd;
      int64_t zero = 0;
      precprobe::detail::weight_update_lanes(g, prev.data(), n, s, sp, sd, zero);
    }
    benchmark::DoNotOptimize(acc);
    benchmark::DoNotOptimize(wacc);
  }
  set_bytes(state, n * 6);
}
BENCHMARK(BM_Bf16GradAndWeight)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
