// Shared by the PrecisionDebugger tests: a scratch dump directory, options pointing at it,
// and reading the records back through DumpReader (the real files).
#pragma once

#include <ATen/ATen.h>
#include <zstd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/temp_dir.h"
#include "precprobe/debugger.h"
#include "precprobe/error.h"
#include "precprobe/reader.h"
#include "precprobe_catch.h"

namespace precprobe::test {

/// The float32 values of a tensor task's .npy.zst file; its NumPy header into `header`.
inline std::vector<float> read_npy_zst(const std::filesystem::path& path, std::string* header) {
  std::string packed = read_bytes(path.string());
  const auto size = ZSTD_getFrameContentSize(packed.data(), packed.size());
  REQUIRE(size != ZSTD_CONTENTSIZE_ERROR);
  REQUIRE(size != ZSTD_CONTENTSIZE_UNKNOWN);
  std::string raw(size, '\0');
  REQUIRE(ZSTD_decompress(&raw[0], raw.size(), packed.data(), packed.size()) == size);
  const size_t header_len = static_cast<uint8_t>(raw[8]) | (static_cast<uint8_t>(raw[9]) << 8);
  *header = raw.substr(10, header_len);
  std::vector<float> v((raw.size() - 10 - header_len) / sizeof(float));
  std::memcpy(v.data(), raw.data() + 10 + header_len, v.size() * sizeof(float));
  return v;
}

inline DebuggerOptions options_in(const TempDir& dir, bool async = true) {
  DebuggerOptions o;
  o.dump_path = dir.path().string();
  o.async_stats = async;
  o.grad_monitor = false;
  o.keep_dropout = true;
  return o;
}

inline std::vector<OpRecord> read_ops(const TempDir& dir) {
  DumpReader r(dir.path().string());
  return r.ops();
}

inline std::vector<OpRecord> with_name(const std::vector<OpRecord>& ops, const std::string& op,
                                       Direction dir = Direction::kForward) {
  std::vector<OpRecord> out;
  for (const auto& r : ops)
    if (r.op == op && r.dir == dir) out.push_back(r);
  return out;
}

/// Float64 reference statistics, computed independently of the probe.
struct RefStats {
  int64_t nan = 0, pinf = 0, ninf = 0, zero = 0, neg = 0, pos = 0;
  double min = std::numeric_limits<double>::quiet_NaN(), max = min, mean = min, norm = min;
};

inline RefStats reference(const at::Tensor& t) {
  RefStats r;
  auto d = t.detach().to(at::kDouble).contiguous();
  const double* p = d.data_ptr<double>();
  double lo = INFINITY, hi = -INFINITY, sum = 0, sq = 0;
  int64_t n = 0;
  for (int64_t i = 0; i < d.numel(); ++i) {
    const double v = p[i];
    if (std::isnan(v)) {
      ++r.nan;
    } else if (std::isinf(v)) {
      (v > 0 ? r.pinf : r.ninf)++;
    } else {
      if (v == 0.0) ++r.zero;
      if (v < 0.0) ++r.neg;
      if (v > 0.0) ++r.pos;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      sum += v;
      sq += v * v;
      ++n;
    }
  }
  if (n > 0) {
    r.min = lo;
    r.max = hi;
    r.mean = sum / static_cast<double>(n);
    r.norm = std::sqrt(sq);
  }
  return r;
}

/// Sets an environment variable for the lifetime of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

}  // namespace precprobe::test
