// Reproducible runs: one call that seeds every random number generator a LibTorch program
// uses, optionally switches LibTorch to deterministic algorithms, and reports every setting
// it made and every one it could not make.
//
// **Example**:
//
//     auto report = precprobe::seed_all(1234, /*deterministic=*/true);
//     std::cout << report.summary() << "\n";      // or: std::cout << report;
//     auto x = precprobe::randn_on_host({4, 8}, at::device(at::kCUDA).dtype(at::kHalf));
//
// What cannot be made reproducible (GPU atomics, thread counts, BLAS builds, CPU ISA paths,
// LibTorch versions) is listed in docs/reproducibility.md.
//
// Threads: call seed_all() once from the main thread before training starts and before any
// other thread draws random numbers (it changes process-wide state: generators, environment
// variables, the global ATen context). rng() may be obtained from any thread, but the engine
// it returns is one per process and is not locked: draw from one thread, or lock around
// draws, or give each worker its own engine with make_rng(stream). randn_on_host() may be
// called from any thread (it locks LibTorch's default CPU generator like every ATen draw).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <random>
#include <string>
#include <vector>

namespace precprobe {

/// The largest seed seed_all() accepts: 2^32 - 1. LibTorch's generators take 64-bit seeds,
/// but std::srand() takes an unsigned int and msprobe (the peer tool) checks [0, 2^32 - 1];
/// one bound for every generator means one seed reproduces a run everywhere.
inline constexpr uint64_t kMaxSeed = 0xFFFFFFFFull;

/// The seed rng() uses until seed_all() is called (and seed_all()'s default).
inline constexpr uint64_t kDefaultSeed = 1234;

/// Everything seed_all() can do; every field has a default.
struct SeedOptions {
  /// Seed for every generator, in [0, kMaxSeed].
  uint64_t seed = kDefaultSeed;
  /// Deterministic algorithms (at::globalContext().setDeterministicAlgorithms), cuDNN
  /// deterministic and benchmark off, TF32 off for cuBLAS and cuDNN.
  bool deterministic = false;
  /// With `deterministic`: an op that has no deterministic implementation warns instead of
  /// throwing.
  bool warn_only = false;
  /// > 0: pin LibTorch's intra-op thread count (at::set_num_threads). 0: leave it and only
  /// record it. CPU reductions (sum, matmul) split work by thread, so results depend on it.
  int num_threads = 0;
  /// Set the environment variables listed in docs/reproducibility.md
  /// (CUBLAS_WORKSPACE_CONFIG; HCCL_DETERMINISTIC with `deterministic`).
  bool set_environment = true;
};

/// One setting seed_all() made.
struct SeedSetting {
  std::string name;   ///< e.g. "torch.manual_seed", "env CUBLAS_WORKSPACE_CONFIG"
  std::string value;  ///< the value it now has
};

/// One setting seed_all() did not make, and why.
struct SeedSkipped {
  std::string name;
  std::string reason;
};

/// What seed_all() did. Printable (to_string, operator<<, summary) and serialisable
/// (to_json).
struct SeedReport {
  uint64_t seed = kDefaultSeed;
  bool deterministic = false;
  bool warn_only = false;
  int intra_op_threads = 0;     ///< at::get_num_threads() after the call
  bool threads_pinned = false;  ///< whether seed_all() set intra_op_threads
  int inter_op_threads = 0;     ///< at::get_num_interop_threads(), recorded only
  bool cuda_available = false;
  int cuda_devices = 0;
  std::string torch_version;  ///< the LibTorch headers the probe was compiled against
  std::vector<SeedSetting> applied;
  std::vector<SeedSkipped> skipped;
  /// Things that were set but may not take effect (e.g. CUDA initialised before the call).
  std::vector<std::string> warnings;

  /// The applied setting called `name`, or nullptr.
  const SeedSetting* find_applied(const std::string& name) const;
  /// The skipped setting called `name`, or nullptr.
  const SeedSkipped* find_skipped(const std::string& name) const;

  /// Several lines: every applied and skipped setting, then the warnings.
  std::string to_string() const;
  /// One line, e.g. "seed_all(1234, deterministic): 12 settings, 4 skipped, 0 warnings,
  /// 1 intra-op thread".
  std::string summary() const;
  /// A JSON object with every field above (meta.json's "seed").
  nlohmann::json to_json_value() const;
  /// to_json_value() as one line of text.
  std::string to_json() const;
};

std::ostream& operator<<(std::ostream& os, const SeedReport& report);

/// Seeds LibTorch's CPU generator and every CUDA generator, std::srand and rng(); sets the
/// environment for deterministic cuBLAS; with `deterministic`, switches LibTorch to
/// deterministic algorithms (see SeedOptions). Throws precprobe::Error for a seed outside
/// [0, kMaxSeed] or a negative thread count; everything else it cannot do is listed in
/// the report, not thrown.
SeedReport seed_all(uint64_t seed = kDefaultSeed, bool deterministic = false);
SeedReport seed_all(const SeedOptions& options);

/// The library's engine for user code (shuffling, sampling). Seeded with kDefaultSeed at
/// first use and re-seeded by every seed_all(). One engine per process, not locked: see the
/// thread note at the top of this header.
std::mt19937_64& rng();

/// A fresh engine for worker `stream`, derived deterministically from the last seed given
/// to seed_all() (kDefaultSeed before) and `stream`. Distinct streams give independent
/// sequences; the same (seed, stream) gives the same sequence in every run and on every
/// thread. Use one per worker thread instead of sharing rng().
std::mt19937_64 make_rng(uint64_t stream);

/// The seed last given to seed_all() (kDefaultSeed before the first call).
uint64_t last_seed();

/// Standard-normal numbers drawn on the CPU with LibTorch's default CPU generator (in
/// float64 when `options` asks for float64, else float32), then moved and cast to the
/// device and dtype of `options`: a CPU run and a GPU run see the same numbers (to the
/// precision of the target dtype). `options.requires_grad()` is honoured on the result.
/// Throws precprobe::Error for a non-floating dtype or a non-strided layout.
at::Tensor randn_on_host(at::IntArrayRef shape, const at::TensorOptions& options = {});

}  // namespace precprobe
