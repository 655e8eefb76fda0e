// What `precprobe check` needs from a training program beyond the debugger's own streams:
// the batches (observe_batch), the model at start (check_initial_model) and an expected
// module hash. Each writes "check/..." scalars (precprobe/checklist.h) through the started
// debugger; rules in docs/checklist.md. Usually called as members of the debugger
// (PrecisionDebugger::observe_batch, ::expect_module_hash), which use the model given to
// start(model); the free functions here take the model explicitly.
//
// **Example**:
//
//     dbg.start(net);
//     for (auto& [x, y] : batches) {
//       dbg.observe_batch(x, y, epoch);  // before the forward pass
//       ...
//     }
//
// Threads: call from the training loop's thread (the one that calls dbg.step()). Nothing
// here throws: errors are reported through precprobe::report_error(). Calls made while the
// debugger is not started (or its rank is not dumped) do nothing.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace torch {
namespace nn {
class Module;
}
}  // namespace torch

namespace precprobe {

class PrecisionDebugger;

/// Registers a training or evaluation batch: NaN/Inf counts and per-channel mean/std of
/// `inputs` (dim 1 is the channel/feature), and for integer `targets` the label histogram,
/// the label-order hash and the share equal to `ignore_index`; the model's train/eval mode,
/// its BatchNorm/Dropout modules' modes and the grad mode (off = evaluation). `epoch` (-1:
/// unknown) lets the check compare the label order of epochs. The first call for a debugger
/// also runs check_initial_model(). Costs one pass over the batch (not observed as ops).
void observe_batch(PrecisionDebugger& dbg, const torch::nn::Module& model, const at::Tensor& inputs,
                   const at::Tensor& targets, int64_t epoch = -1,
                   int64_t ignore_index = -100) noexcept;

/// Checks the weights (dim >= 2) for all-zero tensors and rows identical across the layer,
/// and records the model's module_hash. Once per debugger; call before the first step.
void check_initial_model(PrecisionDebugger& dbg, const torch::nn::Module& model) noexcept;

/// The module_hash the model is expected to have at start (e.g. of a checkpoint);
/// `precprobe check` reports a mismatch with the hash check_initial_model() recorded.
void expect_module_hash(PrecisionDebugger& dbg, uint64_t hash) noexcept;

}  // namespace precprobe
