// Runs the built `precprobe` tool (PRECPROBE_CLI, set by the test's CMake target) as a
// shell command and collects its output and exit status. Shared by the CLI tests.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "precprobe_catch.h"

namespace precprobe::test {

struct CliRun {
  int status = -1;  ///< exit status; -1 when killed by a signal (a crash)
  std::string out;  ///< stdout, and stderr too when asked for
};

/// `NO_COLOR=1 precprobe <args>`; with `merge_stderr` the output holds stderr too,
/// otherwise stderr is discarded.
inline CliRun run_cli(const std::string& args, bool merge_stderr) {
  const std::string cmd = std::string("NO_COLOR=1 '") + PRECPROBE_CLI + "' " + args +
                          (merge_stderr ? " 2>&1" : " 2>/dev/null");
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace precprobe::test
