// The training state a step snapshot covers, copied deep so that tests can compare it bit
// for bit (test_replay, test_replay_overlap).
#pragma once

#include <torch/torch.h>

#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace precprobe::test {

// Bitwise equality, NaN and -0.0 included.
inline bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  auto x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}

// A deep copy of everything the snapshot covers that a test can read.
struct State {
  std::vector<at::Tensor> tensors;  // parameters, buffers, optimizer state tensors
  std::vector<int64_t> steps;       // optimizer step counts
};

// The optimizer's state key of `p`: a string up to LibTorch 2.0, the TensorImpl* later.
template <typename Map>
typename Map::key_type key_of(const Map&, const at::Tensor& p) {
  if constexpr (std::is_same<typename Map::key_type, std::string>::value) {
    std::ostringstream os;  // as 1.13's c10::guts::to_string(p.unsafeGetTensorImpl())
    os << p.unsafeGetTensorImpl();
    return os.str();
  } else {
    return static_cast<typename Map::key_type>(p.unsafeGetTensorImpl());
  }
}

inline State copy_state(torch::nn::Module& m, torch::optim::Optimizer& opt) {
  State s;
  for (const auto& p : m.parameters()) s.tensors.push_back(p.detach().clone());
  for (const auto& b : m.buffers()) s.tensors.push_back(b.clone());
  for (const auto& p : m.parameters()) {
    auto it = opt.state().find(key_of(opt.state(), p));
    if (it == opt.state().end()) {
      s.steps.push_back(-1);
      continue;
    }
    if (auto* a = dynamic_cast<torch::optim::AdamWParamState*>(it->second.get())) {
      s.tensors.push_back(a->exp_avg().clone());
      s.tensors.push_back(a->exp_avg_sq().clone());
      s.tensors.push_back(a->max_exp_avg_sq().defined() ? a->max_exp_avg_sq().clone()
                                                        : at::Tensor());
      s.steps.push_back(a->step());
    } else if (auto* g = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
      s.tensors.push_back(g->momentum_buffer().clone());
      s.steps.push_back(0);
    }
  }
  return s;
}

inline bool same_state(const State& a, const State& b) {
  if (a.tensors.size() != b.tensors.size() || a.steps != b.steps) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i)
    if (!same_bits(a.tensors[i], b.tensors[i])) return false;
  return true;
}

}  // namespace precprobe::test
