// docs/debugger.md's examples are these programs: each region between "// [doc:NAME]" and
// "// [doc:end]" below is the code block that the doc marks with "<!-- doc:NAME -->", line
// for line (indentation aside; the first test case fails when they drift apart), and each
// is compiled here and run on a tiny model, its dump read back.
#include <torch/torch.h>
#include <unistd.h>

#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "debugger_fixture.h"
#include "precprobe/analysis.h"
#include "precprobe/precprobe.h"
#include "precprobe_catch.h"
#include "support/doc_text.h"

using precprobe::test::TempDir;

namespace {

// ---- what the examples' names stand for ----

struct NetImpl : torch::nn::Module {
  NetImpl() : fc(register_module("fc", torch::nn::Linear(16, 4))) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::log_softmax(fc(x), 1); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Net);

constexpr int64_t kNoise = 8;
struct GeneratorImpl : torch::nn::Module {
  GeneratorImpl() : fc(register_module("fc", torch::nn::Linear(kNoise, 16))) {}
  torch::Tensor forward(const torch::Tensor& z) { return torch::tanh(fc(z)); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Generator);
struct DiscriminatorImpl : torch::nn::Module {
  DiscriminatorImpl() : fc(register_module("fc", torch::nn::Linear(16, 1))) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::sigmoid(fc(x)); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Discriminator);

using Loader = std::vector<torch::data::Example<>>;

Loader make_loader() {
  torch::manual_seed(0);
  Loader loader;
  for (int i = 0; i < 4; ++i)
    loader.push_back({torch::randn({8, 16}), torch::randint(0, 4, {8}, torch::kLong)});
  return loader;
}

// Runs in a scratch directory holding config.json (the examples read it), then goes back.
class InDir {
 public:
  InDir(const TempDir& dir, const std::string& config) {
    char buf[4096];
    old_ = ::getcwd(buf, sizeof buf) ? buf : ".";
    precprobe::test::write_bytes(dir / "config.json", config);
    REQUIRE(::chdir(dir.path().c_str()) == 0);
  }
  ~InDir() { (void)::chdir(old_.c_str()); }

