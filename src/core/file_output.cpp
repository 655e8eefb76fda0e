// write_whole_file: temporary file + rename for regular files, in place for everything else.
#include "file_output.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "precprobe/error.h"

namespace precprobe::detail {
namespace {

/// Writes all of `data` to `fd`; returns 0 or the errno of the failure.
int write_all(int fd, std::string_view data) {
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    p += n;
    left -= static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

void write_whole_file(const std::string& path, std::string_view data, const std::string& tmp_path,
                      bool durable) {
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) throw Error(fmt::format("'{}' is a directory, not a file", path));
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw Error(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
    int err = write_all(fd, data);
    if (::close(fd) != 0 && err == 0) err = errno;
    if (err != 0) throw Error(fmt::format("cannot write '{}': {}", path, std::strerror(err)));
    return;
  }
  int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("cannot create '{}': {}", tmp_path, std::strerror(errno)));
  int err = write_all(fd, data);
  if (err == 0 && durable && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(tmp_path.c_str());
    throw Error(fmt::format("cannot write '{}': {}", tmp_path, std::strerror(err)));
  }
  if (::rename(tmp_path.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp_path.c_str());
    throw Error(fmt::format("cannot rename '{}' to '{}': {}", tmp_path, path, std::strerror(err)));
  }
}

}  // namespace precprobe::detail
