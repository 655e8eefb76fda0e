// Records of the scaler, grads and events streams round-trip; hostile lines fail cleanly;
// non-finite numbers as format v2 writes them (null plus a named field) and as v1 did.
// Op records: test_records.cpp.
// Exact float comparisons are the point here (round trips must be bit-exact).
#pragma GCC diagnostic ignored "-Wfloat-equal"
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "core/record_samples.h"
#include "core/records_test_util.h"
#include "precprobe/records.h"
#include "precprobe_catch.h"

using namespace precprobe;
using namespace precprobe::test;  // diff, same_bits, kNaN, kInf, tensor, round_trip

TEST_CASE("scaler, grad and scalar records round-trip", "[records]") {
  ScalerRecord s;
  s.step = 9;
  s.optimizer = 1;
  s.group = 2;
  s.found_inf = true;
  s.nonfinite_params = 3;
  s.bad_params = {"fc.weight", "fc.bias", "emb\"x"};
  s.grad_norm_scaled = kInf;
  s.grad_norm = 12.5;
  s.scale_before = 65536;
  s.scale_after = 32768;
  s.growth_tracker = 0;
  s.skipped = true;
  s.event = "backoff";
  std::string line;
  append_json(s, line);
  CHECK(line ==
        R"({"step":9,"opt":1,"group":2,"found_inf":true,"n_bad":3,"bad":["fc.weight","fc.bias",)"
        R"("emb\"x"],"gn_scaled":null,"gn_scaled_nonfinite":"inf","gn":12.5,"scale":65536,)"
        R"("scale_next":32768,"tracker":0,)"
        R"("skipped":true,"event":"backoff"})"
        "\n");
  ScalerRecord s2;
  REQUIRE(parse_record(line, s2));
  CHECK(s2.step == 9);
  CHECK(s2.optimizer == 1);
  CHECK(s2.group == 2);
  CHECK(s2.found_inf);
  CHECK(s2.nonfinite_params == 3);
  CHECK(s2.bad_params == s.bad_params);
  CHECK(std::isinf(s2.grad_norm_scaled));
  CHECK(s2.grad_norm == 12.5);
  CHECK(s2.scale_before == 65536);
  CHECK(s2.scale_after == 32768);
  CHECK(s2.skipped);
  CHECK(s2.event == "backoff");

  GradRecord g;
  g.step = 4;
  g.param = "enc.0.bias";
  g.grad_norm = 0.1 + 0.2;  // a double with all 17 digits
  g.grad_abs_max = kNaN;
  g.grad_abs_mean = 5e-324;
  g.grad_nan = 7;
  g.grad_inf = 1;
  g.has_grad = false;
  g.weight_norm = -0.0;
  g.update_ratio = 1e-12;
  g.watch = {"w1", "w2"};
  line.clear();
  append_json(g, line);
  GradRecord g2;
  REQUIRE(parse_record(line, g2));
  CHECK(g2.step == 4);
  CHECK(g2.param == g.param);
  CHECK(same_bits(g2.grad_norm, g.grad_norm));
  CHECK(std::isnan(g2.grad_abs_max));
  CHECK(same_bits(g2.grad_abs_mean, 5e-324));
  CHECK(g2.grad_nan == 7);
  CHECK(g2.grad_inf == 1);
  CHECK_FALSE(g2.has_grad);
  CHECK(same_bits(g2.weight_norm, -0.0));
  CHECK(g2.update_ratio == 1e-12);
  CHECK(g2.watch == g.watch);
  CHECK(g2.has_weight);

  // Without weight statistics (the on_anomaly watch's records): "wn" and "ur" are absent,
  // never a made-up 0, and read back as absent.
  g.has_weight = false;
  line.clear();
  append_json(g, line);
  CHECK(line.find("\"wn\"") == std::string::npos);
  CHECK(line.find("\"ur\"") == std::string::npos);
  REQUIRE(parse_record(line, g2));
  CHECK_FALSE(g2.has_weight);
  CHECK(std::isnan(g2.weight_norm));
  CHECK(std::isnan(g2.update_ratio));
  CHECK(g2.watch == g.watch);
  // A line of an older writer always has them.
  REQUIRE(parse_record(R"({"step":1,"param":"w","wn":null,"wn_nonfinite":"inf","ur":0})", g2));
  CHECK(g2.has_weight);
  CHECK(g2.weight_norm == kInf);
  CHECK(g2.update_ratio == 0.0);

  ScalarRecord v;
  v.step = 3;
  v.name = "loss";
  v.value = -kInf;
  line.clear();
  append_json(v, line);
  CHECK(line == "{\"step\":3,\"name\":\"loss\",\"value\":null,\"value_nonfinite\":\"-inf\"}\n");
  ScalarRecord v2;
  REQUIRE(parse_record(line, v2));
  CHECK(v2.step == 3);
  CHECK(v2.name == "loss");
  CHECK(v2.value == -kInf);
}

