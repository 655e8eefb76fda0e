// Writes the dumps under tests/data/cli/ that the CLI tests read, with the real probe:
//   precprobe_make_golden_dumps <tests/data/cli>
//
// A tiny MLP (fc1: Linear(4, 8) -> ReLU -> `* act_scale` -> fc2: Linear(8, 3) called as
// torch::linear), cross-entropy, SGD(lr 0.01) under precprobe::GradScaler(init 65536, growth
// interval 2), trained for 3 steps on fixed batches with the PrecisionDebugger at level L2
// (nested ops too), summary_mode "hash", the gradient monitor and the checklist probe
// (observe_batch). The weights and the batches are set here, not drawn, so what the dumps
// must hold can be worked out by hand (tests/cli/test_cli.cpp does). One intra-op thread,
// seed_all(1234, deterministic): running this again gives the same records (meta.json's
// times, host and pid differ).
//
//   clean           act_scale 1 every step.
//   overflow        rank 0: act_scale 1e38 at step 1. relu(fc1(x)) <= 2.5, so the scaled
//                   activation (<= 2.5e38) is still finite, but for batch row s0 fc2's row 0
//                   sums to 4.2e38 > FLT_MAX: fc2's aten::addmm (nested in aten::linear) is
//                   the origin, with one +inf. The loss and every gradient turn NaN; GradScaler
//                   skips step 1 and backs off. rank 1: the clean run (RANK=1, WORLD_SIZE=2).
//   diverged_1pct   act_scale 1.01 at step 1: aten::mul's tensor input is the same as in
//                   clean, its scalar argument and output differ by 1 %.
//   extra_op        clean, plus `x * ones` (one aten::mul, values unchanged) at step 0.
//   truncated       a copy of clean whose ops stream lost its last 7 bytes (mid-frame).
//   corrupt_meta    meta.json cut short.
//   future_version  meta.json with format_version 99.
//   range           act_scale 4e4 at step 2 (a large activation, up to 1e5: beyond fp16's
//                   65504, well inside bf16), recorded at level L1 with range statistics
//                   ("statistics": {"range": true}), without GradScaler (enabled: false) and
//                   summary_mode "statistics": the dump of `precprobe precision` in
//                   docs/cli.md. Written alone with `precprobe_make_golden_dumps <dir> range`
//                   (format_version 2; the others stay as they are).
#include <precprobe/checklist_probe.h>
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(4, 8))),
        fc2(register_module("fc2", torch::nn::Linear(8, 3))) {
    torch::NoGradGuard no_grad;
    // Rows: sum |w| <= 1.6 and |b| <= 0.1, so with |x| <= 1.5 every activation is <= 2.5.
    fc1->weight.copy_(torch::tensor({{0.6, -0.2, 0.2, -0.6},
                                     {0.5, -0.3, 0.3, -0.5},
                                     {0.4, 0.1, 0.2, -0.4},
                                     {0.3, -0.4, 0.1, -0.3},
                                     {-0.3, 0.5, -0.4, 0.2},
                                     {-0.2, 0.6, -0.5, 0.1},
                                     {0.2, 0.3, -0.6, 0.4},
                                     {-0.5, -0.2, 0.4, 0.3}}));
    fc1->bias.copy_(torch::tensor({0.1, -0.1, 0.05, 0.0, 0.1, -0.05, 0.0, 0.1}));
    // Row 0 is positive: its sum over relu activations only grows. For row s0 of the batch
    // it is 4.2 (with act_scale 1e38: 4.2e38, beyond FLT_MAX 3.4e38); for the others <= 3.0.
    fc2->weight.copy_(torch::tensor({{0.8, 0.7, 0.6, 0.5, 0.5, 0.4, 0.5, 0.3},
                                     {-0.4, 0.3, -0.2, 0.5, -0.3, 0.4, -0.5, 0.2},
                                     {0.2, -0.5, 0.4, -0.3, 0.1, -0.2, 0.3, -0.6}}));
    fc2->bias.copy_(torch::tensor({0.0, 0.1, -0.1}));
  }

  torch::Tensor forward(const torch::Tensor& x, double act_scale) {
    precprobe::Scope mlp("mlp");
    torch::Tensor h;
    {
      precprobe::Scope s("fc1");
      h = torch::relu(fc1(x));
    }
    h = h * act_scale;
    // Through aten::linear, which runs aten::t and aten::addmm nested in it (fc1's module
    // call runs them directly): an overflow here is reported at the inner aten::addmm.
    precprobe::Scope s("fc2");
    return torch::linear(h, fc2->weight, fc2->bias);
  }

  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Mlp);

