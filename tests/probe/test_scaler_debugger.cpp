// GradScaler and GradMonitor inside a running PrecisionDebugger: the scaler names parameters
// through the debugger and writes to its dump; the debugger's step() runs the monitor.
#include <torch/torch.h>

#include <limits>

#include "core/temp_dir.h"
#include "precprobe/debugger.h"
#include "precprobe/grad_scaler.h"
#include "precprobe/reader.h"
#include "precprobe_catch.h"

TEST_CASE("a started debugger receives scaler and gradient records, named", "[scaler]") {
  precprobe::test::TempDir dir("scaler_dbg");
  precprobe::DebuggerOptions o;
  o.dump_path = dir.path().string();
  o.grad_monitor = true;
  o.keep_dropout = true;
  o.async_stats = false;
  torch::manual_seed(5);
  torch::nn::Sequential model(torch::nn::Linear(3, 5), torch::nn::Tanh(), torch::nn::Linear(5, 2));
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  auto x = torch::randn({8, 3});
  auto y = torch::randint(0, 2, {8});
  const int steps = 4, planted = 2;
  {
    precprobe::PrecisionDebugger dbg(o);
    dbg.start(model.ptr());
    precprobe::GradScaler scaler;  // no set_parameter_names: the debugger names them
    for (int step = 0; step < steps; ++step) {
      opt.zero_grad();
      scaler.scale(torch::nn::functional::cross_entropy(model->forward(x), y)).backward();
      if (step == planted) {
        model->named_parameters()["2.weight"].mutable_grad()[0][1] =
            std::numeric_limits<float>::quiet_NaN();
      }
      CHECK(scaler.step(opt) == (step != planted));
      scaler.update();
      dbg.step();
    }
    dbg.stop();
  }
  precprobe::DumpReader reader(dir.path().string());
  auto scaler = reader.scaler();
  REQUIRE(scaler.size() == steps);  // one optimizer, one group
  CHECK(scaler[planted].found_inf);
  CHECK(scaler[planted].bad_params == std::vector<std::string>{"2.weight"});
  CHECK(scaler[planted].skipped);
  CHECK_FALSE(scaler[planted + 1].found_inf);

  auto grads = reader.grads();
  REQUIRE(grads.size() == 4 * steps);  // 4 parameters a step
  CHECK(grads[0].param == "0.weight");
  CHECK(grads[3].param == "2.bias");
  for (const auto& g : grads) {
    INFO("step " << g.step << " " << g.param);
    const bool nan_here = g.step == planted && g.param == "2.weight";
    CHECK(g.grad_nan == (nan_here ? 1 : 0));
    // The skipped step leaves every weight as it was.
    const bool unchanged = g.step == planted;
    CHECK((std::find(g.watch.begin(), g.watch.end(), "weight_not_changed") != g.watch.end()) ==
          unchanged);
  }
}
