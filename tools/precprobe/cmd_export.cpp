// `precprobe export DIR --format csv|jsonl`: flat tables for pandas and spreadsheets.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <map>

#include "cli_common.h"
#include "precprobe/error.h"

namespace precprobe::cli {
namespace {

struct ExportArgs {
  std::string dir, format, stream = "ops", output;
};

}  // namespace

void add_export_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "export", "Write one stream as a flat CSV or JSON Lines table (ops: one row per tensor)");
  cmd->add_option("DIR", args->dir, "dump directory")->required();
  cmd->add_option("--format", args->format, "csv or jsonl")
      ->required()
      ->check(CLI::IsMember({"csv", "jsonl"}));
  cmd->add_option("--stream", args->stream, "ops, scaler, grads or events")
      ->capture_default_str()
      ->check(CLI::IsMember({"ops", "scaler", "grads", "events"}));
  cmd->add_option("-o,--output", args->output, "output file (default: stdout)");
  cmd->footer(
      "Columns of --stream ops: step, rank, seq, name, op, overload, call, dir, depth, thread,\n"
      "scope, node, io, index, li, dtype, shape, numel, nan, pinf, ninf, zero, neg, pos, min,\n"
      "max, mean, norm, hash, param, rg, value, grad, sn, bg, opt, mod. NaN/Inf statistics are\n"
      "empty (CSV) or null.\n\n"
      "Examples:\n  precprobe export ./precprobe_dump --format csv -o ops.csv\n"
      "  precprobe export ./precprobe_dump --format jsonl --stream scaler");
  cmd->callback([args, &exit_code] {
    const std::map<std::string, StreamKind> streams{{"ops", StreamKind::kOps},
                                                    {"scaler", StreamKind::kScaler},
                                                    {"grads", StreamKind::kGrads},
                                                    {"events", StreamKind::kEvents}};
    const Terminal term = Terminal::detect();
    auto reader = open_dump(args->dir);
    const ExportFormat format = args->format == "csv" ? ExportFormat::kCsv : ExportFormat::kJsonl;
    std::ofstream file;
    if (!args->output.empty()) {
      file.open(args->output, std::ios::binary | std::ios::trunc);
      if (!file) throw Error(fmt::format("cannot write '{}'", args->output));
    }
    std::ostream& out = args->output.empty() ? std::cout : file;
    Progress progress(term, args->dir);
    ReadOptions read;
    read.progress = progress.callback();
    const uint64_t rows = export_table(*reader, streams.at(args->stream), format, out, read);
    out.flush();
    if (!out)
      throw Error(
          fmt::format("writing '{}' failed", args->output.empty() ? "stdout" : args->output));
    if (!args->output.empty())
      std::cerr << fmt::format("wrote {} rows to {}\n", rows, args->output);
    exit_code = kExitClean;
  });
}

}  // namespace precprobe::cli
