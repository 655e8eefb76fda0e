// Records: helpers, exact JSON text, round trips of every field of op records. Scaler, grad
// and scalar records, hostile input and the v1/v2 number spellings: test_records_parse.cpp.
// Exact float comparisons are the point here (round trips must be bit-exact).
#pragma GCC diagnostic ignored "-Wfloat-equal"
#include <cfloat>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "core/record_samples.h"
#include "core/records_test_util.h"
#include "precprobe/records.h"
#include "precprobe_catch.h"

using namespace precprobe;
using namespace precprobe::test;  // diff, same_bits, kNaN, kInf, tensor, round_trip

TEST_CASE("helpers: direction names, msprobe-style name, abs_max, non-finite flags", "[records]") {
  CHECK(to_string(Direction::kForward) == "forward");
  CHECK(to_string(Direction::kBackward) == "backward");

  OpRecord r;
  r.op = "aten::addmm";
  r.call = 3;
  CHECK(r.name() == "aten::addmm.3.forward");
  r.dir = Direction::kBackward;
  r.call = 0;
  CHECK(r.name() == "aten::addmm.0.backward");

  TensorStats t;
  t.min = -7.5;
  t.max = 2;
  CHECK(t.abs_max() == 7.5);
  t.min = 0.5;
  t.max = 9;
  CHECK(t.abs_max() == 9);
  t.min = t.max = kNaN;  // no finite value at all
  CHECK(std::isnan(t.abs_max()));

  CHECK_FALSE(r.inputs_non_finite());
  TensorStats good = tensor("Float", {2});
  TensorStats bad = tensor("Float", {2});
  bad.ninf = 1;
  r.inputs = {Arg{good, {}}, Arg{std::nullopt, "1"}};
  r.outputs = {Arg{good, {}}, Arg{bad, {}}};
  CHECK_FALSE(r.inputs_non_finite());
  CHECK(r.outputs_non_finite());
  CHECK(bad.non_finite() == 1);

  // Uninitialized memory from the empty family is garbage, never an overflow.
  for (const char* op :
       {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
        "aten::new_empty_strided", "aten::empty_permuted", "aten::empty_quantized",
        "aten::_empty_affine_quantized", "aten::_empty_per_channel_affine_quantized"}) {
    r.op = op;
    CHECK(r.outputs_uninitialized());
    CHECK_FALSE(r.outputs_non_finite());
  }
  r.op = "aten::empty_like_not";  // only those exact names
  CHECK_FALSE(r.outputs_uninitialized());
  CHECK(r.outputs_non_finite());
}

