// The analyses the report embeds, from the CLI's analysis functions (precprobe/analysis.h).
#include "report/report_internal.h"

namespace precprobe::report {

void add_analyses(const ReportOptions& options, DumpReader& reader, nlohmann::json& data) {
  // Wired to precprobe/analysis.h once it lands on main.
  (void)options;
  (void)reader;
  data["overflow"] = nullptr;
  data["compare"] = nullptr;
}

}  // namespace precprobe::report
