// watch_report() fed record by record (private to the core): for the commands that read every
// op record anyway (check, the report), so that their op watch verdict is the one `precprobe
// watch` gives, computed in the same pass.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "masking.h"
#include "precprobe/op_watch.h"
#include "precprobe/reader.h"

namespace precprobe::analysis_detail {

class WatchReportBuilder {
 public:
  /// One OpWatcher per rank of `ranks` (their meta.json's module order), judging with
  /// `options`; `live`: the run judged them live (WatchReport::live).
  WatchReportBuilder(const std::vector<RankInfo>& ranks, const OpWatchOptions& options,
                     bool live = false);
  /// As watch_report() takes `options` (nullopt: those the run used, else the defaults).
  static WatchReportBuilder for_dump(DumpReader& reader,
                                     const std::optional<OpWatchOptions>& options);
  /// One op record, each rank's in file order (ranks may interleave).
  void add(const OpRecord& r);
  /// The report; `recorded`: the dump's live hits (DumpReader::watch_hits()), if read.
  WatchReport finish(std::vector<OpWatchHit> recorded = {});

 private:
  OpWatcher& watcher(int rank);

  WatchReport rep_;
  std::map<int, std::unique_ptr<OpWatcher>> watchers_;
  std::map<int, std::vector<OpWatchHit>> hits_;  // per rank: the rank order of watch_dump()
  std::optional<std::pair<int64_t, int64_t>> first_bad_;  // (step, seq), a mask's -inf aside
  MaskTracker masks_;
};

}  // namespace precprobe::analysis_detail
