// config.json's "watch" (precprobe/op_watch.h, docs/watchpoints.md): the op watchpoints'
// thresholds. Parsing, validation and the JSON written back to meta.json's "config".
#include <cmath>
#include <string>

#include "options_detail.h"
#include "precprobe/error.h"
#include "precprobe/op_watch.h"

namespace precprobe {
namespace {

constexpr detail::IntLimits kWindowLimits{1, 100000};

[[noreturn]] void fail_expected(const std::string& key, const nlohmann::json& v,
                                const std::string& what) {
  detail::fail_key(key, "expected " + what + ", found " + detail::describe_value(v));
}

bool read_bool(const nlohmann::json& v, const std::string& key) {
  if (!v.is_boolean()) fail_expected(key, v, "a boolean (true or false)");
  return v.get<bool>();
}

int64_t read_int(const nlohmann::json& v, const std::string& key) {
  if (v.is_number_integer() && v.get<int64_t>() >= kWindowLimits.lo &&
      v.get<int64_t>() <= kWindowLimits.hi)
    return v.get<int64_t>();
  fail_expected(key, v, detail::describe_limits(kWindowLimits));
}

// A number, or false / null for off.
std::optional<double> read_optional(const nlohmann::json& v, const std::string& key,
                                    const char* what) {
  if (v.is_null() || (v.is_boolean() && !v.get<bool>())) return std::nullopt;
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    fail_expected(key, v, std::string(what) + ", or false (off)");
  return v.get<double>();
}

void check_positive(const std::optional<double>& v, const std::string& key, const char* what) {
  if (v && !(*v > 0))
    detail::fail_key(key, "is " + std::to_string(*v) + "; allowed: " + what + ", or off");
}

void check_fraction(const std::optional<double>& v, const std::string& key) {
  if (v && !(*v > 0 && *v <= 1))
    detail::fail_key(key, "is " + std::to_string(*v) + "; allowed: a fraction in (0, 1], or off");
}

nlohmann::json optional_json(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(false);
}

}  // namespace

void OpWatchOptions::validate() const {
  check_fraction(activation_dead_fraction, "watch.activation_dead_fraction");
  check_fraction(activation_saturated, "watch.activation_saturated");
  if (tensor_too_large_factor && !(*tensor_too_large_factor > 1))
    detail::fail_key("watch.tensor_too_large_factor",
                     "is " + std::to_string(*tensor_too_large_factor) +
                         "; allowed: a factor > 1 (of the op's median max |x|), or off");
  if (tensor_too_small_factor && !(*tensor_too_small_factor > 1))
    detail::fail_key("watch.tensor_too_small_factor",
                     "is " + std::to_string(*tensor_too_small_factor) +
                         "; allowed: a factor > 1 (the norm under its median / factor), or off");
  check_positive(tensor_too_large_abs, "watch.tensor_too_large_abs", "a number > 0");
  check_positive(tensor_too_small_abs, "watch.tensor_too_small_abs", "a number > 0");
  if (range_min && range_max && !(*range_min < *range_max))
    detail::fail_key("watch.range_min", "must be below watch.range_max");
  if (!range_dtype.empty() && !dtype_max(range_dtype))
    detail::fail_key("watch.range_dtype",
                     "'" + range_dtype +
                         "' is not one of: float16, bfloat16, float8_e4m3fn, float8_e5m2 (or \"\" "
                         "for off)");
  for (const auto& [key, v] :
       {std::pair<const char*, int64_t>{"watch.median_window", median_window},
        {"watch.activation_dead_steps", activation_dead_steps},
        {"watch.activation_saturated_steps", activation_saturated_steps}})
    if (v < kWindowLimits.lo || v > kWindowLimits.hi)
      detail::fail_key(key, std::to_string(v) + " is out of range; allowed: " +
                                detail::describe_limits(kWindowLimits));
  if (warmup < 1 || warmup > median_window)
    detail::fail_key("watch.warmup", std::to_string(warmup) +
                                         " is out of range; allowed: 1 .. watch.median_window (" +
                                         std::to_string(median_window) + ")");
}

nlohmann::ordered_json OpWatchOptions::to_json_value() const {
  nlohmann::ordered_json j;
  j["enable"] = enable;
  j["tensor_overflow"] = tensor_overflow;
  j["tensor_all_zero"] = tensor_all_zero;
  j["activation_dead_fraction"] = optional_json(activation_dead_fraction);
  j["activation_dead_steps"] = activation_dead_steps;
  j["tensor_too_large_factor"] = optional_json(tensor_too_large_factor);
  j["tensor_too_large_abs"] = optional_json(tensor_too_large_abs);
  j["tensor_too_small_factor"] = optional_json(tensor_too_small_factor);
  j["tensor_too_small_abs"] = optional_json(tensor_too_small_abs);
  j["range_min"] = optional_json(range_min);
  j["range_max"] = optional_json(range_max);
  j["range_dtype"] = range_dtype;
  j["activation_saturated"] = optional_json(activation_saturated);
  j["activation_saturated_steps"] = activation_saturated_steps;
  j["median_window"] = median_window;
  j["warmup"] = warmup;
  return j;
}

OpWatchOptions OpWatchOptions::from_json_value(const nlohmann::json& v, const std::string& key) {
  OpWatchOptions o;
  if (v.is_boolean()) {
    o.enable = v.get<bool>();
    return o;
  }
  if (!v.is_object())
    fail_expected(key, v,
                  "true, false, or an object of watchpoint thresholds (docs/watchpoints.md)");
  for (const auto& item : v.items()) {
    const std::string& k = item.key();
    const nlohmann::json& x = item.value();
    const std::string sub = key + "." + k;
    if (k == "enable") {
      o.enable = read_bool(x, sub);
    } else if (k == "tensor_overflow") {
      o.tensor_overflow = read_bool(x, sub);
    } else if (k == "tensor_all_zero") {
      o.tensor_all_zero = read_bool(x, sub);
    } else if (k == "activation_dead_fraction") {
      o.activation_dead_fraction = read_optional(x, sub, "a fraction in (0, 1]");
    } else if (k == "activation_dead_steps") {
      o.activation_dead_steps = read_int(x, sub);
    } else if (k == "tensor_too_large_factor") {
      o.tensor_too_large_factor = read_optional(x, sub, "a factor > 1");
    } else if (k == "tensor_too_large_abs") {
      o.tensor_too_large_abs = read_optional(x, sub, "a number > 0");
    } else if (k == "tensor_too_small_factor") {
      o.tensor_too_small_factor = read_optional(x, sub, "a factor > 1");
    } else if (k == "tensor_too_small_abs") {
      o.tensor_too_small_abs = read_optional(x, sub, "a number > 0");
    } else if (k == "range_min") {
      o.range_min = read_optional(x, sub, "a number");
    } else if (k == "range_max") {
      o.range_max = read_optional(x, sub, "a number");
    } else if (k == "range_dtype") {
      if (!x.is_string())
        fail_expected(sub, x, "a dtype name: float16, bfloat16, float8_e4m3fn, float8_e5m2");
      o.range_dtype = x.get<std::string>();
    } else if (k == "activation_saturated") {
      o.activation_saturated = read_optional(x, sub, "a fraction in (0, 1]");
    } else if (k == "activation_saturated_steps") {
      o.activation_saturated_steps = read_int(x, sub);
    } else if (k == "median_window") {
      o.median_window = read_int(x, sub);
    } else if (k == "warmup") {
      o.warmup = read_int(x, sub);
    } else {
      throw Error("unknown config key '" + sub + "'. Valid keys in '" + key +
                  "': enable, tensor_overflow, tensor_all_zero, activation_dead_fraction, "
                  "activation_dead_steps, tensor_too_large_factor, tensor_too_large_abs, "
                  "tensor_too_small_factor, tensor_too_small_abs, range_min, range_max, "
                  "range_dtype, activation_saturated, activation_saturated_steps, median_window, "
                  "warmup");
    }
  }
  o.validate();
  return o;
}

namespace detail {
void parse_watch(const nlohmann::json& v, const std::string& key, DebuggerOptions& o) {
  o.watch = OpWatchOptions::from_json_value(v, key);
}
}  // namespace detail

}  // namespace precprobe
