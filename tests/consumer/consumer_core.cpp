// The torch-free half of a program that vendors precprobe with add_subdirectory: writes one
// op record through precprobe::core's DumpWriter and reads it back with DumpReader.
#include <precprobe/core.h>

#include <cstdio>
#include <filesystem>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: consumer_core DUMP_DIR\n");
    return 2;
  }
  std::filesystem::remove_all(argv[1]);
  {
    precprobe::WriterOptions o;
    o.dir = std::string(argv[1]) + "/rank0";
    precprobe::DumpWriter writer(o);
    precprobe::RunMeta meta;
    meta.format_version = precprobe::kDumpFormatVersion;
    meta.rank = 0;
    meta.world_size = 1;
    writer.write_meta(meta);
    precprobe::OpRecord r;
    r.op = "aten::mul";
    writer.submit(std::move(r));
    writer.close();
  }
  precprobe::DumpReader reader(argv[1]);
  const auto ops = reader.ops();
  std::printf("precprobe %s (core): %zu op records\n", PRECPROBE_VERSION_STRING, ops.size());
  return ops.size() == 1 ? 0 : 1;
}
