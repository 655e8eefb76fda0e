// Content hashes of tensors and modules, to tell in one number whether two runs (or two
// ranks, or two steps) hold bit-identical values.
//
// tensor_hash() is XXH3-64 (XXH3_64bits, seed 0) over the c10 dtype name, the shape and
// the element bytes in logical row-major order, so a non-contiguous view and its contiguous
// copy hash alike, while one changed bit, another dtype or another shape changes the hash.
// It is the value a dump writes as "hash" (summary_mode=hash). Bit-level: -0.0 and 0.0, or
// two NaN payloads, hash differently. Tensors on other devices are copied to the CPU first.
// Tensors whose values cannot be read (meta, sparse, mkldnn, quantized, nested) hash their
// dtype (with layout) and shape only; an undefined tensor hashes as dtype "undefined".
//
// module_hash() combines, in name order, the names and tensor hashes of every parameter and
// buffer of a module and its submodules (named_parameters() and named_buffers()).
//
// Both may be called from any thread while no other thread writes the tensors.
#pragma once

#include <cstdint>

namespace at {
class Tensor;
}  // namespace at
namespace torch {
namespace nn {
class Module;
}  // namespace nn
}  // namespace torch

namespace precprobe {

/// Hash of dtype, shape and values of `t`.
///
/// **Example**: `CHECK(precprobe::tensor_hash(w.t()) ==
/// precprobe::tensor_hash(w.t().contiguous()));`
uint64_t tensor_hash(const at::Tensor& t);

/// Hash of every parameter and buffer of `m` (recursively), with their names.
///
/// **Example**: `auto before = precprobe::module_hash(*net); optimizer.step();`
/// `bool changed = precprobe::module_hash(*net) != before;`
uint64_t module_hash(const torch::nn::Module& m);

}  // namespace precprobe
