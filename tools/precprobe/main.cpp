// The precprobe command line tool (minimal until the CLI helper's main lands).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cmd_report.h"
#include "precprobe/error.h"

int main(int argc, char** argv) {
  CLI::App app{"precprobe: read precprobe dumps"};
  app.require_subcommand(1);
  precprobe::cli::add_report_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const precprobe::Error& e) {
    std::fprintf(stderr, "precprobe: %s\n", e.what());
    return 2;
  }
  return 0;
}
