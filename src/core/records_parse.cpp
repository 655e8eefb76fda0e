// The JSON Lines decoder for op records (the encoder is in records.cpp; the other streams'
// records are decoded in records_parse_streams.cpp).
//
// parse_record() reuses the strings and vectors already in `out`, so a reader that parses
// line after line into one record allocates almost nothing. Unknown keys are skipped (a
// newer minor writer may add some); a known key with a value of the wrong type fails the
// line. Input is untrusted: see json_lite.h.
#include <cmath>
#include <string>

#include "json_lite.h"
#include "precprobe/records.h"
#include "records_parse_util.h"

namespace precprobe {
namespace {

using json::Cursor;
using records_parse_detail::ends_nonfinite;
using records_parse_detail::missing;
using records_parse_detail::Named;
using records_parse_detail::parse_line;
using records_parse_detail::parse_string_list;

using records_parse_detail::kMaxListSize;

void reset(TensorStats& t) {
  t.dtype.clear();
  t.shape.clear();
  if (!json::detail::equal(t.device, "cpu", 3)) t.device.assign("cpu");
  t.requires_grad = false;
  t.numel = t.nan = t.pinf = t.ninf = t.zero = t.neg = t.pos = 0;
  t.min = t.max = t.mean = t.norm = 0;
  t.hash.reset();
  t.param.clear();
  t.list_index = -1;
  t.hist.clear();
  t.range.clear();
  t.has_range = false;
}

bool parse_int_list(Cursor& c, std::vector<int64_t>& v) {
  v.clear();
  return c.array([&] {
    int64_t x = 0;
    if (!c.int64(x)) return false;
    v.push_back(x);
    return true;
  });
}

// [[value, count], ...] ("hist").
bool parse_histogram(Cursor& c, std::vector<std::pair<int64_t, int64_t>>& h) {
  h.clear();
  return c.array([&] {
    if (h.size() >= kHistogramBins) return c.fail("hist has too many bins");
    std::pair<int64_t, int64_t> bin{0, 0};
    int at = 0;
    const bool ok = c.array([&] {
      if (at >= 2) return c.fail("a hist bin is [value, count]");
      return c.int64(at++ == 0 ? bin.first : bin.second);
    });
    if (!ok) return false;
    if (at != 2) return c.fail("a hist bin is [value, count]");
    h.push_back(bin);
    return true;
  });
}

// [[e, count], ...] ("range"): exponents strictly ascending within the range of a double,
// counts >= 0; at most one bin per exponent.
bool parse_range(Cursor& c, std::vector<std::pair<int32_t, int64_t>>& r) {
  r.clear();
  constexpr size_t kMaxBins = size_t(kRangeMaxExponent - kRangeMinExponent + 1);
  return c.array([&] {
    if (r.size() >= kMaxBins) return c.fail("range has too many bins");
    int64_t e = 0, count = 0;
    int at = 0;
    const bool ok = c.array([&] {
      if (at >= 2) return c.fail("a range bin is [exponent, count]");
      return c.int64(at++ == 0 ? e : count);
    });
    if (!ok) return false;
    if (at != 2) return c.fail("a range bin is [exponent, count]");
    if (e < kRangeMinExponent || e > kRangeMaxExponent || count < 0)
      return c.fail("a range bin's exponent is outside a double's or its count is negative");
    if (!r.empty() && e <= r.back().first)
      return c.fail("range exponents must be strictly ascending");
    r.emplace_back(static_cast<int32_t>(e), count);
    return true;
  });
}

// Tensor keys in the order the writer emits them (optional ones included).
enum TensorKey : int {
  kDtype,
  kShape,
  kDevice,
  kRg,
  kNumel,
  kNan,
  kPinf,
  kNinf,
  kZero,
  kNeg,
  kPos,
  kMin,
  kMax,
  kMean,
  kNorm,
  kHash,
  kParam,
  kLi,
  kHist,
  kRange,
  kTensorKeys,
  kUnknownKey = kTensorKeys
};
constexpr std::string_view kTensorKeyNames[kTensorKeys] = {
    "dtype", "shape", "device", "rg",   "numel", "nan",  "pinf",  "ninf", "zero", "neg",
    "pos",   "min",   "max",    "mean", "norm",  "hash", "param", "li",   "hist", "range"};

constexpr json::KeyLiteral kTensorKeyLiterals[kTensorKeys] = {
    json::KeyLiteral("dtype"), json::KeyLiteral("shape"), json::KeyLiteral("device"),
    json::KeyLiteral("rg"),    json::KeyLiteral("numel"), json::KeyLiteral("nan"),
    json::KeyLiteral("pinf"),  json::KeyLiteral("ninf"),  json::KeyLiteral("zero"),
    json::KeyLiteral("neg"),   json::KeyLiteral("pos"),   json::KeyLiteral("min"),
    json::KeyLiteral("max"),   json::KeyLiteral("mean"),  json::KeyLiteral("norm"),
    json::KeyLiteral("hash"),  json::KeyLiteral("param"), json::KeyLiteral("li"),
    json::KeyLiteral("hist"),  json::KeyLiteral("range")};

int tensor_key_id(std::string_view k) {
  for (int i = 0; i < kTensorKeys; ++i) {
    if (k == kTensorKeyNames[i]) return i;
  }
  return kUnknownKey;
}

// The next key: a line from our writer has the keys in kTensorKeyNames order, so the
// expected key is matched without scanning; anything else takes the generic path.
bool next_tensor_key(Cursor& c, int& expected, int& id, std::string_view& k) {
  for (int i = expected; i < kTensorKeys && i < expected + 4; ++i) {
    if (c.match(kTensorKeyLiterals[i])) {
      id = i;
      expected = i + 1;
      return true;
    }
  }
  if (!c.key(k)) return false;
  id = tensor_key_id(k);
  return true;
}

bool tensor_value(Cursor& c, int id, TensorStats& t) {
  switch (id) {
    case kDtype:
      return c.string(t.dtype);
    case kShape:
      return parse_int_list(c, t.shape);
    case kDevice:
      return c.string(t.device);
    case kRg:
      return c.boolean(t.requires_grad);
    case kNumel:
      return c.int64(t.numel);
    case kNan:
      return c.int64(t.nan);
    case kPinf:
      return c.int64(t.pinf);
    case kNinf:
      return c.int64(t.ninf);
    case kZero:
      return c.int64(t.zero);
    case kNeg:
      return c.int64(t.neg);
    case kPos:
      return c.int64(t.pos);
    case kMin:
      return c.number(t.min);
    case kMax:
      return c.number(t.max);
    case kMean:
      return c.number_float32(t.mean);
    case kNorm:
      return c.number_float32(t.norm);
    case kHash: {
      uint64_t h = 0;
      if (!c.hex64(h)) return false;
      t.hash = h;
      return true;
    }
    case kParam:
      return c.string(t.param);
    case kLi:
      return c.int64(t.list_index);
    case kHist:
      return parse_histogram(c, t.hist);
    case kRange:
      t.has_range = true;
      return parse_range(c, t.range);
    default:
      return c.skip_value(2);
  }
}

// A tensor object exactly as our writer lays it out (records.cpp, append_tensor): keys in
// order, optional ones only where they may be, no blanks. Anything else returns false and
// the caller parses the object again with the general code.
bool parse_tensor_fast(Cursor& c, TensorStats& t) {
  if (!c.token("{\"dtype\":") || !c.string(t.dtype)) return false;
  if (!c.token(",\"shape\":") || !parse_int_list(c, t.shape)) return false;
  if (!c.token(",\"device\":") || !c.string(t.device)) return false;
  t.requires_grad = c.token(",\"rg\":true");
  if (!c.token(",\"numel\":") || !c.int64(t.numel)) return false;
  if (!c.token(",\"nan\":") || !c.int64(t.nan)) return false;
  if (!c.token(",\"pinf\":") || !c.int64(t.pinf)) return false;
  if (!c.token(",\"ninf\":") || !c.int64(t.ninf)) return false;
  if (!c.token(",\"zero\":") || !c.int64(t.zero)) return false;
  if (!c.token(",\"neg\":") || !c.int64(t.neg)) return false;
  if (!c.token(",\"pos\":") || !c.int64(t.pos)) return false;
  if (!c.token(",\"min\":") || !c.number(t.min)) return false;
  if (std::isnan(t.min) && c.token(",\"min_nonfinite\":") && !c.nonfinite_name(t.min)) return false;
  if (!c.token(",\"max\":") || !c.number(t.max)) return false;
  if (std::isnan(t.max) && c.token(",\"max_nonfinite\":") && !c.nonfinite_name(t.max)) return false;
  if (!c.token(",\"mean\":") || !c.number_float32(t.mean)) return false;
  if (std::isnan(t.mean) && c.token(",\"mean_nonfinite\":") && !c.nonfinite_name(t.mean))
    return false;
  if (!c.token(",\"norm\":") || !c.number_float32(t.norm)) return false;
  if (std::isnan(t.norm) && c.token(",\"norm_nonfinite\":") && !c.nonfinite_name(t.norm))
    return false;
  if (c.token(",\"hash\":")) {
    uint64_t h = 0;
    if (!c.hex64(h)) return false;
    t.hash = h;
  } else {
    t.hash.reset();
  }
  if (c.token(",\"param\":")) {
    if (!c.string(t.param)) return false;
  } else {
    t.param.clear();
  }
  if (c.token(",\"li\":")) {
    if (!c.int64(t.list_index)) return false;
  } else {
    t.list_index = -1;
  }
  if (c.token(",\"hist\":")) {
    if (!parse_histogram(c, t.hist)) return false;
  } else {
    t.hist.clear();
  }
  t.has_range = c.token(",\"range\":");
  if (t.has_range) {
    if (!parse_range(c, t.range)) return false;
  } else {
    t.range.clear();
  }
  return c.token("}");
}

// 0..3 for "min_nonfinite", "max_nonfinite", "mean_nonfinite", "norm_nonfinite"; else -1.
int stat_sibling_id(std::string_view k) {
  static constexpr std::string_view kNames[] = {"min_nonfinite", "max_nonfinite", "mean_nonfinite",
                                                "norm_nonfinite"};
  for (int i = 0; i < 4; ++i) {
    if (k == kNames[i]) return i;
  }
  return -1;
}

// {"v": <json>} for a value, else the statistics of a tensor.
bool parse_arg(Cursor& c, Arg& a) {
  const char* start = c.position();
  if (c.token("{\"dtype\":")) {
    c.rewind(start);
    if (!a.tensor) a.tensor.emplace();
    if (parse_tensor_fast(c, *a.tensor)) {
      a.value.clear();
      return true;
    }
    c.rewind(start);
  }
  if (!c.expect('{')) return false;
  if (c.quoted_key("v")) {
    a.tensor.reset();
    if (!c.raw_value(a.value)) return false;
    // "v_nonfinite" (the value with its non-finite numbers named) replaces "v"; unknown
    // keys are skipped.
    while (c.consume(',')) {
      std::string_view k;
      if (!c.key(k)) return false;
      if (k == "v_nonfinite" ? !c.raw_value(a.value) : !c.skip_value(2)) return false;
    }
    return c.expect('}');
  }
  if (!a.tensor) a.tensor.emplace();
  TensorStats& t = *a.tensor;
  reset(t);
  a.value.clear();
  bool saw_value = false;
  bool saw_dtype = false;
  std::string named_value;  // "v_nonfinite"
  // "<stat>_nonfinite" for min, max, mean, norm: applied after the object, in any order.
  double named[4];
  bool has_named[4] = {false, false, false, false};
  if (!c.consume('}')) {
    int expected = 0;
    do {
      int id = kUnknownKey;
      std::string_view k;
      if (!next_tensor_key(c, expected, id, k)) return false;
      if (id == kUnknownKey) {
        if (k == "v" || k == "v_nonfinite") {
          std::string& into = k == "v" ? a.value : named_value;
          saw_value = true;
          if (!c.raw_value(into)) return false;
          continue;
        }
        int stat = stat_sibling_id(k);
        if (stat >= 0) {
          if (!c.nonfinite_name(named[stat])) return false;
          has_named[stat] = true;
          continue;
        }
      }
      saw_dtype |= id == kDtype;
      if (!tensor_value(c, id, t)) return false;
    } while (c.consume(','));
    if (!c.expect('}')) return false;
  }
  if (saw_value) {
    a.tensor.reset();
    if (!named_value.empty()) a.value.swap(named_value);
    return true;
  }
  double* stats[4] = {&t.min, &t.max, &t.mean, &t.norm};
  for (int i = 0; i < 4; ++i) {
    if (has_named[i]) *stats[i] = named[i];
  }
  if (!saw_dtype) return c.fail("argument has neither \"dtype\" (a tensor) nor \"v\" (a value)");
  return true;
}

// Arguments a shorter record left over, kept with their strings and shape vectors for the
// next longer one: records of different ops alternate, and without this every line would
// free and allocate them again. Per thread; bounded so a hostile line cannot hoard memory.
thread_local std::vector<Arg> t_spare_args;
constexpr size_t kMaxSpareArgs = 64;

bool parse_args(Cursor& c, std::vector<Arg>& args) {
  size_t n = 0;
  if (args.capacity() == 0) args.reserve(4);  // a record taken away (compare keeps them)
  bool ok = c.array([&] {
    if (n >= kMaxListSize) return c.fail("too many arguments");
    if (n == args.size()) {
      if (t_spare_args.empty()) {
        args.emplace_back();
      } else {
        args.push_back(std::move(t_spare_args.back()));
        t_spare_args.pop_back();
      }
    }
    return parse_arg(c, args[n++]);
  });
  while (args.size() > n) {
    if (t_spare_args.size() < kMaxSpareArgs) t_spare_args.push_back(std::move(args.back()));
    args.pop_back();
  }
  return ok;
}

bool parse_direction(Cursor& c, Direction& d) {
  c.skip_ws();
  if (c.literal("\"forward\"")) {
    d = Direction::kForward;
  } else if (c.literal("\"backward\"")) {
    d = Direction::kBackward;
  } else {
    return c.fail("\"dir\" must be \"forward\" or \"backward\"");
  }
  return true;
}

// Op keys in the order the writer emits them.
enum OpKey : int {
  kStep,
  kSeq,
  kOp,
  kOvl,
  kCall,
  kDir,
  kThr,
  kDepth,
  kSn,
  kGrad,
  kBg,
  kOpt,
  kScope,
  kMod,
  kNode,
  kIn,
  kOut,
  kOpKeys,
  kUnknownOpKey = kOpKeys
};
constexpr std::string_view kOpKeyNames[kOpKeys] = {"step",  "seq",   "op",   "ovl",  "call", "dir",
                                                   "thr",   "depth", "sn",   "grad", "bg",   "opt",
                                                   "scope", "mod",   "node", "in",   "out"};

constexpr json::KeyLiteral kOpKeyLiterals[kOpKeys] = {
    json::KeyLiteral("step"),  json::KeyLiteral("seq"),   json::KeyLiteral("op"),
    json::KeyLiteral("ovl"),   json::KeyLiteral("call"),  json::KeyLiteral("dir"),
    json::KeyLiteral("thr"),   json::KeyLiteral("depth"), json::KeyLiteral("sn"),
    json::KeyLiteral("grad"),  json::KeyLiteral("bg"),    json::KeyLiteral("opt"),
    json::KeyLiteral("scope"), json::KeyLiteral("mod"),   json::KeyLiteral("node"),
    json::KeyLiteral("in"),    json::KeyLiteral("out")};

int next_op_key(Cursor& c, int& expected) {
  for (int i = expected; i < kOpKeys && i < expected + 4; ++i) {
    if (c.match(kOpKeyLiterals[i])) {
      expected = i + 1;
      return i;
    }
  }
  std::string_view k;
  if (!c.key(k)) return -1;
  for (int i = 0; i < kOpKeys; ++i) {
    if (k == kOpKeyNames[i]) return i;
  }
  return kUnknownOpKey;
}

bool op_value(Cursor& c, int id, OpRecord& r) {
  switch (id) {
    case kStep:
      return c.int64(r.step);
    case kSeq:
      return c.int64(r.seq);
    case kOp:
      return c.string(r.op);
    case kOvl:
      return c.string(r.overload);
    case kCall:
      return c.int64(r.call);
    case kDir:
      return parse_direction(c, r.dir);
    case kThr:
      return c.uint32(r.thread);
    case kDepth:
      return c.int32(r.depth);
    case kSn:
      return c.int64(r.seqnr);
    case kGrad: {
      bool on = true;
      if (!c.boolean(on)) return false;
      r.grad = on;
      return true;
    }
    case kBg:
      return c.boolean(r.background);
    case kOpt:
      return c.boolean(r.optimizer);
    case kScope:
      return c.string(r.scope);
    case kMod:
      return c.string(r.module);
    case kNode:
      return c.string(r.node);
    case kIn:
      return parse_args(c, r.inputs);
    case kOut:
      return parse_args(c, r.outputs);
    default:
      return c.skip_value(1);
  }
}

bool parse_op(Cursor& c, OpRecord& r, bool& has_op) {
  bool has_in = false;
  bool has_out = false;
  bool ok = c.expect('{');
  if (ok && !c.consume('}')) {
    int expected = 0;
    do {
      int id = next_op_key(c, expected);
      if (id < 0 || !op_value(c, id, r)) {
        ok = false;
        break;
      }
      has_op |= id == kOp;
      has_in |= id == kIn;
      has_out |= id == kOut;
    } while (c.consume(','));
    ok = ok && c.expect('}');
  }
  if (!has_in) r.inputs.clear();
  if (!has_out) r.outputs.clear();
  return ok && (c.at_end() || c.fail("text after the record"));
}

// An op record exactly as our writer lays it out (records.cpp, append_json); see
// parse_tensor_fast.
bool parse_op_fast(Cursor& c, OpRecord& r) {
  if (!c.token("{\"step\":") || !c.int64(r.step)) return false;
  if (!c.token(",\"seq\":") || !c.int64(r.seq)) return false;
  if (!c.token(",\"op\":") || !c.string(r.op)) return false;
  if (c.token(",\"ovl\":")) {
    if (!c.string(r.overload)) return false;
  } else {
    r.overload.clear();
  }
  if (!c.token(",\"call\":") || !c.int64(r.call)) return false;
  if (c.token(",\"dir\":\"forward\",\"thr\":")) {
    r.dir = Direction::kForward;
  } else if (c.token(",\"dir\":\"backward\",\"thr\":")) {
    r.dir = Direction::kBackward;
  } else {
    return false;
  }
  if (!c.uint32(r.thread)) return false;
  if (!c.token(",\"depth\":") || !c.int32(r.depth)) return false;
  if (!c.token(",\"sn\":") || !c.int64(r.seqnr)) return false;
  if (c.token(",\"grad\":false")) {
    r.grad = false;
  } else {
    r.grad.reset();
  }
  r.background = c.token(",\"bg\":true");
  r.optimizer = c.token(",\"opt\":true");
  if (c.token(",\"scope\":")) {
    if (!c.string(r.scope)) return false;
  } else {
    r.scope.clear();
  }
  if (c.token(",\"mod\":")) {
    if (!c.string(r.module)) return false;
  } else {
    r.module.clear();
  }
  if (c.token(",\"node\":")) {
    if (!c.string(r.node)) return false;
  } else {
    r.node.clear();
  }
  if (!c.token(",\"in\":") || !parse_args(c, r.inputs)) return false;
  if (!c.token(",\"out\":") || !parse_args(c, r.outputs)) return false;
  return c.token("}") && c.at_end();
}

}  // namespace

bool parse_record(std::string_view line, OpRecord& out, std::string* error) {
  {
    Cursor fast(line);
    if (parse_op_fast(fast, out)) {
      out.rank = 0;
      return true;
    }
  }
  out.step = out.seq = out.call = 0;
  out.seqnr = -1;
  out.grad.reset();
  out.background = false;
  out.optimizer = false;
  out.op.clear();
  out.overload.clear();
  out.scope.clear();
  out.module.clear();
  out.node.clear();
  out.dir = Direction::kForward;
  out.thread = 0;
  out.depth = 0;
  out.rank = 0;
  Cursor c(line);
  bool has_op = false;
  if (!parse_op(c, out, has_op)) {
    if (error != nullptr) *error = c.error_message();
    return false;
  }
  if (!has_op) return missing(error, "op record without \"op\"");
  return true;
}

}  // namespace precprobe
