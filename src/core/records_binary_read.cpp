// The decoder of ops.bin.zst's binary op records (records_binary.h; docs/dump-format.md).
#include <cmath>
#include <cstring>
#include <limits>

#include "records_binary.h"
#include "records_binary_layout.h"
#include "records_parse_util.h"

namespace precprobe {
namespace {

using namespace binary_layout;

// Reads one record's body; every read checks the bytes left.
class Body {
 public:
  Body(std::string_view bytes, const std::vector<std::string_view>& strings,
       std::vector<uint8_t>& value_checked)
      : p_(bytes.data()),
        end_(bytes.data() + bytes.size()),
        strings_(strings),
        value_checked_(value_checked) {}

  __attribute__((always_inline)) bool varint(uint64_t& v) {
    if (p_ != end_ && (static_cast<uint8_t>(*p_) & 0x80) == 0) {  // most numbers: one byte
      v = static_cast<uint8_t>(*p_++);
      return true;
    }
    return long_varint(v);
  }
  bool long_varint(uint64_t& v) {
    // Counts of a tensor of more than 127 elements: mostly two bytes.
    if (end_ - p_ >= 2 && (static_cast<uint8_t>(p_[0]) & 0x80) != 0 &&
        (static_cast<uint8_t>(p_[1]) & 0x80) == 0) {
      v = (static_cast<uint64_t>(p_[0]) & 0x7fu) | static_cast<uint64_t>(p_[1]) << 7;
      p_ += 2;
      return true;
    }
    if (end_ - p_ >= 10) {  // every byte of the longest number there: no check per byte
      const auto* q = reinterpret_cast<const uint8_t*>(p_);
      uint64_t r = 0;
      for (int i = 0; i < 10; ++i) {
        r |= static_cast<uint64_t>(q[i] & 0x7f) << (7 * i);
        if ((q[i] & 0x80) == 0) {
          if (i == 9 && q[i] > 1) return fail("a number overflows 64 bits");
          v = r;
          p_ += i + 1;
          return true;
        }
      }
      return fail("a number is longer than 10 bytes");
    }
    v = 0;
    const char* p = p_;
    const size_t left = static_cast<size_t>(end_ - p);
    const size_t n = left < 10 ? left : 10;
    for (size_t i = 0; i < n; ++i) {
      const auto byte = static_cast<uint8_t>(p[i]);
      v |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
      if ((byte & 0x80) == 0) {
        if (i == 9 && byte > 1) return fail("a number overflows 64 bits");
        p_ = p + i + 1;
        return true;
      }
    }
    return fail(n < 10 ? "the record ends inside a number" : "a number is longer than 10 bytes");
  }
  __attribute__((always_inline)) bool signed64(int64_t& v) {
    uint64_t u = 0;
    if (!varint(u)) return false;
    v = static_cast<int64_t>((u >> 1) ^ (~(u & 1) + 1));
    return true;
  }
  template <class T>
  __attribute__((always_inline)) bool fixed(T& v) {
    if (static_cast<size_t>(end_ - p_) < sizeof(T)) return fail("the record ends inside a number");
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return true;
  }
  bool byte(uint8_t& v) { return fixed(v); }
  bool string(std::string& out) {
    uint64_t id = 0;
    if (!index(id)) return false;
    const std::string_view s = strings_[id];
    // Records repeat their neighbours' strings (dtype, device, op): no copy when it is there.
    if (!same(out, s)) out.assign(s.data(), s.size());
    return true;
  }
  // A value argument's text: the JSON text the writer gives every value (canonical_value()),
  // checked once a frame for each string used as one. Any other text is not a value a
  // writer wrote, and would not read back as itself.
  bool value(std::string& out) {
    uint64_t id = 0;
    if (!index(id)) return false;
    const std::string_view s = strings_[id];
    uint8_t& checked = value_checked_[id];
    if (checked == 0) checked = canonical_value_text(s) ? 1 : 2;
    if (checked != 1) return fail("a value that is not JSON text without surrounding blanks");
    if (!same(out, s)) out.assign(s.data(), s.size());
    return true;
  }
  // The index of a string of the frame's table.
  __attribute__((always_inline)) bool index(uint64_t& id) {
    if (!varint(id)) return false;
    return id < strings_.size() || fail("a string index beyond the frame's table");
  }
  // Most strings compared are a few bytes long (dtype, device, op): no call for those, and
  // from 4 bytes on two overlapping words compared instead of each byte.
  static __attribute__((always_inline)) bool same(const std::string& a, std::string_view b) {
    const size_t n = b.size();
    if (a.size() != n) return false;
    const char* x = a.data();
    const char* y = b.data();
    if (n > 16) return std::memcmp(x, y, n) == 0;
    if (n >= 8)
      return word<uint64_t>(x) == word<uint64_t>(y) &&
             word<uint64_t>(x + n - 8) == word<uint64_t>(y + n - 8);
    if (n >= 4)
      return word<uint32_t>(x) == word<uint32_t>(y) &&
             word<uint32_t>(x + n - 4) == word<uint32_t>(y + n - 4);
    for (size_t i = 0; i < n; ++i)
      if (x[i] != y[i]) return false;
    return true;
  }
  template <class W>
  static __attribute__((always_inline)) W word(const char* p) {
    W w;
    std::memcpy(&w, p, sizeof w);
    return w;
  }
  // A count of items of at least one byte each, no more than `limit`.
  bool count(size_t& n, size_t limit, const char* what) {
    uint64_t v = 0;
    if (!varint(v)) return false;
    if (v > limit) return fail(what);
    if (v > static_cast<uint64_t>(end_ - p_)) return fail("a count beyond the record's bytes");
    n = static_cast<size_t>(v);
    return true;
  }
  bool at_end() const { return p_ == end_; }
  bool fail(const char* why) {
    if (error_ == nullptr) error_ = why;
    return false;
  }
  const char* error() const { return error_ != nullptr ? error_ : "bad record"; }