TEST_CASE("hostile lines fail cleanly with a message", "[records]") {
  std::string deep_array = R"({"op":"x","in":[{"v":)" + std::string(100000, '[');
  std::string deep_object = R"({"op":"x","zz":)";
  for (int i = 0; i < 50000; ++i) deep_object += R"({"a":)";
  std::string long_digits =
      R"({"op":"x","in":[{"dtype":"F","min":1)" + std::string(5000, '0') + "}]}";
  std::string many_bins = R"({"op":"x","in":[{"dtype":"Long","hist":[)";
  for (size_t i = 0; i <= precprobe::kHistogramBins; ++i)
    many_bins += (i ? ",[" : "[") + std::to_string(i) + ",1]";
  many_bins += "]}]}";
  std::vector<std::string> bad = {
      many_bins,
      "",
      "   ",
      "null",
      "[]",
      "{",
      "}",
      R"({"op":"x"} trailing)",
      R"({"op":"x",})",
      R"({"op":"x" "step":1})",
      R"({"step":1})",  // no op
      R"({"op":1})",
      R"({"op":"x","step":"1"})",
      R"({"op":"x","step":1.5})",
      R"({"op":"x","step":1e3})",
      R"({"op":"x","step":99999999999999999999})",
      R"({"op":"x","step":-9223372036854775809})",
      R"({"op":"x","step":01})",
      R"({"op":"x","step":-})",
      R"({"op":"x","step":+1})",
      R"({"op":"x","thr":-1})",
      R"({"op":"x","thr":4294967296})",
      R"({"op":"x","depth":2147483648})",
      R"({"op":"x","dir":"sideways"})",
      R"({"op":"x","dir":1})",
      R"({"op":"x","in":{}})",
      R"({"op":"x","in":[1]})",
      R"({"op":"x","in":[{}]})",
      R"({"op":"x","in":[{"dtype":"F","shape":"2x3"}]})",
      R"({"op":"x","in":[{"dtype":"F","shape":[2.5]}]})",
      R"({"op":"x","in":[{"dtype":"F","rg":1}]})",
      R"({"op":"x","in":[{"dtype":"F","min":"NaN!"}]})",
      R"({"op":"x","in":[{"dtype":"F","min":nan}]})",
      R"({"op":"x","in":[{"dtype":"F","min":Infinity}]})",
      R"({"op":"x","in":[{"dtype":"F","min":1e999}]})",
      R"({"op":"x","in":[{"dtype":"F","min":-1e400}]})",
      R"({"op":"x","in":[{"dtype":"F","min":1.}]})",
      R"({"op":"x","in":[{"dtype":"F","min":.5}]})",
      R"({"op":"x","in":[{"dtype":"F","hash":"xyz"}]})",
      R"({"op":"x","in":[{"dtype":"F","hash":"12345678901234567"}]})",
      R"({"op":"x","in":[{"dtype":"F","hash":""}]})",
      R"({"op":"x","in":[{"dtype":"F","hist":[[1]]}]})",
      R"({"op":"x","in":[{"dtype":"F","hist":[[1,2,3]]}]})",
      R"({"op":"x","in":[{"dtype":"F","hist":[1,2]}]})",
      R"({"op":"x","in":[{"dtype":"F","hist":[[1,2.5]]}]})",
      R"({"op":"x","in":[{"v":}]})",
      R"({"op":"x","in":[{"v":[1,]}]})",
      R"({"op":"x","in":[{"v":tru}]})",
      R"({"op":"x","in":[{"v":"abc}]})",
      R"({"op":"x\q"})",
      R"({"op":"x\u12"})",
      "{\"op\":\"x\ny\"}",
      std::string("{\"op\":\"x\0\"}", 10),
      deep_array,
      deep_array + std::string(100000, ']') + "}]}",
      deep_object,
      long_digits,
  };
  for (const std::string& line : bad) {
    OpRecord r;
    std::string error;
    INFO(line.substr(0, 200));
    CHECK_FALSE(parse_record(line, r, &error));
    CHECK_FALSE(error.empty());
  }
  // Bounded memory: at most 2^18 arguments (and list entries) per list.
  std::string many = R"({"op":"x","in":[)";
  for (int i = 0; i < (1 << 18) + 1; ++i) many += R"({"v":1},)";
  many.back() = ']';
  many += '}';
  OpRecord r;
  std::string error;
  CHECK_FALSE(parse_record(many, r, &error));
  CHECK(error.find("too many arguments") != std::string::npos);
  many.erase(many.size() - 10, 8);  // exactly 2^18 arguments: accepted
  REQUIRE(parse_record(many, r, &error));
  CHECK(r.inputs.size() == (1u << 18));

  ScalerRecord s;
  CHECK_FALSE(parse_record(R"({"step":1,"found_inf":"yes"})", s));
  GradRecord g;
  CHECK_FALSE(parse_record(R"({"step":1})", g));
  CHECK_FALSE(parse_record(R"({"param":"p","gn":[1]})", g));
  ScalarRecord v;
  CHECK_FALSE(parse_record(R"({"name":"loss","value":"1"})", v));
  CHECK_FALSE(parse_record(R"({"value":1})", v));
}

