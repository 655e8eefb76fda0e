// The LibTorch side of a Python model: a torch::nn::Module tree that mirrors a torch.nn.Module's
// submodules (same dotted paths, the Python class name as each module's name(): "BatchNorm2d",
// "Dropout") and holds the very parameter and buffer tensors of the Python model (the same
// TensorImpls, not copies). Given to PrecisionDebugger::start, it names parameters as Python's
// named_parameters() does, lets the gradient monitor, observe_batch's checks and the
// "on_anomaly" snapshot reach every tensor, and keeps those tensors alive when the Python
// model is deleted while the debugger still runs.
//
// Threads: built and updated on the Python thread that owns the debugger (GIL held).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace precprobe {
namespace python {

/// (path, Python class name) of each submodule, in named_modules() order ("" is the root).
using ModuleList = std::vector<std::pair<std::string, std::string>>;
using NamedTensorList = std::vector<std::pair<std::string, at::Tensor>>;

/// What the Python side sends for one model.
struct ModelSpec {
  std::string name;  ///< "" for start(model); the key of start({"G": g, ...})
  ModuleList modules;
  NamedTensorList parameters;
  NamedTensorList buffers;
};

class MirrorModule : public torch::nn::Module {
 public:
  explicit MirrorModule(const std::string& type_name) : torch::nn::Module(type_name) {}
};

/// Builds the mirror. Throws precprobe::Error for a name with an empty component.
std::shared_ptr<torch::nn::Module> build_mirror(const ModelSpec& spec);

/// Whether `mirror` (built from an earlier spec) holds exactly the tensors of `spec` under the
/// same names (then it is reused, keeping the gradient monitor's history).
bool mirror_matches(const torch::nn::Module& mirror, const ModelSpec& spec);

/// Sets each mirrored module's train/eval flag: `training[i]` for modules[i] of the spec it was
/// built from (named_modules() order: parents before children).
void set_training(torch::nn::Module& mirror, const ModuleList& modules,
                  const std::vector<bool>& training);

}  // namespace python
}  // namespace precprobe