 private:
  const char* p_;
  const char* end_;
  const std::vector<std::string_view>& strings_;
  std::vector<uint8_t>& value_checked_;  // by string index: 0 not yet, 1 a value's text, 2 not
  const char* error_ = nullptr;
};

double canonical_nan(double v) {
  return std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : v;
}

__attribute__((always_inline)) inline bool stat32(Body& in, bool is_wide, double& v) {
  if (is_wide) {
    if (!in.fixed(v)) return false;
  } else {
    float f = 0;
    if (!in.fixed(f)) return false;
    v = static_cast<double>(f);
  }
  v = canonical_nan(v);
  return true;
}

bool read_tensor(Body& in, TensorStats& t) {
  uint64_t flags = 0;
  if (!in.varint(flags) || !in.string(t.dtype) || !in.string(t.device)) return false;
  t.requires_grad = (flags & kRequiresGrad) != 0;
  size_t ndim = 0;
  if (!in.count(ndim, records_parse_detail::kMaxListSize, "too many dimensions")) return false;
  t.shape.resize(ndim);
  for (int64_t& d : t.shape) {
    if (!in.signed64(d)) return false;
  }
  if (!in.signed64(t.numel) || !in.signed64(t.nan) || !in.signed64(t.pinf) ||
      !in.signed64(t.ninf) || !in.signed64(t.zero) || !in.signed64(t.neg) || !in.signed64(t.pos))
    return false;
  if (!in.fixed(t.min) || !in.fixed(t.max)) return false;
  t.min = canonical_nan(t.min);
  t.max = canonical_nan(t.max);
  if (!stat32(in, (flags & kWideMean) != 0, t.mean) ||
      !stat32(in, (flags & kWideNorm) != 0, t.norm))
    return false;
  if ((flags & kHasHash) != 0) {
    uint64_t h = 0;
    if (!in.fixed(h)) return false;
    t.hash = h;
  } else {
    t.hash.reset();
  }
  if ((flags & kHasParam) != 0) {
    if (!in.string(t.param)) return false;
  } else {
    t.param.clear();
  }
  t.list_index = -1;
  if ((flags & kHasListIndex) != 0 && (!in.signed64(t.list_index) || t.list_index < 0))
    return in.fail("a negative list index");
  t.hist.clear();
  if ((flags & kHasHist) != 0) {
    size_t n = 0;
    if (!in.count(n, kHistogramBins, "hist has too many bins")) return false;
    t.hist.resize(n);
    for (auto& [value, count] : t.hist) {
      if (!in.signed64(value) || !in.signed64(count)) return false;
    }
  }
  t.range.clear();
  t.has_range = (flags & kHasRange) != 0;
  if (t.has_range) {
    size_t n = 0;
    constexpr size_t kMaxBins = size_t(kRangeMaxExponent - kRangeMinExponent + 1);
    if (!in.count(n, kMaxBins, "range has too many bins")) return false;
    t.range.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      int64_t e = 0, count = 0;
      if (!in.signed64(e) || !in.signed64(count)) return false;
      if (e < kRangeMinExponent || e > kRangeMaxExponent || count < 0)
        return in.fail("a range bin's exponent is outside a double's or its count is negative");
      if (!t.range.empty() && e <= t.range.back().first)
        return in.fail("range exponents must be strictly ascending");
      t.range.emplace_back(static_cast<int32_t>(e), count);
    }
  }
  return true;
}

// As parse_args (records_parse.cpp): arguments a shorter record left over are kept for the
// next longer one.
thread_local std::vector<Arg> t_spare;
constexpr size_t kMaxSpare = 64;

bool read_args(Body& in, std::vector<Arg>& args) {
  size_t n = 0;
  if (!in.count(n, records_parse_detail::kMaxListSize, "too many arguments")) return false;
  while (args.size() > n) {
    if (t_spare.size() < kMaxSpare) t_spare.push_back(std::move(args.back()));
    args.pop_back();
  }
  while (args.size() < n) {
    if (t_spare.empty()) {
      args.emplace_back();
    } else {
      args.push_back(std::move(t_spare.back()));
      t_spare.pop_back();
    }
  }
  for (Arg& a : args) {
    uint8_t kind = 0;
    if (!in.byte(kind)) return false;
    if (kind == kValueArg) {
      a.tensor.reset();
      if (!in.value(a.value)) return false;
    } else if (kind == kTensorArg) {
      a.value.clear();
      if (!a.tensor) a.tensor.emplace();
      if (!read_tensor(in, *a.tensor)) return false;
    } else {
      return in.fail("an argument that is neither a value nor a tensor");
    }
  }
  return true;
}

bool read_record(Body& in, OpRecord& r) {
  uint64_t flags = 0;
  if (!in.varint(flags)) return false;
  r.dir = (flags & kBackward) != 0 ? Direction::kBackward : Direction::kForward;
  if ((flags & kGradOff) != 0) {
    r.grad = false;
  } else {
    r.grad.reset();
  }
  r.background = (flags & kBackground) != 0;
  r.optimizer = (flags & kOptimizerStep) != 0;
  if (!in.signed64(r.step) || !in.signed64(r.seq) || !in.string(r.op)) return false;
  r.overload.clear();
  if ((flags & kHasOverload) != 0 && !in.string(r.overload)) return false;
  uint64_t thread = 0;
  int64_t depth = 0;
  if (!in.signed64(r.call) || !in.varint(thread) || !in.signed64(depth) || !in.signed64(r.seqnr))
    return false;
  if (thread > std::numeric_limits<uint32_t>::max()) return in.fail("\"thr\" beyond 32 bits");
  if (depth < std::numeric_limits<int32_t>::min() || depth > std::numeric_limits<int32_t>::max())
    return in.fail("\"depth\" beyond 32 bits");
  r.thread = static_cast<uint32_t>(thread);
  r.depth = static_cast<int32_t>(depth);
  r.scope.clear();
  r.node.clear();
  if ((flags & kHasScope) != 0 && !in.string(r.scope)) return false;
  if ((flags & kHasNode) != 0 && !in.string(r.node)) return false;
  r.module.clear();
  if ((flags & kHasModule) != 0 && !in.string(r.module)) return false;
  if (!read_args(in, r.inputs) || !read_args(in, r.outputs)) return false;
  if (!in.at_end()) return in.fail("bytes after the record");
  r.rank = 0;
  return true;
}

}  // namespace