TEST_CASE("every truncation of a valid line fails, random corruption never crashes", "[records]") {
  std::mt19937_64 rng(42);
  OpRecord r = precprobe::test::sample_op(rng, 3, 9);
  r.scope = "x/y";
  r.inputs[0].tensor->hash = 12345;
  r.inputs.push_back(Arg{std::nullopt, "[1,{\"a\":\"b\"}]"});
  std::string line;
  append_json(r, line);
  line.pop_back();
  OpRecord out;
  for (size_t n = 0; n < line.size(); ++n) {
    INFO(n);
    CHECK_FALSE(parse_record(std::string_view(line).substr(0, n), out));
  }
  REQUIRE(parse_record(line, out));
  CHECK(diff(r, out).empty());

  // Single-byte corruption: whatever parses must be a full record; nothing may crash.
  std::uniform_int_distribution<size_t> pos(0, line.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  int parsed = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string m = line;
    for (int k = 0; k < 1 + i % 3; ++k) m[pos(rng)] = static_cast<char>(byte(rng));
    std::string error;
    if (parse_record(m, out, &error)) {
      ++parsed;
      CHECK(!out.op.empty());
    } else {
      CHECK(!error.empty());
    }
  }
  CHECK(parsed < 20000);
}

namespace {

// Every value in `j` that is the name of a non-finite number ("nan", "inf", "-inf") must sit
// under a "<key>_nonfinite" key; every other string is allowed only under `string_keys`.
// Returns the path of the first offender, else "".
std::string quoted_nonfinite(const nlohmann::json& j, const std::string& path = "",
                             bool in_named = false) {
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    const bool name = s == "nan" || s == "inf" || s == "-inf";
    return name && !in_named ? path : "";
  }
  if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      auto bad = quoted_nonfinite(j[i], path + "[" + std::to_string(i) + "]", in_named);
      if (!bad.empty()) return bad;
    }
  }
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      const bool named = k.size() > 10 && k.compare(k.size() - 10, 10, "_nonfinite") == 0;
      auto bad = quoted_nonfinite(v, path + "." + k, in_named || named);
      if (!bad.empty()) return bad;
    }
  }
  return "";
}

// The numeric keys of each record kind: each must hold a JSON number or null.
void check_numbers(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    INFO(k << " in " << j.dump());
    REQUIRE(j.contains(k));
    CHECK((j[k].is_number() || j[k].is_null()));
  }
}

// "nan", "inf" or "-inf" for a non-finite v, "" otherwise.
std::string name_of(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return "";
}

}  // namespace

