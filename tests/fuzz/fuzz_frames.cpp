// Fuzzes the frame decoder and everything after it: FrameReader over arbitrary bytes, each
// decoded frame split into lines and parsed as op records, read twice: decoding every frame,
// and offering each frame that has a digest to a gate that passes over some of them (the
// digest parser and the passing path of summary and overflow); and the bytes as a digest's
// payload. Must never crash, hang or allocate without bound (frames decompressing to more
// than the cap count as corrupt).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "frame_digest.h"
#include "frame_stream.h"
#include "fuzz_util.h"
#include "precprobe/records.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  precprobe::FrameDigest digest;
  uint64_t frame_size = 0;
  (void)precprobe::digest_detail::parse(std::string_view(reinterpret_cast<const char*>(data), size),
                                        digest, frame_size);
  precprobe_fuzz::MemFile file(data, size);
  const std::function<bool(const precprobe::FrameDigest&)> gate =
      [](const precprobe::FrameDigest& d) { return d.records % 2 == 0 || d.nonfinite(); };
  for (const auto* pass : {static_cast<decltype(&gate)>(nullptr), &gate}) {
    precprobe::FrameReader reader;
    std::string error;
    if (!reader.open(file.path(), &error)) return 0;
    std::string content;
    precprobe::OpRecord rec;
    bool passed = false;
    while (reader.next(content, pass, &passed)) {
      if (passed) continue;
      precprobe::for_each_line(content, [&](std::string_view line) {
        (void)precprobe::parse_record(line, rec, &error);
        return true;
      });
    }
  }
  return 0;
}
