// A child process that reports progress through a pipe, for the tests that kill a writer
// mid-run: fork, read the child's progress values until one reaches a target, SIGKILL it.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <functional>

#include "precprobe_catch.h"

namespace precprobe::test {

/// A forked child that runs `body(progress_fd)`; the body writes int64 progress values to
/// the fd and never returns (it is killed).
class ProgressChild {
 public:
  explicit ProgressChild(const std::function<void(int progress_fd)>& body) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(fds[0]);
      body(fds[1]);
      ::_exit(0);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  ProgressChild(const ProgressChild&) = delete;
  ProgressChild& operator=(const ProgressChild&) = delete;
  ~ProgressChild() {
    if (fd_ >= 0) ::close(fd_);
  }

  /// Reads progress values until one is >= target or the pipe ends; the last value read
  /// (`initial` when none).
  int64_t wait_for(int64_t target, int64_t initial) {
    int64_t v = initial;
    while (v < target) {
      int64_t next = 0;
      if (::read(fd_, &next, sizeof next) != sizeof next) break;
      v = next;
    }
    return v;
  }

  /// SIGKILLs the child and reaps it; the wait status.
  int kill() {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    ::close(fd_);
    fd_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
};

}  // namespace precprobe::test
