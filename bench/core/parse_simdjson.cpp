// json_lite (src/core/json_lite.h, the reader's own parser) against
// simdjson 3 (Debian's libsimdjson-dev) on the same op records, both producing the same
// OpRecord. Reads the first N lines of a dump's ops stream into memory (decompression is
// not timed: it is the same for both), then times, each on every line:
//   json_lite   precprobe::parse_record (the reader's parse: the writer's layout first, then
//               the general path)
//   simdjson    simdjson::ondemand into an OpRecord (any key order, every key the reader knows)
//   simdjson-dom  simdjson::dom::parser::parse, no OpRecord (what simdjson costs to
//               validate and index a line, a floor for any parser built on it)
// and checks that the two OpRecords of every line encode to the same JSON text.
//
//   parse_simdjson OPS.jsonl.zst [--records N] [--repeat K]
//
// Single-threaded: pin it with taskset to measure one core.
#include <precprobe/records.h>
#include <simdjson.h>
#include <time.h>
#include <zstd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

using namespace precprobe;
namespace od = simdjson::ondemand;

#define PRECPROBE_STR2(x) #x
#define PRECPROBE_STR(x) PRECPROBE_STR2(x)
// The implementation simdjson::ondemand stands for in this translation unit.
constexpr const char* kOndemandTarget = PRECPROBE_STR(SIMDJSON_BUILTIN_IMPLEMENTATION);

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The first `n` lines of a zstd-compressed JSON Lines file, in one buffer with simdjson's
// padding after it; `lines` holds each line's offset and length (without '\n').
struct Lines {
  std::string text;
  std::vector<std::pair<size_t, size_t>> at;
};

bool read_lines(const char* path, size_t n, Lines& out) {
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr) return false;
  ZSTD_DStream* z = ZSTD_createDStream();
  std::vector<char> in(ZSTD_DStreamInSize()), buf(ZSTD_DStreamOutSize());
  size_t line_start = 0;
  bool done = false;
  while (!done) {
    const size_t got = std::fread(in.data(), 1, in.size(), f);
    if (got == 0) break;
    ZSTD_inBuffer ib{in.data(), got, 0};
    while (ib.pos < ib.size && !done) {
      ZSTD_outBuffer ob{buf.data(), buf.size(), 0};
      if (ZSTD_isError(ZSTD_decompressStream(z, &ob, &ib))) {
        done = true;
        break;
      }
      for (size_t i = 0; i < ob.pos; ++i) {
        out.text.push_back(buf[i]);
        if (buf[i] == '\n') {
          out.at.emplace_back(line_start, out.text.size() - 1 - line_start);
          line_start = out.text.size();
          if (out.at.size() == n) {
            done = true;
            break;
          }
        }
      }
    }
  }
  ZSTD_freeDStream(z);
  std::fclose(f);
  out.text.append(simdjson::SIMDJSON_PADDING, ' ');
  return !out.at.empty();
}

// --- simdjson::ondemand into OpRecord (the reader's rules: records_parse.cpp) ---

using simdjson::error_code;

bool get_i64(od::value v, int64_t& out) { return v.get_int64().get(out) == simdjson::SUCCESS; }

bool get_string(od::value v, std::string& out) {
  std::string_view s;
  if (v.get_string().get(s) != simdjson::SUCCESS) return false;
  out.assign(s.data(), s.size());
  return true;
}

