// Shared pieces of the `precprobe` commands: exit codes, terminal styling, aligned tables,
// a progress line on stderr, number formatting and opening dumps. Single-threaded.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "precprobe/analysis.h"
#include "precprobe/reader.h"

namespace CLI {
class App;
}

namespace precprobe::cli {

/// The module attribution rule of every command that names a module
/// (src/core/analysis/modules.h; docs/cli.md, "Modules"), as their tables' headings say it.
inline constexpr const char* kModuleRule =
    "an op reading parameter b0.fc1.weight belongs to b0.fc1, an op between two such reads "
    "to the module running then (b0.qkv and b0.proj: b0; b0.fc2 and b1.ln1: b0; fc1 and fc2: "
    "(root)), "
    "a dropout op to the dropout module registered after the current one; outside the "
    "modules: (top level), (after backward), (optimizer); a backward op belongs where its "
    "forward op does";

/// Exit statuses, as diff(1) uses them.
enum ExitCode : int {
  kExitClean = 0,  ///< nothing found / identical
  kExitFound = 1,  ///< an overflow or a divergence was found
  kExitUsage = 2,  ///< bad arguments or unreadable input
};

/// Whether stdout gets colour and stderr a progress line.
struct Terminal {
  bool color = false;     ///< stdout is a terminal and NO_COLOR is unset
  bool progress = false;  ///< stderr is a terminal
  static Terminal detect();
};

enum class Tone { kPlain, kBold, kDim, kRed, kGreen, kYellow, kCyan };

/// `text` wrapped in the ANSI sequence for `tone` when colour is on.
std::string paint(const Terminal& term, Tone tone, const std::string& text);

/// Columns padded to their widest cell; numbers (cells starting with a digit, sign or
/// dot) are right-aligned. A row may carry a tone applied after padding.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row, Tone tone = Tone::kPlain);
  size_t size() const noexcept { return rows_.size(); }
  void print(std::ostream& out, const Terminal& term, const std::string& indent = "  ") const;

 private:
  std::vector<std::string> header_;
  std::vector<std::pair<std::vector<std::string>, Tone>> rows_;
};

/// "reading <what>: N records" on stderr, refreshed at most 10 times a second, erased at
/// destruction. Does nothing when stderr is not a terminal.
class Progress {
 public:
  Progress(const Terminal& term, std::string what);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  /// The callback for ReadOptions::progress (empty when disabled).
  ProgressFn callback();

 private:
  bool enabled_;
  std::string what_;
  int64_t last_ms_ = 0;
  bool drawn_ = false;
};

/// Compact number: %.6g, "nan", "inf", "-inf"; integers exactly.
std::string num(double v);
std::string num(int64_t v);
/// "[2, 3]"
std::string shape_str(const std::vector<int64_t>& shape);
/// One-line health of a tensor argument: "Float [2, 3] min .. max .. nan 1 +inf 2".
std::string arg_str(const Arg& a);

/// Opens a dump; a missing path is reported as such (precprobe::Error).
std::unique_ptr<DumpReader> open_dump(const std::string& path);

/// Prints a result's JSON on stdout (two-space indent; invalid UTF-8 from records
/// replaced): the one place a result becomes text.
void print_json(const nlohmann::json& j);

/// Registers the commands; each sets `exit_code` when it runs.
void add_summary_command(CLI::App& app, int& exit_code);
void add_overflow_command(CLI::App& app, int& exit_code);
void add_compare_command(CLI::App& app, int& exit_code);
void add_grads_command(CLI::App& app, int& exit_code);
void add_scale_command(CLI::App& app, int& exit_code);
void add_export_command(CLI::App& app, int& exit_code);
void add_report_command(CLI::App& app, int& exit_code);
void add_check_command(CLI::App& app, int& exit_code);
void add_repro_command(CLI::App& app, int& exit_code);
void add_precision_command(CLI::App& app, int& exit_code);
void add_watch_command(CLI::App& app, int& exit_code);

}  // namespace precprobe::cli