struct Variant {
  double act_scale_step1 = 1.0;  ///< act_scale at step 1 (1 at steps 0 and 2)
  bool extra_op = false;         ///< x * ones at step 0
  bool range = false;            ///< L1, range statistics, no hash, GradScaler disabled
};

constexpr int kSteps = 3;

// The batch of step s: the rows s0..s3 below, rotated by s. Every column is a permutation
// of {-1.5, -0.5, 0.5, 1.5} (mean 0, std 1.118); labels 0, 1, 2, 0 travel with their rows.
std::pair<torch::Tensor, torch::Tensor> batch(int step) {
  static const float rows[4][4] = {{1.5f, -0.5f, 0.5f, -1.5f},
                                   {-0.5f, 1.5f, -1.5f, 0.5f},
                                   {0.5f, -1.5f, 1.5f, -0.5f},
                                   {-1.5f, 0.5f, -0.5f, 1.5f}};
  static const int64_t labels[4] = {0, 1, 2, 0};
  auto x = torch::empty({4, 4});
  auto y = torch::empty({4}, torch::kLong);
  for (int r = 0; r < 4; ++r) {
    const int s = (r + step) % 4;
    for (int c = 0; c < 4; ++c) x[r][c] = rows[s][c];
    y[r] = labels[s];
  }
  return {x, y};
}

void train(const fs::path& dump, const Variant& v, int rank, int world) {
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  precprobe::seed_all(1234, /*deterministic=*/true);
  at::set_num_threads(1);
  Mlp model;
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01));
  // Made before start(): not recorded.
  const torch::Tensor ones = torch::ones({4, 4});
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
  for (int step = 0; step < kSteps; ++step) batches.push_back(batch(step));

  precprobe::DebuggerOptions o;
  o.dump_path = dump.string();
  o.level = precprobe::Level::kL2;
  o.summary_mode = precprobe::SummaryMode::kHash;
  o.seed = 1234;
  o.is_deterministic = true;
  o.async_stats = false;  // records in a fixed order
  o.overwrite = true;
  if (v.range) {
    o.level = precprobe::Level::kL1;
    o.summary_mode = precprobe::SummaryMode::kStatistics;
    o.range_stats = precprobe::RangeStats::kTraining;
  }
  precprobe::PrecisionDebugger dbg(o);
  precprobe::GradScalerOptions so;
  so.growth_interval = 2;
  so.enabled = !v.range;
  precprobe::GradScaler scaler(so);
  dbg.start(model);
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batches[static_cast<size_t>(step)];
    if (v.extra_op && step == 0) x = x * ones;
    precprobe::observe_batch(dbg, *model, x, y);
    // range: the last step, so that no update spreads the large values further.
    const double act_scale = step == (v.range ? kSteps - 1 : 1) ? v.act_scale_step1 : 1.0;
    auto loss = torch::nn::functional::cross_entropy(model->forward(x, act_scale), y);
    opt.zero_grad();
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    dbg.log_scalar("loss", loss.item<double>());
    dbg.step();
  }
  dbg.stop();
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
}

void write_text(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && !(argc == 3 && std::string(argv[2]) == "range")) {
    std::cerr << "usage: precprobe_make_golden_dumps <out dir> [range]\n";
    return 2;
  }
  const fs::path out = argv[1];
  if (argc == 3) {  // the range dump alone
    fs::remove_all(out / "range");
    train(out / "range", Variant{4e4, false, true}, 0, 1);
    std::cout << "wrote " << (out / "range").string() << '\n';
    return 0;
  }
  for (const char* name : {"clean", "overflow", "diverged_1pct", "extra_op", "truncated",
                           "corrupt_meta", "future_version"}) {
    fs::remove_all(out / name);
  }
  train(out / "clean", Variant{}, 0, 1);
  train(out / "overflow", Variant{1e38, false}, 0, 2);
  train(out / "overflow", Variant{}, 1, 2);
  train(out / "diverged_1pct", Variant{1.01, false}, 0, 1);
  train(out / "extra_op", Variant{1.0, true}, 0, 1);
  // A copy of `clean` whose ops stream lost its tail (a process killed mid-write).
  fs::copy(out / "clean", out / "truncated", fs::copy_options::recursive);
  const fs::path ops = out / "truncated/rank0/ops.jsonl.zst";
  fs::resize_file(ops, fs::file_size(ops) - 7);
  write_text(out / "corrupt_meta/rank0/meta.json", "{\"format_version\": 1, \"rank\": ");
  write_text(out / "future_version/rank0/meta.json", R"({"format_version":99,"rank":0})");
  std::cout << "wrote golden dumps under " << out.string() << '\n';
  return 0;
}