TEST_CASE("v2: NaN and +-Inf in every numeric field round-trip, as null plus a named field",
          "[records]") {
  const double specials[] = {kNaN, kInf, -kInf, 1.5};
  for (double a : specials) {
    for (double b : specials) {
      INFO("a=" << a << " b=" << b);
      // Op record: every tensor statistic, a scalar value and a list value.
      OpRecord r;
      r.op = "aten::clamp";
      TensorStats t = tensor("Double", {3});
      t.numel = 3;
      t.min = a;
      t.max = b;
      t.mean = b;
      t.norm = a;
      r.inputs.push_back(Arg{t, {}});
      const std::string value = std::isfinite(a) ? "1.5" : "\"" + name_of(a) + "\"";
      r.inputs.push_back(Arg{std::nullopt, value});
      r.inputs.push_back(Arg{std::nullopt, "[" + value + ",2.0]"});
      r.outputs.push_back(Arg{t, {}});
      std::string line;
      append_json(r, line);
      INFO(line);
      auto j = nlohmann::json::parse(line);
      CHECK(quoted_nonfinite(j).empty());
      for (const auto& x : {j["in"][0], j["out"][0]}) {
        check_numbers(x, {"numel", "nan", "pinf", "ninf", "zero", "neg", "pos", "min", "max",
                          "mean", "norm"});
        // NaN statistics are undefined (null alone); +-Inf also names itself.
        for (auto [key, v] :
             {std::pair<const char*, double>{"min", a}, {"max", b}, {"mean", b}, {"norm", a}}) {
          CHECK(x[key].is_null() == !std::isfinite(v));
          if (std::isinf(v)) {
            CHECK(x[std::string(key) + "_nonfinite"] == name_of(v));
          } else {
            CHECK_FALSE(x.contains(std::string(key) + "_nonfinite"));
          }
        }
      }
      if (std::isfinite(a)) {
        CHECK(j["in"][1] == nlohmann::json::parse(R"({"v":1.5})"));
      } else {
        CHECK(j["in"][1]["v"].is_null());
        CHECK(j["in"][1]["v_nonfinite"] == name_of(a));
        CHECK(j["in"][2]["v"] == nlohmann::json::parse("[null,2.0]"));
        CHECK(j["in"][2]["v_nonfinite"] == nlohmann::json::parse("[" + value + ",2.0]"));
      }
      OpRecord back = round_trip(r);
      CHECK(diff(r, back).empty());
      INFO(diff(r, back));

      ScalerRecord s;
      s.grad_norm_scaled = a;
      s.grad_norm = b;
      s.scale_before = b;
      s.scale_after = a;
      line.clear();
      append_json(s, line);
      j = nlohmann::json::parse(line);
      CHECK(quoted_nonfinite(j).empty());
      check_numbers(j, {"step", "opt", "group", "n_bad", "gn_scaled", "gn", "scale", "scale_next",
                        "tracker"});
      CHECK(j.value("gn_scaled_nonfinite", "") == name_of(a));
      CHECK(j.value("scale_next_nonfinite", "") == name_of(a));
      CHECK(j.value("gn_nonfinite", "") == name_of(b));
      ScalerRecord s2;
      REQUIRE(parse_record(line, s2));
      CHECK(same_bits(s2.grad_norm_scaled, a));
      CHECK(same_bits(s2.grad_norm, b));
      CHECK(same_bits(s2.scale_before, b));
      CHECK(same_bits(s2.scale_after, a));

      GradRecord g;
      g.param = "w";
      g.grad_norm = a;
      g.grad_abs_max = b;
      g.grad_abs_mean = a;
      g.weight_norm = b;
      g.update_ratio = a;
      line.clear();
      append_json(g, line);
      j = nlohmann::json::parse(line);
      CHECK(quoted_nonfinite(j).empty());
      check_numbers(j, {"step", "gn", "gmax", "gmean", "gnan", "ginf", "wn", "ur"});
      CHECK(j.value("ur_nonfinite", "") == name_of(a));
      CHECK(j.value("wn_nonfinite", "") == name_of(b));
      GradRecord g2;
      REQUIRE(parse_record(line, g2));
      CHECK(same_bits(g2.grad_norm, a));
      CHECK(same_bits(g2.grad_abs_max, b));
      CHECK(same_bits(g2.grad_abs_mean, a));
      CHECK(same_bits(g2.weight_norm, b));
      CHECK(same_bits(g2.update_ratio, a));

      ScalarRecord v;
      v.name = "loss";
      v.value = a;
      line.clear();
      append_json(v, line);
      j = nlohmann::json::parse(line);
      CHECK(quoted_nonfinite(j).empty());
      check_numbers(j, {"step", "value"});
      CHECK(j.value("value_nonfinite", "") == name_of(a));
      ScalarRecord v2;
      REQUIRE(parse_record(line, v2));
      CHECK(same_bits(v2.value, a));
    }
  }
}

