// The same starting point on both sides of a port: a model's parameters and buffers by name,
// saved to and loaded from one file that any tool reads — the safetensors layout (8-byte
// little-endian header length, a JSON header {name: {"dtype", "shape", "data_offsets"}},
// then the raw little-endian C-order bytes of each tensor; docs/python.md, "The state file").
// The Python module's precprobe.save_state / load_state write and read the same files, so a
// PyTorch model and its LibTorch port start from the same weights.
//
// **Example**:
//
//     Net net;                                         // a TORCH_MODULE holder
//     precprobe::load_state(net, "init.safetensors");  // written by Python's save_state
//     precprobe::save_state(net, "after.safetensors");
//
// Names are those of named_parameters() and named_buffers() (Python's and LibTorch's agree
// for registered submodules and Sequential: "conv1.weight", "bn1.running_mean",
// "bn1.num_batches_tracked", "0.weight"). load_state checks the whole file against the
// module before it writes any tensor: a name missing from the file, a name the module lacks,
// a shape or a dtype that differs is a precprobe::Error naming every one of them; nothing is
// converted. Undefined tensors (a buffer registered as None) are neither written nor expected.
//
// Threads: any thread, one call at a time per module; the module must not train meanwhile.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace torch {
namespace nn {
class Module;
}
}  // namespace torch

namespace precprobe {

/// Named tensors in the order they are written (parameters first, then buffers).
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// The module's parameters then its buffers, by their dotted names, undefined ones left out.
NamedTensors state_tensors(const torch::nn::Module& module);

/// Writes `tensors` to `path` (replaced atomically: a temporary file renamed over it).
/// `metadata` goes to the header's "__metadata__" (strings only, as the format wants) beside
/// precprobe's own "format": "pt" and "producer". Throws precprobe::Error for an empty or
/// repeated name, a dtype the format has no name for (complex, quantized), or an I/O error,
/// naming the tensor or the path.
void save_state(const NamedTensors& tensors, const std::string& path,
                const std::map<std::string, std::string>& metadata = {});
/// save_state(state_tensors(module), path, metadata).
void save_state(const torch::nn::Module& module, const std::string& path,
                const std::map<std::string, std::string>& metadata = {});

/// What a non-strict load_state left out, as PyTorch's load_state_dict(strict=False) returns
/// it: the module's names the file lacks (left as they were) and the file's names the module
/// lacks (not read). Both are empty after a strict load.
struct LoadResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

/// Copies the file's tensors into `tensors` (in place, no autograd), after checking that the
/// file holds exactly these names with the same shapes and dtypes. Throws precprobe::Error
/// naming every mismatch (and the file) before anything is written, or for a file that is
/// not a valid state file (header, offsets, size). With `strict` false (a port that has no
/// bias where the original has one), names on one side only are returned instead of thrown;
/// a shape or a dtype that differs still throws.
LoadResult load_state(const NamedTensors& tensors, const std::string& path, bool strict = true);
/// load_state(state_tensors(module), path, strict).
LoadResult load_state(torch::nn::Module& module, const std::string& path, bool strict = true);

/// As save_state / load_state of a module, for what PrecisionDebugger::start() takes too: a
/// TORCH_MODULE holder (`Net net; precprobe::load_state(net, "init.safetensors");`) or a
/// shared_ptr to a module.
template <typename HolderT, typename = decltype(std::declval<const HolderT&>().ptr())>
void save_state(const HolderT& holder, const std::string& path,
                const std::map<std::string, std::string>& metadata = {}) {
  save_state(static_cast<const torch::nn::Module&>(*holder.ptr()), path, metadata);
}
template <typename HolderT, typename = decltype(std::declval<const HolderT&>().ptr())>
LoadResult load_state(const HolderT& holder, const std::string& path, bool strict = true) {
  return load_state(static_cast<torch::nn::Module&>(*holder.ptr()), path, strict);
}
template <typename ModuleT>
void save_state(const std::shared_ptr<ModuleT>& module, const std::string& path,
                const std::map<std::string, std::string>& metadata = {}) {
  save_state(static_cast<const torch::nn::Module&>(*module), path, metadata);
}
template <typename ModuleT>
LoadResult load_state(const std::shared_ptr<ModuleT>& module, const std::string& path,
                      bool strict = true) {
  return load_state(static_cast<torch::nn::Module&>(*module), path, strict);
}

/// Every tensor of the file, in the header's order, as CPU tensors; the header's
/// "__metadata__" into `metadata` when given. Throws precprobe::Error as load_state.
NamedTensors read_state(const std::string& path,
                        std::map<std::string, std::string>* metadata = nullptr);

}  // namespace precprobe
