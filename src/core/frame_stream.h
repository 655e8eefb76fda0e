// Framed zstd files (private to precprobe::core): the container of every dump stream.
//
// A stream is a plain concatenation of independent zstd frames, each holding whole JSON
// lines, so `zstdcat file` reads it and a process killed at any moment leaves every
// complete frame intact. FrameWriter buffers bytes and compresses them into one frame at
// end_frame(), then write(2)s the frame in one go; FrameReader walks the frames and stops
// at the first incomplete or corrupt one, saying how many bytes it left behind.
// Neither class is thread-safe: each is owned by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "precprobe/reader.h"

namespace precprobe {

class FrameWriter {
 public:
  FrameWriter();
  ~FrameWriter();
  FrameWriter(const FrameWriter&) = delete;
  FrameWriter& operator=(const FrameWriter&) = delete;

  /// Creates (truncates) `path`. False with *error set on failure.
  bool open(const std::string& path, int zstd_level, std::string* error);
  bool is_open() const noexcept { return fd_ >= 0; }

  /// The bytes of the frame being built; append to it directly (whole lines only).
  std::string& buffer() noexcept { return pending_; }
  void append(std::string_view bytes) { pending_.append(bytes); }
  size_t pending_bytes() const noexcept { return pending_.size(); }

  /// Compresses the buffered bytes into one frame and writes it; nothing when empty. With a
  /// digest (frame_digest.h), its skippable frame goes first, in the same write; its
  /// `content` is set to the hash of the frame's bytes.
  bool end_frame(std::string* error, FrameDigest* digest = nullptr);
  /// fsync(2).
  bool sync(std::string* error);
  /// Ends the frame and closes the file.
  bool close(std::string* error);

  uint64_t bytes_in() const noexcept { return bytes_in_; }
  uint64_t bytes_out() const noexcept { return bytes_out_; }
  uint64_t frames() const noexcept { return frames_; }

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
  int fd_ = -1;
  std::string path_;
  std::string pending_;
  std::vector<char> out_;
  uint64_t bytes_in_ = 0;
  uint64_t bytes_out_ = 0;
  uint64_t frames_ = 0;
};

class FrameReader {
 public:
  /// Frames that decompress to more than this are treated as corrupt (zstd bombs).
  static constexpr size_t kMaxFrameContent = size_t{256} << 20;

  FrameReader();
  ~FrameReader();
  FrameReader(const FrameReader&) = delete;
  FrameReader& operator=(const FrameReader&) = delete;

  /// False with *error set when the file cannot be opened.
  bool open(const std::string& path, std::string* error);

  /// Decompresses the next data frame into `content` (skippable frames are passed over). False
  /// at the end of the stream, or at the first frame that is incomplete or corrupt (then
  /// truncated() is true).
  bool next(std::string& content) { return next(content, nullptr, nullptr); }
  /// As next(content), but a data frame right after a digest of its size is first offered
  /// to pass(digest): when it returns true the frame is passed over, `content` is left empty
  /// and *passed (when given) is set; it still counts in frames().
  bool next(std::string& content, const std::function<bool(const FrameDigest&)>* pass,
            bool* passed);

  uint64_t frames() const noexcept { return frames_; }
  bool truncated() const noexcept { return truncated_; }
  /// Bytes from the start of the bad frame to the end of the file.
  uint64_t truncated_bytes() const noexcept { return truncated_bytes_; }
  const std::string& message() const noexcept { return message_; }

 private:
  bool fill(size_t want);
  /// Finds the size of the frame at buf_[start_] (reading more as needed): true with *size
  /// set; false at the end of the stream or at a bad frame (done_ then says which).
  bool frame_at_start(size_t* size);
  bool stop(uint64_t bytes_left, std::string message);
  bool decompress(const char* src, size_t size, std::string& content);

  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
  int fd_ = -1;
  std::string path_;
  std::vector<char> buf_;
  size_t start_ = 0;  // first unread byte in buf_
  size_t end_ = 0;    // one past the last valid byte in buf_
  bool eof_ = false;
  bool done_ = false;
  uint64_t offset_ = 0;  // file offset of buf_[start_]
  uint64_t frames_ = 0;
  bool truncated_ = false;
  uint64_t truncated_bytes_ = 0;
  std::string message_;
};

/// Calls fn(line) for each '\n'-terminated line of `text` and for a last unterminated
/// one; empty lines are skipped. fn returns false to stop; returns false when stopped.
template <class F>
bool for_each_line(std::string_view text, F&& fn) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    if (nl > pos && !fn(text.substr(pos, nl - pos))) return false;
    pos = nl + 1;
  }
  return true;
}

}  // namespace precprobe
