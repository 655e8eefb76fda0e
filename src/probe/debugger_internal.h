// What other parts of the probe need from the PrecisionDebugger beyond its public API.
#pragma once

#include <memory>

#include "precprobe/writer.h"

namespace precprobe {
namespace detail {

/// The writer of the started debugger, or null. Shared: the caller may flush it after
/// the debugger was stopped or destroyed (the signal flusher does).
std::shared_ptr<DumpWriter> started_debugger_writer();

}  // namespace detail
}  // namespace precprobe
