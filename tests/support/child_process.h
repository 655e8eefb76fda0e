// Child processes for the tests that kill, signal or crash a writer mid-run: a forked body
// that reports progress values through a pipe (ProgressChild), and a program run with its
// stdout on a pipe (OutputChild, the reliability tests' training child).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

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

/// How an OutputChild runs, beside its arguments.
struct ChildSetup {
  std::string stderr_path;       ///< "": stderr inherited; else written to this file
  std::vector<std::string> env;  ///< "NAME=value" set in the child before exec
};

/// A program run as a child with its stdout on a pipe: the test reads its lines while it
/// runs, signals it, and reaps it (SIGKILLed at destruction if still running).
class OutputChild {
 public:
  OutputChild(const std::string& exe, const std::vector<std::string>& args,
              const ChildSetup& setup = {}) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(fds[1], 1);
      ::close(fds[0]);
      ::close(fds[1]);
      if (!setup.stderr_path.empty()) {
        const int err = ::open(setup.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (err >= 0) ::dup2(err, 2);
      }
      for (const std::string& e : setup.env) {
        const size_t eq = e.find('=');
        ::setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
      }
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(exe.c_str()));
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(exe.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out_ = ::fdopen(fds[0], "r");
    REQUIRE(out_ != nullptr);
  }
  ~OutputChild() {
    if (pid_ > 0 && status_ < 0) {
      ::kill(pid_, SIGKILL);
      wait();
    }
    if (out_) std::fclose(out_);
  }
  // The next line of output ("" at end of file).
  std::string line() {
    char buf[512];
    if (std::fgets(buf, sizeof buf, out_) == nullptr) return "";
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    lines_.push_back(s);
    return s;
  }
  // Reads lines until "step <k>"; false at end of output.
  bool wait_for_step(int64_t k) {
    const std::string want = "step " + std::to_string(k);
    for (std::string s = line(); !s.empty(); s = line())
      if (s == want) return true;
    return false;
  }
  void drain() {
    while (!line().empty()) {
    }
  }
  int wait() {
    if (status_ < 0) REQUIRE(::waitpid(pid_, &status_, 0) == pid_);
    return status_;
  }
  void signal(int sig) { REQUIRE(::kill(pid_, sig) == 0); }
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  int status_ = -1;
  std::vector<std::string> lines_;
};

}  // namespace precprobe::test