TEST_CASE("op record: exact JSON text with short keys and omitted defaults", "[records]") {
  OpRecord r;
  r.step = 2;
  r.seq = 7;
  r.op = "aten::addmm";
  r.call = 3;
  r.thread = 1;
  r.seqnr = 42;
  TensorStats a = tensor("Float", {2, 3});
  a.numel = 6;
  a.nan = 1;
  a.zero = 1;
  a.neg = 2;
  a.pos = 2;
  a.min = -1.5;
  a.max = 2.25;
  a.mean = 0.1;
  a.norm = 3;
  TensorStats b = tensor("Half", {});
  b.requires_grad = true;
  b.numel = 1;
  b.pos = 1;
  b.min = b.max = b.mean = b.norm = 1;
  b.hash = 0xdeadbeefULL;
  b.param = "w";
  b.list_index = 0;
  r.inputs = {Arg{a, {}}, Arg{std::nullopt, "0.5"}};
  r.outputs = {Arg{b, {}}};
  std::string line;
  append_json(r, line);
  CHECK(line ==
        R"({"step":2,"seq":7,"op":"aten::addmm","call":3,"dir":"forward","thr":1,"depth":0,)"
        R"("sn":42,"in":[{"dtype":"Float","shape":[2,3],"device":"cpu","numel":6,"nan":1,)"
        R"("pinf":0,"ninf":0,"zero":1,"neg":2,"pos":2,"min":-1.5,"max":2.25,"mean":0.1,)"
        R"("norm":3},{"v":0.5}],"out":[{"dtype":"Half","shape":[],"device":"cpu","rg":true,)"
        R"("numel":1,"nan":0,"pinf":0,"ninf":0,"zero":0,"neg":0,"pos":1,"min":1,"max":1,)"
        R"("mean":1,"norm":1,"hash":"00000000deadbeef","param":"w","li":0}]})"
        "\n");

  r.overload = "Tensor";
  r.scope = "enc/b1";
  r.node = "AddmmBackward0";
  r.dir = Direction::kBackward;
  r.inputs.clear();
  r.outputs.clear();
  line.clear();
  append_json(r, line);
  CHECK(line ==
        R"({"step":2,"seq":7,"op":"aten::addmm","ovl":"Tensor","call":3,"dir":"backward",)"
        R"("thr":1,"depth":0,"sn":42,"scope":"enc/b1","node":"AddmmBackward0","in":[],"out":[]})"
        "\n");

  // overflow_check's module and an optimizer's step, in the writer's key order.
  r.dir = Direction::kForward;
  r.node.clear();
  r.optimizer = true;
  r.module = "b0";
  line.clear();
  append_json(r, line);
  CHECK(line ==
        R"({"step":2,"seq":7,"op":"aten::addmm","ovl":"Tensor","call":3,"dir":"forward",)"
        R"("thr":1,"depth":0,"sn":42,"opt":true,"scope":"enc/b1","mod":"b0","in":[],"out":[]})"
        "\n");
}

TEST_CASE("op record: every field round-trips, special doubles and extreme integers", "[records]") {
  OpRecord r;
  r.step = std::numeric_limits<int64_t>::max();
  r.seq = std::numeric_limits<int64_t>::min();
  r.op = "aten::weird \"quoted\" \\ name\t\x01 \xc3\xa9";
  r.overload = "Scalar";
  r.call = 123456789012345;
  r.dir = Direction::kBackward;
  r.thread = std::numeric_limits<uint32_t>::max();
  r.depth = std::numeric_limits<int32_t>::min();
  r.seqnr = -1;
  r.scope = "a/b/c";
  r.node = "MulBackward0";
  r.background = true;
  r.optimizer = true;
  r.module = "blocks.0.attn \"q\"";

  std::vector<double> specials = {kNaN,    kInf,   -kInf,         -0.0,     0.0,
                                  DBL_MIN, 5e-324, DBL_MAX,       -DBL_MAX, 0.1,
                                  1.0 / 3, 1e16,   FLT_MAX * 2.0, 1e-320,   123456789.123456789};
  for (size_t i = 0; i < specials.size(); ++i) {
    TensorStats t = tensor(i % 2 ? "BFloat16" : "Float", {static_cast<int64_t>(i), 1, -1});
    t.device = "cuda:0";
    t.requires_grad = i % 3 == 0;
    t.numel = std::numeric_limits<int64_t>::max() - static_cast<int64_t>(i);
    t.nan = 1;
    t.pinf = 2;
    t.ninf = 3;
    t.zero = 4;
    t.neg = 5;
    t.pos = 6;
    t.min = specials[i];
    t.max = specials[(i + 1) % specials.size()];
    t.mean = specials[(i + 2) % specials.size()];
    t.norm = specials[(i + 3) % specials.size()];
    if (i % 2) t.hash = i == 1 ? ~uint64_t{0} : uint64_t{i};
    if (i % 4 == 1) t.param = "layers." + std::to_string(i) + ".weight";
    t.list_index = i % 3 == 0 ? -1 : static_cast<int64_t>(i);
    if (i % 5 == 2) t.hist = {{std::numeric_limits<int64_t>::min(), 1}, {7, int64_t(i) << 40}};
    (i % 2 ? r.inputs : r.outputs).push_back(Arg{t, {}});
  }
  for (const char* v : {"1", "-0.5", "[1,2,[3,{\"a\":null}]]", "\"mean\"", "null", "true",
                        "{\"x\":[1,{\"y\":\"}\"}]}", "1e-7"}) {
    r.inputs.push_back(Arg{std::nullopt, v});
  }
  OpRecord back = round_trip(r);
  CHECK(diff(r, back).empty());
  INFO(diff(r, back));

  // mean/norm come back as their float32 rounding; values beyond float range stay whole.
  CHECK(back.inputs[0].tensor->mean == 0.0);  // specials[3]
  CHECK(std::signbit(back.inputs[0].tensor->mean));
  OpRecord one;
  one.op = "x";
  TensorStats t = tensor("Double", {1});
  t.mean = 0.1;
  t.norm = 1e300;
  one.outputs.push_back(Arg{t, {}});
  OpRecord b1 = round_trip(one);
  CHECK(b1.outputs[0].tensor->mean == static_cast<double>(0.1f));
  CHECK(b1.outputs[0].tensor->norm == 1e300);
}

