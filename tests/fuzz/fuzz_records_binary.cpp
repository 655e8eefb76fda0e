// Fuzzes the binary op record decoder (ops.bin.zst frames, src/core/records_binary.h). Input
// that does not start with the frame magic gets it, so every byte string is a frame body.
// Properties beyond "no crash": a record that decodes encodes to a frame that decodes to the
// same record (the codec is a fixed point), and it reads the same through JSON Lines.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "precprobe/records.h"
#include "records_binary.h"

namespace {

std::string line_of(const precprobe::OpRecord& r) {
  std::string s;
  precprobe::append_json(r, s);
  return s;
}

void check_fixed_point(const precprobe::OpRecord& r) {
  precprobe::BinaryOpEncoder enc;
  std::string frame;
  enc.append(r, frame);
  precprobe::BinaryOpDecoder dec;
  std::string error;
  if (!dec.open(frame, &error)) std::abort();  // we wrote it: must open
  precprobe::OpRecord again;
  if (dec.next(again, &error) != precprobe::BinaryOpDecoder::Next::kRecord) std::abort();
  const std::string once = line_of(r);
  if (line_of(again) != once) std::abort();
  precprobe::OpRecord via_json;
  if (!precprobe::parse_record(once, via_json, &error)) std::abort();
  if (line_of(via_json) != once) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string frame(reinterpret_cast<const char*>(data), size);
  if (!precprobe::is_binary_ops_frame(frame)) {
    frame.insert(0, precprobe::kBinaryOpsMagic);
    frame.insert(precprobe::kBinaryOpsMagic.size(), 1, char(precprobe::kBinaryOpsVersion));
  }
  precprobe::BinaryOpDecoder dec;
  std::string error;
  if (!dec.open(frame, &error)) return 0;
  precprobe::OpRecord r;
  for (int i = 0; i < 100000; ++i) {
    const auto next = dec.next(r, &error);
    if (next == precprobe::BinaryOpDecoder::Next::kEnd) break;
    if (next == precprobe::BinaryOpDecoder::Next::kRecord) check_fixed_point(r);
  }
  return 0;
}
