// observe_batch and the checks made at the first batch, written as "check/..." scalars for
// `precprobe check` (names in precprobe/dump_format.h, rules in docs/checklist.md). The
// PrecisionDebugger members that call them are in debugger.cpp.
#include "precprobe/checklist_probe.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <torch/nn/module.h>

#include <string>

#include "debugger/debugger_internal.h"
#include "precprobe/debugger.h"
#include "precprobe/dump_format.h"
#include "precprobe/error.h"
#include "precprobe/hash.h"

namespace precprobe {
namespace {

namespace cs = check_scalar;

constexpr int64_t kMaxChannels = 64;  // per-channel statistics of the first channels only
constexpr int64_t kMaxLabels = 256;   // label histograms of more classes are not written

// Which debugger the initial checks ran for (training-loop thread only). The writer and
// the dump path are part of the key: a later debugger may reuse the address.
struct State {
  const PrecisionDebugger* dbg = nullptr;
  const DumpWriter* writer = nullptr;
  std::string dump_path;
};

State& state() {
  static State s;
  return s;
}

std::string key(std::string_view prefix, const std::string& suffix) {
  return std::string(prefix) + suffix;
}

bool is_stat_module(const torch::nn::Module& m) {
  const std::string& n = m.name();
  return n.find("BatchNorm") != std::string::npos || n.find("Dropout") != std::string::npos ||
         n.find("InstanceNorm") != std::string::npos;
}

// A weight (not a bias: dim >= 2) that is all zero, or whose rows are all equal.
void check_initial_weights(PrecisionDebugger& dbg, const torch::nn::Module& model) {
  int64_t checked = 0;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    const at::Tensor& w = p.value();
    if (w.dim() < 2 || w.numel() == 0 || !w.is_floating_point()) continue;
    ++checked;
    const at::Tensor rows = w.detach().reshape({w.size(0), -1});
    if (rows.count_nonzero().item<int64_t>() == 0) {
      dbg.log_scalar(key(cs::kInitZero, p.key()), 1);
    } else if (w.size(0) > 1 && rows.eq(rows.narrow(0, 0, 1)).all().item<bool>()) {
      dbg.log_scalar(key(cs::kInitIdentical, p.key()), 1);
    }
  }
  dbg.log_scalar(std::string(cs::kInitParams), static_cast<double>(checked));
  const uint64_t h = module_hash(model);
  dbg.log_scalar(std::string(cs::kHashHi), static_cast<double>(h >> 32));
  dbg.log_scalar(std::string(cs::kHashLo), static_cast<double>(h & 0xffffffffull));
}

void observe_inputs(PrecisionDebugger& dbg, const at::Tensor& x) {
  dbg.log_scalar(std::string(cs::kInputsNumel), static_cast<double>(x.numel()));
  if (!x.is_floating_point() || x.numel() == 0) return;
  const at::Tensor d = x.detach().to(at::kDouble);
  const int64_t nan = d.isnan().sum().item<int64_t>();
  const int64_t inf = d.isinf().sum().item<int64_t>();
  dbg.log_scalar(std::string(cs::kInputsNan), static_cast<double>(nan));
  dbg.log_scalar(std::string(cs::kInputsInf), static_cast<double>(inf));
  if (nan + inf > 0) return;  // the statistics would be NaN; the item above reports it
  // Channels are dim 1 of [N, C, ...] (features of [N, F]); a 1-d batch is one channel.
  const at::Tensor per =
      d.dim() >= 2 ? d.transpose(0, 1).reshape({d.size(1), -1}) : d.reshape({1, -1});
  const int64_t channels = std::min(per.size(0), kMaxChannels);
  const at::Tensor sub = per.narrow(0, 0, channels);
  const at::Tensor mean = sub.mean(1);
  const at::Tensor sd = sub.std(1, /*unbiased=*/false);
  for (int64_t c = 0; c < channels; ++c) {
    dbg.log_scalar(key(cs::kChannelMean, std::to_string(c)), mean[c].item<double>());
    dbg.log_scalar(key(cs::kChannelStd, std::to_string(c)), sd[c].item<double>());
  }
}

// FNV-1a over the label values in order; 48 bits so the double holds it exactly.
double label_hash(const at::Tensor& y) {
  uint64_t h = 1469598103934665603ull;
  const int64_t* p = y.data_ptr<int64_t>();
  for (int64_t i = 0; i < y.numel(); ++i) h = (h ^ static_cast<uint64_t>(p[i])) * 1099511628211ull;
  return static_cast<double>(h & ((uint64_t{1} << 48) - 1));
}

void observe_targets(PrecisionDebugger& dbg, const at::Tensor& y, int64_t ignore_index) {
  if (!y.defined() || y.is_floating_point() || y.is_complex() || y.scalar_type() == at::kBool)
    return;
  const at::Tensor t = y.detach().to(at::kLong).reshape({-1}).contiguous();
  const at::Tensor ignored = t.eq(ignore_index);
  const int64_t n_ignored = ignored.sum().item<int64_t>();
  dbg.log_scalar(std::string(cs::kTargetsNumel), static_cast<double>(t.numel()));
  dbg.log_scalar(std::string(cs::kIgnored), static_cast<double>(n_ignored));
  const at::Tensor kept = t.masked_select(ignored.logical_not());
  if (kept.numel() == 0) return;
  const auto uc = at::_unique2(kept, /*sorted=*/true, /*return_inverse=*/false,
                               /*return_counts=*/true);
  const at::Tensor values = std::get<0>(uc);
  const at::Tensor counts = std::get<2>(uc);
  dbg.log_scalar(std::string(cs::kDistinctLabels), static_cast<double>(values.numel()));
  dbg.log_scalar(std::string(cs::kLabelHash), label_hash(kept));
  if (values.numel() > kMaxLabels) return;
  const int64_t* v = values.data_ptr<int64_t>();
  const int64_t* c = counts.data_ptr<int64_t>();
  for (int64_t i = 0; i < values.numel(); ++i)
    dbg.log_scalar(key(cs::kLabelCount, std::to_string(v[i])), static_cast<double>(c[i]));
}

}  // namespace

