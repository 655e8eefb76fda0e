// The precision-readiness analysis (precprobe/precision.h): the formats against their bit
// layouts, the histogram model against rounding every value through the format (all of the
// format's values enumerated and the nearest taken, ties to even), and analyse_precision on
// synthetic runs whose answers are worked out by hand in the comments.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "analysis_fixtures.h"
#include "precprobe/precision.h"
#include "precprobe_catch.h"

// The expected values are exact: comparing them with == is the point.
#pragma GCC diagnostic ignored "-Wfloat-equal"

using namespace precprobe;
using namespace precprobe::test;
using Range = std::vector<std::pair<int32_t, int64_t>>;

namespace {

// A binary floating-point format by its bit layout.
struct Layout {
  const char* name;
  int exponent_bits, mantissa_bits, bias;
  bool ieee_top;  // the all-ones exponent is Inf/NaN (else: only S.1111.111 is NaN, E4M3FN)
};
const Layout kLayouts[] = {
    {"fp16", 5, 10, 15, true},
    {"bf16", 8, 7, 127, true},
    {"e4m3", 4, 3, 7, false},
    {"e5m2", 5, 2, 15, true},
};

// Every finite non-negative value of the format, ascending, each with whether its code is
// even (for ties), decoded from the codes.
std::vector<std::pair<double, bool>> values_of(const Layout& l) {
  std::vector<std::pair<double, bool>> v;
  const int codes = 1 << (l.exponent_bits + l.mantissa_bits);
  const int top = (1 << l.exponent_bits) - 1;
  for (int c = 0; c < codes; ++c) {
    const int e = c >> l.mantissa_bits, m = c & ((1 << l.mantissa_bits) - 1);
    if (l.ieee_top && e == top) continue;
    if (!l.ieee_top && e == top && m == (1 << l.mantissa_bits) - 1) continue;  // NaN
    const double x = e == 0 ? std::ldexp(m, 1 - l.bias - l.mantissa_bits)
                            : std::ldexp((1 << l.mantissa_bits) + m, e - l.bias - l.mantissa_bits);
    v.emplace_back(x, c % 2 == 0);
  }
  return v;
}

// |x| rounded to the nearest value (ties to the even code); +Inf beyond the largest value
// and half a step more (the step the next binade would have).
double round_to(double x, const std::vector<std::pair<double, bool>>& values, double step_above) {
  const double a = std::fabs(x);
  const double max = values.back().first;
  // Past the largest value: the next code (NaN or Inf) where it is nearer, or on the tie
  // when the largest value's code is odd (ties go to the even code).
  const double tie = max + step_above / 2;
  if (a > tie || (a == tie && !values.back().second)) return HUGE_VAL;
  auto hi = std::lower_bound(values.begin(), values.end(), std::make_pair(a, false));
  if (hi == values.end()) return max;
  if (hi->first == a || hi == values.begin()) return hi->first;
  auto lo = hi - 1;
  const double dl = a - lo->first, dh = hi->first - a;
  if (dl < dh) return lo->first;
  if (dh < dl) return hi->first;
  return lo->second ? lo->first : hi->first;
}

Range range_of(const std::vector<double>& v) {
  std::map<int32_t, int64_t> bins;
  for (double x : v) {
    if (!std::isfinite(x) || x == 0) continue;
    int e = 0;
    std::frexp(x, &e);
    ++bins[e - 1];
  }
  return Range(bins.begin(), bins.end());
}

double abs_max(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Values m * 2^e, m in [1.001, 1.7]: away from the slivers where a binade's values round
// across a boundary (up to the smallest normal, or just past the largest value).
std::vector<double> sample(int lo_exp, int hi_exp, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> m(1.001, 1.7);
  std::uniform_int_distribution<int> e(lo_exp, hi_exp);
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back((i % 2 ? -1 : 1) * std::ldexp(m(rng), e(rng)));
  return v;
}

struct Rounded {
  int64_t overflow = 0, subnormal = 0, flush = 0;
};

Rounded round_all(const std::vector<double>& v, const Layout& l, const FloatFormat& f) {
  const auto values = values_of(l);
  const double step_above = std::ldexp(1.0, static_cast<int>(std::log2(f.max)) - l.mantissa_bits);
  Rounded r;
  for (double x : v) {
    const double y = round_to(x, values, step_above);
    if (std::isinf(y)) {
      ++r.overflow;
    } else if (y == 0) {
      ++r.flush;
    } else if (y < std::ldexp(1.0, f.min_normal_exponent)) {
      ++r.subnormal;
    }
  }
  return r;
}

// Statistics with range statistics of a vector (requires_grad as given).
Arg ranged(const std::vector<double>& v, bool rg = true, const std::string& param = "") {
  TensorStats t = stats_of(v);
  t.requires_grad = rg;
  t.param = param;
  t.has_range = true;
  t.range = range_of(v);
  return Arg{t, ""};
}

}  // namespace

TEST_CASE("precision: the formats' ranges follow from their bit layouts", "[precision]") {
  for (const Layout& l : kLayouts) {
    INFO(l.name);
    const FloatFormat* f = FloatFormat::find(l.name);
    REQUIRE(f != nullptr);
    const auto values = values_of(l);
    const double max = values.back().first;
    CHECK(f->max == max);
    const int max_exp = static_cast<int>(std::floor(std::log2(max)));
    CHECK(f->overflow_threshold == max + std::ldexp(1.0, max_exp - l.mantissa_bits - 1));
    // The tie rounds to the even code: away (overflow) when the largest value's code is odd.
    CHECK(f->tie_overflows == !values.back().second);
    CHECK(std::ldexp(1.0, f->min_subnormal_exponent) == values[1].first);
    CHECK(f->min_normal_exponent == 1 - l.bias);
  }
  CHECK(FloatFormat::find("fp16")->max == 65504);
  CHECK(FloatFormat::find("e4m3")->max == 448);
  CHECK(FloatFormat::find("e5m2")->max == 57344);
  CHECK(FloatFormat::find("e4m3")->overflow_threshold == 464);
  CHECK(FloatFormat::find("fp32") == nullptr);
}

TEST_CASE("precision: the histogram model counts what rounding every value does", "[precision]") {
  for (const Layout& l : kLayouts) {
    INFO(l.name);
    const FloatFormat& f = *FloatFormat::find(l.name);
    const int top = static_cast<int>(std::floor(std::log2(f.overflow_threshold)));
    // Below the threshold's binade: flush and subnormal exactly, no overflow.
    std::vector<double> v =
        sample(f.min_subnormal_exponent - 6, f.min_normal_exponent + 3, 3000, 1);
    const std::vector<double> wide = sample(f.min_normal_exponent + 4, top - 1, 1000, 5);
    v.insert(v.end(), wide.begin(), wide.end());
    RangeCounts c = classify_range(range_of(v), abs_max(v), 0, f);
    Rounded r = round_all(v, l, f);
    CHECK(c.elements == 4000);
    CHECK(c.flush_to_zero == r.flush);
    CHECK(c.subnormal == r.subnormal);
    CHECK(c.overflow == 0);
    CHECK(r.overflow == 0);
    CHECK_FALSE(c.any_overflow);
    CHECK(r.flush > 100);
    CHECK(r.subnormal > 100);
    // Values beyond the threshold's binade overflow exactly; none inside it here.
    v = sample(top + 1, top + 4, 500, 2);
    const std::vector<double> below = sample(0, top - 1, 500, 3);
    v.insert(v.end(), below.begin(), below.end());
    c = classify_range(range_of(v), abs_max(v), 0, f);
    r = round_all(v, l, f);
    CHECK(c.overflow == r.overflow);
    CHECK(c.overflow == 500);
    CHECK(c.any_overflow);
    // Inside the threshold's binade only |max| tells: it is counted once it reaches the
    // threshold (a lower bound there), nothing when it does not.
    const double t = f.overflow_threshold;
    const std::vector<double> edge = {std::ldexp(1.0, top) * 1.01, t * 0.999, std::ldexp(1.0, top)};
    const double first_over = f.tie_overflows ? t : t * 1.0001;
    c = classify_range(range_of(edge), abs_max(edge), 0, f);
    CHECK(c.overflow == 0);
    std::vector<double> over = edge;
    over.push_back(first_over);
    c = classify_range(range_of(over), abs_max(over), 0, f);
    r = round_all(over, l, f);
    CHECK(r.overflow == 1);
    CHECK(c.overflow == 1);
    over.push_back(t * 1.001);
    r = round_all(over, l, f);
    c = classify_range(range_of(over), abs_max(over), 0, f);
    CHECK(r.overflow == 2);
    CHECK(c.overflow == 1);  // the lower bound
    CHECK(c.any_overflow);
  }
}

TEST_CASE("precision: a shift by 2^k moves every binade by k", "[precision]") {
  const FloatFormat& f = *FloatFormat::find("fp16");
  const std::vector<double> v = sample(-40, -20, 1000, 4);
  for (int k : {-3, 0, 5, 17}) {
    std::vector<double> scaled;
    for (double x : v) scaled.push_back(std::ldexp(x, k));
    const RangeCounts a = classify_range(range_of(v), abs_max(v), k, f);
    const RangeCounts b = classify_range(range_of(scaled), abs_max(scaled), 0, f);
    CHECK(a.flush_to_zero == b.flush_to_zero);
    CHECK(a.subnormal == b.subnormal);
    CHECK(a.overflow == b.overflow);
  }
  CHECK(tensor_scale_shift(1000, f) == 6);  // 64000 <= 65504 < 128000
  CHECK(tensor_scale_shift(65504, f) == 0);
  CHECK(tensor_scale_shift(65505, f) == -1);
  CHECK(tensor_scale_shift(std::ldexp(1.0, -30), f) == 45);  // 2^15 <= 65504 < 2^16
  CHECK(tensor_scale_shift(448, *FloatFormat::find("e4m3")) == 0);
  CHECK(tensor_scale_shift(449, *FloatFormat::find("e4m3")) == -1);
  CHECK(tensor_scale_shift(0, f) == 0);
  CHECK(tensor_scale_shift(kNaN, f) == 0);
}

namespace {

// Two steps of a small training run (see the expected figures in the test below):
//   fwd  aten::linear  reads fc1.weight, output {1e5, 2, -3, 0.5}   (overflows fp16 and e4m3)
//   fwd  aten::relu    output {1e-3, 2e-3}
//   fwd  aten::zero_   output {0, 0}, requires no grad: outside the graph
//   bwd  aten::mm.0    reads fc2.weight, output {1e-9, -2e-9, 3e-9, 5e-10}   (tiny gradients)
//   bwd  aten::mm.1    output {4, -1}
DumpData training_run() {
  DumpData d;
  for (int64_t step : {0, 1}) {
    OpSpec mm0{"aten::mm",
               3,
               {ranged({0.1}, false, "fc2.weight")},
               {ranged({1e-9, -2e-9, 3e-9, 5e-10}, false)}};
    mm0.dir = Direction::kBackward;
    OpSpec mm1{"aten::mm", 4, {}, {ranged({4, -1}, false)}};
    mm1.dir = Direction::kBackward;
    mm1.call = 1;
    add_step(d, step, 0,
             {{"aten::linear", 0, {ranged({0.5}, true, "fc1.weight")}, {ranged({1e5, 2, -3, 0.5})}},
              {"aten::relu", 1, {}, {ranged({1e-3, 2e-3})}},
              {"aten::zero_", 2, {}, {ranged({0, 0}, false)}},
              mm0,
              mm1});
  }
  return d;
}

const OpPrecision& op_named(const PrecisionResult& r, const std::string& name) {
  for (const OpPrecision& o : r.ops)
    if (o.op == name) return o;
  FAIL("no op " << name);
  return r.ops.front();
}

}  // namespace

TEST_CASE("precision: verdicts, modules, loss scale and GradScaler's default on a run",
          "[precision]") {
  const DumpData d = training_run();
  PrecisionOptions o;
  o.format = FloatFormat::find("fp16");
  const PrecisionResult r = analyse_precision(d, o);
  CHECK(r.ops_outside_graph == 1);  // aten::zero_
  REQUIRE(r.ops.size() == 4);
  // Most harmful first: linear overflows (1 in 4), mm.0 flushes everything; both fit with
  // per-tensor scaling (1e5 * 2^-1; 3e-9 * 2^44).
  CHECK(r.ops[0].op == "aten::linear.0.forward");
  CHECK(r.ops[0].verdict == PrecisionVerdict::kFitsWithScaling);
  CHECK(r.ops[0].unscaled.overflow == 0.25);
  CHECK(r.ops[0].module == "fc1");
  CHECK(r.ops[1].op == "aten::mm.0.backward");
  CHECK(r.ops[1].verdict == PrecisionVerdict::kFitsWithScaling);
  CHECK(r.ops[1].unscaled.flush_to_zero == 1.0);
  CHECK(r.ops[1].module == "fc2");
  CHECK(op_named(r, "aten::relu.0.forward").verdict == PrecisionVerdict::kFits);
  // After the forward's only parameter read, as a loss would be: outside the modules.
  CHECK(op_named(r, "aten::relu.0.forward").module == "(top level)");
  CHECK(op_named(r, "aten::mm.1.backward").module == "fc2");
  CHECK(op_named(r, "aten::mm.1.backward").verdict == PrecisionVerdict::kFits);
  // Gradients: binades -30, -29, -29, -31 and 2, 0. Nothing may flush (12 elements, 0.1 %):
  // -31 + k >= -25 needs k >= 6; 4 * 2^k < 65520 needs k <= 13; 8x below that: 10.
  const LossScaleAdvice& ls = r.loss_scale;
  REQUIRE(ls.available);
  CHECK(ls.low == 64);
  CHECK(ls.high == 8192);
  CHECK(ls.feasible);
  CHECK(ls.recommended == 1024);
  CHECK(ls.flush_at_recommended == 0);
  CHECK(ls.at_recommended.skipped_steps == 0);
  // 65536 * 4 overflows at step 0 (-> 32768) and step 1 (-> 16384).
  CHECK(ls.default_65536.skipped_steps == 2);
  CHECK(ls.default_65536.first_skipped_step == 0);
  CHECK(ls.default_65536.final_scale == 16384);
  // Plan: fc1's forward overflows as is; fc2's gradients fit at the loss scale.
  REQUIRE(r.modules.size() == 3);
  CHECK(r.modules[0].module == "fc1");
  CHECK(r.modules[0].keep_fp32);
  CHECK(r.modules[1].module == "(top level)");
  CHECK_FALSE(r.modules[1].keep_fp32);
  CHECK(r.modules[2].module == "fc2");
  CHECK_FALSE(r.modules[2].keep_fp32);
  CHECK(r.keep_fp32_modules() == std::vector<std::string>{"fc1"});

  o.format = FloatFormat::find("bf16");
  const PrecisionResult b = analyse_precision(d, o);
  for (const OpPrecision& op : b.ops) CHECK(op.verdict == PrecisionVerdict::kFits);
  CHECK(b.keep_fp32_modules().empty());

  // e4m3 with per-tensor scaling: linear scaled by 2^-8 (390.6, 2^-7, ..., 2^-9) fits; the
  // tiny gradients scaled up fit; nothing must stay in fp32.
  o.format = FloatFormat::find("e4m3");
  o.scaling = PrecisionScaling::kTensor;
  const PrecisionResult e = analyse_precision(d, o);
  CHECK(op_named(e, "aten::linear.0.forward").verdict == PrecisionVerdict::kFitsWithScaling);
  CHECK(op_named(e, "aten::linear.0.forward").scaled.overflow == 0);
  CHECK(op_named(e, "aten::linear.0.forward").scaled.subnormal == 0.75);
  CHECK(e.keep_fp32_modules().empty());
}

TEST_CASE("precision: --json has the documented keys", "[precision]") {
  PrecisionOptions o;
  o.format = FloatFormat::find("fp16");
  const nlohmann::json j = analyse_precision(training_run(), o).to_json();
  CHECK(j["format"] == "fp16");
  CHECK(j["scaling"] == "none");
  const std::set<std::string> op_keys = {"op",        "direction",     "module", "overflow",
                                         "subnormal", "flush_to_zero", "verdict"};
  for (const auto& op : j["ops"]) {
    std::set<std::string> keys;
    for (const auto& [k, v] : op.items()) keys.insert(k);
    CHECK(keys == op_keys);
  }
  CHECK(j["ops"][0]["verdict"] == "fits_with_scaling");
  CHECK(j["ops"][0]["overflow"] == 0.25);
  for (const char* k : {"recommended", "low", "high", "default_65536"})
    CHECK(j["loss_scale"].contains(k));
  CHECK(j["loss_scale"]["recommended"] == 1024);
  CHECK(j["loss_scale"]["default_65536"]["skipped_steps"] == 2);
  CHECK(j["modules"][0]["keep_fp32"] == true);
}

TEST_CASE("precision: a dump without range statistics says so", "[precision]") {
  DumpData d;
  add_step(d, 0, 0, {{"aten::relu", 0, {targ({1})}, {targ({1})}}});
  PrecisionOptions o;
  o.format = FloatFormat::find("bf16");
  try {
    analyse_precision(d, o);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("no range statistics") != std::string::npos);
  }
}

