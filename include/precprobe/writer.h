// DumpWriter: one rank directory of a dump, written by a background thread.
//
// Producers (the op observer, GradScaler, the gradient monitor) call submit() from any
// thread; submit() only moves the record into a bounded queue. The writer thread encodes
// records as JSON Lines and compresses each stream as a sequence of independent zstd
// frames, so a process killed at any point leaves every complete frame readable. A frame
// is closed at every flush() (the debugger calls it at each step), every
// `flush_every_records` records and every `flush_interval_ms`.
//
// I/O errors never throw into the caller: they are reported once through
// precprobe::report_error(), writing stops, and later submits are counted as dropped.
// The constructor throws precprobe::Error when the directory cannot be created or is
// not empty (unless `overwrite`).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "precprobe/op_watch.h"
#include "precprobe/records.h"

namespace precprobe {

struct RunMeta;  // dump_format.h

/// What submit() does when the queue is full.
enum class OverflowPolicy : uint8_t {
  kBlock,  ///< wait for the writer thread (no record is lost; the step slows down)
  kDrop,   ///< drop the record and count it in meta.json ("dropped")
};

/// How the writer encodes op records (docs/dump-format.md).
enum class OpsEncoding : uint8_t {
  kBinary,     ///< ops.bin.zst: fixed fields, little-endian, a string table per frame
  kJsonLines,  ///< ops.jsonl.zst: one JSON object per line (zstdcat | jq reads it)
};

/// The streams of a rank directory.
enum class StreamKind : uint8_t {
  kOps,     ///< ops.bin.zst, or ops.jsonl.zst (WriterOptions::ops_encoding)
  kScaler,  ///< scaler.jsonl.zst
  kGrads,   ///< grads.jsonl.zst
  kEvents,  ///< events.jsonl.zst (scalars logged by the user, markers)
};

struct WriterOptions {
  /// The rank directory, e.g. "dump/rank0"; created (with parents) if missing.
  std::string dir;
  /// Replace the files of an existing non-empty directory instead of refusing it.
  bool overwrite = false;
  /// Records the queue holds before `policy` applies. The writer thread takes the whole
  /// queue at once, so up to twice this many records can be in memory.
  size_t queue_capacity = 65536;
  OverflowPolicy policy = OverflowPolicy::kBlock;
  /// Close the current frame after this many records of a stream.
  size_t flush_every_records = 4096;
  /// ... and at least this often (milliseconds) while records arrive.
  int flush_interval_ms = 1000;
  /// zstd compression level (1 = fastest).
  int zstd_level = 3;
  /// fsync(2) the files at every flush() (slower; survives power loss, not only kills).
  bool fsync = false;
  /// Precede each frame of op records with its digest (FrameDigest, a zstd skippable frame
  /// that zstd and zstdcat pass over), so that summary and overflow need not decompress the
  /// frames that hold nothing they look for. Off writes the streams of format version 1.x
  /// before digests (tests of readers of such dumps).
  bool frame_digests = true;
  /// The encoding of op records: binary (ops.bin.zst) or JSON Lines (ops.jsonl.zst). Every
  /// reader of precprobe since this option reads both; `precprobe export` turns either into
  /// JSON Lines or CSV.
  OpsEncoding ops_encoding = OpsEncoding::kJsonLines;
  /// The op watchpoints judged on the writer thread as each op record is written
  /// (precprobe/op_watch.h); each hit also goes to events.jsonl.zst ("watch"), once its op's
  /// module is known (at the latest before the step's step_end event). nullopt: off.
  std::optional<OpWatchOptions> watch;
};

/// Counters, readable at any time from any thread.
struct WriterCounters {
  uint64_t records_written = 0;
  uint64_t records_dropped = 0;
  uint64_t bytes_uncompressed = 0;
  uint64_t bytes_compressed = 0;
  uint64_t frames = 0;
  bool failed = false;      ///< an I/O error stopped writing
  uint64_t watch_hits = 0;  ///< op watchpoint hits (WriterOptions::watch)
};

class DumpWriter {
 public:
  /// Creates the directory and opens the streams lazily. Throws precprobe::Error.
  explicit DumpWriter(WriterOptions options);
  /// Flushes and closes; never throws.
  ~DumpWriter();
  DumpWriter(const DumpWriter&) = delete;
  DumpWriter& operator=(const DumpWriter&) = delete;

  /// Writes meta.json atomically (temp file + rename). Called at start and at close with
  /// the counters added under "writer". Throws precprobe::Error on failure.
  void write_meta(const RunMeta& meta);
  /// The same with the text as given (tests and tools that write foreign metadata).
  void write_meta(const std::string& json_text);

  /// Enqueue a record; false when it was dropped (full queue with kDrop, or failed).
  bool submit(OpRecord&& r) noexcept;
  bool submit(ScalerRecord&& r) noexcept;
  bool submit(GradRecord&& r) noexcept;
  bool submit(ScalarRecord&& r) noexcept;
  /// Moves up to `max` argument vectors of op records already written onto `into`: their
  /// Args keep their storage (strings, shapes), so a producer that assigns into them instead
  /// of building new ones allocates nothing per record. Spares are kept only once this has
  /// been called, and at most 1024. Any thread; never throws.
  void take_spare_args(std::vector<std::vector<Arg>>& into, size_t max) noexcept;

  /// Ask the writer thread to close the current frame of every stream. With `wait`, return
  /// only when everything submitted before the call is on disk (write(2) done).
  void flush(bool wait = false) noexcept;

  /// Ends step `step`: as flush(wait), and once every record submitted before the call is
  /// written, the writer appends `{"step":step,"name":"step_end","value":step}` to
  /// events.jsonl.zst in a frame of its own (kStepEndEventName, dump_format.h). Frames reach
  /// the files in order, so a step_end on disk means every record submitted before it is
  /// too. The event is not counted in counters()' records. Never throws.
  void end_step(int64_t step, bool wait = false) noexcept;

  /// Drain the queue, close every stream and join the thread. Idempotent; never throws.
  void close() noexcept;

  WriterCounters counters() const noexcept;
  /// The op watchpoint hits from the `from`-th on (0: all), in the order they fired; each
  /// one's event is in events.jsonl.zst once its frame is written. Any thread.
  std::vector<OpWatchHit> watch_hits(size_t from = 0) const;
  const std::string& dir() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace precprobe