TEST_CASE("op record: the largest histograms round-trip in many tensors", "[records]") {
  // kHistogramBins bins of 20-digit numbers in every tensor of a record: the encoder must
  // make room for each bin (a line once ended in blanks where it did not).
  OpRecord r;
  r.op = "aten::max_pool2d_with_indices";
  for (int k = 0; k < 6; ++k) {
    TensorStats t = tensor("Long", {64, 16, 14, 14});
    for (size_t i = 0; i < precprobe::kHistogramBins; ++i) {
      t.hist.emplace_back(std::numeric_limits<int64_t>::min() + int64_t(i),
                          std::numeric_limits<int64_t>::max() - int64_t(i));
    }
    (k % 2 ? r.inputs : r.outputs).push_back(Arg{t, {}});
  }
  std::string line;
  append_json(r, line);
  REQUIRE(line.back() == '\n');
  CHECK(line.find(' ') == std::string::npos);
  OpRecord back = round_trip(r);
  CHECK(diff(r, back).empty());
}

TEST_CASE("mean and norm survive as float32 for random bit patterns", "[records]") {
  // Independent reference: the float itself. Every finite float written by the encoder
  // must parse back to exactly that float (decimal -> double -> float double rounding
  // must not bite on shortest representations).
  std::mt19937 rng(11);
  OpRecord r;
  r.op = "x";
  r.outputs.push_back(Arg{tensor("Float", {1}), {}});
  std::string line;
  OpRecord back;
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &bits, 4);
    if (!std::isfinite(f)) continue;
    r.outputs[0].tensor->mean = f;
    r.outputs[0].tensor->norm = std::nextafter(f, 0.0f);
    line.clear();
    append_json(r, line);
    REQUIRE(parse_record(line, back));
    const TensorStats& t = *back.outputs[0].tensor;
    if (!same_bits(t.mean, f) || !same_bits(t.norm, std::nextafter(f, 0.0f))) {
      FAIL(line);
    }
    ++checked;
  }
  CHECK(checked > 190000);
}

TEST_CASE("min, max and counts round-trip bit-exactly for random values", "[records]") {
  // The reader's number paths (SWAR digits, the exact 128-bit division for 17-19 digit
  // mantissas, from_chars) against the values the writer was given.
  std::mt19937_64 rng(23);
  OpRecord r;
  r.op = "x";
  r.outputs.push_back(Arg{tensor("Float", {1}), {}});
  std::string line;
  OpRecord back;
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    TensorStats& t = *r.outputs[0].tensor;
    const uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, 8);
    if (!std::isfinite(d)) continue;
    float f;
    const auto fbits = static_cast<uint32_t>(bits >> 11);
    std::memcpy(&f, &fbits, 4);
    if (!std::isfinite(f)) continue;
    // Random bit patterns, a float widened (what the probe writes), typical magnitudes.
    t.min = d;
    t.max = static_cast<double>(f);
    t.numel = static_cast<int64_t>(rng() >> (rng() % 64));
    t.nan = static_cast<int64_t>(rng() % 1000);
    t.neg = -static_cast<int64_t>(rng() >> (1 + rng() % 63));
    t.pos = static_cast<int64_t>(i);
    if (i % 3 == 0)
      t.min = std::ldexp(static_cast<double>(rng() >> 11), -static_cast<int>(rng() % 80));
    line.clear();
    append_json(r, line);
    REQUIRE(parse_record(line, back));
    const TensorStats& b = *back.outputs[0].tensor;
    if (!same_bits(b.min, t.min) || !same_bits(b.max, t.max) || b.numel != t.numel ||
        b.nan != t.nan || b.neg != t.neg || b.pos != t.pos) {
      FAIL(line);
    }
    ++checked;
  }
  CHECK(checked > 150000);
}

