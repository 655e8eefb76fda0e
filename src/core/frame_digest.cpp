#include "frame_digest.h"

#include <xxhash.h>

#include <algorithm>

#include "json_lite.h"

namespace precprobe::digest_detail {

void add(FrameDigest& d, const OpRecord& r) {
  ++d.records;
  if (r.background) ++d.background;
  if (d.steps.empty() || d.steps.back().step != r.step) d.steps.push_back({r.step, 0, 0, 0});
  FrameDigest::Step& s = d.steps.back();
  ++s.records;
  // Any count, on either side and whatever the op (an aten::empty output's garbage included).
  bool any = false;
  for (const auto* side : {&r.inputs, &r.outputs}) {
    for (const Arg& a : *side) any = any || (a.tensor && a.tensor->non_finite() != 0);
  }
  if (!any) return;
  ++s.nonfinite_records;
  if (!r.outputs_non_finite()) return;
  ++s.nonfinite_outputs;
  auto at = std::find_if(d.nonfinite_ops.begin(), d.nonfinite_ops.end(),
                         [&](const auto& op) { return op.first == r.op; });
  if (at == d.nonfinite_ops.end()) {
    d.nonfinite_ops.emplace_back(r.op, 1);
  } else {
    ++at->second;
  }
}

namespace {

void put_le32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xffu));
}

}  // namespace

std::string encode(const FrameDigest& d, uint64_t frame_size) {
  std::string payload;
  {
    json::TextOut o(payload);
    o.reserve(96);
    o.lit("{\"precprobe_digest\":1,\"size\":");
    o.int64(static_cast<int64_t>(frame_size));
    o.lit(",\"records\":");
    o.int64(static_cast<int64_t>(d.records));
    o.lit(",\"steps\":[");
    for (size_t i = 0; i < d.steps.size(); ++i) {
      const FrameDigest::Step& s = d.steps[i];
      o.reserve(96);
      if (i > 0) o.put(',');
      o.put('[');
      o.int64(s.step);
      o.put(',');
      o.int64(s.records);
      o.put(',');
      o.int64(s.nonfinite_outputs);
      o.put(',');
      o.int64(s.nonfinite_records);
      o.put(']');
    }
    o.reserve(24);
    o.lit("],\"nonfinite_ops\":[");
    for (size_t i = 0; i < d.nonfinite_ops.size(); ++i) {
      o.reserve(json::TextOut::string_bound(d.nonfinite_ops[i].first.size()) + 32);
      if (i > 0) o.put(',');
      o.put('[');
      o.string(d.nonfinite_ops[i].first);
      o.put(',');
      o.int64(d.nonfinite_ops[i].second);
      o.put(']');
    }
    o.reserve(96);
    o.lit("],\"background\":");
    o.int64(static_cast<int64_t>(d.background));
    if (d.content) {
      o.lit(",\"content\":");
      o.hex64(*d.content);
    }
    o.put('}');
  }
  std::string frame;
  frame.reserve(kSkippableHeader + payload.size());
  put_le32(frame, kDigestMagic);
  put_le32(frame, static_cast<uint32_t>(payload.size()));
  frame += payload;
  return frame;
}

bool parse(std::string_view payload, FrameDigest& d, uint64_t& frame_size) {
  json::Cursor c(payload);
  int64_t version = 0, size = 0, records = 0;
  d = FrameDigest{};
  if (!c.expect('{') || !c.quoted_key("precprobe_digest") || !c.int64(version) || version != 1)
    return false;
  if (!c.expect(',') || !c.quoted_key("size") || !c.int64(size) || size <= 0) return false;
  if (!c.expect(',') || !c.quoted_key("records") || !c.int64(records) || records < 0) return false;
  if (!c.expect(',') || !c.quoted_key("steps") || !c.expect('[')) return false;
  int64_t counted = 0, outputs = 0;
  if (!c.consume(']')) {
    do {
      FrameDigest::Step s;
      if (!c.expect('[') || !c.int64(s.step) || !c.expect(',') || !c.int64(s.records) ||
          !c.expect(',') || !c.int64(s.nonfinite_outputs) || !c.expect(',') ||
          !c.int64(s.nonfinite_records) || !c.expect(']'))
        return false;
      // Counts that contradict each other: the digest is not used.
      if (s.records <= 0 || s.nonfinite_records < 0 || s.nonfinite_records > s.records ||
          s.nonfinite_outputs < 0 || s.nonfinite_outputs > s.nonfinite_records ||
          s.records > records - counted)
        return false;
      counted += s.records;
      outputs += s.nonfinite_outputs;
      d.steps.push_back(s);
    } while (c.consume(','));
    if (!c.expect(']')) return false;
  }
  if (!c.expect(',') || !c.quoted_key("nonfinite_ops") || !c.expect('[')) return false;
  int64_t by_op = 0;
  if (!c.consume(']')) {
    do {
      std::pair<std::string, int64_t> op;
      if (!c.expect('[') || !c.string(op.first) || !c.expect(',') || !c.int64(op.second) ||
          !c.expect(']') || op.second <= 0 || op.second > outputs - by_op)
        return false;
      by_op += op.second;
      d.nonfinite_ops.push_back(std::move(op));
    } while (c.consume(','));
    if (!c.expect(']')) return false;
  }
  // Later additions; keys this reader does not know are skipped (written by a newer one).
  while (c.consume(',')) {
    int64_t background = 0;
    uint64_t content = 0;
    if (c.quoted_key("background")) {
      if (!c.int64(background) || background < 0 || background > records) return false;
      d.background = static_cast<uint64_t>(background);
    } else if (c.quoted_key("content")) {
      if (!c.hex64(content)) return false;
      d.content = content;
    } else {
      std::string_view key;
      if (!c.key(key) || !c.skip_value()) return false;
    }
  }
  if (!c.expect('}') || !c.at_end()) return false;
  if (counted != records || by_op != outputs) return false;
  d.records = static_cast<uint64_t>(records);
  frame_size = static_cast<uint64_t>(size);
  return true;
}

uint64_t content_hash(std::string_view bytes) noexcept {
  return XXH3_64bits(bytes.data(), bytes.size());
}

}  // namespace precprobe::digest_detail
