// A program that uses precprobe as an outside project would: through find_package or
// add_subdirectory, built in Release or in Debug. It trains a small seeded MLP for three
// steps with the debugger on and checks that records were written; tests/consumer/tests.cmake
// compares the dumps of its builds with `precprobe compare --exact`.
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: consumer DUMP_DIR\n");
    return 2;
  }
  std::filesystem::remove_all(argv[1]);
  precprobe::seed_all(1234, /*deterministic=*/true);
  torch::nn::Sequential model(torch::nn::Linear(8, 16), torch::nn::ReLU(), torch::nn::Dropout(0.5),
                              torch::nn::Linear(16, 3));
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  const auto x = torch::randn({32, 8});
  const auto y = torch::randint(0, 3, {32});
  precprobe::DebuggerOptions opts;
  opts.dump_path = argv[1];
  {
    precprobe::PrecisionDebugger dbg(opts);
    dbg.start(model);
    for (int step = 0; step < 3; ++step) {
      const auto idx = torch::randperm(32).slice(0, 0, 16);
      auto loss =
          torch::nn::functional::cross_entropy(model->forward(x.index({idx})), y.index({idx}));
      opt.zero_grad();
      loss.backward();
      opt.step();
      dbg.step();
    }
    dbg.stop();
  }
  precprobe::DumpReader reader(argv[1]);
  auto ops = reader.ops();
  size_t with_inputs = 0;
  for (const auto& op : ops) with_inputs += op.inputs.empty() ? 0 : 1;
  std::printf("precprobe %s (C++%ld): %zu op records, %zu with inputs\n", PRECPROBE_VERSION_STRING,
              static_cast<long>(__cplusplus / 100 % 100), ops.size(), with_inputs);
  // Most ops read an input (a Debug build whose capture could not read RecordFunction's
  // inputs recorded none).
  return ops.empty() || with_inputs * 2 < ops.size() ? 1 : 0;
}
