// c10d across LibTorch versions: the TCPStore's libuv server and the ProcessGroup/Backend split.
// Feature tests (not only version numbers) decide, so a LibTorch between the versions tried
// here takes the branch its headers support:
//   - 1.13: ProcessGroupGloo *is* a ProcessGroup.
//   - 2.0 (c10d::Backend appears, PyTorch PR 88330) to 2.4: ProcessGroup(store, rank, size,
//     Options) with the backend's name in its Options; 2.5 dropped those Options (PR 132931):
//     ProcessGroup(store, rank, size), then setDefaultBackend(). Either way the Gloo backend
//     is attached with setBackend().
//   - TCPStoreOptions::useLibUV from 2.1 (PR 105870), true by default from 2.4 (PR 127957);
//     a LibTorch built without libuv (Debian's) then throws "use_libuv was requested but
//     PyTorch was build without libuv support", and the store is made again without it.
#pragma once

#include <chrono>
#include <exception>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <type_traits>
#include <utility>

#include "support/torch_compat.h"

namespace precprobe::detail {

template <class O, class = void>
struct HasUseLibUV : std::false_type {};
template <class O>
struct HasUseLibUV<O, std::void_t<decltype(std::declval<O&>().useLibUV)>> : std::true_type {};

template <class PG, class = void>
struct HasSetDefaultBackend : std::false_type {};
template <class PG>
struct HasSetDefaultBackend<
    PG, std::void_t<decltype(std::declval<PG&>().setDefaultBackend(PG::BackendType::GLOO))>>
    : std::true_type {};

/// A TCPStore; the libuv server only where this LibTorch has it (see the top of this file).
template <class Options>
c10::intrusive_ptr<c10d::TCPStore> make_tcp_store(const std::string& host, Options options) {
  try {
    return c10::make_intrusive<c10d::TCPStore>(host, options);
  } catch (const std::exception& e) {
    if constexpr (HasUseLibUV<Options>::value) {
      if (options.useLibUV && std::string(e.what()).find("libuv") != std::string::npos) {
        options.useLibUV = false;
        return c10::make_intrusive<c10d::TCPStore>(host, options);
      }
    }
    throw;
  }
}

/// A process group whose CPU collectives run on Gloo.
template <class PG = c10d::ProcessGroup>
c10::intrusive_ptr<PG> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int world,
                                       c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> options,
                                       std::chrono::milliseconds timeout) {
#if PRECPROBE_TORCH_AT_LEAST(2, 0)
  auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);
  c10::intrusive_ptr<PG> pg;
  if constexpr (std::is_constructible_v<PG, c10::intrusive_ptr<c10d::Store>, int, int>) {
    pg = c10::make_intrusive<PG>(store, rank, world);
  } else {
    pg = c10::make_intrusive<PG>(store, rank, world,
                                 c10::make_intrusive<typename PG::Options>("gloo", timeout));
  }
  pg->setBackend(c10::DeviceType::CPU, PG::BackendType::GLOO, backend);
  if constexpr (HasSetDefaultBackend<PG>::value) pg->setDefaultBackend(PG::BackendType::GLOO);
  return pg;
#else
  (void)timeout;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);
#endif
}

}  // namespace precprobe::detail
