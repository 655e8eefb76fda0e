// The binary op records of ops.bin.zst (records_binary.h; docs/dump-format.md).
#include "records_binary.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "json_lite.h"
#include "records_parse_util.h"

namespace precprobe {
namespace {

enum Tag : uint8_t { kTagString = 1, kTagRecord = 2 };

// Record flags.
constexpr uint64_t kBackward = 1, kGradOff = 2, kBackground = 4, kHasOverload = 8, kHasScope = 16,
                   kHasNode = 32;
// Argument kinds.
constexpr uint8_t kValueArg = 0, kTensorArg = 1;
// Tensor flags.
constexpr uint64_t kRequiresGrad = 1, kHasHash = 2, kHasParam = 4, kHasListIndex = 8, kHasHist = 16,
                   kHasRange = 32, kWideMean = 64, kWideNorm = 128;

// ---- writing ----
//
// A record is written through a raw pointer into room reserved beforehand (Room): the bytes
// are those of one append() per field, without a capacity check per byte.

uint64_t zigzag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
constexpr size_t kMaxVarint = 10;

char* put_varint(char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}
char* put_signed(char* p, int64_t v) { return put_varint(p, zigzag(v)); }

template <class T>
char* put_le(char* p, T v) {
  std::memcpy(p, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  return p + sizeof(T);
}

// `n` more bytes to write through a pointer, after the `len` bytes written so far of `buf`.
// The buffer's size only grows (zero-filled once, when it grows), so reserving room for a
// record's fields costs no fill and no shrink per record; `len` says what is written.
class Room {
 public:
  Room(std::string& buf, size_t& len, size_t n) : buf_(buf), len_(len) {
    if (buf_.size() < len_ + n) buf_.resize(std::max(len_ + n, 2 * buf_.size()));
    p = buf_.data() + len_;
  }
  void done() { len_ = static_cast<size_t>(p - buf_.data()); }
  char* p;

 private:
  std::string& buf_;
  size_t& len_;
};

void put_varint(std::string& out, uint64_t v) {
  char bytes[kMaxVarint];
  out.append(bytes, static_cast<size_t>(put_varint(bytes, v) - bytes));
}

// Whether a statistic stored as float32 loses what the JSON text keeps (TextOut::float32):
// a value whose float rounding is not finite stays a double there.
bool wide(double v) { return !std::isfinite(static_cast<float>(v)) && std::isfinite(v); }

char* put_stat32(char* p, double v, bool is_wide) {
  return is_wide ? put_le(p, v) : put_le(p, static_cast<float>(v));
}

void put_entry(std::string& frame, Tag tag, std::string_view bytes) {
  frame.push_back(static_cast<char>(tag));
  put_varint(frame, bytes.size());
  frame.append(bytes);
}

bool is_json_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The text the JSON Lines reader returns for a value the writer was given (records.cpp,
// append_arg): null for an empty value, the JSON text without surrounding blanks, or, for
// text that is not JSON, that text as a JSON string.
std::string_view canonical_value(const std::string& v, std::string& scratch) {
  if (v.empty()) return "null";
  if (json::is_valid_value(v)) {
    size_t b = 0, e = v.size();
    while (b < e && is_json_blank(v[b])) ++b;
    while (e > b && is_json_blank(v[e - 1])) --e;
    return std::string_view(v).substr(b, e - b);
  }
  scratch.clear();
  {
    json::TextOut o(scratch);
    o.reserve(json::TextOut::string_bound(v.size()));
    o.string(v);
  }
  return scratch;
}

}  // namespace

uint64_t BinaryOpEncoder::string_id(std::string_view s, std::string& frame) {
  auto found = strings_.find(s);
  if (found != strings_.end()) return found->second;
  const std::string& kept = texts_.emplace_back(s);
  strings_.emplace(kept, next_id_);
  put_entry(frame, kTagString, s);
  return next_id_++;
}

uint64_t BinaryOpEncoder::common_id(std::string_view s, std::string& frame) {
  for (const Recent& r : recent_)
    if (r.used && r.text.size() == s.size() && std::memcmp(r.text.data(), s.data(), s.size()) == 0)
      return r.id;
  Recent& r = recent_[recent_next_++ % recent_.size()];
  r.used = true;
  r.text.assign(s);
  r.id = string_id(s, frame);
  return r.id;
}

uint64_t BinaryOpEncoder::value_id(const std::string& value, std::string& frame) {
  auto found = values_.find(value);
  if (found != values_.end()) return found->second;
  const uint64_t id = string_id(canonical_value(value, canonical_), frame);
  values_.emplace(value, id);
  return id;
}

void BinaryOpEncoder::arg(const Arg& a, std::string& frame) {
  if (!a.tensor) {
    const uint64_t id = value_id(a.value, frame);
    Room w(body_, body_len_, 1 + kMaxVarint);
    *w.p++ = static_cast<char>(kValueArg);
    w.p = put_varint(w.p, id);
    w.done();
    return;
  }
  const TensorStats& t = *a.tensor;
  // The strings first: a new one is defined in the frame before the record.
  const uint64_t dtype = common_id(t.dtype, frame), device = common_id(t.device, frame);
  const uint64_t param = t.param.empty() ? 0 : string_id(t.param, frame);
  const bool wide_mean = wide(t.mean), wide_norm = wide(t.norm);
  const uint64_t flags = (t.requires_grad ? kRequiresGrad : 0) | (t.hash ? kHasHash : 0) |
                         (t.param.empty() ? 0 : kHasParam) |
                         (t.list_index >= 0 ? kHasListIndex : 0) | (t.hist.empty() ? 0 : kHasHist) |
                         (t.has_range ? kHasRange : 0) | (wide_mean ? kWideMean : 0) |
                         (wide_norm ? kWideNorm : 0);
  // kind, flags, dtype, device, rank, the shape, 7 counts, 4 statistics, hash, param,
  // list index, the histogram's and the range's sizes and pairs.
  Room w(body_, body_len_,
         1 + kMaxVarint * (4 + t.shape.size() + 7 + 4 + 2 * (t.hist.size() + t.range.size())) +
             4 * sizeof(double) + sizeof(uint64_t));
  char* p = w.p;
  *p++ = static_cast<char>(kTensorArg);
  p = put_varint(p, flags);
  p = put_varint(p, dtype);
  p = put_varint(p, device);
  p = put_varint(p, t.shape.size());
  for (int64_t d : t.shape) p = put_signed(p, d);
  for (int64_t c : {t.numel, t.nan, t.pinf, t.ninf, t.zero, t.neg, t.pos}) p = put_signed(p, c);
  p = put_le(p, t.min);
  p = put_le(p, t.max);
  p = put_stat32(p, t.mean, wide_mean);
  p = put_stat32(p, t.norm, wide_norm);
  if (t.hash) p = put_le(p, *t.hash);
  if (!t.param.empty()) p = put_varint(p, param);
  if (t.list_index >= 0) p = put_signed(p, t.list_index);
  if (!t.hist.empty()) {
    p = put_varint(p, t.hist.size());
    for (const auto& [value, count] : t.hist) {
      p = put_signed(p, value);
      p = put_signed(p, count);
    }
  }
  if (t.has_range) {
    p = put_varint(p, t.range.size());
    for (const auto& [e, count] : t.range) {
      p = put_signed(p, e);
      p = put_signed(p, count);
    }
  }
  w.p = p;
  w.done();
}

void BinaryOpEncoder::append(const OpRecord& r, std::string& frame) {
  if (frame.empty()) {
    strings_.clear();
    texts_.clear();
    values_.clear();
    for (Recent& c : recent_) c.used = false;
    next_id_ = 0;
    frame.append(kBinaryOpsMagic);
    frame.push_back(static_cast<char>(kBinaryOpsVersion));
  }
  body_len_ = 0;
  const uint64_t op = string_id(r.op, frame);
  const uint64_t overload = r.overload.empty() ? 0 : common_id(r.overload, frame);
  const uint64_t scope = r.scope.empty() ? 0 : string_id(r.scope, frame);
  const uint64_t node = r.node.empty() ? 0 : string_id(r.node, frame);
  const uint64_t flags = (r.dir == Direction::kBackward ? kBackward : 0) |
                         (r.grad == false ? kGradOff : 0) | (r.background ? kBackground : 0) |
                         (r.overload.empty() ? 0 : kHasOverload) |
                         (r.scope.empty() ? 0 : kHasScope) | (r.node.empty() ? 0 : kHasNode);
  {
    Room w(body_, body_len_, kMaxVarint * 11);
    char* p = w.p;
    p = put_varint(p, flags);
    p = put_signed(p, r.step);
    p = put_signed(p, r.seq);
    p = put_varint(p, op);
    if (!r.overload.empty()) p = put_varint(p, overload);
    p = put_signed(p, r.call);
    p = put_varint(p, r.thread);
    p = put_signed(p, r.depth);
    p = put_signed(p, r.seqnr);
    if (!r.scope.empty()) p = put_varint(p, scope);
    if (!r.node.empty()) p = put_varint(p, node);
    w.p = p;
    w.done();
  }
  for (const std::vector<Arg>* args : {&r.inputs, &r.outputs}) {
    {
      Room w(body_, body_len_, kMaxVarint);
      w.p = put_varint(w.p, args->size());
      w.done();
    }
    for (const Arg& a : *args) arg(a, frame);
  }
  put_entry(frame, kTagRecord, std::string_view(body_.data(), body_len_));
}

// ---- reading ----

namespace {

// Reads one record's body; every read checks the bytes left.
class Body {
 public:
  Body(std::string_view bytes, const std::vector<std::string_view>& strings)
      : p_(bytes.data()), end_(bytes.data() + bytes.size()), strings_(strings) {}

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
    if (!varint(id)) return false;
    if (id >= strings_.size()) return fail("a string index beyond the frame's table");
    const std::string_view s = strings_[id];
    // Records repeat their neighbours' strings (dtype, device, op): no copy when it is there.
    if (!same(out, s)) out.assign(s.data(), s.size());
    return true;
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
      if (!in.string(a.value)) return false;
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
  if (!read_args(in, r.inputs) || !read_args(in, r.outputs)) return false;
  if (!in.at_end()) return in.fail("bytes after the record");
  r.rank = 0;
  return true;
}

}  // namespace

bool BinaryOpDecoder::open(std::string_view content, std::string* error) {
  content_ = content;
  strings_.clear();
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
      continue;
    }
    Body body(bytes, strings_);
    if (read_record(body, out)) return Next::kRecord;
    if (error != nullptr) *error = body.error();
    return Next::kBad;
  }
  return Next::kEnd;
}

}  // namespace precprobe
