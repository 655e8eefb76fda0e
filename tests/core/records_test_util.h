// What the record tests share (test_records*.cpp): IEEE specials, a TensorStats of a dtype
// and shape, and an op record's round trip through its JSON line.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "precprobe/records.h"
#include "precprobe_catch.h"
#include "support/ieee_specials.h"

namespace precprobe::test {

inline TensorStats tensor(std::string dtype, std::vector<int64_t> shape) {
  TensorStats t;
  t.dtype = std::move(dtype);
  t.shape = std::move(shape);
  return t;
}

inline OpRecord round_trip(const OpRecord& r) {
  std::string line;
  append_json(r, line);
  REQUIRE(line.back() == '\n');
  REQUIRE(line.find('\n') == line.size() - 1);
  OpRecord back;
  std::string error;
  INFO(line);
  REQUIRE(parse_record(line, back, &error));
  CHECK(error.empty());
  return back;
}

}  // namespace precprobe::test
