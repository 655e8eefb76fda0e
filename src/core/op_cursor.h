// OpCursor: op records of a DumpReader a frame at a time, pulled by the caller rather than
// pushed to a callback, so one analysis can read two dumps side by side (compare streams
// both runs group by group). Private to precprobe::core. Not thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "precprobe/reader.h"

namespace precprobe {

class OpCursor {
 public:
  /// Reads `reader`'s op records selected by `filter` (kept by reference: it must outlive
  /// the cursor), rank by rank in file order, as DumpReader::for_each_op does, `pass` as its
  /// pass function (may be empty); each stream's status goes to reader.statuses() when the
  /// stream ends.
  OpCursor(DumpReader& reader, const RecordFilter& filter,
           std::function<bool(int rank, const FrameDigest&)> pass = {});
  ~OpCursor();
  OpCursor(const OpCursor&) = delete;
  OpCursor& operator=(const OpCursor&) = delete;

  /// Appends the selected records of the next frame to `out` (none for a frame whose
  /// records are all filtered out or passed over); false when every stream has been read.
  bool next(std::vector<OpRecord>& out);

  /// Takes records the caller is done with (and clears `spent`): the records of later frames
  /// are decoded into their strings and vectors, so a reader that lets go of as many records
  /// as it takes allocates nothing per record. At most kMaxRecycled are kept.
  void recycle(std::vector<OpRecord>& spent);
  static constexpr size_t kMaxRecycled = size_t{1} << 16;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace precprobe
