// watch_report() fed record by record (private to the core): for the commands that read every
// op record anyway (check, the report), so that their op watch verdict is the one `precprobe
// watch` gives, computed in the same pass.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "precprobe/op_watch.h"
#include "precprobe/reader.h"

namespace precprobe::analysis_detail {

class WatchReportBuilder {
 public:
  /// `options`: as watch_report() takes them (nullopt: those the run used, else the defaults).
  WatchReportBuilder(DumpReader& reader, const std::optional<OpWatchOptions>& options);
  /// One op record, each rank's in file order (ranks may interleave).
  void add(const OpRecord& r);
  /// The report; `with_recorded`: also read the dump's live hits (a pass over its events).
  WatchReport finish(bool with_recorded = true);

 private:
  OpWatcher& watcher(int rank);

  DumpReader& reader_;
  WatchReport rep_;
  std::map<int, std::unique_ptr<OpWatcher>> watchers_;
  std::map<int, std::vector<OpWatchHit>> hits_;  // per rank: the rank order of watch_dump()
  std::optional<std::pair<int64_t, int64_t>> first_bad_;  // (step, seq)
};

/// Sets rep.first_nonfinite_step (from `ops`, when given) and rep.early from rep.hits: the
/// first hit other than tensor_overflow at or before the first NaN/Inf.
void find_early(WatchReport& rep, const std::vector<OpRecord>& ops = {});

}  // namespace precprobe::analysis_detail
