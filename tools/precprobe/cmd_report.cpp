// `precprobe report DIR [--compare DIR_B] -o report.html`: one self-contained HTML file.
#include "cmd_report.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "precprobe/error.h"
#include "precprobe/report.h"

namespace precprobe::cli {

void add_report_command(CLI::App& app) {
  auto o = std::make_shared<ReportOptions>();
  auto out = std::make_shared<std::string>("report.html");
  auto step = std::make_shared<int64_t>(-1);
  CLI::App* cmd = app.add_subcommand(
      "report", "Write one self-contained HTML report (opens offline in any browser)");
  cmd->add_option("dir", o->dump, "Dump directory")->required();
  cmd->add_option("--compare", o->compare, "Second dump (the reference) to compare against");
  cmd->add_option("-o,--output", *out, "HTML file to write")->capture_default_str();
  cmd->add_option("--step", *step,
                  "Step whose per-op error is charted (default: the first divergent op's)");
  cmd->add_option("--max-points", o->max_points,
                  "Points a long history keeps (min and max per bucket)")
      ->capture_default_str();
  cmd->add_option("--max-rows", o->max_rows, "Rows each table keeps")->capture_default_str();
  cmd->add_option("--title", o->title, "Page title");
  cmd->callback([o, out, step]() {
    if (*step >= 0) o->step = *step;
    write_report(*o, *out);
    std::printf("wrote %s\n", out->c_str());
  });
}

}  // namespace precprobe::cli
