// The text `precprobe repro` writes: a C++17 program against LibTorch (ATen and the
// dispatcher only, headers present in LibTorch 1.13 and 2.6) that loads the saved inputs
// of one op record from .npy files, calls the op boxed through the dispatcher with the
// recorded non-tensor arguments, and prints every output's health; and its CMakeLists.txt.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "precprobe/analysis.h"
#include "precprobe/error.h"
#include "precprobe/repro.h"

namespace precprobe {
namespace {

// The fixed part of the program: the .npy reader, the argument fitting and the report.
// (Delimiter SRC, not CPP: clang-format would reformat a CPP raw string as code.)
constexpr const char* kPrelude = R"SRC(#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

std::string g_dir = kDataDir;
c10::Device g_device = c10::Device("cpu");

// A NumPy .npy file (version 1.0 or 2.0, C order, little-endian).
at::Tensor read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string raw = ss.str();
  if (raw.size() < 10 || raw.compare(0, 6, "\x93NUMPY") != 0)
    throw std::runtime_error(path + ": not a .npy file");
  const int major = static_cast<unsigned char>(raw[6]);
  size_t len = 0, start = 0;
  if (major == 1) {
    len = static_cast<unsigned char>(raw[8]) |
          static_cast<size_t>(static_cast<unsigned char>(raw[9])) << 8;
    start = 10;
  } else if (major == 2 && raw.size() >= 12) {
    for (int i = 0; i < 4; ++i)
      len |= static_cast<size_t>(static_cast<unsigned char>(raw[8 + i])) << (8 * i);
    start = 12;
  } else {
    throw std::runtime_error(path + ": unsupported .npy version");
  }
  if (raw.size() < start + len) throw std::runtime_error(path + ": header cut short");
  const std::string header = raw.substr(start, len);
  auto field = [&](const std::string& key) {
    size_t p = header.find("'" + key + "'");
    if (p == std::string::npos) throw std::runtime_error(path + ": no '" + key + "' in the header");
    p = header.find(':', p);
    while (++p < header.size() && header[p] == ' ') {
    }
    return p;
  };
  size_t p = field("descr");
  const std::string descr = header.substr(p + 1, header.find('\'', p + 1) - p - 1);
  p = field("fortran_order");
  if (header.compare(p, 4, "True") == 0) throw std::runtime_error(path + ": Fortran order");
  p = field("shape");
  std::vector<int64_t> shape;
  for (size_t q = p + 1; q < header.size() && header[q] != ')'; ++q) {
    if (header[q] >= '0' && header[q] <= '9') {
      size_t used = 0;
      shape.push_back(std::stoll(header.substr(q), &used));
      q += used - 1;
    }
  }
  at::ScalarType t = at::kFloat;
  if (descr == "<f4") t = at::kFloat;
  else if (descr == "<f8") t = at::kDouble;
  else if (descr == "<f2") t = at::kHalf;
  else if (descr == "<i8") t = at::kLong;
  else if (descr == "<i4") t = at::kInt;
  else if (descr == "<i2") t = at::kShort;
  else if (descr == "|i1") t = at::kChar;
  else if (descr == "|u1") t = at::kByte;
  else if (descr == "|b1") t = at::kBool;
  else throw std::runtime_error(path + ": dtype " + descr + " is not supported");
  at::Tensor x = at::empty(shape, at::TensorOptions().dtype(t));
  const size_t bytes = static_cast<size_t>(x.numel()) * x.element_size();
  if (raw.size() < start + len + bytes) throw std::runtime_error(path + ": data cut short");
  if (bytes) std::memcpy(x.data_ptr(), raw.data() + start + len, bytes);
  return x;
}

// An input as recorded: its dtype (BFloat16 was saved as float32) on the chosen device.
at::Tensor load(const char* file, at::ScalarType recorded) {
  at::Tensor x = read_npy(g_dir + "/" + file);
  if (x.scalar_type() != recorded) x = x.to(recorded);
  return x.to(g_device);
}

c10::IValue tensor_list(std::vector<at::Tensor> v) { return c10::IValue(std::move(v)); }

// A recorded value made the type the schema argument asks for: integral numbers for float
// arguments, an int list for a float list, a device name for a Device, a Tensor[] for a
// Tensor?[].
c10::IValue fit(c10::IValue v, const c10::Argument& a) {
  c10::TypePtr t = a.type();
  if (auto o = t->cast<c10::OptionalType>()) {
    if (v.isNone()) return v;
    t = o->getElementType();
  }
  if (t->kind() == c10::TypeKind::FloatType && v.isInt())
    return c10::IValue(static_cast<double>(v.toInt()));
  if (t->kind() == c10::TypeKind::DeviceObjType && v.isString())
    return c10::IValue(c10::Device(v.toStringRef()));
  if (auto l = t->cast<c10::ListType>()) {
    const c10::TypePtr e = l->getElementType();
    if (e->kind() == c10::TypeKind::FloatType && v.isIntList()) {
      std::vector<double> d;
      for (int64_t x : v.toIntVector()) d.push_back(static_cast<double>(x));
      return c10::IValue(d);
    }
    if (e->kind() == c10::TypeKind::OptionalType && v.isTensorList()) {
      c10::List<c10::optional<at::Tensor>> o;
      for (const at::Tensor& x : v.toTensorVector()) o.push_back(x);
      return c10::IValue(o);
    }
  }
  return v;
}

std::string shape_of(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// dtype, shape, NaN/+Inf/-Inf counts and the largest finite |x|, in float64.
void report(const std::string& label, const at::Tensor& t0) {
  if (!t0.defined()) {
    std::printf("  %s: undefined tensor\n", label.c_str());
    return;
  }
  const at::Tensor t = t0.detach().cpu();
  if (t.is_complex()) {
    std::printf("  %s: %s %s (complex: counts not computed)\n", label.c_str(),
                c10::toString(t.scalar_type()), shape_of(t).c_str());
    return;
  }
  long long nan = 0, pinf = 0, ninf = 0;
  double max_abs = 0;
  const at::Tensor d = t.to(at::kDouble);
  if (t.is_floating_point()) {
    nan = at::isnan(d).sum().item<int64_t>();
    pinf = d.eq(std::numeric_limits<double>::infinity()).sum().item<int64_t>();
    ninf = d.eq(-std::numeric_limits<double>::infinity()).sum().item<int64_t>();
  }
  const at::Tensor finite = d.masked_select(at::isfinite(d));
  if (finite.numel() > 0) max_abs = finite.abs().max().item<double>();
  std::printf("  %s: %s %s nan %lld +inf %lld -inf %lld max|finite| %.6g\n", label.c_str(),
              c10::toString(t.scalar_type()), shape_of(t).c_str(), nan, pinf, ninf, max_abs);
}

// A Tensor[] or a Tensor?[] (a list holding tensors).
bool is_tensors(const c10::IValue& v) {
  if (v.isTensorList()) return true;
  if (!v.isList()) return false;
  for (const c10::IValue& e : v.toListRef())
    if (e.isTensor()) return true;
  return false;
}

void report_value(const std::string& label, const c10::IValue& v) {
  if (v.isTensor()) {
    report(label, v.toTensor());
  } else if (v.isTensorList()) {
    const std::vector<at::Tensor> l = v.toTensorVector();
    for (size_t i = 0; i < l.size(); ++i) report(label + "[" + std::to_string(i) + "]", l[i]);
  } else if (is_tensors(v)) {
    const auto l = v.toListRef();
    for (size_t i = 0; i < l.size(); ++i) report_value(label + "[" + std::to_string(i) + "]", l[i]);
  } else {
    std::ostringstream os;
    os << v;
    std::printf("  %s: %s\n", label.c_str(), os.str().c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) {
      g_device = c10::Device(std::string(argv[++i]));
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: %s [--device cpu|cuda:0] [DIR]\n  re-runs %s on the inputs in DIR "
                  "(default %s)\n", argv[0], kRecord, kDataDir);
      return 0;
    } else {
      g_dir = a;
    }
  }
  try {
    const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(kOp, kOverload);
    const std::vector<c10::Argument>& schema = op.schema().arguments();
    std::vector<c10::IValue> stack;
    auto push = [&](c10::IValue v) {
      const size_t k = stack.size();
      stack.push_back(k < schema.size() ? fit(std::move(v), schema[k]) : std::move(v));
    };
    std::printf("%s on %s, inputs from %s\n", kRecord, g_device.str().c_str(), g_dir.c_str());
)SRC";

constexpr const char* kCall = R"SRC(    if (stack.size() != schema.size()) {
      std::ostringstream os;
      os << op.schema();
      std::fprintf(stderr, "repro: the record has %zu arguments, the schema %s has %zu\n",
                   stack.size(), os.str().c_str(), schema.size());
      return 1;
    }
    std::printf("inputs:\n");
    for (size_t i = 0; i < stack.size(); ++i) {
      if (stack[i].isTensor() || is_tensors(stack[i]))
        report_value("in" + std::to_string(i) + " " + schema[i].name(), stack[i]);
    }
    op.callBoxed(&stack);
    std::printf("outputs:\n");
    for (size_t i = 0; i < stack.size(); ++i) report_value("out" + std::to_string(i), stack[i]);
    std::printf("recorded in the dump:\n%s", kRecorded);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "repro: %s\n(an op without a kernel for this dtype on this device, e.g. "
                 "Half on CPU in older LibTorch: try --device cuda:0)\n", e.what());
    return 1;
  }
}
)SRC";