// A number, or null (a non-finite statistic, named by "<key>_nonfinite").
bool get_number(od::value v, double& out) {
  bool is_null = false;
  if (v.is_null().get(is_null) == simdjson::SUCCESS && is_null) {
    out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  return v.get_double().get(out) == simdjson::SUCCESS;
}

bool get_float32(od::value v, double& out) {
  if (!get_number(v, out)) return false;
  const auto f = static_cast<float>(out);
  if (std::isfinite(f)) out = static_cast<double>(f);
  return true;
}

bool nonfinite_name(od::value v, double& out) {
  std::string_view s;
  if (v.get_string().get(s) != simdjson::SUCCESS) return false;
  if (s == "nan") {
    out = std::numeric_limits<double>::quiet_NaN();
  } else if (s == "inf") {
    out = std::numeric_limits<double>::infinity();
  } else if (s == "-inf") {
    out = -std::numeric_limits<double>::infinity();
  } else {
    return false;
  }
  return true;
}

// The exact text of a value (3.0 has raw_json() for arrays and objects, a token's text for
// scalars, with the blanks after it).
bool raw_value(od::value v, std::string_view& raw) {
  od::json_type type;
  if (v.type().get(type) != simdjson::SUCCESS) return false;
  if (type == od::json_type::array) {
    od::array a;
    return v.get_array().get(a) == simdjson::SUCCESS && a.raw_json().get(raw) == simdjson::SUCCESS;
  }
  if (type == od::json_type::object) {
    od::object o;
    return v.get_object().get(o) == simdjson::SUCCESS && o.raw_json().get(raw) == simdjson::SUCCESS;
  }
  raw = v.raw_json_token();
  while (!raw.empty() && (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\t'))
    raw.remove_suffix(1);
  if (type == od::json_type::string || type == od::json_type::number ||
      type == od::json_type::boolean) {
    // A scalar is consumed by reading it: the iterator must move past it.
    if (type == od::json_type::string) {
      std::string_view s;
      return v.get_string().get(s) == simdjson::SUCCESS;
    }
    if (type == od::json_type::number) {
      double d;
      return v.get_double().get(d) == simdjson::SUCCESS;
    }
    bool b;
    return v.get_bool().get(b) == simdjson::SUCCESS;
  }
  bool is_null = false;
  return v.is_null().get(is_null) == simdjson::SUCCESS && is_null;
}

// Fills `a` in place: its strings and vectors keep their memory from the record before (as
// json_lite's parse does), so neither parser is timed allocating.
bool parse_tensor_or_value(od::object obj, Arg& a) {
  if (!a.tensor) a.tensor.emplace();
  TensorStats& t = *a.tensor;
  t.dtype.clear();
  t.shape.clear();
  t.device = "cpu";
  t.requires_grad = false;
  t.numel = t.nan = t.pinf = t.ninf = t.zero = t.neg = t.pos = 0;
  t.min = t.max = t.mean = t.norm = 0;
  t.hash.reset();
  t.param.clear();
  t.list_index = -1;
  t.hist.clear();
  t.range.clear();
  t.has_range = false;
  bool saw_value = false, saw_dtype = false;
  std::string value, named_value;
  double named[4];
  bool has_named[4] = {false, false, false, false};
  for (auto field : obj) {
    std::string_view k;
    if (field.unescaped_key().get(k) != simdjson::SUCCESS) return false;
    od::value v = field.value();
    bool ok = true;
    if (k == "dtype") {
      ok = get_string(v, t.dtype);
      saw_dtype = true;
    } else if (k == "shape") {
      od::array arr;
      if (v.get_array().get(arr) != simdjson::SUCCESS) return false;
      for (auto e : arr) {
        int64_t x;
        if (e.get_int64().get(x) != simdjson::SUCCESS) return false;
        t.shape.push_back(x);
      }
    } else if (k == "device") {
      ok = get_string(v, t.device);
    } else if (k == "rg") {
      ok = v.get_bool().get(t.requires_grad) == simdjson::SUCCESS;
    } else if (k == "numel") {
      ok = get_i64(v, t.numel);
    } else if (k == "nan") {
      ok = get_i64(v, t.nan);
    } else if (k == "pinf") {
      ok = get_i64(v, t.pinf);
    } else if (k == "ninf") {
      ok = get_i64(v, t.ninf);
    } else if (k == "zero") {
      ok = get_i64(v, t.zero);
    } else if (k == "neg") {
      ok = get_i64(v, t.neg);
    } else if (k == "pos") {
      ok = get_i64(v, t.pos);
    } else if (k == "min") {
      ok = get_number(v, t.min);
    } else if (k == "max") {
      ok = get_number(v, t.max);
    } else if (k == "mean") {
      ok = get_float32(v, t.mean);
    } else if (k == "norm") {
      ok = get_float32(v, t.norm);
    } else if (k == "hash") {
      std::string_view s;
      if (v.get_string().get(s) != simdjson::SUCCESS || s.empty() || s.size() > 16) return false;
      uint64_t h = 0;
      for (char c : s) {
        const int d = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
        if (d < 0) return false;
        h = (h << 4) | static_cast<uint64_t>(d);
      }
      t.hash = h;
    } else if (k == "param") {
      ok = get_string(v, t.param);
    } else if (k == "li") {
      ok = get_i64(v, t.list_index);
    } else if (k == "hist" || k == "range") {
      od::array arr;
      if (v.get_array().get(arr) != simdjson::SUCCESS) return false;
      if (k == "range") t.has_range = true;
      for (auto pair : arr) {
        od::array p;
        if (pair.get_array().get(p) != simdjson::SUCCESS) return false;
        int64_t x[2];
        int i = 0;
        for (auto e : p) {
          if (i == 2 || e.get_int64().get(x[i]) != simdjson::SUCCESS) return false;
          ++i;
        }
        if (i != 2) return false;
        if (k == "hist") {
          t.hist.emplace_back(x[0], x[1]);
        } else {
          t.range.emplace_back(static_cast<int32_t>(x[0]), x[1]);
        }
      }
    } else if (k == "v" || k == "v_nonfinite") {
      std::string_view raw;
      if (!raw_value(v, raw)) return false;
      (k == "v" ? value : named_value).assign(raw.data(), raw.size());
      saw_value = true;
    } else if (k == "min_nonfinite" || k == "max_nonfinite" || k == "mean_nonfinite" ||
               k == "norm_nonfinite") {
      const int i = k[1] == 'i' ? 0 : k[1] == 'a' ? 1 : k[1] == 'e' ? 2 : 3;
      ok = nonfinite_name(v, named[i]);
      has_named[i] = true;
    }  // unknown keys: skipped
    if (!ok) return false;
  }
  if (saw_value) {
    a.tensor.reset();
    a.value = named_value.empty() ? std::move(value) : std::move(named_value);
    return true;
  }
  if (!saw_dtype) return false;
  double* stats[4] = {&t.min, &t.max, &t.mean, &t.norm};
  for (int i = 0; i < 4; ++i)
    if (has_named[i]) *stats[i] = named[i];
  a.value.clear();
  return true;
}

bool parse_args(od::value v, std::vector<Arg>& args) {
  od::array arr;
  if (v.get_array().get(arr) != simdjson::SUCCESS) return false;
  size_t n = 0;
  for (auto e : arr) {
    od::object obj;
    if (e.get_object().get(obj) != simdjson::SUCCESS) return false;
    if (n == args.size()) args.emplace_back();
    if (!parse_tensor_or_value(obj, args[n++])) return false;
  }
  args.resize(n);
  return true;
}

bool parse_simdjson(od::parser& parser, const char* p, size_t len, size_t capacity, OpRecord& r) {
  r.step = r.seq = r.call = 0;
  r.seqnr = -1;
  r.grad.reset();
  r.background = false;
  r.op.clear();
  r.overload.clear();
  r.scope.clear();
  r.node.clear();
  r.dir = Direction::kForward;
  r.thread = 0;
  r.depth = 0;
  bool has_in = false, has_out = false;
  od::document doc;
  if (parser.iterate(p, len, capacity).get(doc) != simdjson::SUCCESS) return false;
  od::object obj;
  if (doc.get_object().get(obj) != simdjson::SUCCESS) return false;
  bool has_op = false;
  for (auto field : obj) {
    std::string_view k;
    if (field.unescaped_key().get(k) != simdjson::SUCCESS) return false;
    od::value v = field.value();
    bool ok = true;
    if (k == "step") {
      ok = get_i64(v, r.step);
    } else if (k == "seq") {
      ok = get_i64(v, r.seq);
    } else if (k == "op") {
      ok = get_string(v, r.op);
      has_op = true;
    } else if (k == "ovl") {
      ok = get_string(v, r.overload);
    } else if (k == "call") {
      ok = get_i64(v, r.call);
    } else if (k == "dir") {
      std::string_view s;
      ok = v.get_string().get(s) == simdjson::SUCCESS && (s == "forward" || s == "backward");
      r.dir = s == "backward" ? Direction::kBackward : Direction::kForward;
    } else if (k == "thr") {
      uint64_t x = 0;
      ok = v.get_uint64().get(x) == simdjson::SUCCESS && x <= UINT32_MAX;
      r.thread = static_cast<uint32_t>(x);
    } else if (k == "depth") {
      int64_t x = 0;
      ok = get_i64(v, x);
      r.depth = static_cast<int32_t>(x);
    } else if (k == "sn") {
      ok = get_i64(v, r.seqnr);
    } else if (k == "grad") {
      bool on = true;
      ok = v.get_bool().get(on) == simdjson::SUCCESS;
      r.grad = on;
    } else if (k == "bg") {
      ok = v.get_bool().get(r.background) == simdjson::SUCCESS;
    } else if (k == "scope") {
      ok = get_string(v, r.scope);
    } else if (k == "node") {
      ok = get_string(v, r.node);
    } else if (k == "in") {
      ok = parse_args(v, r.inputs);
      has_in = true;
    } else if (k == "out") {
      ok = parse_args(v, r.outputs);
      has_out = true;
    }
    if (!ok) return false;
  }
  if (!has_in) r.inputs.clear();
  if (!has_out) r.outputs.clear();
  return has_op;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: parse_simdjson OPS.jsonl.zst [--records N] [--repeat K]\n");
    return 2;
  }
  size_t n = 1000000;
  int repeat = 3;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--records") == 0) n = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::atoi(argv[i + 1]);
  }
  Lines lines;
  if (!read_lines(argv[1], n, lines)) {
    std::fprintf(stderr, "parse_simdjson: cannot read %s\n", argv[1]);
    return 1;
  }
  const size_t count = lines.at.size();
  std::printf(
      "%zu records, %.1f B of JSON a record; simdjson ondemand built for %s, dom "
      "dispatched to %s\n",
      count, static_cast<double>(lines.text.size() - simdjson::SIMDJSON_PADDING) / count,
      kOndemandTarget, simdjson::get_active_implementation()->name().c_str());

  // The same OpRecord each way, for every line.
  {
    od::parser parser;
    OpRecord a, b;
    std::string ja, jb;
    size_t differ = 0, failed = 0;
    for (const auto& [at, len] : lines.at) {
      const std::string_view line(lines.text.data() + at, len);
      const bool ok_a = parse_record(line, a);
      const bool ok_b = parse_simdjson(parser, line.data(), len, lines.text.size() - at, b);
      if (!ok_a || !ok_b) {
        failed += ok_a != ok_b;
        continue;
      }
      ja.clear();
      jb.clear();
      append_json(a, ja);
      append_json(b, jb);
      differ += ja != jb;
    }
    std::printf("check: %zu records encode differently, %zu parse with one parser only\n", differ,
                failed);
    if (differ != 0 || failed != 0) return 1;
  }

  auto time = [&](const char* name, auto&& parse_all) {
    double best = 1e30;
    for (int k = 0; k < repeat; ++k) {
      const double t0 = cpu_seconds();
      const size_t ok = parse_all();
      const double t = cpu_seconds() - t0;
      if (ok != count) std::printf("  (%s parsed %zu of %zu)\n", name, ok, count);
      best = std::min(best, t);
    }
    std::printf("%-14s %7.3f s  %6.2f M records/s  %5.0f ns a record\n", name, best,
                count / best / 1e6, best / count * 1e9);
  };
  time("json_lite", [&] {
    OpRecord r;
    size_t ok = 0;
    for (const auto& [at, len] : lines.at)
      ok += parse_record(std::string_view(lines.text.data() + at, len), r);
    return ok;
  });
  time("simdjson", [&] {
    od::parser parser;
    OpRecord r;
    size_t ok = 0;
    for (const auto& [at, len] : lines.at)
      ok += parse_simdjson(parser, lines.text.data() + at, len, lines.text.size() - at, r);
    return ok;
  });
  time("simdjson-dom", [&] {
    simdjson::dom::parser parser;
    size_t ok = 0;
    for (const auto& [at, len] : lines.at) {
      simdjson::dom::element e;
      ok += parser.parse(lines.text.data() + at, len, false).get(e) == simdjson::SUCCESS;
    }
    return ok;
  });
  return 0;
}
