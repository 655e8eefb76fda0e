// The binary encoding of op records (private to precprobe::core): the frames of ops.bin.zst,
// laid out in docs/dump-format.md ("ops.bin.zst: the binary op records").
//
// A frame is self-contained: it starts with the magic "\0PPB" and a version byte, then holds
// entries, each a tag byte and a varint length: a string (appended to the frame's string
// table, numbered from 0 in order of definition) or a record (fixed field order, integers
// as LEB128 varints, zigzag where signed, strings as table indices, doubles as 8
// little-endian bytes, mean and norm as the 4 bytes of their float32 rounding). The encoder
// defines each string the first time a frame uses it, before the record, so the same
// records always give the same bytes (frame digests' `content` stays a test of equality).
//
// The decoder gives exactly the OpRecord the JSON Lines reader gives for append_json() of
// the same record (tests/core/test_records_binary.cpp checks both ways on every sample and
// on every record of the golden dumps). Input is untrusted: every length and index is
// checked, and a record that does not decode is skipped, counted, and the frame read on.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "precprobe/records.h"

namespace precprobe {

/// The first bytes of every binary frame; a JSON Lines frame starts with '{'.
inline constexpr std::string_view kBinaryOpsMagic{"\0PPB", 4};
inline constexpr uint8_t kBinaryOpsVersion = 1;

/// Whether a decompressed frame holds binary op records.
inline bool is_binary_ops_frame(std::string_view content) noexcept {
  return content.size() >= kBinaryOpsMagic.size() &&
         content.compare(0, kBinaryOpsMagic.size(), kBinaryOpsMagic) == 0;
}

/// Encodes op records into the frames of one stream. append() starts a new frame (the magic,
/// an empty string table) whenever `frame` is empty, as FrameWriter leaves it after each
/// end_frame(). One per stream, owned by the writer thread.
/// Bytes written through a pointer (records_binary.cpp's Room): the first `size` of `bytes`,
/// whose own size only grows, so reserving room for a record fills and shrinks nothing.
struct WrittenBytes {
  std::string bytes;
  size_t size = 0;
};

class BinaryOpEncoder {
 public:
  void append(const OpRecord& r, std::string& frame);

 private:
  uint64_t string_id(std::string_view s, std::string& frame);
  /// string_id() of a string most records repeat (a dtype, a device, an overload): a few
  /// recent ones are compared before the table is looked up.
  uint64_t common_id(std::string_view s, std::string& frame);
  uint64_t value_id(const std::string& value, std::string& frame);
  void arg(const Arg& a, std::string& frame);

  struct Recent {
    bool used = false;
    std::string text;
    uint64_t id = 0;
  };
  std::unordered_map<std::string_view, uint64_t> strings_;  // this frame's table
  std::deque<std::string> texts_;                           // the keys of strings_
  std::array<Recent, 8> recent_;
  size_t recent_next_ = 0;
  std::unordered_map<std::string, uint64_t> values_;  // Arg::value -> id of its canonical text
  WrittenBytes body_;                                 // a record's bytes
  std::string canonical_;
  uint64_t next_id_ = 0;
};

/// Decodes the records of one binary frame, in order, into a reused OpRecord.
class BinaryOpDecoder {
 public:
  enum class Next { kRecord, kBad, kEnd };

  /// Starts on `content` (kept by reference: it must outlive the decoding). False with
  /// *error set when it is not a binary frame of a version this reader knows. One decoder
  /// may read frame after frame: its string table's storage is kept.
  bool open(std::string_view content, std::string* error);
  /// kRecord: `out` holds the next record (rank 0). kBad: a record did not decode (*error
  /// says why) and was passed over; call again. kEnd: the frame is done; with *error set, the
  /// rest of it was unreadable (a bad entry header or string).
  Next next(OpRecord& out, std::string* error);

 private:
  std::string_view content_;
  size_t pos_ = 0;
  std::vector<std::string_view> strings_;
  std::vector<uint8_t> value_checked_;  // by index of strings_: checked as a value's text
};

}  // namespace precprobe
