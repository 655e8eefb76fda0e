// The writer's test hook (private); the file names are in precprobe/dump_format.h.
#pragma once

#include "precprobe/dump_format.h"

namespace precprobe {

namespace detail {
/// Test hook: when set, the writer thread calls it before taking each batch from the
/// queue (tests use it to hold the thread and fill the queue deterministically).
using WriterBatchHook = void (*)();
void set_writer_batch_hook(WriterBatchHook hook) noexcept;
}  // namespace detail

}  // namespace precprobe
