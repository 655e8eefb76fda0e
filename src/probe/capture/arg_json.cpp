// Non-tensor op arguments as JSON text (OpRecord Arg::value).
#include <ATen/core/ivalue.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "capture/observer_internal.h"

namespace precprobe {
namespace detail {
namespace {

void append_double(double d, std::string& out) {
  if (std::isnan(d)) {
    out += "\"nan\"";
  } else if (std::isinf(d)) {
    out += d > 0 ? "\"inf\"" : "\"-inf\"";
  } else {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", d);
    out += buf;
    // Keep it a JSON number that reads back as floating point.
    if (out.find_first_of(".eE", out.size() - std::char_traits<char>::length(buf)) ==
        std::string::npos)
      out += ".0";
  }
}

void append_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void append_value(const c10::IValue& v, std::string& out, int level) {
  if (level > 8) {
    out += "\"...\"";
  } else if (v.isNone()) {
    out += "null";
  } else if (v.isBool()) {
    out += v.toBool() ? "true" : "false";
  } else if (v.isInt()) {
    out += std::to_string(v.toInt());
  } else if (v.isDouble()) {
    append_double(v.toDouble(), out);
  } else if (v.isComplexDouble()) {
    auto c = v.toComplexDouble();
    out += '[';
    append_double(c.real(), out);
    out += ',';
    append_double(c.imag(), out);
    out += ']';
  } else if (v.isString()) {
    append_string(v.toStringRef(), out);
  } else if (v.isDevice()) {
    append_string(v.toDevice().str(), out);
  } else if (v.isList()) {
    out += '[';
    bool first = true;
    for (const auto& e : v.toListRef()) {
      if (!first) out += ',';
      first = false;
      append_value(e, out, level + 1);
    }
    out += ']';
  } else if (v.isTuple()) {
    out += '[';
    bool first = true;
    for (const auto& e : v.toTupleRef().elements()) {
      if (!first) out += ',';
      first = false;
      append_value(e, out, level + 1);
    }
    out += ']';
  } else if (v.isTensor()) {
    out += v.toTensor().defined() ? "\"<tensor>\"" : "null";
  } else {
    append_string("<" + v.tagKind() + ">", out);
  }
}

}  // namespace

std::string ivalue_to_json(const c10::IValue& v) {
  std::string out;
  try {
    append_value(v, out, 0);
  } catch (...) {
    out = "\"<?>\"";
  }
  return out;
}

}  // namespace detail
}  // namespace precprobe
