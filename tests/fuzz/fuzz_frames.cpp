// Fuzzes the frame decoder and everything after it: FrameReader over arbitrary bytes, each
// decoded frame split into lines and parsed as op records. Must never crash, hang or
// allocate without bound (frames decompressing to more than the cap count as corrupt).
#include <cstddef>
#include <cstdint>
#include <string>

#include "frame_stream.h"
#include "fuzz_util.h"
#include "precprobe/records.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  precprobe_fuzz::MemFile file(data, size);
  precprobe::FrameReader reader;
  std::string error;
  if (!reader.open(file.path(), &error)) return 0;
  std::string content;
  precprobe::OpRecord rec;
  while (reader.next(content)) {
    precprobe::for_each_line(content, [&](std::string_view line) {
      (void)precprobe::parse_record(line, rec, &error);
      return true;
    });
  }
  return 0;
}