TEST_CASE("decimal text of up to 19 digits parses to the correctly rounded double", "[records]") {
  // Reference: glibc's strtod (correctly rounded, ties to even). Mantissas of 1 to 19
  // digits with the point anywhere, and exact ties between two doubles.
  std::mt19937_64 rng(29);
  OpRecord out;
  auto parse_min = [&](const std::string& text) {
    const std::string line = R"({"op":"x","out":[{"dtype":"Float","min":)" + text + "}]}";
    REQUIRE(parse_record(line, out));
    return out.outputs[0].tensor->min;
  };
  auto check = [&](const std::string& text) {
    const double want = std::strtod(text.c_str(), nullptr);
    const double got = parse_min(text);
    if (!same_bits(got, want)) FAIL(text << " parsed as " << got << ", strtod " << want);
  };
  for (int i = 0; i < 100000; ++i) {
    const int digits = 1 + static_cast<int>(rng() % 19);
    std::string m;
    for (int k = 0; k < digits; ++k) m.push_back(static_cast<char>('0' + rng() % 10));
    if (digits > 1 && m[0] == '0') m[0] = '1';
    const int point = static_cast<int>(rng() % (digits + 1));  // digits before the point
    std::string text = (rng() % 2) ? "-" : "";
    if (point == 0) {
      text += "0." + m;
    } else if (point == digits) {
      text += m;
    } else {
      text += m.substr(0, static_cast<size_t>(point)) + "." + m.substr(static_cast<size_t>(point));
    }
    check(text);
  }
  // t / 2^j for odd t of 54 bits lies exactly between two doubles; its decimal text is
  // t * 5^j with j decimals.
  for (int i = 0; i < 20000; ++i) {
    const uint64_t t = (uint64_t{1} << 53) | (rng() & ((uint64_t{1} << 53) - 1)) | 1;
    const int j = static_cast<int>(rng() % 4);
    uint64_t m = t;
    for (int k = 0; k < j; ++k) m *= 5;
    std::string s = std::to_string(m);
    if (j > 0) s.insert(s.size() - static_cast<size_t>(j), ".");
    check(s);
  }
  for (const char* text : {"9007199254740993", "9007199254740995", "18014398509481990",
                           "9223372036854775807", "9999999999999999999", "0.9999999999999999999",
                           "1.000000000000000001", "0.1000000000000000055511151231257827"}) {
    check(text);
  }
}

TEST_CASE("strings with an escape at every position round-trip", "[records]") {
  // The reader scans strings 8 bytes at a time for '"', '\\' and control bytes: put each of
  // them (and a UTF-8 byte, which is plain) at every offset of strings of every length.
  OpRecord r;
  r.op = "x";
  r.outputs.push_back(Arg{tensor("Float", {1}), {}});
  OpRecord back;
  std::string line;
  for (const char special : {'"', '\\', '\n', '\x01', '\x1f', '\xc3'}) {
    for (size_t len = 1; len <= 40; ++len) {
      for (size_t at = 0; at < len; ++at) {
        std::string text(len, 'a');
        text[at] = special;
        r.op = text;
        r.scope = text + "/s";
        r.outputs[0].tensor->param = text;
        line.clear();
        append_json(r, line);
        REQUIRE(parse_record(line, back));
        if (back.op != text || back.scope != r.scope || back.outputs[0].tensor->param != text) {
          FAIL(line);
        }
      }
    }
  }
}