// A C++ string literal.
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c >= 0x7f) {
      out += fmt::format("\\{:03o}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string double_literal(double d) {
  if (std::isnan(d)) return "std::numeric_limits<double>::quiet_NaN()";
  if (std::isinf(d))
    return d > 0 ? "std::numeric_limits<double>::infinity()"
                 : "-std::numeric_limits<double>::infinity()";
  std::string s = shortest_number(d);  // reads back exactly: 0.2, not 0.20000000000000001
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

const char* scalar_type(const std::string& dtype) {
  static const std::pair<const char*, const char*> kTypes[] = {
      {"Float", "at::kFloat"},       {"Double", "at::kDouble"}, {"Half", "at::kHalf"},
      {"BFloat16", "at::kBFloat16"}, {"Long", "at::kLong"},     {"Int", "at::kInt"},
      {"Short", "at::kShort"},       {"Char", "at::kChar"},     {"Byte", "at::kByte"},
      {"Bool", "at::kBool"}};
  for (const auto& [name, code] : kTypes)
    if (dtype == name) return code;
  return nullptr;
}

// The IValue expression of a recorded value ({"v": ...} text), or throws.
std::string value_expr(const std::string& text, size_t index, const std::string& record) {
  auto refuse = [&](const std::string& why) {
    return Error(
        fmt::format("{}: argument in{} ({}) {}; repro writes numbers, bools, null, "
                    "strings and lists of numbers or bools",
                    record, index, text, why));
  };
  const nlohmann::json v = nlohmann::json::parse(text, nullptr, false);
  if (v.is_discarded()) throw refuse("is not JSON");
  if (v.is_null()) return "c10::IValue()";
  if (v.is_boolean()) return v.get<bool>() ? "c10::IValue(true)" : "c10::IValue(false)";
  if (v.is_number_integer()) return fmt::format("c10::IValue(int64_t{{{}}})", v.dump());
  if (v.is_number()) return fmt::format("c10::IValue({})", double_literal(v.get<double>()));
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "inf" || s == "-inf" || s == "nan")  // a non-finite double, as the probe names it
      return fmt::format("c10::IValue({})", double_literal(s == "nan"   ? NAN
                                                           : s == "inf" ? INFINITY
                                                                        : -INFINITY));
    if (s == "<tensor>") throw refuse("holds a tensor inside a value");
    return fmt::format("c10::IValue(std::string({}))", quote(s));
  }
  if (!v.is_array()) throw refuse("is an object");
  bool ints = true, numbers = true, bools = true;
  for (const nlohmann::json& e : v) {
    ints = ints && e.is_number_integer();
    numbers = numbers && e.is_number();
    bools = bools && e.is_boolean();
  }
  std::string items;
  for (const nlohmann::json& e : v) {
    if (!items.empty()) items += ", ";
    items += bools     ? (e.get<bool>() ? "true" : "false")
             : ints    ? e.dump()
             : numbers ? double_literal(e.get<double>())
                       : "";
  }
  if (ints) return fmt::format("c10::IValue(std::vector<int64_t>{{{}}})", items);
  if (numbers) return fmt::format("c10::IValue(std::vector<double>{{{}}})", items);
  if (bools) return fmt::format("c10::IValue(c10::List<bool>({{{}}}))", items);
  throw refuse("is a list of mixed or nested values");
}

