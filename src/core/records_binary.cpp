// The binary op records of ops.bin.zst (records_binary.h; docs/dump-format.md).
#include "records_binary.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "json_lite.h"
#include "records_binary_layout.h"
#include "records_parse_util.h"

namespace precprobe {
namespace {

using namespace binary_layout;

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

// `n` more bytes of `out` to write through a pointer; done() keeps what was written.
class Room {
 public:
  Room(WrittenBytes& out, size_t n) : out_(out) {
    if (out_.bytes.size() < out_.size + n)
      out_.bytes.resize(std::max(out_.size + n, 2 * out_.bytes.size()));
    p = out_.bytes.data() + out_.size;
  }
  void done() { out_.size = static_cast<size_t>(p - out_.bytes.data()); }
  char* p;

 private:
  WrittenBytes& out_;
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
    Room w(body_, 1 + kMaxVarint);
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
  Room w(body_,
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
  body_.size = 0;
  const uint64_t op = string_id(r.op, frame);
  const uint64_t overload = r.overload.empty() ? 0 : common_id(r.overload, frame);
  const uint64_t scope = r.scope.empty() ? 0 : string_id(r.scope, frame);
  const uint64_t node = r.node.empty() ? 0 : string_id(r.node, frame);
  const uint64_t module = r.module.empty() ? 0 : string_id(r.module, frame);
  const uint64_t flags = (r.dir == Direction::kBackward ? kBackward : 0) |
                         (r.grad == false ? kGradOff : 0) | (r.background ? kBackground : 0) |
                         (r.overload.empty() ? 0 : kHasOverload) |
                         (r.scope.empty() ? 0 : kHasScope) | (r.node.empty() ? 0 : kHasNode) |
                         (r.optimizer ? kOptimizerStep : 0) | (r.module.empty() ? 0 : kHasModule);
  {
    Room w(body_, kMaxVarint * 12);
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
    if (!r.module.empty()) p = put_varint(p, module);
    w.p = p;
    w.done();
  }
  for (const std::vector<Arg>* args : {&r.inputs, &r.outputs}) {
    {
      Room w(body_, kMaxVarint);
      w.p = put_varint(w.p, args->size());
      w.done();
    }
    for (const Arg& a : *args) arg(a, frame);
  }
  put_entry(frame, kTagRecord, std::string_view(body_.bytes.data(), body_.size));
}

}  // namespace precprobe
