// A program that uses precprobe as an outside project would: through find_package or
// add_subdirectory. It records one op and checks that the record was written.
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: consumer DUMP_DIR\n");
    return 2;
  }
  std::filesystem::remove_all(argv[1]);
  precprobe::DebuggerOptions opts;
  opts.dump_path = argv[1];
  {
    precprobe::PrecisionDebugger dbg(opts);
    dbg.start();
    auto y = torch::ones({4}) * 2;
    dbg.step();
    dbg.stop();
  }
  precprobe::DumpReader reader(argv[1]);
  auto ops = reader.ops();
  std::printf("precprobe %s: %zu op records\n", PRECPROBE_VERSION_STRING, ops.size());
  return ops.empty() ? 1 : 0;
}