bool BinaryOpDecoder::open(std::string_view content, std::string* error) {
  content_ = content;
  strings_.clear();
  value_checked_.clear();
  pos_ = content.size();
  if (!is_binary_ops_frame(content) || content.size() < kBinaryOpsMagic.size() + 1) {
    if (error != nullptr) *error = "not a frame of binary op records";
    return false;
  }
  const auto version = static_cast<uint8_t>(content[kBinaryOpsMagic.size()]);
  if (version != kBinaryOpsVersion) {
    if (error != nullptr)
      *error = "binary op records of version " + std::to_string(version) +
               ", which this precprobe does not read (it reads version 1): use a newer precprobe";
    return false;
  }
  pos_ = kBinaryOpsMagic.size() + 1;
  return true;
}

BinaryOpDecoder::Next BinaryOpDecoder::next(OpRecord& out, std::string* error) {
  while (pos_ < content_.size()) {
    const auto tag = static_cast<uint8_t>(content_[pos_]);
    // The entry's length: a varint of at most 10 bytes after the tag.
    uint64_t size = 0;
    size_t at = pos_ + 1;
    bool ended = false;
    for (int shift = 0; shift < 64 && at < content_.size(); shift += 7) {
      const auto byte = static_cast<uint8_t>(content_[at++]);
      size |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) {
        ended = true;
        break;
      }
    }
    if ((tag != kTagString && tag != kTagRecord) || !ended) {
      if (error != nullptr) *error = "an unreadable entry: the rest of the frame is passed over";
      pos_ = content_.size();
      return Next::kEnd;
    }
    const size_t start = at;
    if (size > content_.size() - start) {
      if (error != nullptr) *error = "an entry longer than the frame: the rest is passed over";
      pos_ = content_.size();
      return Next::kEnd;
    }
    std::string_view bytes = content_.substr(start, static_cast<size_t>(size));
    pos_ = start + static_cast<size_t>(size);
    if (tag == kTagString) {
      if (strings_.size() >= (size_t{1} << 24)) {
        if (error != nullptr) *error = "more than 2^24 strings in one frame";
        pos_ = content_.size();
        return Next::kEnd;
      }
      strings_.push_back(bytes);
      value_checked_.push_back(0);
      continue;
    }
    Body body(bytes, strings_, value_checked_);
    if (read_record(body, out)) return Next::kRecord;
    if (error != nullptr) *error = body.error();
    return Next::kBad;
  }
  return Next::kEnd;
}

}  // namespace precprobe