void check_initial_model(PrecisionDebugger& dbg, const torch::nn::Module& model) noexcept {
  try {
    if (!dbg.started() || dbg.writer() == nullptr) return;
    State& s = state();
    if (s.dbg == &dbg && s.writer == dbg.writer() && s.dump_path == dbg.options().dump_path) return;
    s.dbg = &dbg;
    s.writer = dbg.writer();
    s.dump_path = dbg.options().dump_path;
    at::RecordFunctionGuard no_callbacks(false);  // our own ATen calls are not observed
    at::NoGradGuard no_grad;
    check_initial_weights(dbg, model);
  } catch (const std::exception& e) {
    report_error(std::string("precprobe: check_initial_model: ") + e.what());
  } catch (...) {
    report_error("precprobe: check_initial_model failed");
  }
}

namespace detail {

// `model` may be null (start() without one): the batch is observed without the model's modes.
void observe_batch_of(PrecisionDebugger& dbg, const torch::nn::Module* model,
                      const at::Tensor& inputs, const at::Tensor& targets, int64_t epoch,
                      int64_t ignore_index) noexcept {
  try {
    if (!dbg.started() || dbg.writer() == nullptr) return;
    if (model != nullptr) check_initial_model(dbg, *model);
    const bool grad = at::GradMode::is_enabled();
    at::RecordFunctionGuard no_callbacks(false);
    at::NoGradGuard no_grad;
    dbg.log_scalar(std::string(cs::kBatchBegin), static_cast<double>(epoch));
    dbg.log_scalar(std::string(cs::kGradEnabled), grad ? 1 : 0);
    if (model != nullptr) {
      // The model itself apart: modules(include_self) needs it owned by a shared_ptr, and a
      // module started by value (start(Net&)) is not.
      int64_t stat_training = is_stat_module(*model) && model->is_training();
      for (const auto& m : model->modules(/*include_self=*/false))
        stat_training += is_stat_module(*m) && m->is_training();
      dbg.log_scalar(std::string(cs::kTraining), model_training(*model) ? 1 : 0);
      dbg.log_scalar(std::string(cs::kStatModulesTraining), static_cast<double>(stat_training));
    }
    if (inputs.defined()) observe_inputs(dbg, inputs);
    observe_targets(dbg, targets, ignore_index);
  } catch (const std::exception& e) {
    report_error(std::string("precprobe: observe_batch: ") + e.what());
  } catch (...) {
    report_error("precprobe: observe_batch failed");
  }
}

}  // namespace detail

void observe_batch(PrecisionDebugger& dbg, const torch::nn::Module& model, const at::Tensor& inputs,
                   const at::Tensor& targets, int64_t epoch, int64_t ignore_index) noexcept {
  detail::observe_batch_of(dbg, &model, inputs, targets, epoch, ignore_index);
}

void expect_module_hash(PrecisionDebugger& dbg, uint64_t hash) noexcept {
  dbg.log_scalar(std::string(cs::kExpectedHashHi), static_cast<double>(hash >> 32));
  dbg.log_scalar(std::string(cs::kExpectedHashLo), static_cast<double>(hash & 0xffffffffull));
}

}  // namespace precprobe
