// DumpReader: reads a dump directory back (all ranks), torch-free.
//
// A dump directory holds rank<R>/ subdirectories (or is itself one rank directory). Each
// rank has meta.json and streams of independent zstd frames holding JSON Lines. The reader
// decodes frame by frame; a truncated or corrupt tail (a process killed mid-write) ends
// the stream there and is reported in StreamStatus, never thrown. Opening a directory that
// is not a dump, or of an unsupported format version, throws precprobe::Error.
//
// A DumpReader is not thread-safe; use one per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "precprobe/dump_format.h"
#include "precprobe/records.h"
#include "precprobe/writer.h"

namespace precprobe {

class OpCursor;

/// What was found reading one stream of one rank.
struct StreamStatus {
  std::string path;
  bool present = false;
  uint64_t frames = 0;
  uint64_t records = 0;
  uint64_t bad_lines = 0;  ///< lines that did not parse (skipped)
  /// Frames of `frames` passed over: their records were counted from the frame's digest
  /// (FrameDigest), not decoded, because the analysis asked only for what the digest holds.
  uint64_t frames_passed = 0;
  bool truncated = false;  ///< the file ended inside a frame, or a frame was corrupt
  uint64_t truncated_bytes = 0;
  std::string message;  ///< what was wrong, for people
};

struct RankInfo {
  int rank = 0;
  int world_size = 1;
  std::string dir;
  std::string meta_json;        ///< meta.json as written (empty if missing)
  std::optional<RunMeta> meta;  ///< meta.json read (absent if missing)

  /// `meta`, or for a RankInfo made by hand with only `meta_json`, that text read; empty
  /// when there is neither. Throws precprobe::Error when the text is not a JSON object.
  RunMeta run_meta() const;
};

/// What a frame of op records holds, as the writer described it in a digest written just
/// before the frame (a zstd skippable frame: docs/dump-format.md, "Frame digests").
struct FrameDigest {
  struct Step {
    int64_t step = 0;
    int64_t records = 0;
    /// Records with a non-finite output, as OpRecord::outputs_non_finite() counts them.
    int64_t nonfinite_outputs = 0;
    /// Records with a NaN or an Inf in any tensor, input or output, of any op.
    int64_t nonfinite_records = 0;
    bool operator==(const Step& o) const {
      return step == o.step && records == o.records && nonfinite_outputs == o.nonfinite_outputs &&
             nonfinite_records == o.nonfinite_records;
    }
  };
  uint64_t records = 0;
  /// Per step in file order (consecutive records of a step as one entry).
  std::vector<Step> steps;
  /// Records with a non-finite output per op name (OpRecord::op), in first-seen order.
  std::vector<std::pair<std::string, int64_t>> nonfinite_ops;
  /// Records of threads outside the training step (OpRecord::background).
  uint64_t background = 0;
  /// XXH3-64 of the frame's decompressed bytes (absent from digests written before it): two
  /// frames with the same hash hold the same records, so `compare` need not read them.
  std::optional<uint64_t> content;

  /// Whether any tensor of any record counts a NaN or an Inf.
  bool nonfinite() const noexcept {
    for (const Step& s : steps)
      if (s.nonfinite_records != 0) return true;
    return false;
  }
};

/// Selects records; empty fields select everything.
struct RecordFilter {
  std::optional<int64_t> step_min, step_max;  ///< inclusive bounds
  std::vector<int> ranks;
  /// Substring of OpRecord::name(); of GradRecord::param and ScalarRecord::name for those
  /// streams; not applied to scaler records.
  std::string name_contains;
  std::optional<Direction> dir;  ///< op records only
};

class DumpReader {
 public:
  /// Opens `path` (a dump directory or one rank directory). Throws precprobe::Error.
  explicit DumpReader(const std::string& path);

  const std::vector<RankInfo>& ranks() const noexcept { return ranks_; }
  const std::string& path() const noexcept { return path_; }

  /// Calls fn for every matching record in file order, rank by rank. fn returns false to
  /// stop early. The status of each stream read is appended to statuses().
  void for_each_op(const RecordFilter& filter, const std::function<bool(const OpRecord&)>& fn);
  /// As above, but a frame that has a digest is first offered to pass(rank, digest): when it
  /// returns true the frame is passed over (neither decompressed nor parsed; its records are
  /// counted in statuses() and StreamStatus::frames_passed), else read as usual. pass is asked
  /// only about frames it can pass over, and only when `filter` selects every record of the
  /// rank (ranks may be selected): with steps, a name or a direction it is not asked. (Either
  /// form passes over the frames whose digest shows no record in the filter's steps.)
  void for_each_op(const RecordFilter& filter,
                   const std::function<bool(int rank, const FrameDigest&)>& pass,
                   const std::function<bool(const OpRecord&)>& fn);
  void for_each_scaler(const RecordFilter& filter,
                       const std::function<bool(const ScalerRecord&)>& fn);
  void for_each_grad(const RecordFilter& filter, const std::function<bool(const GradRecord&)>& fn);
  /// Every events line, the debugger's "anomaly" event included (is_anomaly_event(): not
  /// a user scalar; consumers of scalars skip it).
  void for_each_scalar(const RecordFilter& filter,
                       const std::function<bool(const ScalarRecord&)>& fn);
  /// The debugger's "anomaly" events (events.jsonl.zst; the other events lines are passed
  /// over). The filter's steps and ranks apply; name_contains does not.
  void for_each_anomaly(const RecordFilter& filter,
                        const std::function<bool(const AnomalyEvent&)>& fn);
  /// The op watchpoint hits the debugger wrote (events "watch"; precprobe/op_watch.h), in
  /// file order. The filter's steps and ranks apply; name_contains does not.
  void for_each_watch(const RecordFilter& filter, const std::function<bool(const OpWatchHit&)>& fn);
  std::vector<OpWatchHit> watch_hits(const RecordFilter& filter = {});

  /// Convenience: all matching records in memory.
  std::vector<OpRecord> ops(const RecordFilter& filter = {});
  std::vector<ScalerRecord> scaler(const RecordFilter& filter = {});
  std::vector<GradRecord> grads(const RecordFilter& filter = {});
  std::vector<ScalarRecord> scalars(const RecordFilter& filter = {});
  std::vector<AnomalyEvent> anomalies(const RecordFilter& filter = {});

  /// Status of every stream read so far (one entry per rank and stream, latest read).
  const std::vector<StreamStatus>& statuses() const noexcept { return statuses_; }

  /// Whether a frame of op records that has a digest (FrameDigest) may be passed over without
  /// decompressing it: when for_each_op's pass function asks, and when the filter's steps
  /// select none of the frame's records. On by default; off decodes every frame (the same
  /// records, slower: the tests compare the two).
  void set_digests(bool on) noexcept { digests_ = on; }
  bool digests() const noexcept { return digests_; }

  /// Path of a stream file of a rank directory, e.g. "<dir>/ops.jsonl.zst".
  static std::string stream_path(const std::string& rank_dir, StreamKind kind);

 private:
  friend class OpCursor;  // src/core/op_cursor.h: the same reading, pulled a frame at a time
  std::string path_;
  std::vector<RankInfo> ranks_;
  std::vector<StreamStatus> statuses_;
  bool digests_ = true;
};

}  // namespace precprobe
