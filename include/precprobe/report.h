// The HTML report: one self-contained file (`precprobe report DIR [--compare DIR_B]`).
//
// build_report_data() reads a dump, runs the same analysis functions the CLI prints
// (summary, overflow origin, compare, histories) and collects their to_json() output,
// with long histories downsampled to min/max per bucket so spikes survive. render_report()
// puts that JSON into a <script type="application/json"> block of an HTML page whose
// chart library (uPlot), script and styles are inlined: the page opens offline, from the
// file alone. Torch-free. The functions are reentrant; call them from any thread.
//
// **Example**:
//   precprobe::ReportOptions o;
//   o.dump = "run_bf16";
//   o.compare = "run_fp32";
//   precprobe::write_report(o, "report.html");
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace precprobe {

struct ReportOptions {
  /// Dump directory (or one rank directory) to report on. Required.
  std::string dump;
  /// Second dump to compare against (the reference, "bench"); empty: no comparison.
  std::string compare;
  /// Step whose per-op error is charted; default: the step of the first divergent op,
  /// else the first step both dumps hold.
  std::optional<int64_t> step;
  /// Points a long history keeps: one min and one max per bucket (at least 16).
  size_t max_points = 2000;
  /// Columns (step buckets) of the gradient heat map (at least 16).
  size_t heatmap_columns = 400;
  /// Rows each embedded table keeps (the page pages through them); the rest are counted.
  size_t max_rows = 5000;
  /// Page title; default: "precprobe report: <dump>".
  std::string title;
};

/// The report's data as JSON text (what render_report() embeds). Throws precprobe::Error
/// when a dump cannot be opened.
std::string build_report_data(const ReportOptions& options);

/// The complete HTML page for `data_json` (the output of build_report_data()).
std::string render_report(std::string_view data_json, std::string_view title);

/// build_report_data() + render_report(), written to `path` (temp file + rename).
/// Throws precprobe::Error naming the path when it cannot be written.
void write_report(const ReportOptions& options, const std::string& path);

}  // namespace precprobe