// The line with a blank after every '{', ',' and ':' outside strings: valid JSON that the
// writer never produces, so the reader's fast paths give up and the general parser reads it.
std::string with_blanks(const std::string& line) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    out += c;
    if (in_string) {
      if (c == '\\') {
        out += line[++i];
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == ',' || c == ':') {
      out += ' ';
    }
  }
  return out;
}

TEST_CASE("the fast paths and the general parser read the same records", "[records]") {
  std::mt19937_64 rng(31);
  OpRecord x;  // reused: fields left by one path must not leak into the other's result
  for (int i = 0; i < 3000; ++i) {
    OpRecord r = precprobe::test::sample_op(rng, i / 10, i);
    if (i % 2) r.overload = "Tensor";
    if (i % 3 == 0) r.scope = "enc/b" + std::to_string(i % 7);
    if (r.dir == Direction::kBackward) r.node = "MulBackward0";
    r.thread = static_cast<uint32_t>(i % 4);
    r.depth = i % 3;
    if (i % 4 == 1) r.grad = false;
    if (i % 11 == 0) r.inputs.clear();
    if (i % 13 == 0) r.outputs.push_back(Arg{std::nullopt, "\"mean\""});
    for (auto* args : {&r.inputs, &r.outputs}) {
      for (Arg& a : *args) {
        if (!a.tensor) continue;
        TensorStats& t = *a.tensor;
        if (i % 5 == 0) t.hash = rng();
        if (i % 7 == 0) t.list_index = i % 4;
        if (i % 17 == 0) t.device = "cuda:0";
        if (i % 19 == 0) t.min = kNaN;
        if (i % 23 == 0) t.max = kInf;
        if (i % 29 == 0) t.dtype = "BFloat16";
        if (i % 31 == 0) t.hist = {{-100, 3}, {0, int64_t(i)}, {9, 1}};
        if (i % 3 == 1) {
          t.has_range = true;
          if (i % 9 != 1) t.range = {{-1074, 1}, {-20, int64_t(i)}, {0, 5}, {1023, 2}};
        }
      }
    }
    std::string line;
    append_json(r, line);
    const std::string spaced = with_blanks(line);
    REQUIRE(spaced != line);
    INFO(line);
    REQUIRE(parse_record(line, x));
    CHECK(diff(r, x).empty());
    REQUIRE(parse_record(spaced, x));
    CHECK(diff(r, x).empty());
    REQUIRE(parse_record(line, x));
    CHECK(diff(r, x).empty());
  }
}

TEST_CASE("range statistics: exact text, round trip, absent is not recorded, bad bins fail",
          "[records][range]") {
  OpRecord r;
  r.op = "aten::mul";
  TensorStats t = tensor("Float", {4});
  t.numel = 4;
  t.pos = 3;
  t.zero = 1;
  t.has_range = true;
  t.range = {{-149, 1}, {-3, 1}, {15, 1}};
  TensorStats empty = tensor("Float", {1});
  empty.numel = 1;
  empty.zero = 1;
  empty.has_range = true;  // recorded: no finite non-zero element
  r.outputs = {Arg{t, {}}, Arg{empty, {}}, Arg{tensor("Float", {}), {}}};
  std::string line;
  append_json(r, line);
  CHECK(line.find(R"("norm":0,"range":[[-149,1],[-3,1],[15,1]]})") != std::string::npos);
  CHECK(line.find(R"("norm":0,"range":[]})") != std::string::npos);
  OpRecord back = round_trip(r);
  CHECK(diff(r, back).empty());
  CHECK(back.outputs[1].tensor->has_range);
  CHECK_FALSE(back.outputs[2].tensor->has_range);  // an older dump's tensor: no range
  // The general parser (blanks, other key orders) reads it too.
  REQUIRE(parse_record(R"({"op":"a","out":[{"range": [[0, 2]], "dtype": "Float"}]})", back));
  CHECK(back.outputs[0].tensor->has_range);
  CHECK(back.outputs[0].tensor->range == std::vector<std::pair<int32_t, int64_t>>{{0, 2}});
  for (const char* bad : {R"([[1,2],[1,3]])", R"([[2,1],[1,1]])", R"([[1024,1]])", R"([[-1075,1]])",
                          R"([[0,-1]])", R"([[0]])", R"([[0,1,2]])", R"([0,1])", R"({"0":1})"}) {
    INFO(bad);
    const std::string text =
        std::string(R"({"op":"a","out":[{"dtype":"Float","range":)") + bad + "}]}";
    CHECK_FALSE(parse_record(text, back));
  }
}

