// precprobe: reads precprobe dumps without LibTorch. Exit status as diff(1): 0 nothing
// found, 1 an overflow or divergence found, 2 usage or input error.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli_common.h"
#include "precprobe/error.h"
#include "precprobe/version.h"

int main(int argc, char** argv) {
  using namespace precprobe::cli;
  int exit_code = kExitClean;
  try {
    CLI::App app{"precprobe " PRECPROBE_VERSION_STRING
                 ": read precprobe dumps: find the first NaN/Inf, compare two runs, export."};
    app.set_version_flag("--version", PRECPROBE_VERSION_STRING);
    app.require_subcommand(1);
    app.footer(
        "Exit status: 0 nothing found, 1 overflow or divergence found, 2 usage or input error.\n"
        "Run 'precprobe COMMAND --help' for the options and an example of each command.");
    add_summary_command(app, exit_code);
    add_overflow_command(app, exit_code);
    add_compare_command(app, exit_code);
    add_grads_command(app, exit_code);
    add_scale_command(app, exit_code);
    add_export_command(app, exit_code);
    add_report_command(app, exit_code);
    add_check_command(app, exit_code);
    add_repro_command(app, exit_code);
    add_precision_command(app, exit_code);
    add_watch_command(app, exit_code);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      const int code = app.exit(e);
      return code == 0 ? kExitClean : kExitUsage;
    }
  } catch (const precprobe::Error& e) {
    std::fprintf(stderr, "precprobe: error: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "precprobe: unexpected error: %s\n", e.what());
    return kExitUsage;
  }
  return exit_code;
}
