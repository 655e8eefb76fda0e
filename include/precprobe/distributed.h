// Multi-process training on LibTorch's c10d: rank discovery, a Gloo process group from the
// torchrun-style environment, and replica checks (silent desync detection).
//
// Every function here that takes a process group is a collective: all ranks must call it,
// in the same order, from their controlling thread. Nothing in the PrecisionDebugger runs a
// collective unless asked (a hanging rank is not made worse by precprobe).
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <string>
#include <vector>

namespace c10d {
class ProcessGroup;
}  // namespace c10d
namespace torch {
namespace nn {
class Module;
}  // namespace nn
}  // namespace torch

namespace precprobe {

/// Rank and world size from the environment as torchrun sets them (RANK, WORLD_SIZE;
/// LOCAL_RANK is not needed). Missing variables mean a single process: rank 0 of 1.
/// Throws precprobe::Error when a variable is set but not a valid number.
int rank_from_env();
int world_size_from_env();

/// A Gloo process group over a TCPStore at MASTER_ADDR:MASTER_PORT (defaults 127.0.0.1:29500),
/// rank 0 hosting the store, as torchrun does. Throws precprobe::Error on a bad environment;
/// c10d's own errors (timeouts) propagate as thrown by LibTorch.
c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_process_group_from_env(int timeout_seconds = 60);

/// What check_replicas() found.
struct ReplicaReport {
  int rank = 0;
  int world_size = 1;
  size_t tensors = 0;                   ///< parameters and buffers compared
  std::vector<std::string> mismatched;  ///< names whose hash differs across ranks
  bool structure_differs = false;       ///< ranks hold different name lists
  bool consistent() const noexcept { return mismatched.empty() && !structure_differs; }
  /// One line for people: "replicas consistent (12 tensors, 4 ranks)" or the names.
  std::string summary() const;
};

/// Hashes every parameter and buffer (tensor_hash, in name order) on each rank, gathers
/// the hashes and names those that differ across ranks. A collective.
ReplicaReport check_replicas(const torch::nn::Module& model,
                             const c10::intrusive_ptr<c10d::ProcessGroup>& process_group);

}  // namespace precprobe
