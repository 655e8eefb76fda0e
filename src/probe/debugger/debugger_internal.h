// What other parts of the probe need from the PrecisionDebugger beyond its public API.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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
struct NamedModel;

namespace detail {

/// The module start(models, optimizers) watches: the named models as its children, so that
/// named_parameters() says "G.conv1.weight". Holds the models as they were given (owning
/// or not); its own train/eval flag means nothing (model_training() asks the models).
class ModelSet : public torch::nn::Module {
 public:
  ModelSet();
  /// The models' names and modules, in the order given.
  const std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>& models() const {
    return models_;
  }
  void add(const std::string& name, const std::shared_ptr<torch::nn::Module>& module);

 private:
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> models_;
};

/// The ModelSet for `models` (validated: throws precprobe::Error naming a bad name or a null
/// or repeated module); `previous` is returned instead when it holds the same models under
/// the same names, so that a later start() keeps the gradient monitor's history.
std::shared_ptr<torch::nn::Module> model_set(const std::vector<NamedModel>& models,
                                             const std::shared_ptr<torch::nn::Module>& previous);

/// meta.json's "modules" and "module_types" (docs/dump-format.md), as the object {"modules":
/// [[path, "params" | "dropout"], ...], "module_types": [[path, type], ...]}: "modules" has each
/// module of `model` that owns parameters directly or is a dropout (its type name contains
/// "Dropout"), "module_types" every module with its name() ("torch::nn::SequentialImpl"), both
/// in named_modules() order; the top module's path is "(root)". The analyses place a dropout
/// op, and the ops of a Sequential's parameterless children, which read no parameter, by them.
nlohmann::json module_order(const torch::nn::Module& model);

/// The train/eval mode observe_batch records: the module's own, or for a ModelSet whether
/// any of its models is in training mode.
bool model_training(const torch::nn::Module& model);

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
