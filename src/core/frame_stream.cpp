#include "frame_stream.h"

#include <endian.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "frame_digest.h"

namespace precprobe {
namespace {

std::string errno_text(int e) { return std::strerror(e); }

bool write_all(int fd, const char* data, size_t size, int& err) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void set_error(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
}

}  // namespace

// ---- FrameWriter ----

struct FrameWriter::Ctx {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ~Ctx() { ZSTD_freeCCtx(cctx); }
};

FrameWriter::FrameWriter() : ctx_(std::make_unique<Ctx>()) {}

FrameWriter::~FrameWriter() {
  if (fd_ >= 0) ::close(fd_);
}

bool FrameWriter::open(const std::string& path, int zstd_level, std::string* error) {
  if (ctx_->cctx == nullptr) {
    set_error(error, "cannot create a zstd compression context");
    return false;
  }
  ZSTD_CCtx_setParameter(ctx_->cctx, ZSTD_c_compressionLevel, zstd_level);
  // The checksum lets the reader tell a corrupt frame from a good one (4 bytes a frame).
  ZSTD_CCtx_setParameter(ctx_->cctx, ZSTD_c_checksumFlag, 1);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    set_error(error, fmt::format("cannot create '{}': {}", path, errno_text(errno)));
    return false;
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  path_ = path;
  return true;
}

bool FrameWriter::end_frame(std::string* error, FrameDigest* digest) {
  if (pending_.empty()) return true;
  if (fd_ < 0) {
    set_error(error, "stream is not open");
    return false;
  }
  size_t bound = ZSTD_compressBound(pending_.size());
  if (out_.size() < bound) out_.resize(bound);
  size_t n = ZSTD_compress2(ctx_->cctx, out_.data(), out_.size(), pending_.data(), pending_.size());
  if (ZSTD_isError(n)) {
    set_error(error,
              fmt::format("zstd compression failed for '{}': {}", path_, ZSTD_getErrorName(n)));
    return false;
  }
  int err = 0;
  size_t head = 0;
  if (digest != nullptr) {
    // One write(2) for both: the digest before its frame, so a reader decides before it
    // decompresses (a digest left without its frame by a crash is passed over unused).
    digest->content = digest_detail::content_hash(pending_);
    const std::string skippable = digest_detail::encode(*digest, n);
    head = skippable.size();
    if (out_.size() < head + n) out_.resize(head + n);
    std::memmove(out_.data() + head, out_.data(), n);
    std::memcpy(out_.data(), skippable.data(), head);
  }
  if (!write_all(fd_, out_.data(), head + n, err)) {
    set_error(error, fmt::format("cannot write '{}': {}", path_, errno_text(err)));
    return false;
  }
  bytes_in_ += pending_.size();
  bytes_out_ += head + n;
  ++frames_;
  pending_.clear();
  return true;
}

bool FrameWriter::sync(std::string* error) {
  if (fd_ >= 0 && ::fsync(fd_) != 0) {
    set_error(error, fmt::format("cannot fsync '{}': {}", path_, errno_text(errno)));
    return false;
  }
  return true;
}

bool FrameWriter::close(std::string* error) {
  if (fd_ < 0) return true;
  bool ok = end_frame(error);
  if (::close(fd_) != 0 && ok) {
    set_error(error, fmt::format("cannot close '{}': {}", path_, errno_text(errno)));
    ok = false;
  }
  fd_ = -1;
  return ok;
}

// ---- FrameReader ----

struct FrameReader::Ctx {
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  ~Ctx() { ZSTD_freeDCtx(dctx); }
};

FrameReader::FrameReader() : ctx_(std::make_unique<Ctx>()) {}

FrameReader::~FrameReader() {
  if (fd_ >= 0) ::close(fd_);
}

bool FrameReader::open(const std::string& path, std::string* error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    set_error(error, fmt::format("cannot open '{}': {}", path, errno_text(errno)));
    return false;
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  path_ = path;
  start_ = end_ = 0;
  eof_ = done_ = truncated_ = false;
  offset_ = frames_ = truncated_bytes_ = 0;
  message_.clear();
  if (ctx_->dctx == nullptr) return stop(0, "cannot create a zstd decompression context");
  return true;
}

// Makes at least `want` unread bytes available unless the file ends first.
bool FrameReader::fill(size_t want) {
  if (start_ > 0) {
    std::memmove(buf_.data(), buf_.data() + start_, end_ - start_);
    end_ -= start_;
    start_ = 0;
  }
  if (buf_.size() < want) buf_.resize(want);
  while (!eof_ && end_ < want) {
    ssize_t n = ::read(fd_, buf_.data() + end_, buf_.size() - end_);
    if (n < 0) {
      if (errno == EINTR) continue;
      return stop(end_, fmt::format("read error: {}", errno_text(errno)));
    }
    if (n == 0) eof_ = true;
    end_ += static_cast<size_t>(n);
  }
  return true;
}

bool FrameReader::stop(uint64_t bytes_left, std::string message) {
  done_ = true;
  truncated_ = true;
  // Everything from the bad frame to the end of the file is lost, not only what was read.
  struct stat st {};
  if (fd_ >= 0 && ::fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) > offset_) {
    bytes_left = std::max<uint64_t>(bytes_left, static_cast<uint64_t>(st.st_size) - offset_);
  }
  truncated_bytes_ = bytes_left;
  message_ = fmt::format("{}: {} at byte {} ({} bytes after the last complete frame)", path_,
                         message, offset_, bytes_left);
  return false;
}

