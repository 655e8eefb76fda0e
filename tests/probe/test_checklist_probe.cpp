// The checklist's probe side on real Fashion-MNIST batches: what observe_batch and
// check_initial_model write, read back through the dump, and the verdicts they lead to.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <string>

#include "../../examples/fashion_mnist.h"
#include "debugger_fixture.h"
#include "precprobe/checklist.h"
#include "precprobe/checklist_probe.h"

using namespace precprobe;
using precprobe::test::TempDir;

namespace {

const fashion_mnist::Split& train_raw() {
  static const fashion_mnist::Split s = fashion_mnist::load("t10k", /*normalise=*/false);
  return s;
}

struct Net : torch::nn::Module {
  Net() {
    fc = register_module("fc", torch::nn::Linear(784, 10));
    bn = register_module("bn", torch::nn::BatchNorm1d(10));
  }
  torch::Tensor forward(const torch::Tensor& x) { return bn(fc(x.flatten(1))); }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

struct RunSpec {
  bool normalise = true;
  bool sorted = false;
  bool eval_in_train = false;
  bool zero_weight = false;
};

// Observes 12 batches of 64 over two epochs and 2 evaluation batches; returns the checklist.
ChecklistResult run(const RunSpec& spec, std::vector<ScalarRecord>* scalars = nullptr) {
  TempDir dir("checklist_probe");
  auto net = std::make_shared<Net>();
  if (spec.zero_weight) {
    torch::NoGradGuard g;
    net->fc->weight.zero_();
  }
  const auto& data = train_raw();
  at::Tensor images = data.images.slice(0, 0, 2000);
  at::Tensor labels = data.labels.slice(0, 0, 2000);
  if (spec.normalise) images = (images - fashion_mnist::kMean) / fashion_mnist::kStd;
  {
    PrecisionDebugger dbg(test::options_in(dir));
    dbg.start(net);
    for (int epoch = 0; epoch < 2; ++epoch) {
      at::Tensor order = spec.sorted ? std::get<1>(labels.sort(c10::optional<bool>(true), 0))
                                     : torch::randperm(labels.size(0), torch::kInt64);
      for (int64_t b = 0; b < 6; ++b) {
        at::Tensor idx = order.slice(0, b * 64, (b + 1) * 64);
        observe_batch(dbg, *net, images.index_select(0, idx), labels.index_select(0, idx), epoch);
        net->forward(images.index_select(0, idx));
        dbg.step();
      }
    }
    torch::NoGradGuard no_grad;
    if (!spec.eval_in_train) net->eval();
    for (int64_t b = 0; b < 2; ++b) {
      observe_batch(dbg, *net, images.slice(0, b * 100, (b + 1) * 100),
                    labels.slice(0, b * 100, (b + 1) * 100));
      net->forward(images.slice(0, b * 100, (b + 1) * 100));
    }
    dbg.stop();
  }
  DumpReader reader(dir.path().string());
  if (scalars) *scalars = reader.scalars();
  return run_checklist(reader);
}

Verdict of(const ChecklistResult& r, const char* id) {
  const CheckItem* c = r.find(id);
  REQUIRE(c != nullptr);
  INFO(id << ": " << c->evidence);
  return c->verdict;
}

}  // namespace

TEST_CASE("checklist probe: clean Fashion-MNIST batches", "[checklist]") {
  torch::manual_seed(7);
  std::vector<ScalarRecord> scalars;
  const ChecklistResult r = run({}, &scalars);
  CHECK(of(r, "data.missing_values") == Verdict::kOk);
  CHECK(of(r, "data.inputs_not_normalised") == Verdict::kOk);
  CHECK(of(r, "data.no_shuffling") == Verdict::kOk);
  CHECK(of(r, "data.class_imbalance") == Verdict::kOk);
  CHECK(of(r, "api.train_eval_mode") == Verdict::kOk);
  CHECK(of(r, "api.init_weights") == Verdict::kOk);
  // The first evaluation batch's channel mean, against a float64 recomputation.
  const at::Tensor x =
      (train_raw().images.slice(0, 0, 100) - fashion_mnist::kMean) / fashion_mnist::kStd;
  const double ref = test::reference(x).mean;
  std::vector<double> means;
  for (const ScalarRecord& s : scalars)
    if (s.name == "check/batch/mean/0") means.push_back(s.value);
  REQUIRE(means.size() == 14);
  CHECK(means[12] == Approx(ref).epsilon(1e-9));
  // One weight checked: fc.weight (biases and BatchNorm weights are 1-d).
  for (const ScalarRecord& s : scalars)
    if (s.name == "check/init/params") CHECK(s.value == Approx(1.0));
}

TEST_CASE("checklist probe: planted data and API bugs flip their items", "[checklist]") {
  torch::manual_seed(7);
  RunSpec raw;
  raw.normalise = false;
  CHECK(of(run(raw), "data.inputs_not_normalised") == Verdict::kProblem);
  RunSpec sorted;
  sorted.sorted = true;
  const ChecklistResult s = run(sorted);
  CHECK(of(s, "data.no_shuffling") == Verdict::kProblem);
  RunSpec eval;
  eval.eval_in_train = true;
  CHECK(of(run(eval), "api.train_eval_mode") == Verdict::kProblem);
  RunSpec zero;
  zero.zero_weight = true;
  CHECK(of(run(zero), "api.init_weights") == Verdict::kProblem);
}
