// `precprobe report DIR [--compare DIR_B] -o report.html`: one self-contained HTML file
// (src/core/report/, docs/report.md).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "cli_common.h"
#include "precprobe/report.h"

namespace precprobe::cli {
namespace {

struct ReportArgs {
  ReportOptions options;
  std::string output = "report.html";
  int64_t step = -1;
};

}  // namespace

void add_report_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Write one self-contained HTML report that opens offline in any browser");
  cmd->add_option("dir", a->options.dump, "Dump directory")->required();
  cmd->add_option("--compare", a->options.compare,
                  "Second dump (the reference) to compare against");
  cmd->add_option("-o,--output", a->output, "HTML file to write")->capture_default_str();
  cmd->add_option("--step", a->step,
                  "Step whose per-op error is charted (default: the first divergent op's)");
  cmd->add_option("--max-points", a->options.max_points,
                  "Points a long history keeps (its min and max per bucket)")
      ->capture_default_str();
  cmd->add_option("--max-rows", a->options.max_rows, "Rows each table keeps")
      ->capture_default_str();
  cmd->add_option("--title", a->options.title, "Page title");
  cmd->footer(
      "Example:\n"
      "  precprobe report run_bf16 --compare run_fp32 -o report.html\n"
      "The page embeds summary, overflow and compare --first as their --json output.");
  cmd->callback([a, &exit_code]() {
    if (a->step >= 0) a->options.step = a->step;
    // Validated as every other command does (foreign streams are input errors).
    open_dump(a->options.dump);
    if (!a->options.compare.empty()) open_dump(a->options.compare);
    write_report(a->options, a->output);
    std::printf("wrote %s\n", a->output.c_str());
    exit_code = kExitClean;
  });
}

}  // namespace precprobe::cli
