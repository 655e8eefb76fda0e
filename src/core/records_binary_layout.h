// The layout of ops.bin.zst's frames shared by the binary encoder (records_binary.cpp) and
// decoder (records_binary_read.cpp): entry tags, flag bits, argument kinds
// (docs/dump-format.md, "ops.bin.zst: binary op records"). Private to src/core.
#pragma once

#include <cstdint>
#include <string_view>

#include "json_lite.h"

namespace precprobe::binary_layout {

enum Tag : uint8_t { kTagString = 1, kTagRecord = 2 };

// Record flags.
inline constexpr uint64_t kBackward = 1, kGradOff = 2, kBackground = 4, kHasOverload = 8,
                          kHasScope = 16, kHasNode = 32, kOptimizerStep = 64, kHasModule = 128;
// Argument kinds.
inline constexpr uint8_t kValueArg = 0, kTensorArg = 1;
// Tensor flags.
inline constexpr uint64_t kRequiresGrad = 1, kHasHash = 2, kHasParam = 4, kHasListIndex = 8,
                          kHasHist = 16, kHasRange = 32, kWideMean = 64, kWideNorm = 128;

inline bool is_json_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Whether `s` is its own canonical_value(): JSON text without surrounding blanks.
inline bool canonical_value_text(std::string_view s) {
  return !s.empty() && !is_json_blank(s.front()) && !is_json_blank(s.back()) &&
         json::is_valid_value(s);
}

}  // namespace precprobe::binary_layout
