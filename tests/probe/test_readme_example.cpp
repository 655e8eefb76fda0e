// README.md's usage example is the program below: the region between "// [readme:usage]"
// and "// [readme:end]" is the README's first ```cpp block, line for line (indentation
// aside; the first test case fails when they drift apart), and the second test case runs it
// in a scratch directory and reads its dump back.
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/temp_dir.h"
#include "precprobe/analysis.h"
#include "precprobe/precprobe.h"
#include "precprobe_catch.h"
#include "support/doc_text.h"

// The README's program, in a namespace of its own so that its main() is not the test's.
// Its two headers are already included above: the #include lines add nothing here.
namespace readme {
// The README's layout, line for line:
// clang-format off
// [readme:usage]
#include <precprobe/precprobe.h>
#include <torch/torch.h>

int main() {
  precprobe::seed_all(1234, /*deterministic=*/true);  // every RNG; deterministic algorithms
  torch::nn::Sequential model(torch::nn::Linear(784, 64), torch::nn::ReLU(),
                              torch::nn::Dropout(0.2), torch::nn::Linear(64, 10));
  torch::optim::Adam opt(model->parameters(), 1e-3);
  precprobe::PrecisionDebugger dbg;  // L1 statistics of every op, into ./precprobe_dump
  dbg.start(model);                  // names the parameters, forces dropout to p = 0
  for (int step = 0; step < 100; ++step) {
    auto x = torch::randn({64, 784}), y = torch::randint(10, {64}, torch::kLong);
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    opt.zero_grad(); loss.backward(); opt.step();
    dbg.step();                      // the step's records are on disk
  }
  return 0;                          // the destructor stops the debugger and flushes
}
// [readme:end]
// clang-format on
}  // namespace readme

namespace {

// Runs in a scratch directory (the program writes ./precprobe_dump), then goes back.
class InDir {
 public:
  explicit InDir(const std::filesystem::path& dir) {
    char buf[4096];
    old_ = ::getcwd(buf, sizeof buf) ? buf : ".";
    REQUIRE(::chdir(dir.c_str()) == 0);
  }
  ~InDir() { (void)::chdir(old_.c_str()); }
  InDir(const InDir&) = delete;
  InDir& operator=(const InDir&) = delete;

 private:
  std::string old_;
};

}  // namespace

TEST_CASE("README.md's usage example is the program of this test", "[doc]") {
  using precprobe::test::lines_between;
  using precprobe::test::read_text;
  // This file's region, and the README's first ```cpp block.
  const auto src =
      lines_between(read_text(PRECPROBE_SOURCE_DIR "/tests/probe/test_readme_example.cpp"),
                    "// [readme:usage]", "// [readme:end]");
  const auto doc = lines_between(read_text(PRECPROBE_SOURCE_DIR "/README.md"), "```cpp", "```");
  REQUIRE(src.size() > 10);
  CHECK(doc == src);
}

TEST_CASE("README.md's usage example trains and records every step", "[doc]") {
  precprobe::test::TempDir dir("readme_usage");
  {
    InDir in(dir.path());
    CHECK(readme::main() == 0);
  }
  precprobe::DumpReader reader(dir / "precprobe_dump");
  const auto s = precprobe::summarize_dump(reader);
  CHECK(s.op_records > 0);
  REQUIRE(s.step_min);
  REQUIRE(s.step_max);
  CHECK(*s.step_min == 0);
  CHECK(*s.step_max == 99);
  CHECK(s.nonfinite_op_records == 0);
}
