// The C++ side of the Python tests (tests/python/): the LibTorch twin of the small model of
// tests/python/twin.py, driven from pytest.
//
//   precprobe_pytest_tool pattern OUT        the model with every tensor set to a known
//                                            pattern (tensor i: (arange(numel) % 97 - 48) *
//                                            (i + 1) / 64 in its dtype), saved with save_state
//   precprobe_pytest_tool roundtrip IN OUT   load_state(IN) into the model, save_state(OUT)
//   precprobe_pytest_tool train STATE INPUTS DUMP STEPS
//                                            load_state(STATE); x, y from INPUTS (read_state);
//                                            STEPS SGD steps (lr 0.1) recorded at L1
//   precprobe_pytest_tool load IN            load_state(IN); exit 3 with the error on stderr
//
// Single-threaded; exits 0 on success, 2 on bad usage, 3 on a precprobe::Error.
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>

namespace {

// Python: nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
//                       nn.Flatten(), nn.Linear(4 * 5 * 5, 3))
torch::nn::Sequential make_model() {
  return torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)),
                               torch::nn::BatchNorm2d(4), torch::nn::ReLU(), torch::nn::Flatten(),
                               torch::nn::Linear(4 * 5 * 5, 3));
}

void fill_pattern(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  int64_t i = 0;
  for (auto& [name, t] : precprobe::state_tensors(m)) {
    auto v = (torch::arange(t.numel(), torch::kInt64).remainder(97) - 48) * (i + 1);
    if (t.is_floating_point()) {
      t.copy_((v.to(torch::kFloat64) / 64.0).reshape(t.sizes()));
    } else {
      t.copy_(v.reshape(t.sizes()));
    }
    ++i;
  }
}

int train(const std::string& state, const std::string& inputs, const std::string& dump,
          int64_t steps) {
  precprobe::seed_all(1234, true);
  auto model = make_model();
  precprobe::load_state(*model, state);
  at::Tensor x, y;
  for (auto& [name, t] : precprobe::read_state(inputs)) {
    if (name == "x") x = t;
    if (name == "y") y = t;
  }
  if (!x.defined() || !y.defined()) throw precprobe::Error(inputs + " holds no 'x' and 'y'");
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  precprobe::DebuggerOptions o;
  o.dump_path = dump;
  o.overwrite = true;
  o.level = precprobe::Level::kL1;
  precprobe::PrecisionDebugger dbg(o);
  dbg.start(model);
  for (int64_t s = 0; s < steps; ++s) {
    opt.zero_grad();
    auto loss = torch::cross_entropy_loss(model->forward(x), y);
    loss.backward();
    opt.step();
    dbg.log_scalar("loss", loss.item<double>());
    dbg.step();
  }
  dbg.stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "pattern" && argc == 3) {
    auto m = make_model();
    fill_pattern(*m);
    precprobe::save_state(*m, argv[2], {{"writer", "precprobe_pytest_tool"}});
    return 0;
  }
  if (cmd == "roundtrip" && argc == 4) {
    auto m = make_model();
    precprobe::load_state(*m, argv[2]);
    precprobe::save_state(*m, argv[3]);
    return 0;
  }
  if (cmd == "load" && argc == 3) {
    auto m = make_model();
    precprobe::load_state(*m, argv[2]);
    return 0;
  }
  if (cmd == "train" && argc == 6) return train(argv[2], argv[3], argv[4], std::stoll(argv[5]));
  std::fprintf(
      stderr,
      "usage: %s pattern OUT | roundtrip IN OUT | load IN | train STATE INPUTS DUMP STEPS\n",
      argv[0]);
  return 2;
} catch (const precprobe::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 3;
}