bool FrameReader::frame_at_start(size_t* size) {
  static const size_t kMaxCompressed = ZSTD_compressBound(kMaxFrameContent);
  for (size_t want = size_t{1} << 16;;) {
    size_t avail = end_ - start_;
    if (avail > 0) {
      *size = ZSTD_findFrameCompressedSize(buf_.data() + start_, avail);
      if (!ZSTD_isError(*size)) return true;
    }
    if (eof_) {
      if (avail == 0) {
        done_ = true;
        return false;
      }
      return stop(avail, fmt::format("incomplete frame ({})", ZSTD_getErrorName(*size)));
    }
    if (avail >= kMaxCompressed) return stop(avail, "frame larger than the allowed maximum");
    want = std::min(std::max(want, avail * 2), kMaxCompressed);
    if (!fill(want)) return false;
  }
}

bool FrameReader::next(std::string& content, const std::function<bool(const FrameDigest&)>* pass,
                       bool* passed) {
  if (passed != nullptr) *passed = false;
  if (done_ || fd_ < 0) return false;
  FrameDigest digest;
  uint64_t digest_for = 0;  // the size of the data frame the last digest describes; 0: none
  for (;;) {
    size_t frame_size = 0;
    if (!frame_at_start(&frame_size)) return false;
    const char* frame = buf_.data() + start_;
    uint32_t magic = 0;
    std::memcpy(&magic, frame, 4);  // frames are at least 8 bytes (findFrameCompressedSize)
    magic = le32toh(magic);
    if (magic >= digest_detail::kSkippableFirst && magic <= digest_detail::kSkippableLast) {
      digest_for = 0;
      if (magic == digest_detail::kDigestMagic && pass != nullptr &&
          !digest_detail::parse(std::string_view(frame + digest_detail::kSkippableHeader,
                                                 frame_size - digest_detail::kSkippableHeader),
                                digest, digest_for)) {
        digest_for = 0;
      }
      start_ += frame_size;
      offset_ += frame_size;
      continue;
    }
    if (digest_for != 0 && digest_for == frame_size && (*pass)(digest)) {
      content.clear();
      if (passed != nullptr) *passed = true;
    } else if (!decompress(frame, frame_size, content)) {
      return false;
    }
    start_ += frame_size;
    offset_ += frame_size;
    ++frames_;
    return true;
  }
}

bool FrameReader::decompress(const char* src, size_t size, std::string& content) {
  unsigned long long known = ZSTD_getFrameContentSize(src, size);
  if (known == ZSTD_CONTENTSIZE_ERROR) return stop(size, "corrupt frame header");
  if (known != ZSTD_CONTENTSIZE_UNKNOWN) {
    if (known > kMaxFrameContent) return stop(size, "frame content larger than 256 MiB");
    content.resize(static_cast<size_t>(known));
    size_t n = ZSTD_decompressDCtx(ctx_->dctx, content.data(), content.size(), src, size);
    if (ZSTD_isError(n)) return stop(size, fmt::format("corrupt frame ({})", ZSTD_getErrorName(n)));
    if (n != known) return stop(size, "corrupt frame (content size mismatch)");
    return true;
  }
  // Frames written by other tools (e.g. `zstd` reading a pipe) may not declare their size.
  ZSTD_DCtx_reset(ctx_->dctx, ZSTD_reset_session_only);
  ZSTD_inBuffer in{src, size, 0};
  size_t produced = 0;
  content.resize(std::max<size_t>(content.capacity(), 1 << 16));
  for (;;) {
    if (content.size() - produced < (1 << 15)) {
      if (content.size() > kMaxFrameContent) {
        return stop(size, "frame content larger than 256 MiB");
      }
      content.resize(content.size() * 2);
    }
    ZSTD_outBuffer out{content.data() + produced, content.size() - produced, 0};
    size_t ret = ZSTD_decompressStream(ctx_->dctx, &out, &in);
    if (ZSTD_isError(ret)) {
      return stop(size, fmt::format("corrupt frame ({})", ZSTD_getErrorName(ret)));
    }
    produced += out.pos;
    if (ret == 0) break;  // frame complete
    if (in.pos == in.size && out.pos == 0) return stop(size, "corrupt frame (ends early)");
  }
  if (produced > kMaxFrameContent) return stop(size, "frame content larger than 256 MiB");
  content.resize(produced);
  return true;
}

}  // namespace precprobe
