// What the record decoders share (private to records_parse*.cpp): the line and list
// parsers, "<key>_nonfinite" handling, and the bound on list lengths.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "json_lite.h"

namespace precprobe::records_parse_detail {

using json::Cursor;

// An Arg takes ~250 bytes for 7 bytes of text (`{"v":1}`): without a bound, one hostile
// 256 MiB line would ask for gigabytes. Real TensorLists are far shorter.
constexpr size_t kMaxListSize = size_t{1} << 18;

inline bool parse_string_list(Cursor& c, std::vector<std::string>& v) {
  size_t n = 0;
  bool ok = c.array([&] {
    if (n >= kMaxListSize) return c.fail("list too long");
    if (n == v.size()) v.emplace_back();
    return c.string(v[n++]);
  });
  v.resize(n);
  return ok;
}

// Parses one line as an object, then checks nothing but blanks follows it.
template <class F>
bool parse_line(std::string_view line, std::string* error, F&& on_member) {
  Cursor c(line);
  bool ok = c.object([&](std::string_view k) { return on_member(c, k); }) &&
            (c.at_end() || c.fail("text after the record"));
  if (!ok && error != nullptr) *error = c.error_message();
  return ok;
}

inline bool ends_nonfinite(std::string_view k) {
  constexpr std::string_view kSuffix = "_nonfinite";
  return k.size() > kSuffix.size() && k.substr(k.size() - kSuffix.size()) == kSuffix;
}

// "<key>_nonfinite" fields of a record, applied after the whole line so that they win
// over "<key>": null in any key order.
struct Named {
  double values[8];
  double* targets[8];
  int n = 0;
  bool read(Cursor& c, double& target) {
    if (n == 8) return c.skip_value(1);  // only repeated keys get here
    targets[n] = &target;
    return c.nonfinite_name(values[n++]);
  }
  void apply() {
    for (int i = 0; i < n; ++i) *targets[i] = values[i];
  }
};

inline bool missing(std::string* error, const char* what) {
  if (error != nullptr) *error = what;
  return false;
}

}  // namespace precprobe::records_parse_detail
