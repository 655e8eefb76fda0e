// Pieces shared by the CPU statistics pass (stats.cpp) and the ATen path for other devices
// (stats_aten.cpp). Private to src/probe. Pure functions: callable from any thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "precprobe/records.h"
#include "stats/stats_kernels.h"

namespace precprobe {
namespace detail {

/// c10's dtype name ("Float", "ComplexFloat"...), with ":<layout>" for a non-strided layout;
/// "undefined" for an undefined tensor.
std::string dtype_name(const at::Tensor& t);

/// Everything but the statistics (dtype, shape, device, requires_grad, numel); counts 0,
/// statistics NaN, no hash, no range statistics.
void fill_header(const at::Tensor& t, TensorStats& out);

/// The values as a real strided tensor without lazy conj/neg bits (copies only then).
at::Tensor values_view(const at::Tensor& t);

/// out.range from dense exponent counts: bins[i] counts binade min_exponent + i, each
/// counted `repeat` times; sets out.has_range.
void fill_range(const int64_t* bins, int num_bins, int min_exponent, int64_t repeat,
                TensorStats& out);

/// summarize(t, out, false, range != nullptr) for a contiguous Float, Double, BFloat16 or
/// Half CPU tensor (no conj/neg bit, not a ZeroTensor, at least one element), given its
/// blocks' partials: block i from block_stats() of elements [i * kStatsBlock, ...), and with
/// range statistics, the exponent counts of every block added in `range` (kFloatRangeBins or
/// kDoubleRangeBins of them). Bit for bit summarize()'s result: the partials are added in
/// block order, as its own loop adds them (split_stats.h).
void summarize_from_blocks(const at::Tensor& t, const BlockStats* blocks, int64_t num_blocks,
                           const int64_t* range, TensorStats& out);

/// The range statistics of a floating (or complex) tensor on any device, from ATen ops
/// (frexp, bincount): the path of summarize_with_aten(). May throw c10::Error.
void range_with_aten(const at::Tensor& t, TensorStats& out);

}  // namespace detail
}  // namespace precprobe
