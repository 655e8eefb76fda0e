// tensor_hash and module_hash (precprobe/hash.h).
#include "precprobe/hash.h"

#include <torch/nn/module.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "stats/stats.h"
#include "stats/tensor_hasher.h"

namespace precprobe {

uint64_t tensor_hash(const at::Tensor& t) { return detail::logical_order_hash(t); }

uint64_t module_hash(const torch::nn::Module& m) {
  // "p:" / "b:" keep a parameter and a buffer of the same name apart.
  std::vector<std::pair<std::string, uint64_t>> entries;
  for (const auto& item : m.named_parameters(/*recurse=*/true)) {
    entries.emplace_back("p:" + item.key(), detail::logical_order_hash(item.value()));
  }
  for (const auto& item : m.named_buffers(/*recurse=*/true)) {
    entries.emplace_back("b:" + item.key(), detail::logical_order_hash(item.value()));
  }
  std::sort(entries.begin(), entries.end());
  detail::TensorHasher hasher;
  for (const auto& [name, h] : entries) {
    hasher.update(name.data(), name.size() + 1);  // with the '\0' as separator
    hasher.update(&h, sizeof h);
  }
  return hasher.digest();
}

}  // namespace precprobe
