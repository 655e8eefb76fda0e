// Pieces of build_report_data() shared between its files. Not installed.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>

#include "precprobe/reader.h"
#include "precprobe/report.h"

namespace precprobe::report {

/// Rows of the gradient heat map (parameters past it are counted, not drawn).
inline constexpr size_t kMaxHeatmapRows = 256;
/// Rows of the "top ops by |output|" table.
inline constexpr size_t kMaxTopOps = 1000;
/// Scalars charted (one chart each, in order of first appearance).
inline constexpr size_t kMaxScalarCharts = 32;

/// Path, ranks and meta.json (parsed) of a dump: runs[i] of the report data.
nlohmann::json run_header(DumpReader& reader);

/// Adds the CLI's analyses to `data`: runs[i].summary, overflow, compare (with --compare)
/// and top_ops.by_error. `reader` is the reader of options.dump.
void add_analyses(const ReportOptions& options, DumpReader& reader, nlohmann::json& data);

}  // namespace precprobe::report
