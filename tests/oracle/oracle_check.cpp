// The oracle's value check: every statistic recorded in dump B equals a float64
// recomputation of the tensor as the op saw it, taken from the tensor files that a
// sync-mode run of the same program saved ("task": "tensor", dump A: each file written at
// the moment its statistics were taken, on the training thread).
//
//   precprobe_oracle_check DUMP_WITH_TENSORS DUMP_TO_CHECK
//
// Both dumps must hold the same op sequence (run_oracle.cmake checks they are identical
// first). Counts, min and max must be exact, mean and norm within 1e-6 relative (they are
// written as float32). Prints the number of tensors checked; exit 1 on any mismatch, or
// when fewer than 95 % of the recorded tensors had a file to check against.
#include <ATen/ATen.h>
#include <zstd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "precprobe/reader.h"
#include "probe/debugger_fixture.h"

namespace fs = std::filesystem;
using precprobe::OpRecord;
using precprobe::TensorStats;

namespace {

bool read_npy_zst(const fs::path& path, at::Tensor& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string packed = ss.str();
  const auto size = ZSTD_getFrameContentSize(packed.data(), packed.size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN) return false;
  std::string raw(size, '\0');
  if (ZSTD_decompress(&raw[0], raw.size(), packed.data(), packed.size()) != size) return false;
  const size_t header_len = static_cast<uint8_t>(raw[8]) | (static_cast<uint8_t>(raw[9]) << 8);
  const std::string header = raw.substr(10, header_len);
  const auto descr_at = header.find("'descr': '") + 10;
  const std::string descr = header.substr(descr_at, header.find('\'', descr_at) - descr_at);
  std::vector<int64_t> shape;
  const auto open = header.find("'shape': (") + 10;
  std::stringstream dims(header.substr(open, header.find(')', open) - open));
  for (std::string d; std::getline(dims, d, ',');)
    if (d.find_first_of("0123456789") != std::string::npos) shape.push_back(std::stoll(d));
  at::ScalarType t;
  if (descr == "<f4") {
    t = at::kFloat;
  } else if (descr == "<f8") {
    t = at::kDouble;
  } else if (descr == "<f2") {
    t = at::kHalf;
  } else if (descr == "<i8") {
    t = at::kLong;
  } else if (descr == "<i4") {
    t = at::kInt;
  } else if (descr == "|b1") {
    t = at::kBool;
  } else {
    return false;
  }
  void* data = raw.data() + 10 + header_len;
  out = at::from_blob(data, shape, at::TensorOptions().dtype(t)).clone();
  return true;
}

bool close(double got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  return std::fabs(got - want) <= 1e-6 * std::fabs(want) + 1e-300;
}

bool exact(double got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  return !(got < want) && !(got > want);
}

// "" when `s` agrees with the recomputation of `t`, else what differs.
std::string mismatch(const TensorStats& s, const at::Tensor& t) {
  const auto r = precprobe::test::reference(t);  // float64, independent of the probe
  std::string out;
  auto count = [&](const char* name, int64_t got, int64_t want) {
    if (got != want)
      out += std::string(" ") + name + " " + std::to_string(got) + " != " + std::to_string(want);
  };
  count("numel", s.numel, t.numel());
  count("nan", s.nan, r.nan);
  count("pinf", s.pinf, r.pinf);
  count("ninf", s.ninf, r.ninf);
  count("zero", s.zero, r.zero);
  count("neg", s.neg, r.neg);
  count("pos", s.pos, r.pos);
  auto value = [&](const char* name, double got, double want, bool must_be_exact) {
    if (!(must_be_exact ? exact(got, want) : close(got, want)))
      out += std::string(" ") + name + " " + std::to_string(got) + " != " + std::to_string(want);
  };
  value("min", s.min, r.min, true);
  value("max", s.max, r.max, true);
  value("mean", s.mean, r.mean, false);
  value("norm", s.norm, r.norm, false);
  return out;
}

// A tensor whose statistics say "not read" (uninitialized memory: no counts, NaN values).
bool unread(const TensorStats& s) {
  return s.numel > 0 && s.nan + s.pinf + s.ninf + s.zero + s.neg + s.pos == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: precprobe_oracle_check DUMP_WITH_TENSORS DUMP_TO_CHECK\n");
    return 2;
  }
  const fs::path files = fs::path(argv[1]) / "rank0" / "tensors";
  const std::vector<OpRecord> with_files = precprobe::DumpReader(argv[1]).ops();
  const std::vector<OpRecord> checked = precprobe::DumpReader(argv[2]).ops();
  if (with_files.size() != checked.size() || checked.empty()) {
    std::fprintf(stderr, "oracle_check: %zu records against %zu: not the same run\n",
                 with_files.size(), checked.size());
    return 1;
  }
  int64_t tensors = 0, compared = 0, skipped_unread = 0, bad = 0;
  for (size_t i = 0; i < checked.size(); ++i) {
    const OpRecord& r = checked[i];
    if (r.name() != with_files[i].name() || r.step != with_files[i].step) {
      std::fprintf(stderr, "oracle_check: record %zu is %s in one dump, %s in the other\n", i,
                   r.name().c_str(), with_files[i].name().c_str());
      return 1;
    }
    for (int side = 0; side < 2; ++side) {
      const auto& args = side == 0 ? r.inputs : r.outputs;
      for (size_t k = 0; k < args.size(); ++k) {
        if (!args[k].is_tensor() || args[k].tensor->dtype == "undefined") continue;
        const TensorStats& s = *args[k].tensor;
        if (s.numel == 0 || s.dtype.find(':') != std::string::npos) continue;
        ++tensors;
        if (unread(s)) {
          ++skipped_unread;
          continue;
        }
        const fs::path f =
            files / ("step" + std::to_string(r.step)) /
            (r.name() + (side == 0 ? ".in" : ".out") + std::to_string(k) + ".npy.zst");
        at::Tensor t;
        if (!read_npy_zst(f, t)) continue;
        ++compared;
        const std::string m = mismatch(s, t);
        if (!m.empty()) {
          if (++bad <= 20)
            std::fprintf(stderr, "oracle_check: step %lld %s %s %zu (%s):%s\n",
                         static_cast<long long>(r.step), r.name().c_str(),
                         side == 0 ? "input" : "output", k, s.dtype.c_str(), m.c_str());
        }
      }
    }
  }
  std::printf(
      "oracle_check: %lld tensors recorded, %lld unread (uninitialized memory), %lld "
      "compared with a float64 recomputation, %lld differ\n",
      static_cast<long long>(tensors), static_cast<long long>(skipped_unread),
      static_cast<long long>(compared), static_cast<long long>(bad));
  if (bad > 0) return 1;
  if (compared * 100 < (tensors - skipped_unread) * 95) {
    std::fprintf(stderr, "oracle_check: only %lld of %lld read tensors had a file\n",
                 static_cast<long long>(compared),
                 static_cast<long long>(tensors - skipped_unread));
    return 1;
  }
  return 0;
}
