// seed_all(), its report, rng()/make_rng(), randn_on_host(); and whole training runs in
// separate processes (tests/probe/repro_train.cpp) compared bit for bit.
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <vector>

#include "precprobe/error.h"
#include "precprobe/seed.h"
#include "precprobe_catch.h"
#include "probe/repro_run.h"

using precprobe_test::run_helper;
using precprobe_test::TrainRun;

namespace {

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) {
    return false;
  }
  auto ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// The global context outlives a test case when the binary runs all cases in one process.
struct ContextRestorer {
  ~ContextRestorer() { at::globalContext().setDeterministicAlgorithms(false, false); }
};

std::string message_of(uint64_t seed) {
  try {
    precprobe::seed_all(seed);
  } catch (const precprobe::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE(
    "two processes seeded with seed_all(1234, true) under a DropoutGuard train "
    "bitwise identically",
    "[seed][process]") {
  TrainRun a = run_helper("--seed 1234 --deterministic --guard --steps 20");
  TrainRun b = run_helper("--seed 1234 --deterministic --guard --steps 20");
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  REQUIRE(a.losses.size() == 20);
  REQUIRE(a.params.size() == 4);  // fc1/fc2 weight and bias
  CHECK(a.losses == b.losses);
  CHECK(a.params == b.params);
  REQUIRE(a.module_hash.size() == 16);
  CHECK(a.module_hash == b.module_hash);
  // The run trains: the loss moves.
  CHECK(a.losses.front() != a.losses.back());
}

TEST_CASE("a different seed, or dropout left on, changes the run", "[seed][process]") {
  TrainRun base = run_helper("--seed 1234 --deterministic --guard --steps 20");
  TrainRun other_seed = run_helper("--seed 1235 --deterministic --guard --steps 20");
  TrainRun with_dropout = run_helper("--seed 1234 --deterministic --steps 20");
  REQUIRE(base.losses.size() == 20);
  REQUIRE(other_seed.losses.size() == 20);
  REQUIRE(with_dropout.losses.size() == 20);
  CHECK(base.losses.front() != other_seed.losses.front());
  CHECK(base.params != other_seed.params);
  CHECK(base.module_hash != other_seed.module_hash);
  // Same seed, same initial parameters and batch order: only the dropout masks differ.
  CHECK(base.losses.front() != with_dropout.losses.front());
  CHECK(base.params != with_dropout.params);
  // Seeded dropout is itself reproducible across processes.
  TrainRun with_dropout2 = run_helper("--seed 1234 --deterministic --steps 20");
  CHECK(with_dropout.losses == with_dropout2.losses);
  CHECK(with_dropout.params == with_dropout2.params);
}

TEST_CASE("without seed_all two processes train differently", "[seed][process]") {
  // LibTorch seeds its default CPU generator from c10::detail::getNonDeterministicRandom()
  // at first use, so an unseeded program differs from run to run.
  TrainRun a = run_helper("--no-seed --guard --steps 5");
  TrainRun b = run_helper("--no-seed --guard --steps 5");
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  REQUIRE(a.losses.size() == 5);
  REQUIRE(b.losses.size() == 5);
  CHECK_FALSE(a.initial_seed.empty());
  CHECK(a.initial_seed != b.initial_seed);
  CHECK(a.losses.front() != b.losses.front());
  CHECK(a.params != b.params);
  CHECK(a.module_hash != b.module_hash);
}

TEST_CASE("within one process, draws repeat only after re-seeding", "[seed]") {
  precprobe::seed_all(7);
  auto a = at::randn({256});
  auto b = at::randn({256});  // generator moved on: without a new seed, different numbers
  CHECK_FALSE(bitwise_equal(a, b));
  precprobe::seed_all(7);
  CHECK(bitwise_equal(at::randn({256}), a));
  CHECK(at::detail::getDefaultCPUGenerator().current_seed() == 7);

  // std::srand and rng() against independent references.
  precprobe::seed_all(7);
  std::vector<int> rand_seq{std::rand(), std::rand(), std::rand()};
  std::mt19937_64 ref(7);
  CHECK(precprobe::rng()() == ref());
  CHECK(precprobe::rng()() == ref());
  std::srand(7);
  std::vector<int> rand_ref{std::rand(), std::rand(), std::rand()};
  CHECK(rand_seq == rand_ref);
  CHECK(precprobe::last_seed() == 7);
}

TEST_CASE("make_rng gives per-stream engines derived from the seed", "[seed]") {
  precprobe::seed_all(99);
  auto s0 = precprobe::make_rng(0);
  auto s0_again = precprobe::make_rng(0);
  auto s1 = precprobe::make_rng(1);
  const auto first = s0();
  CHECK(first == s0_again());
  CHECK(first != s1());
  CHECK(first != std::mt19937_64(99)());  // not the same stream as rng()
  precprobe::seed_all(100);
  CHECK(precprobe::make_rng(0)() != first);
  precprobe::seed_all(99);
  CHECK(precprobe::make_rng(0)() == first);
}

TEST_CASE("a seed outside [0, 2^32-1] throws and names the range", "[seed][error]") {
  CHECK_THROWS_AS(precprobe::seed_all(uint64_t{1} << 32), precprobe::Error);
  const std::string msg = message_of(uint64_t{1} << 32);
  CHECK(msg.find("4294967296") != std::string::npos);
  CHECK(msg.find("[0, 4294967295]") != std::string::npos);
  // An int -1 converts to 2^64-1; the message says why such a number appears.
  CHECK(message_of(static_cast<uint64_t>(-1)).find("negative") != std::string::npos);
  CHECK_NOTHROW(precprobe::seed_all(precprobe::kMaxSeed));
  CHECK(at::detail::getDefaultCPUGenerator().current_seed() == 4294967295ull);
  CHECK_NOTHROW(precprobe::seed_all(0));

  precprobe::SeedOptions o;
  o.num_threads = -1;
  CHECK_THROWS_WITH(precprobe::seed_all(o), Catch::Matchers::ContainsSubstring("num_threads -1"));
}

TEST_CASE("the report lists every setting made and skipped", "[seed][report]") {
  ContextRestorer restore;
  const int threads_before = at::get_num_threads();
  ::unsetenv("CUBLAS_WORKSPACE_CONFIG");
  ::unsetenv("HCCL_DETERMINISTIC");
  precprobe::SeedOptions o;
  o.seed = 42;
  o.deterministic = true;
  o.warn_only = true;
  o.num_threads = 1;
  const auto r = precprobe::seed_all(o);

  auto applied = [&](const char* name) {
    const auto* s = r.find_applied(name);
    return s ? s->value : std::string("<missing>");
  };
  CHECK(applied("torch.manual_seed (CPU generator)") == "42");
  CHECK(applied("std::srand") == "42");
  CHECK(applied("precprobe::rng") == "42");
  CHECK(applied("env CUBLAS_WORKSPACE_CONFIG") == ":4096:8");
  CHECK(std::string(std::getenv("CUBLAS_WORKSPACE_CONFIG")) == ":4096:8");
  CHECK(applied("env HCCL_DETERMINISTIC") == "true");
  CHECK(std::string(std::getenv("HCCL_DETERMINISTIC")) == "true");
  CHECK(applied("torch.use_deterministic_algorithms") == "true (warn_only=true)");
  CHECK(applied("cudnn.deterministic") == "true");
  CHECK(applied("cudnn.benchmark") == "false");
  CHECK(applied("cuda.matmul.allow_tf32") == "false");
  CHECK(applied("cudnn.allow_tf32") == "false");
  CHECK(applied("intra_op_threads") == "1");

  // ... and each claim is true of the process.
  auto& ctx = at::globalContext();
  CHECK(at::detail::getDefaultCPUGenerator().current_seed() == 42);
  CHECK(ctx.deterministicAlgorithms());
  CHECK(ctx.deterministicAlgorithmsWarnOnly());
  CHECK(ctx.deterministicCuDNN());
  CHECK_FALSE(ctx.benchmarkCuDNN());
  CHECK_FALSE(ctx.allowTF32CuBLAS());
  CHECK_FALSE(ctx.allowTF32CuDNN());
  CHECK(at::get_num_threads() == 1);
  CHECK(r.intra_op_threads == 1);
  CHECK(r.threads_pinned);

  CHECK(r.find_skipped("env PYTHONHASHSEED") != nullptr);
  CHECK(r.find_skipped("env NCCL_*") != nullptr);
  if (torch::cuda::is_available()) {  // not run on this CPU-only machine
    CHECK(applied("torch.cuda.manual_seed_all").find("42 on") == 0);
    CHECK(at::globalContext().defaultGenerator(at::Device(at::kCUDA, 0)).current_seed() == 42);
  } else {
    CHECK(r.find_skipped("torch.cuda.manual_seed_all") != nullptr);
    CHECK_FALSE(r.cuda_available);
  }

  const std::string text = r.to_string();
  for (const auto& s : r.applied) {
    CHECK(text.find(s.name + " = " + s.value) != std::string::npos);
  }
  for (const auto& s : r.skipped) {
    CHECK(text.find(s.name + ": " + s.reason) != std::string::npos);
  }
  std::ostringstream os;
  os << r;
  CHECK(os.str() == text);
  const std::string one = r.summary();
  CHECK(one.find('\n') == std::string::npos);
  CHECK(one.find("seed_all(42, deterministic warn_only)") == 0);

  const auto j = nlohmann::json::parse(r.to_json());
  CHECK(j.at("seed").get<uint64_t>() == 42);
  CHECK(j.at("deterministic").get<bool>());
  CHECK(j.at("intra_op_threads").get<int>() == 1);
  REQUIRE(j.at("applied").size() == r.applied.size());
  CHECK(j.at("applied")[0].at("name").get<std::string>() == r.applied[0].name);
  CHECK(j.at("skipped").size() == r.skipped.size());

  at::set_num_threads(threads_before);
}

TEST_CASE("seed_all keeps a deterministic CUBLAS_WORKSPACE_CONFIG the user chose",
          "[seed][report]") {
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8", 1);
  auto r = precprobe::seed_all(1);
  CHECK(r.find_applied("env CUBLAS_WORKSPACE_CONFIG")->value == ":16:8 (already set; kept)");
  CHECK(std::string(std::getenv("CUBLAS_WORKSPACE_CONFIG")) == ":16:8");
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":1:1", 1);  // not deterministic: replaced
  r = precprobe::seed_all(1);
  CHECK(r.find_applied("env CUBLAS_WORKSPACE_CONFIG")->value == ":4096:8 (replaced :1:1)");
  ::setenv("HCCL_DETERMINISTIC", "strict", 1);
  r = precprobe::seed_all(1, /*deterministic=*/true);
  CHECK(r.find_applied("env HCCL_DETERMINISTIC")->value == "strict (already set; kept)");
  CHECK(std::string(std::getenv("HCCL_DETERMINISTIC")) == "strict");
  at::globalContext().setDeterministicAlgorithms(false, false);
  r = precprobe::seed_all(1);
  // Without `deterministic` nothing of the context is touched, and the report says so.
  CHECK(r.find_applied("torch.use_deterministic_algorithms") == nullptr);
  CHECK(r.find_skipped("torch.use_deterministic_algorithms") != nullptr);
  CHECK(r.find_skipped("intra_op_threads") != nullptr);
  CHECK_FALSE(r.threads_pinned);
  CHECK(r.intra_op_threads == at::get_num_threads());
}

TEST_CASE("randn_on_host draws float32/float64 on the CPU generator, then casts", "[seed][randn]") {
  precprobe::seed_all(5);
  auto a = precprobe::randn_on_host({3, 4}, at::kFloat);
  precprobe::seed_all(5);
  auto ref = at::randn({3, 4}, at::kFloat);
  CHECK(bitwise_equal(a, ref));

  precprobe::seed_all(5);
  auto d = precprobe::randn_on_host({3, 4}, at::kDouble);
  precprobe::seed_all(5);
  CHECK(bitwise_equal(d, at::randn({3, 4}, at::kDouble)));

  // Half and bfloat16 are the float32 draw rounded, not a separate half-precision draw.
  precprobe::seed_all(5);
  auto h = precprobe::randn_on_host({3, 4}, at::TensorOptions().dtype(at::kHalf));
  CHECK(h.scalar_type() == at::kHalf);
  CHECK(bitwise_equal(h, ref.to(at::kHalf)));
  precprobe::seed_all(5);
  auto bf = precprobe::randn_on_host({3, 4}, at::kBFloat16);
  CHECK(bitwise_equal(bf, ref.to(at::kBFloat16)));

  precprobe::seed_all(5);
  auto g = precprobe::randn_on_host({3, 4}, at::TensorOptions().requires_grad(true));
  CHECK(g.requires_grad());
  CHECK(g.is_leaf());
  CHECK(bitwise_equal(g.detach(), ref));

  CHECK_THROWS_WITH(precprobe::randn_on_host({2}, at::kLong),
                    Catch::Matchers::ContainsSubstring("Long") &&
                        Catch::Matchers::ContainsSubstring("not a floating type"));

  if (torch::cuda::is_available()) {  // not run on this CPU-only machine
    precprobe::seed_all(5);
    auto c = precprobe::randn_on_host({3, 4}, at::TensorOptions().device(at::kCUDA));
    CHECK(c.is_cuda());
    CHECK(bitwise_equal(c.cpu(), ref));
  }
}
