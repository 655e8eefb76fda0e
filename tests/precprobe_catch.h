// Catch2 2 (Debian bookworm) and Catch2 3 (trixie) behind one include, so one set of test
// sources builds against both. Tests write the Catch2 3 spellings:
//   Approx(x)                                  (Catch::Approx in 3, global in 2)
//   Catch::Matchers::ContainsSubstring("text") (Catch::Contains in 2)
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
using Catch::Approx;
#define PRECPROBE_CATCH2_MAJOR 3
#else
#include <catch2/catch.hpp>
#include <string>
namespace Catch::Matchers {
inline auto ContainsSubstring(const std::string& text,
                              CaseSensitive::Choice cs = CaseSensitive::Yes) {
  return Contains(text, cs);
}
}  // namespace Catch::Matchers
#define PRECPROBE_CATCH2_MAJOR 2
#endif
