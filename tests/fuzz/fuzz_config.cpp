// Fuzzes config.json parsing. Either it parses or it throws precprobe::Error; a config that
// parses must survive to_json() -> from_json() (what we write, we read).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "precprobe/error.h"
#include "precprobe/options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  precprobe::DebuggerOptions opts;
  try {
    opts = precprobe::DebuggerOptions::from_json(text);
  } catch (const precprobe::Error&) {
    return 0;
  }
  try {
    auto again = precprobe::DebuggerOptions::from_json(opts.to_json());
    if (again.to_json() != opts.to_json()) std::abort();
  } catch (const precprobe::Error&) {
    std::abort();  // we wrote it: must parse
  }
  return 0;
}
