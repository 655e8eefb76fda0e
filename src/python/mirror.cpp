// build_mirror and friends: see mirror.h.
#include "mirror.h"

#include <map>

#include "precprobe/error.h"

namespace precprobe {
namespace python {
namespace {

std::vector<std::string> split(const std::string& dotted) {
  std::vector<std::string> parts;
  size_t from = 0;
  while (true) {
    const size_t dot = dotted.find('.', from);
    parts.push_back(dotted.substr(from, dot == std::string::npos ? std::string::npos : dot - from));
    if (dot == std::string::npos) break;
    from = dot + 1;
  }
  return parts;
}

class Builder {
 public:
  explicit Builder(const ModuleList& modules) {
    std::string root_type = "Module";
    for (const auto& [path, type] : modules) {
      types_[path] = type;
      if (path.empty()) root_type = type;
    }
    root_ = std::make_shared<MirrorModule>(root_type);
    made_[""] = root_;
    for (const auto& m : modules) module_at(m.first);
  }

  /// The module at `path`, made (with its parents) when missing.
  std::shared_ptr<torch::nn::Module> module_at(const std::string& path) {
    auto it = made_.find(path);
    if (it != made_.end()) return it->second;
    const size_t dot = path.rfind('.');
    const std::string parent_path = dot == std::string::npos ? "" : path.substr(0, dot);
    const std::string leaf = dot == std::string::npos ? path : path.substr(dot + 1);
    if (leaf.empty()) throw Error("precprobe: the module path '" + path + "' has an empty part");
    auto parent = module_at(parent_path);
    auto type = types_.find(path);
    auto child = std::make_shared<MirrorModule>(type != types_.end() ? type->second : "Module");
    parent->register_module(leaf, child);
    made_[path] = child;
    return child;
  }

  /// (the module holding `name`, its last component).
  std::pair<std::shared_ptr<torch::nn::Module>, std::string> owner_of(const std::string& name) {
    for (const std::string& part : split(name))
      if (part.empty()) throw Error("precprobe: the tensor name '" + name + "' has an empty part");
    const size_t dot = name.rfind('.');
    if (dot == std::string::npos) return {root_, name};
    return {module_at(name.substr(0, dot)), name.substr(dot + 1)};
  }

  std::shared_ptr<torch::nn::Module> root() const { return root_; }

 private:
  std::map<std::string, std::string> types_;
  std::map<std::string, std::shared_ptr<torch::nn::Module>> made_;
  std::shared_ptr<torch::nn::Module> root_;
};

}  // namespace

std::shared_ptr<torch::nn::Module> build_mirror(const ModelSpec& spec) {
  Builder b(spec.modules);
  for (const auto& [name, t] : spec.parameters) {
    auto [owner, leaf] = b.owner_of(name);
    // requires_grad as it is: register_parameter sets it on the tensor it is given.
    owner->register_parameter(leaf, t, t.defined() && t.requires_grad());
  }
  for (const auto& [name, t] : spec.buffers) {
    auto [owner, leaf] = b.owner_of(name);
    owner->register_buffer(leaf, t);
  }
  return b.root();
}

bool mirror_matches(const torch::nn::Module& mirror, const ModelSpec& spec) {
  auto same = [](const auto& items, const NamedTensorList& want) {
    if (items.size() != want.size()) return false;
    size_t i = 0;
    for (const auto& item : items) {
      if (item.key() != want[i].first ||
          item.value().unsafeGetTensorImpl() != want[i].second.unsafeGetTensorImpl())
        return false;
      ++i;
    }
    return true;
  };
  return same(mirror.named_parameters(true), spec.parameters) &&
         same(mirror.named_buffers(true), spec.buffers);
}

void set_training(torch::nn::Module& mirror, const ModuleList& modules,
                  const std::vector<bool>& training) {
  std::map<std::string, torch::nn::Module*> by_path;
  by_path[""] = &mirror;
  for (const auto& item : mirror.named_modules("", /*include_self=*/false))
    by_path[item.key()] = item.value().get();
  for (size_t i = 0; i < modules.size() && i < training.size(); ++i) {
    auto it = by_path.find(modules[i].first);
    if (it != by_path.end()) it->second->train(training[i]);
  }
}

}  // namespace python
}  // namespace precprobe
