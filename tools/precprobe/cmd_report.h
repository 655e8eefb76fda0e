// The `report` subcommand of the precprobe CLI.
#pragma once

namespace CLI {
class App;
}

namespace precprobe::cli {

/// Adds `report DIR [--compare DIR_B] [-o FILE] [--step S] ...` to `app`. Its callback
/// throws precprobe::Error on unreadable dumps or an unwritable output.
void add_report_command(CLI::App& app);

}  // namespace precprobe::cli
