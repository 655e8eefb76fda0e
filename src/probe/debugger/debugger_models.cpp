// Several models for one debugger (start(models, optimizers)): the ModelSet that names their
// parameters "<name>.<parameter>" and the checks on what start() was given.
#include <set>
#include <utility>

#include "debugger/debugger_internal.h"
#include "precprobe/debugger.h"
#include "precprobe/error.h"

namespace precprobe {
namespace detail {

ModelSet::ModelSet() : torch::nn::Module("precprobe::ModelSet") {}

void ModelSet::add(const std::string& name, const std::shared_ptr<torch::nn::Module>& module) {
  register_module(name, module);
  models_.emplace_back(name, module);
}

nlohmann::json module_order(const torch::nn::Module& model) {
  nlohmann::json order = nlohmann::json::array();
  nlohmann::json types = nlohmann::json::array();
  auto add = [&](const std::string& path, const torch::nn::Module& m) {
    if (m.name().find("Dropout") != std::string::npos)
      order.push_back({path, "dropout"});
    else if (!m.named_parameters(/*recurse=*/false).is_empty())
      order.push_back({path, "params"});
    types.push_back({path, m.name()});
  };
  // named_modules() includes the top module only when it is held by a shared_ptr: a module
  // held by value (start(model) takes one) is added here.
  add("(root)", model);
  for (const auto& item : model.named_modules("", /*include_self=*/false))
    add(item.key(), *item.value());
  return nlohmann::json{{"modules", std::move(order)}, {"module_types", std::move(types)}};
}

namespace {

void check_models(const std::vector<NamedModel>& models) {
  if (models.empty()) {
    throw Error(
        "precprobe: start(models, optimizers): no model given; use start() to observe without "
        "one");
  }
  std::set<std::string> names;
  std::set<const torch::nn::Module*> modules;
  for (const NamedModel& m : models) {
    const std::string quoted = "'" + m.name + "'";
    if (m.name.empty())
      throw Error("precprobe: start(models, optimizers): a model's name is empty");
    if (m.name.find('.') != std::string::npos) {
      throw Error("precprobe: start(models, optimizers): the model name " + quoted +
                  " contains a '.' (parameter names are <model>.<parameter>)");
    }
    if (!names.insert(m.name).second)
      throw Error("precprobe: start(models, optimizers): the model name " + quoted +
                  " is given twice");
    if (!m.module)
      throw Error("precprobe: start(models, optimizers): the model " + quoted + " is null");
    if (!modules.insert(m.module.get()).second) {
      throw Error("precprobe: start(models, optimizers): the model " + quoted +
                  " is a module already given under another name");
    }
  }
}

bool same_models(const ModelSet& set, const std::vector<NamedModel>& models) {
  if (set.models().size() != models.size()) return false;
  for (size_t i = 0; i < models.size(); ++i) {
    if (set.models()[i].first != models[i].name ||
        set.models()[i].second.get() != models[i].module.get())
      return false;
  }
  return true;
}

}  // namespace

std::shared_ptr<torch::nn::Module> model_set(const std::vector<NamedModel>& models,
                                             const std::shared_ptr<torch::nn::Module>& previous) {
  check_models(models);
  if (const auto* old = dynamic_cast<const ModelSet*>(previous.get())) {
    if (same_models(*old, models)) return previous;
  }
  auto set = std::make_shared<ModelSet>();
  for (const NamedModel& m : models) set->add(m.name, m.module);
  return set;
}

bool model_training(const torch::nn::Module& model) {
  const auto* set = dynamic_cast<const ModelSet*>(&model);
  if (set == nullptr) return model.is_training();
  for (const auto& m : set->models())
    if (m.second->is_training()) return true;
  return false;
}

}  // namespace detail
}  // namespace precprobe