// Text for a // comment: line breaks (a path may hold them) become spaces.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

// "Float [2, 2] nan 0 +inf 1 -inf 0 max|finite| 2.71828" of a recorded tensor.
std::string recorded_line(const TensorStats& t) {
  std::string shape;
  for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape[i]);
  const double m = t.abs_max();
  return fmt::format("{} [{}] nan {} +inf {} -inf {} max|finite| {}", t.dtype, shape, t.nan, t.pinf,
                     t.ninf, std::isnan(m) ? std::string("-") : fmt::format("{:.6g}", m));
}

}  // namespace

std::string repro_source(const OpRecord& r, const std::string& origin,
                         const std::string& data_dir) {
  const std::string name = r.name();
  std::string args;
  for (size_t i = 0; i < r.inputs.size();) {
    const Arg& a = r.inputs[i];
    if (!a.is_tensor()) {
      const std::string shown = display_value(a.value);
      args += fmt::format("    push({});  // in{}: {}\n", value_expr(a.value, i, name), i,
                          shown.size() > 60 ? shown.substr(0, 60) + "..." : shown);
      ++i;
      continue;
    }
    auto load = [&](size_t k) {
      const TensorStats& t = *r.inputs[k].tensor;
      const char* type = scalar_type(t.dtype);
      if (type == nullptr)
        throw Error(
            fmt::format("{}: input in{} has dtype {}, which repro does not load (it "
                        "loads Float, Double, Half, BFloat16, Long, Int, Short, Char, "
                        "Byte and Bool)",
                        name, k, t.dtype));
      return fmt::format("load(\"repro_in{}.npy\", {})", k, type);
    };
    if (a.tensor->list_index < 0) {
      args += fmt::format("    push({});  // in{}: {}\n", load(i), i, recorded_line(*a.tensor));
      ++i;
      continue;
    }
    if (a.tensor->list_index != 0)
      throw Error(
          fmt::format("{}: input in{} is element {} of a tensor list whose first "
                      "elements are not tensors (a Tensor?[] holding None): repro "
                      "does not rebuild such lists",
                      name, i, a.tensor->list_index));
    std::string items;
    size_t k = i;
    for (int64_t li = 0;
         k < r.inputs.size() && r.inputs[k].is_tensor() && r.inputs[k].tensor->list_index == li;
         ++k, ++li) {
      items += (items.empty() ? "" : ",\n                          ") + load(k);
    }
    if (k < r.inputs.size() && r.inputs[k].is_tensor() && r.inputs[k].tensor->list_index > 0)
      throw Error(fmt::format("{}: input in{} continues a tensor list out of order (li {})", name,
                              k, r.inputs[k].tensor->list_index));
    args += fmt::format("    push(tensor_list({{{}}}));  // in{}..in{}: a tensor list\n", items, i,
                        k - 1);
    i = k;
  }
  std::string recorded;
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    const Arg& o = r.outputs[i];
    recorded += fmt::format("  out{}: {}\n", i,
                            o.is_tensor() ? recorded_line(*o.tensor) : "value " + o.value);
  }
  std::string head = fmt::format(
      "// {}: generated by `precprobe repro` from {}.\n"
      "// Re-runs {} (step {}) on its saved inputs through the dispatcher and prints each\n"
      "// output's dtype, shape, NaN/+Inf/-Inf counts and largest finite |x|.\n"
      "// Build: cmake -S . -B build [-DCMAKE_PREFIX_PATH=/path/to/libtorch] && cmake --build "
      "build\n"
      "// Run:   build/<program> [--device cuda:0] [DIR holding repro_in<i>.npy]\n",
      name, one_line(origin), name, r.step);
  std::string consts = fmt::format(
      "static const char* const kDataDir = {};\n"
      "static const char* const kOp = {};\n"
      "static const char* const kOverload = {};\n"
      "static const char* const kRecord = {};\n"
      "static const char* const kRecorded = {};\n\n",
      quote(data_dir), quote(r.op), quote(r.overload),
      quote(fmt::format("{} (step {}, recorded on {})", name, r.step,
                        [&] {
                          for (const Arg& a : r.inputs)
                            if (a.is_tensor()) return a.tensor->device;
                          return std::string("cpu");
                        }())),
      quote(recorded));
  std::string prelude = kPrelude;
  // The constants go after the includes, before the code that reads them.
  const size_t at = prelude.find("namespace {");
  prelude.insert(at, consts);
  return head + prelude + args + kCall;
}

