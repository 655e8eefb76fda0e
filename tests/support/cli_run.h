// Runs a shell command, or the built `precprobe` tool (PRECPROBE_CLI, set by the test's
// CMake target), and collects its output and exit status. Shared by the tests that run
// programs.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace precprobe::test {

struct CliRun {
  int status = -1;  ///< exit status; -1 when killed by a signal (a crash)
  std::string out;  ///< stdout, and stderr too when asked for
};

/// Runs `cmd` through the shell: its stdout and exit status (-1 when killed by a signal).
/// Throws std::runtime_error when no shell can be started.
inline CliRun run_shell(const std::string& cmd) {
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) throw std::runtime_error("cannot run " + cmd);
  char buf[8192];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

#ifdef PRECPROBE_CLI
/// `NO_COLOR=1 precprobe <args>`; with `merge_stderr` the output holds stderr too,
/// otherwise stderr is discarded.
inline CliRun run_cli(const std::string& args, bool merge_stderr) {
  return run_shell(std::string("NO_COLOR=1 '") + PRECPROBE_CLI + "' " + args +
                   (merge_stderr ? " 2>&1" : " 2>/dev/null"));
}
#endif

}  // namespace precprobe::test
