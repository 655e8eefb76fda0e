// The ops the masking rule knows by name (precprobe/masking.h; the rule:
// src/core/analysis/masking.h). A header of its own so that the probe's overflow_check fast
// path can ask without the analyses' headers.
#pragma once

#include <string_view>

namespace precprobe {

/// Attention ops, whose tensor arguments include a mask by their API: scaled_dot_product_
/// attention and its kernels (flash, efficient, cuDNN, math) with their backward ops, and
/// the fused multi-head attention. A -inf given to one of them is its attn_mask's: a mask,
/// also when no recorded op wrote it (SDPA turns a bool mask into -inf inside the op; a
/// float mask may be built before recording starts).
bool is_attention_op(std::string_view op) noexcept;

}  // namespace precprobe