std::string repro_cmake(const std::string& source_file, const std::string& target) {
  return fmt::format(
      "# Generated by precprobe repro: builds {0} against LibTorch.\n"
      "#   cmake -S . -B build [-DCMAKE_PREFIX_PATH=/path/to/libtorch] && cmake --build build\n"
      "cmake_minimum_required(VERSION 3.18)\n"
      "project(precprobe_repro CXX)\n"
      "find_package(Torch REQUIRED)\n"
      "# C++17, or the standard this LibTorch asks of its users (C++20 from 2.14 on).\n"
      "get_target_property(_torch_std torch CXX_STANDARD)\n"
      "if(_torch_std AND _torch_std GREATER 17)\n"
      "  set(CMAKE_CXX_STANDARD ${{_torch_std}})\n"
      "else()\n"
      "  set(CMAKE_CXX_STANDARD 17)\n"
      "endif()\n"
      "set(CMAKE_CXX_STANDARD_REQUIRED ON)\n"
      "set(CMAKE_CXX_FLAGS \"${{CMAKE_CXX_FLAGS}} ${{TORCH_CXX_FLAGS}}\")\n"
      "add_executable({1} {0})\n"
      "target_link_libraries({1} PRIVATE ${{TORCH_LIBRARIES}})\n",
      source_file, target);
}

}  // namespace precprobe