 private:
  std::string old_;
};

int64_t records(const std::string& dump) {
  precprobe::DumpReader r(dump);
  return static_cast<int64_t>(r.ops().size());
}

// ---- the examples ----

void use(Net model, Loader& loader) {
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  // [doc:use]
  auto opts = precprobe::DebuggerOptions::from_json_file("config.json");
  precprobe::PrecisionDebugger dbg(opts);  // $PRECPROBE_CONFIG, when set, wins
  dbg.start(model);                        // parameter names; dropout p=0; seed if configured
  for (auto& batch : loader) {
    opt.zero_grad();
    auto loss = torch::nll_loss(model->forward(batch.data), batch.target);
    loss.backward();
    opt.step();
    dbg.log_scalar("loss", loss.item<double>());
    dbg.step();  // ends the step: flushes a frame
  }
  dbg.stop();  // also done by the destructor
  // [doc:end]
}

void gan(const precprobe::DebuggerOptions& opts, Loader& loader) {
  // [doc:gan]
  Generator generator;
  Discriminator discriminator;
  torch::optim::Adam opt_g(generator->parameters(),
                           torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  torch::optim::Adam opt_d(discriminator->parameters(),
                           torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));

  precprobe::PrecisionDebugger dbg(opts);
  dbg.start({{"G", generator}, {"D", discriminator}}, {&opt_g, &opt_d});
  for (auto& batch : loader) {
    auto real = torch::ones({batch.data.size(0), 1});
    auto fake = generator->forward(torch::randn({batch.data.size(0), kNoise}));
    discriminator->zero_grad();
    auto d_loss = torch::binary_cross_entropy(discriminator->forward(batch.data), real) +
                  torch::binary_cross_entropy(discriminator->forward(fake.detach()), 1 - real);
    d_loss.backward();
    opt_d.step();
    generator->zero_grad();
    auto g_loss = torch::binary_cross_entropy(discriminator->forward(fake), real);
    g_loss.backward();
    opt_g.step();
    dbg.log_scalar("d_loss", d_loss.item<double>());
    dbg.log_scalar("g_loss", g_loss.item<double>());
    dbg.step();
  }
  dbg.stop();
  // [doc:end]
}

void on_anomaly(Net model, Loader& loader) {
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  // [doc:on_anomaly]
  // config.json: {"task": "statistics", "level": "L2", "dump_path": "dump", "record": "on_anomaly"}
  precprobe::seed_all(1234, /*deterministic=*/true);  // a replay must redo the same arithmetic
  precprobe::PrecisionDebugger dbg("config.json");
  dbg.start(model, opt);  // the optimizer's state joins the snapshot
  // several: dbg.start({{"G", generator}, {"D", discriminator}}, {&opt_g, &opt_d});
  for (auto& batch : loader) {  // data loading stays outside the step
    torch::Tensor loss = dbg.run_step([&] {
      opt.zero_grad();
      auto l = torch::nll_loss(model->forward(batch.data), batch.target);
      l.backward();
      opt.step();
      return l;  // run_step returns what the lambda returns
    });
    dbg.log_scalar("train_loss", loss.item<double>());  // the step run_step just ran
  }
  dbg.stop();
  // [doc:end]
}

void gan_run_step(const precprobe::DebuggerOptions& opts, Loader& loader) {
  Generator generator;
  Discriminator discriminator;
  torch::optim::Adam opt_g(generator->parameters(), torch::optim::AdamOptions(2e-4));
  torch::optim::Adam opt_d(discriminator->parameters(), torch::optim::AdamOptions(2e-4));
  precprobe::PrecisionDebugger dbg(opts);
  // [doc:run_step_losses]
  dbg.start({{"G", generator}, {"D", discriminator}}, {&opt_g, &opt_d});
  for (auto& batch : loader) {
    auto [d_loss, g_loss] = dbg.run_step([&] {
      auto real = torch::ones({batch.data.size(0), 1});
      auto fake = generator->forward(torch::randn({batch.data.size(0), kNoise}));
      opt_d.zero_grad();
      auto d = torch::binary_cross_entropy(discriminator->forward(batch.data), real) +
               torch::binary_cross_entropy(discriminator->forward(fake.detach()), 1 - real);
      d.backward();
      opt_d.step();
      opt_g.zero_grad();
      auto g = torch::binary_cross_entropy(discriminator->forward(fake), real);
      g.backward();
      opt_g.step();
      return std::make_tuple(d, g);  // or std::vector<torch::Tensor>{d, g}: no torch::stack
    });
    dbg.log_scalar("d_loss", d_loss.item<double>());
    dbg.log_scalar("g_loss", g_loss.item<double>());
  }
  dbg.stop();
  // [doc:end]
}

void switched_off(Net model, Loader& loader) {
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  // [doc:off]
  // config.json: {"enable": false}; or run the program with PRECPROBE_DISABLE=1
  precprobe::PrecisionDebugger dbg("config.json");
  dbg.start(model, opt);  // nothing: no directory, no handler, no callback
  for (auto& batch : loader) {
    auto loss = dbg.run_step([&] {  // only calls the lambda
      opt.zero_grad();
      auto l = torch::nll_loss(model->forward(batch.data), batch.target);
      l.backward();
      opt.step();
      return l;
    });
    dbg.log_scalar("train_loss", loss.item<double>());  // returns at once
  }
  // [doc:end]
}

// ---- the doc and this file ----

using precprobe::test::read_text;
using precprobe::test::trim;

// NAME -> its lines (trimmed, blank lines kept), from the test's "// [doc:NAME]" regions.
std::map<std::string, std::vector<std::string>> source_regions(const std::string& text) {
  std::map<std::string, std::vector<std::string>> out;
  std::istringstream in(text);
  std::string line, name;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (t == "// [doc:end]") {
      name.clear();
    } else if (t.rfind("// [doc:", 0) == 0 && t.back() == ']') {
      name = t.substr(8, t.size() - 9);
      out[name];
    } else if (!name.empty()) {
      out[name].push_back(t);
    }
  }
  return out;
}

// NAME -> its lines, from the doc's code blocks preceded by "<!-- doc:NAME -->".
std::map<std::string, std::vector<std::string>> doc_blocks(const std::string& text) {
  std::map<std::string, std::vector<std::string>> out;
  std::istringstream in(text);
  std::string line, name;
  bool inside = false;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (inside) {
      if (t == "```") {
        inside = false;
        name.clear();
      } else {
        out[name].push_back(t);
      }
    } else if (t.rfind("<!-- doc:", 0) == 0) {
      name = t.substr(9, t.find(' ', 9) - 9);
    } else if (!name.empty() && t == "```cpp") {
      inside = true;
      out[name];
    }
  }
  return out;
}

}  // namespace