TEST_CASE("op record: values that are not JSON or empty are still written readably", "[records]") {
  OpRecord r;
  r.op = "aten::x";
  r.inputs = {Arg{std::nullopt, ""}, Arg{std::nullopt, "not json {"}, Arg{std::nullopt, "1 2"}};
  OpRecord back = round_trip(r);
  REQUIRE(back.inputs.size() == 3);
  CHECK(back.inputs[0].value == "null");
  CHECK(back.inputs[1].value == "\"not json {\"");
  CHECK(back.inputs[2].value == "\"1 2\"");
}

TEST_CASE("op record: parsing reuses the output and resets absent fields", "[records]") {
  std::mt19937_64 rng(7);
  OpRecord big = precprobe::test::sample_op(rng, 1, 3);
  big.overload = "Tensor";
  big.scope = "s";
  OpRecord small;
  small.op = "aten::relu";
  small.inputs.push_back(Arg{tensor("Long", {5}), {}});
  std::string a, b;
  append_json(big, a);
  append_json(small, b);
  OpRecord out;
  REQUIRE(parse_record(a, out));
  CHECK(diff(big, out).empty());
  REQUIRE(parse_record(b, out));
  CHECK(diff(small, out).empty());
  CHECK(out.overload.empty());
  CHECK(out.inputs[0].tensor->param.empty());
  CHECK(out.outputs.empty());
  // Missing keys take their defaults; unknown keys of any shape are skipped.
  REQUIRE(parse_record(
      R"({"op":"aten::y","future":{"a":[1,2,{"b":null}]},"in":[{"dtype":"Float","new":[[]]}]})",
      out));
  CHECK(out.op == "aten::y");
  CHECK(out.step == 0);
  CHECK(out.seqnr == -1);
  CHECK(out.inputs.size() == 1);
  CHECK(out.inputs[0].tensor->device == "cpu");
  CHECK(out.inputs[0].tensor->list_index == -1);
  // Escapes the writer never produces are still decoded.
  REQUIRE(parse_record(R"({"op":"a\u00e9\ud83d\ude00\/\b"} )", out));
  CHECK(out.op == "a\xc3\xa9\xf0\x9f\x98\x80/\b");
}

TEST_CASE("op record: the grad mode is written only when off", "[records]") {
  OpRecord r;
  r.op = "aten::dropout";
  std::string on, off, unknown;
  r.grad = true;
  append_json(r, on);
  r.grad = false;
  append_json(r, off);
  r.grad.reset();
  append_json(r, unknown);
  CHECK(on == unknown);  // on is the common case: nothing written
  CHECK(on.find("grad") == std::string::npos);
  CHECK(off ==
        R"({"step":0,"seq":0,"op":"aten::dropout","call":0,"dir":"forward","thr":0,"depth":0,)"
        R"("sn":-1,"grad":false,"in":[],"out":[]})"
        "\n");
  OpRecord back;
  REQUIRE(parse_record(off, back));
  CHECK(back.grad == false);
  REQUIRE(parse_record(on, back));     // resets what the last line set
  CHECK_FALSE(back.grad.has_value());  // absent: unknown to a line alone
  // Any key order, and "grad":true from another writer.
  REQUIRE(parse_record(R"({"grad":true,"op":"aten::x"})", back));
  CHECK(back.grad == true);
  REQUIRE(parse_record(R"({"op":"aten::x", "grad" : false})", back));
  CHECK(back.grad == false);
  CHECK_FALSE(parse_record(R"({"op":"aten::x","grad":0})", back));
}
