// libFuzzer target: config.json text → DebuggerOptions. Any input must either parse or
// throw precprobe::Error (never crash, never another exception), and what parses must
// round-trip through to_json() unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "precprobe/error.h"
#include "precprobe/options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  precprobe::DebuggerOptions options;
  try {
    options = precprobe::DebuggerOptions::from_json(text);
  } catch (const precprobe::Error&) {
    return 0;
  }
  const std::string once = options.to_json();
  const std::string twice = precprobe::DebuggerOptions::from_json(once).to_json();
  if (once != twice) std::abort();
  const precprobe::NameMatcher matcher(options.list);
  (void)matcher.matches("aten::addmm.0.forward");
  (void)matcher.matches("AddmmBackward0.0.backward");
  return 0;
}
