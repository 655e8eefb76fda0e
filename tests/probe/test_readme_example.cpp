// README.md's usage example is the program below: the region between "// [readme:usage]"
// and "// [readme:end]" is the README's first ```cpp block, line for line (indentation
// aside; the first test case fails when they drift apart), and the second test case runs it
// in a scratch directory and reads its dump back.
#include <torch/torch.h>
#include <unistd.h>

#include <cctype>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/temp_dir.h"
#include "precprobe/analysis.h"
#include "precprobe/precprobe.h"
#include "precprobe_catch.h"

// The README's program, in a namespace of its own so that its main() is not the test's.
// Its two headers are already included above: the #include lines add nothing here.
namespace readme {
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
}  // namespace readme

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string trim(const std::string& line) {
  size_t a = 0, b = line.size();
  while (a < b && std::isspace(static_cast<unsigned char>(line[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(line[b - 1]))) --b;
  return line.substr(a, b - a);
}

// The lines (trimmed, blank lines kept) between the two markers of this file.
std::vector<std::string> source_region(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (t == "// [readme:usage]") {
      inside = true;
    } else if (t == "// [readme:end]") {
      break;
    } else if (inside) {
      out.push_back(t);
    }
  }
  return out;
}

// The lines of the README's first ```cpp block.
std::vector<std::string> readme_block(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (!inside && t == "```cpp") {
      inside = true;
    } else if (inside && t == "```") {
      break;
    } else if (inside) {
      out.push_back(t);
    }
  }
  return out;
}

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
  const auto src =
      source_region(read_text(PRECPROBE_SOURCE_DIR "/tests/probe/test_readme_example.cpp"));
  const auto doc = readme_block(read_text(PRECPROBE_SOURCE_DIR "/README.md"));
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
