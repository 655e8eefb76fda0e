// Shared by the fuzz targets: put the input bytes into a file the real readers can open.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace precprobe_fuzz {

/// An anonymous in-memory file holding `data`, reachable by path (/proc/self/fd/N).
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) : fd_(memfd_create("precprobe-fuzz", 0)) {
    size_t off = 0;
    while (fd_ >= 0 && off < size) {
      ssize_t n = write(fd_, data + off, size - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
  }
  ~MemFile() {
    if (fd_ >= 0) close(fd_);
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace precprobe_fuzz
