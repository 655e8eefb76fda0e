// c10d helpers: environment, Gloo process group, replica checks.
#include "precprobe/distributed.h"

#include <fmt/format.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>

#include "debugger/c10d_compat.h"
#include "precprobe/error.h"
#include "precprobe/hash.h"

namespace precprobe {
namespace {

int int_from_env(const char* name, int fallback, int min_value) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < min_value || x > (1L << 30)) {
    throw Error(fmt::format("environment variable {}='{}' is not a valid integer >= {}", name, v,
                            min_value));
  }
  return static_cast<int>(x);
}

}  // namespace

int rank_from_env() { return int_from_env("RANK", 0, 0); }
int world_size_from_env() { return int_from_env("WORLD_SIZE", 1, 1); }

c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_process_group_from_env(int timeout_seconds) {
  const int rank = rank_from_env();
  const int world = world_size_from_env();
  if (rank >= world) {
    throw Error(fmt::format("RANK={} is not below WORLD_SIZE={}", rank, world));
  }
  const char* addr_env = std::getenv("MASTER_ADDR");
  const std::string addr = addr_env != nullptr && *addr_env != '\0' ? addr_env : "127.0.0.1";
  const int port = int_from_env("MASTER_PORT", 29500, 1);
  if (port > 65535) throw Error(fmt::format("MASTER_PORT={} is not a TCP port", port));

  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(port);
  so.isServer = rank == 0;
  so.numWorkers = static_cast<size_t>(world);
  so.timeout = std::chrono::seconds(timeout_seconds);
  try {
    const auto store = detail::make_tcp_store(addr, so);
    auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(timeout_seconds));
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    return detail::make_gloo_group(store, rank, world, opts, std::chrono::seconds(timeout_seconds));
  } catch (const std::exception& e) {
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    throw Error(fmt::format(
        "cannot create the Gloo process group (rank {} of {}, TCPStore at {}:{}): {}\n"
        "  check that MASTER_ADDR/MASTER_PORT name rank 0's machine and a free port, and that "
        "all {} ranks start within the timeout ({} s)",
        rank, world, addr, port, c10_error ? c10_error->what_without_backtrace() : e.what(), world,
        timeout_seconds));
  }
}

std::string ReplicaReport::summary() const {
  if (consistent()) {
    return fmt::format("replicas consistent ({} tensors, {} ranks)", tensors, world_size);
  }
  if (structure_differs) {
    return fmt::format("replicas differ in structure: ranks hold different parameter/buffer names");
  }
  std::string names;
  for (size_t i = 0; i < mismatched.size() && i < 8; ++i) {
    names += (i ? ", " : "") + mismatched[i];
  }
  if (mismatched.size() > 8) names += fmt::format(", ... ({} more)", mismatched.size() - 8);
  return fmt::format("replicas DIFFER in {} of {} tensors across {} ranks: {}", mismatched.size(),
                     tensors, world_size, names);
}

ReplicaReport check_replicas(const torch::nn::Module& model,
                             const c10::intrusive_ptr<c10d::ProcessGroup>& process_group) {
  if (!process_group) throw Error("check_replicas: the process group is null");
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& p : model.named_parameters(/*recurse=*/true))
    named.emplace_back(p.key(), p.value());
  for (const auto& b : model.named_buffers(/*recurse=*/true))
    named.emplace_back(b.key(), b.value());
  std::sort(named.begin(), named.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });

  // Slot 0 holds a hash of the name list, so ranks with different structures are caught
  // before per-tensor slots are compared position by position.
  const auto n = static_cast<int64_t>(named.size());
  auto local = at::empty({n + 2}, at::kLong);
  auto* h = local.data_ptr<int64_t>();
  uint64_t names_hash = 1469598103934665603ULL;  // FNV-1a over the names
  for (const auto& [name, t] : named) {
    for (unsigned char c : name) names_hash = (names_hash ^ c) * 1099511628211ULL;
    names_hash = (names_hash ^ 0xff) * 1099511628211ULL;
  }
  h[0] = static_cast<int64_t>(names_hash);
  h[1] = n;
  for (int64_t i = 0; i < n; ++i) h[i + 2] = static_cast<int64_t>(tensor_hash(named[i].second));

  const int world = process_group->getSize();
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < world; ++r) outputs[0].push_back(at::empty_like(local));
  std::vector<at::Tensor> inputs{local};
  try {
    process_group->allgather(outputs, inputs)->wait();
  } catch (const c10::Error& e) {
    throw Error(
        fmt::format("check_replicas: the all-gather of {} tensor hashes failed on rank {} "
                    "(a rank died or the group's timeout passed): {}",
                    n, process_group->getRank(), e.what_without_backtrace()));
  }

  ReplicaReport report;
  report.rank = process_group->getRank();
  report.world_size = world;
  report.tensors = named.size();
  for (int r = 0; r < world; ++r) {
    const auto* o = outputs[0][r].data_ptr<int64_t>();
    if (o[0] != h[0] || o[1] != h[1]) report.structure_differs = true;
  }
  if (report.structure_differs) return report;
  for (int64_t i = 0; i < n; ++i) {
    for (int r = 0; r < world; ++r) {
      if (outputs[0][r].data_ptr<int64_t>()[i + 2] != h[i + 2]) {
        report.mismatched.push_back(named[i].first);
        break;
      }
    }
  }
  return report;
}

}  // namespace precprobe
