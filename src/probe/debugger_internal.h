// What other parts of the probe need from the PrecisionDebugger beyond its public API.
#pragma once

#include <cstdint>
#include <memory>

#include "precprobe/writer.h"

namespace at {
class Tensor;
}  // namespace at
namespace torch {
namespace nn {
class Module;
}  // namespace nn
}  // namespace torch

namespace precprobe {

class PrecisionDebugger;

namespace detail {

/// PrecisionDebugger::observe_batch and the free observe_batch (checklist_probe.cpp):
/// `model` may be null (start() without one); then the model's modes are not recorded.
void observe_batch_of(PrecisionDebugger& dbg, const torch::nn::Module* model,
                      const at::Tensor& inputs, const at::Tensor& targets, int64_t epoch,
                      int64_t ignore_index) noexcept;

/// The writer of the started debugger, or null. Shared: the caller may flush it after
/// the debugger was stopped or destroyed (the signal flusher does).
std::shared_ptr<DumpWriter> started_debugger_writer();

}  // namespace detail
}  // namespace precprobe
