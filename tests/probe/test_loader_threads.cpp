// Threads the program starts (issue 35): LibTorch's DataLoader with workers runs the dataset's
// ops (a transform, the Stack collation) on its own threads, and which step they fall into
// depends on prefetch timing. Those ops are recorded apart (OpRecord::background) and left
// out of compare's pairing, so two seeded runs of a deterministic program compare identical,
// while a real difference in one worker's data still shows where the step's ops consume it.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "debugger_fixture.h"
#include "precprobe/analysis.h"
#include "precprobe/debugger.h"
#include "precprobe/reader.h"
#include "precprobe/seed.h"
#include "precprobe_catch.h"

namespace {

// Samples transformed on the worker thread that loads them; sample `perturb` gets +1e-3.
class Data : public torch::data::datasets::Dataset<Data> {
 public:
  Data(int64_t perturb) : perturb_(perturb) {
    auto g = at::make_generator<at::CPUGeneratorImpl>(7);
    x_ = at::randn({96, 6}, g);
    y_ = at::randint(0, 3, {96}, g);
  }
  torch::data::Example<> get(size_t i) override {
    at::Tensor xi = x_[static_cast<int64_t>(i)].mul(2.0).add(0.5);  // ops on the worker
    if (static_cast<int64_t>(i) == perturb_) xi = xi.add(1e-3);
    return {xi, y_[static_cast<int64_t>(i)]};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(x_.size(0)); }

 private:
  at::Tensor x_, y_;
  int64_t perturb_;
};

// One seeded run of 12 steps: a random sampler, two workers, batches of 8.
void train(const precprobe::test::TempDir& dir, int64_t perturb) {
  precprobe::seed_all(1234, true);
  torch::nn::Sequential model(torch::nn::Linear(6, 16), torch::nn::ReLU(),
                              torch::nn::Linear(16, 3));
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  auto loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      Data(perturb).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(8).workers(2));
  auto o = precprobe::test::options_in(dir, true);
  o.grad_monitor = true;
  precprobe::PrecisionDebugger dbg(o);
  dbg.start(model.ptr());
  for (auto& batch : *loader) {
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(batch.data), batch.target);
    loss.backward();
    opt.step();
    dbg.step();
  }
  dbg.stop();
  CHECK(dbg.counters().errors == 0);
}

}  // namespace

TEST_CASE("data-loader workers: seeded runs compare identical, a worker's data difference is found",
          "[threads]") {
  precprobe::test::TempDir a("loader_a"), b("loader_b"), c("loader_c");
  train(a, -1);
  train(b, -1);
  train(c, 37);  // one sample, transformed on a worker thread, differs by 1e-3

  // The workers' ops were recorded, apart from the step's.
  int64_t background = 0, step_ops = 0;
  for (const auto& r : precprobe::test::read_ops(a)) (r.background ? background : step_ops)++;
  CHECK(background > 0);
  CHECK(step_ops > 0);

  precprobe::CompareOptions exact;
  exact.exact = true;
  {
    precprobe::DumpReader ra(a.path().string()), rb(b.path().string());
    auto r = precprobe::compare_dumps(ra, rb, exact);
    CAPTURE(r.to_json().dump());
    CHECK(r.identical);
    CHECK(r.unmatched.empty());
    CHECK(r.background_a > 0);
    CHECK(r.groups_compared == 12);
  }
  {
    precprobe::DumpReader ra(a.path().string()), rc(c.path().string());
    auto r = precprobe::compare_dumps(ra, rc, exact);
    CHECK_FALSE(r.identical);
    REQUIRE(r.first);
    // Found at the step's first op that reads the batch: the model's first layer.
    CHECK(r.first->name.find(".forward") != std::string::npos);
  }
}