TEST_CASE("v2: named non-finite fields are read in any key order, with blanks", "[records]") {
  OpRecord r;
  REQUIRE(parse_record(
      R"({"op":"x","in":[{"min_nonfinite":"-inf","dtype":"Float","min":null,"norm":null,)"
      R"("norm_nonfinite" : "inf","max":null,"mean":null},{"v_nonfinite":"nan","v":null},)"
      R"({"v":null,"v_nonfinite":["inf",1]}]})",
      r));
  REQUIRE(r.inputs.size() == 3);
  const TensorStats& t = *r.inputs[0].tensor;
  CHECK(t.min == -kInf);
  CHECK(t.norm == kInf);
  CHECK(std::isnan(t.max));  // null without a name: undefined
  CHECK(std::isnan(t.mean));
  CHECK(r.inputs[1].value == "\"nan\"");
  CHECK(r.inputs[2].value == "[\"inf\",1]");
  GradRecord g;
  REQUIRE(parse_record(R"({"gn_nonfinite":"inf","param":"w","gn":null,"gmax":null})", g));
  CHECK(g.grad_norm == kInf);
  CHECK(std::isnan(g.grad_abs_max));
  ScalerRecord s;
  REQUIRE(parse_record(R"({"scale_nonfinite":"-inf","scale":null})", s));
  CHECK(s.scale_before == -kInf);
  ScalarRecord v;
  REQUIRE(parse_record(R"({"name":"loss","value":null,"value_nonfinite":"nan"})", v));
  CHECK(std::isnan(v.value));
  // A named field must name a non-finite value.
  std::string error;
  CHECK_FALSE(parse_record(R"({"name":"loss","value":null,"value_nonfinite":1})", v, &error));
  CHECK_THAT(error, Catch::Matchers::ContainsSubstring("\"nan\", \"inf\" or \"-inf\""));
  CHECK_FALSE(parse_record(R"({"name":"loss","value_nonfinite":"big"})", v, &error));
  CHECK_FALSE(parse_record(R"({"op":"x","in":[{"dtype":"F","min_nonfinite":null}]})", r, &error));
}

TEST_CASE("v1: lines with the strings \"nan\", \"inf\", \"-inf\" still read", "[records]") {
  OpRecord r;
  REQUIRE(parse_record(
      R"({"step":1,"seq":0,"op":"aten::div","call":0,"dir":"forward","thr":0,"depth":0,"sn":-1,)"
      R"("in":[{"dtype":"Float","shape":[2],"device":"cpu","numel":2,"nan":2,"pinf":0,"ninf":0,)"
      R"("zero":0,"neg":0,"pos":0,"min":"nan","max":"nan","mean":"nan","norm":"inf"},)"
      R"({"v":"-inf"}],"out":[]})",
      r));
  REQUIRE(r.inputs.size() == 2);
  CHECK(std::isnan(r.inputs[0].tensor->min));
  CHECK(std::isnan(r.inputs[0].tensor->mean));
  CHECK(r.inputs[0].tensor->norm == kInf);
  CHECK(r.inputs[1].value == "\"-inf\"");
  ScalerRecord s;
  REQUIRE(parse_record(R"({"step":9,"gn_scaled":"inf","gn":"nan","scale":"-inf"})", s));
  CHECK(s.grad_norm_scaled == kInf);
  CHECK(std::isnan(s.grad_norm));
  CHECK(s.scale_before == -kInf);
  ScalarRecord v;
  REQUIRE(parse_record(R"({"step":3,"name":"loss","value":"-inf"})", v));
  CHECK(v.value == -kInf);
}