TEST_CASE("docs/debugger.md's examples are the programs of this test", "[doc]") {
  const auto src =
      source_regions(read_text(PRECPROBE_SOURCE_DIR "/tests/probe/test_doc_examples.cpp"));
  const auto doc = doc_blocks(read_text(PRECPROBE_SOURCE_DIR "/docs/debugger.md"));
  REQUIRE(src.size() == 5);
  for (const auto& [name, lines] : src) {
    INFO("example " << name);
    REQUIRE(doc.count(name));
    CHECK(doc.at(name) == lines);
  }
  CHECK(doc.size() == src.size());  // every marked block of the doc is tested here
}

TEST_CASE("the doc's examples run", "[doc]") {
  Loader loader = make_loader();
  SECTION("use") {
    TempDir dir("doc_use");
    InDir in(dir, R"({"dump_path": "dump"})");
    use(Net(), loader);
    CHECK(records(dir / "dump") > 0);
    precprobe::DumpReader r(dir / "dump");
    CHECK(precprobe::summarize_dump(r).losses.at(0).last_step == 3);
  }
  SECTION("gan") {
    TempDir dir("doc_gan");
    auto opts = precprobe::test::options_in(dir);
    gan(opts, loader);
    precprobe::DumpReader r(dir.path().string());
    const auto s = precprobe::summarize_dump(r);
    REQUIRE(s.losses.size() == 2);
    CHECK(s.losses[0].points == 4);
  }
  SECTION("on_anomaly") {
    TempDir dir("doc_on_anomaly");
    InDir in(dir, R"({"task": "statistics", "level": "L2", "dump_path": "dump",)"
                  R"( "record": "on_anomaly"})");
    on_anomaly(Net(), loader);
    precprobe::DumpReader r(dir / "dump");
    const auto s = precprobe::summarize_dump(r);
    REQUIRE(s.losses.size() == 2);  // the watch's "loss" and the program's "train_loss"
    for (const auto& l : s.losses) CHECK((l.first_step == 0 && l.last_step == 3));
    CHECK(s.run.stopped());
  }
  SECTION("run_step_losses") {
    TempDir dir("doc_losses");
    auto opts = precprobe::test::options_in(dir);
    opts.record = precprobe::RecordMode::kOnAnomaly;
    gan_run_step(opts, loader);
    precprobe::DumpReader r(dir.path().string());
    std::map<std::string, int> names;
    for (const auto& s : r.scalars()) names[s.name]++;
    CHECK(names["loss/0"] == 4);
    CHECK(names["loss/1"] == 4);
    CHECK(names["d_loss"] == 4);
  }
  SECTION("off") {
    TempDir dir("doc_off");
    InDir in(dir, R"({"enable": false})");
    switched_off(Net(), loader);
    CHECK_FALSE(std::filesystem::exists(dir / "precprobe_dump"));
  }
}