TEST_CASE(
    "modules: a dropout op belongs to the dropout module meta.json's order puts after the "
    "current module",
    "[precision][modules]") {
  // fc1 -> relu -> drop1 (aten::dropout with native_dropout nested) -> fc2 -> drop2a -> drop2b.
  DumpData d;
  OpSpec native{"aten::native_dropout", 3, {}, {ranged({0.5})}};
  native.depth = 1;
  add_step(d, 0, 0,
           {{"aten::linear", 0, {ranged({0.5}, true, "fc1.weight")}, {ranged({1, 2})}},
            {"aten::relu", 1, {}, {ranged({1, 2})}},
            {"aten::dropout", 2, {}, {ranged({1, 2})}},
            native,
            {"aten::linear", 4, {ranged({0.5}, true, "fc2.weight")}, {ranged({3})}},
            {"aten::dropout", 5, {}, {ranged({3})}, 1},
            {"aten::feature_dropout", 6, {}, {ranged({3})}},
            {"aten::add", 7, {}, {ranged({4})}}});
  PrecisionOptions o;
  o.format = FloatFormat::find("bf16");
  // Without the module order: the ops between fc1 and fc2 in the model's own forward, those
  // after fc2 (its last parameter) outside the modules.
  const std::vector<std::pair<std::string, std::string>> without = {
      {"aten::relu.0.forward", "(root)"},
      {"aten::dropout.0.forward", "(root)"},
      {"aten::native_dropout.0.forward", "(root)"},
      {"aten::dropout.1.forward", "(top level)"},
      {"aten::feature_dropout.0.forward", "(top level)"},
      {"aten::add.0.forward", "(top level)"}};
  for (const auto& [op, module] : without) {
    INFO(op);
    CHECK(op_named(analyse_precision(d, o), op).module == module);
  }
  RankInfo rank;
  rank.meta = RunMeta{};
  rank.meta->other["modules"] = nlohmann::json::parse(
      R"([["fc1","params"],["drop1","dropout"],["act","dropout_not"],["fc2","params"],)"
      R"(["drop2a","dropout"],["drop2b","dropout"],["head","params"]])");
  d.ranks.push_back(rank);
  // The relu between fc1 and drop1: their common ancestor; the add after the last dropout
  // module, the forward's last one placed: outside the modules.
  const std::vector<std::pair<std::string, std::string>> with = {
      {"aten::relu.0.forward", "(root)"},
      {"aten::dropout.0.forward", "drop1"},
      {"aten::native_dropout.0.forward", "drop1"},
      {"aten::dropout.1.forward", "drop2a"},
      {"aten::feature_dropout.0.forward", "drop2b"},
      {"aten::add.0.forward", "(top level)"}};
  const PrecisionResult r = analyse_precision(d, o);
  for (const auto& [op, module] : with) {
    INFO(op);
    CHECK(op_named(r, op).module == module);
  }
  // A third dropout after fc2 has no module of its own left: placed as any op that reads no
  // parameter (here after the forward's last placed op).
  add_step(d, 0, 0, {{"aten::dropout", 8, {}, {ranged({4})}, 2}});
  CHECK(op_named(analyse_precision(d, o), "aten::dropout.2.forward").module == "(top level)");
  // An order that is not a list of [path, kind] pairs is ignored, never a failure.
  d.ranks[0].meta->other["modules"] = nlohmann::json::parse(R"([["fc1"], 3])");
  CHECK(op_named(analyse_precision(d, o), "aten::dropout.0.forward").module == "(root)");
}
