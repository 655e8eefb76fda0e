// File names inside a rank directory, shared by the writer and the reader (private).
#pragma once

#include <string_view>

#include "precprobe/writer.h"

namespace precprobe {

inline constexpr StreamKind kAllStreams[] = {StreamKind::kOps, StreamKind::kScaler,
                                             StreamKind::kGrads, StreamKind::kEvents};
inline constexpr std::string_view kMetaFile = "meta.json";
inline constexpr std::string_view kMetaTempFile = "meta.json.tmp";

inline std::string_view stream_file_name(StreamKind kind) noexcept {
  switch (kind) {
    case StreamKind::kOps:
      return "ops.jsonl.zst";
    case StreamKind::kScaler:
      return "scaler.jsonl.zst";
    case StreamKind::kGrads:
      return "grads.jsonl.zst";
    case StreamKind::kEvents:
      return "events.jsonl.zst";
  }
  return "unknown.jsonl.zst";
}

namespace detail {
/// Test hook: when set, the writer thread calls it before taking each batch from the
/// queue (tests use it to hold the thread and fill the queue deterministically).
using WriterBatchHook = void (*)();
void set_writer_batch_hook(WriterBatchHook hook) noexcept;
}  // namespace detail

}  // namespace precprobe
