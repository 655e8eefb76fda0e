// Pieces shared by the CPU statistics pass (stats.cpp) and the ATen path for other devices
// (stats_aten.cpp). Private to src/probe. Pure functions: callable from any thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "precprobe/records.h"

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

/// The range statistics of a floating (or complex) tensor on any device, from ATen ops
/// (frexp, bincount): the path of summarize_with_aten(). May throw c10::Error.
void range_with_aten(const at::Tensor& t, TensorStats& out);

}  // namespace detail
}  // namespace precprobe
