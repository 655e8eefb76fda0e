// Fuzzes the JSON Lines record parsers. Property beyond "no crash": a record that parses
// encodes to a line that parses again to the same encoding (the codec is a fixed point).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "precprobe/records.h"

namespace {

template <class Record>
void round_trip(std::string_view line) {
  Record r;
  std::string error;
  if (!precprobe::parse_record(line, r, &error)) return;
  std::string once;
  precprobe::append_json(r, once);
  Record again;
  if (!precprobe::parse_record(once, again, &error)) std::abort();  // we wrote it: must parse
  std::string twice;
  precprobe::append_json(again, twice);
  if (once != twice) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view line(reinterpret_cast<const char*>(data), size);
  round_trip<precprobe::OpRecord>(line);
  round_trip<precprobe::ScalerRecord>(line);
  round_trip<precprobe::GradRecord>(line);
  round_trip<precprobe::ScalarRecord>(line);
  round_trip<precprobe::AnomalyEvent>(line);
  return 0;
}
