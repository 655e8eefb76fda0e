// seed_all(), rng(), randn_on_host(). The report's rendering lives in seed_report.cpp.
#include "precprobe/seed.h"

#include <ATen/Context.h>
#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "precprobe/error.h"
#include "support/torch_compat.h"

namespace precprobe {
namespace detail {
std::string torch_version_string();
}  // namespace detail

namespace {

std::atomic<uint64_t> g_last_seed{kDefaultSeed};

std::mutex& rng_mutex() {
  static std::mutex m;
  return m;
}

std::string bool_str(bool b) { return b ? "true" : "false"; }

void check_options(const SeedOptions& o) {
  if (o.seed > kMaxSeed) {
    std::string hint =
        o.seed > (uint64_t{1} << 63) ? " (a negative seed converts to a huge uint64_t)" : "";
    throw Error(fmt::format(
        "seed_all: seed {} is outside the allowed range [0, {}] (2^32-1: std::srand takes an "
        "unsigned int and msprobe checks the same range){}",
        o.seed, kMaxSeed, hint));
  }
  if (o.num_threads < 0) {
    throw Error(fmt::format(
        "seed_all: num_threads {} is negative; allowed: 0 (leave the intra-op thread count "
        "as it is) or a positive count to pin",
        o.num_threads));
  }
}

// Whether some CUDA device already has a primary context: a proxy for "cuBLAS handles
// may exist already". The hooks answer false (never throw) on CPU-only builds.
int first_initialised_cuda_device(int devices) {
  for (int i = 0; i < devices; ++i) {
    try {
      if (at::detail::getCUDAHooks().hasPrimaryContext(i)) {
        return i;
      }
    } catch (const std::exception&) {
      return -1;
    }
  }
  return -1;
}

// CUBLAS_WORKSPACE_CONFIG must be set before the first cuBLAS handle is created: cuBLAS
// (and LibTorch's workspace allocator) read it then. A user's deterministic choice is kept.
void set_cublas_env(SeedReport& r) {
  const char* name = "CUBLAS_WORKSPACE_CONFIG";
  const char* old = std::getenv(name);
  std::string key = std::string("env ") + name;
  if (old != nullptr && (std::string(old) == ":4096:8" || std::string(old) == ":16:8")) {
    r.applied.push_back({key, std::string(old) + " (already set; kept)"});
  } else {
    ::setenv(name, ":4096:8", 1);
    r.applied.push_back(
        {key, old != nullptr ? ":4096:8 (replaced " + std::string(old) + ")" : ":4096:8"});
  }
  if (!r.cuda_available) {
    return;  // No cuBLAS here; the variable still reaches child processes.
  }
  int dev = first_initialised_cuda_device(r.cuda_devices);
  if (dev >= 0) {
    r.warnings.push_back(fmt::format(
        "CUDA was already initialised (device {} has a context): cuBLAS handles created "
        "before seed_all keep their workspace; call seed_all before the first CUDA call",
        dev));
  } else {
    r.warnings.push_back(
        "CUBLAS_WORKSPACE_CONFIG takes effect only if no cuBLAS handle exists yet; no CUDA "
        "context was found, but call seed_all before the first CUDA call to be sure");
  }
}

void set_distributed_env(const SeedOptions& o, SeedReport& r) {
  if (o.deterministic) {
    // Ascend's HCCL: deterministic reductions (what msprobe sets). A user's "strict"
    // (order-preserving as well) is stronger than "true" and is kept.
    const char* old = std::getenv("HCCL_DETERMINISTIC");
    if (old != nullptr && (std::string(old) == "strict" || std::string(old) == "true")) {
      r.applied.push_back({"env HCCL_DETERMINISTIC", std::string(old) + " (already set; kept)"});
    } else {
      ::setenv("HCCL_DETERMINISTIC", "true", 1);
      r.applied.push_back({"env HCCL_DETERMINISTIC", "true"});
    }
  } else {
    r.skipped.push_back({"env HCCL_DETERMINISTIC", "deterministic=false: left as it is"});
  }
  r.skipped.push_back(
      {"env NCCL_*",
       "not set: NCCL has no determinism switch. Its algorithm and protocol depend on "
       "message size and topology, and NVLS reductions can vary between calls; pin "
       "NCCL_ALGO=Ring and NCCL_NVLS_ENABLE=0 yourself if needed (slower); see "
       "docs/reproducibility.md"});
}

void seed_generators(const SeedOptions& o, SeedReport& r) {
  // Seeds CPU, then every CUDA generator (at::manual_seed skips CUDA without devices).
  // The CPU generator is seeded first, so a CUDA failure leaves it seeded.
  std::string cuda_failure;
  try {
    at::manual_seed(o.seed);
  } catch (const c10::Error& e) {
    cuda_failure = e.what_without_backtrace();
  }
  r.applied.push_back({"torch.manual_seed (CPU generator)", std::to_string(o.seed)});
  if (!cuda_failure.empty()) {
    r.skipped.push_back({"torch.cuda.manual_seed_all", "failed: " + cuda_failure});
  } else if (r.cuda_available && r.cuda_devices > 0) {
    r.applied.push_back(
        {"torch.cuda.manual_seed_all", fmt::format("{} on {} device(s)", o.seed, r.cuda_devices)});
  } else {
    r.skipped.push_back({"torch.cuda.manual_seed_all", "CUDA is not available"});
  }
  std::srand(static_cast<unsigned int>(o.seed));
  r.applied.push_back({"std::srand", std::to_string(o.seed)});
  {
    std::lock_guard<std::mutex> lock(rng_mutex());
    rng().seed(o.seed);
    g_last_seed.store(o.seed);
  }
  r.applied.push_back({"precprobe::rng", std::to_string(o.seed)});
  r.skipped.push_back({"env PYTHONHASHSEED", "not applicable: no Python interpreter"});
}

void set_deterministic(const SeedOptions& o, SeedReport& r) {
  auto& ctx = at::globalContext();
  if (!o.deterministic) {
    r.skipped.push_back(
        {"torch.use_deterministic_algorithms",
         "deterministic=false: left as it is (" + bool_str(ctx.deterministicAlgorithms()) + ")"});
    return;
  }
  ctx.setDeterministicAlgorithms(true, o.warn_only);
  r.applied.push_back(
      {"torch.use_deterministic_algorithms", "true (warn_only=" + bool_str(o.warn_only) + ")"});
  // Context flags; they matter once a CUDA kernel runs, and cost nothing on CPU.
  ctx.setDeterministicCuDNN(true);
  r.applied.push_back({"cudnn.deterministic", "true"});
  ctx.setBenchmarkCuDNN(false);
  r.applied.push_back({"cudnn.benchmark", "false"});
  ctx.setAllowTF32CuBLAS(false);
  r.applied.push_back({"cuda.matmul.allow_tf32", "false"});
  ctx.setAllowTF32CuDNN(false);
  r.applied.push_back({"cudnn.allow_tf32", "false"});
}

void set_threads(const SeedOptions& o, SeedReport& r) {
  if (o.num_threads > 0) {
    at::set_num_threads(o.num_threads);
    r.threads_pinned = true;
  }
  r.intra_op_threads = at::get_num_threads();
  r.inter_op_threads = at::get_num_interop_threads();
  if (r.threads_pinned) {
    r.applied.push_back({"intra_op_threads", std::to_string(r.intra_op_threads)});
  } else {
    r.skipped.push_back(
        {"intra_op_threads", fmt::format("not pinned (num_threads=0); recorded: {}; CPU "
                                         "reductions depend on it",
                                         r.intra_op_threads)});
  }
}

}  // namespace

SeedReport seed_all(uint64_t seed, bool deterministic) {
  SeedOptions o;
  o.seed = seed;
  o.deterministic = deterministic;
  return seed_all(o);
}

SeedReport seed_all(const SeedOptions& options) try {
  check_options(options);
  SeedReport r;
  r.seed = options.seed;
  r.deterministic = options.deterministic;
  r.warn_only = options.deterministic && options.warn_only;
  r.torch_version = detail::torch_version_string();
  r.cuda_available = at::hasCUDA();
  r.cuda_devices = r.cuda_available ? static_cast<int>(at::getNumGPUs()) : 0;
  // The environment first: seeding CUDA generators initialises CUDA.
  if (options.set_environment) {
    set_cublas_env(r);
    set_distributed_env(options, r);
  } else {
    r.skipped.push_back({"environment", "set_environment=false"});
  }
  seed_generators(options, r);
  set_deterministic(options, r);
  set_threads(options, r);
  return r;
} catch (...) {
  detail::rethrow_c10_as_error("precprobe: seed_all failed inside LibTorch");
}

std::mt19937_64& rng() {
  static std::mt19937_64 engine(kDefaultSeed);
  return engine;
}

std::mt19937_64 make_rng(uint64_t stream) {
  const uint64_t seed = g_last_seed.load();
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32),
                    0x70726563u /* "prec": keeps stream 0 apart from rng() */};
  return std::mt19937_64(seq);
}

uint64_t last_seed() { return g_last_seed.load(); }

at::Tensor randn_on_host(at::IntArrayRef shape, const at::TensorOptions& options) {
  const auto dtype = c10::typeMetaToScalarType(options.dtype());
  if (!at::isFloatingType(dtype)) {
    throw Error(
        fmt::format("randn_on_host: dtype {} is not a floating type; allowed: Float, Double, Half, "
                    "BFloat16",
                    c10::toString(dtype)));
  }
  if (options.layout() != at::kStrided) {
    throw Error("randn_on_host: only the strided layout is supported");
  }
  const auto draw = dtype == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor host = at::randn(shape, at::TensorOptions().dtype(draw).device(at::kCPU));
  at::Tensor out = host.to(options.device(), dtype);
  if (options.requires_grad()) {
    out.requires_grad_(true);
  }
  return out;
}

}  // namespace precprobe
