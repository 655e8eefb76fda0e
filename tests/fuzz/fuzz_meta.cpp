// Fuzzes opening a dump: arbitrary bytes as rank0/meta.json. DumpReader either opens the
// dump or throws precprobe::Error; anything else (a crash, another exception) is a bug.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "precprobe/error.h"
#include "precprobe/reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("precprobe-fuzz-meta-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "rank0");
  {
    std::ofstream f(dir / "rank0" / "meta.json", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    precprobe::DumpReader reader(dir.string());
    (void)reader.ops();
  } catch (const precprobe::Error&) {
  }
  return 0;
}
