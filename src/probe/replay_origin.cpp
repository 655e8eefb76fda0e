// OriginTracker and the float64 re-run of an origin op: see replay_origin.h.
#include "replay_origin.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "observer_internal.h"
#include "precprobe/error.h"

namespace precprobe {
namespace detail {
namespace {

constexpr size_t kMaxCandidates = 16;

// In-place ops that overwrite all of `self` without reading it (as `precprobe overflow`
// treats them, src/core/analysis/overflow.cpp): input 0 may be uninitialized garbage.
bool overwrites_self(const std::string& op) {
  return op == "aten::fill_" || op == "aten::zero_" || op == "aten::copy_" ||
         op == "aten::normal_" || op == "aten::uniform_";
}

bool is_float(const at::Tensor& t) {
  return t.defined() && (at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()));
}

template <typename Fn>
c10::IValue map_tensors(const c10::IValue& v, Fn&& fn) {
  if (v.isTensor()) return c10::IValue(fn(v.toTensor()));
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList().vec()) out.push_back(fn(t));
    return c10::IValue(out);
  }
  if (v.isList() && !v.toListRef().empty()) {
    bool tensors = false;
    for (const auto& e : v.toListRef()) tensors = tensors || e.isTensor();
    if (tensors) {
      c10::impl::GenericList out(v.toList().elementType());
      for (const auto& e : v.toListRef())
        out.push_back(e.isTensor() ? c10::IValue(fn(e.toTensor())) : e);
      return c10::IValue(out);
    }
  }
  return v;
}

at::Tensor deep_copy(const at::Tensor& t) {
  return t.defined() ? t.detach().clone(at::MemoryFormat::Preserve) : t;
}

double dtype_max(at::ScalarType s) {
  switch (s) {
    case at::ScalarType::Half:
      return 65504.0;
    case at::ScalarType::BFloat16:
      return 3.38953139e38;
    case at::ScalarType::Float:
    case at::ScalarType::ComplexFloat:
      return static_cast<double>(std::numeric_limits<float>::max());
    default:
      return std::numeric_limits<double>::max();
  }
}

std::string dtype_text(at::ScalarType s) {
  switch (s) {
    case at::ScalarType::Half:
      return "float16";
    case at::ScalarType::BFloat16:
      return "bfloat16";
    case at::ScalarType::Float:
      return "float32";
    case at::ScalarType::Double:
      return "float64";
    default:
      return c10::toString(s);
  }
}

}  // namespace

bool all_finite(const at::Tensor& t) {
  if (!is_float(t) || t.numel() == 0) return true;
  const auto s = t.scalar_type();
  if (s == at::kFloat || s == at::kHalf || s == at::kBFloat16) {
    // A float64 sum of float32 values cannot overflow: it is non-finite exactly when an
    // element is (one pass, no temporary of the tensor's size).
    return std::isfinite(t.sum(at::kDouble).item<double>());
  }
  return t.isfinite().all().item<bool>();
}

struct OriginTracker::Call {
  int64_t seq = 0;
  const OpInfo* info = nullptr;
  std::vector<c10::IValue> inputs;  // references; written arguments deep-copied
  std::vector<bool> copied;
};

std::shared_ptr<OriginTracker::Call> OriginTracker::on_start(
    const OpInfo& info, const OpRecord& header, c10::ArrayRef<const c10::IValue> inputs) {
  try {
    if (header.outputs_uninitialized()) return nullptr;
    {
      std::lock_guard<std::mutex> lk(mu_);
      // Later ops cannot win once enough earlier candidates are kept.
      if (candidates_.size() >= kMaxCandidates && header.seq > candidates_.back().seq)
        return nullptr;
    }
    const bool skip_self = overwrites_self(info.name);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (i == 0 && skip_self) continue;
      bool finite = true;
      for_each_tensor(inputs[i], [&](const at::Tensor& t) { finite = finite && all_finite(t); });
      if (!finite) {
        std::lock_guard<std::mutex> lk(mu_);
        bad_inputs_.push_back(header.seq);
        return nullptr;
      }
    }
    auto call = std::make_shared<Call>();
    call->seq = header.seq;
    call->info = &info;
    call->inputs.assign(inputs.begin(), inputs.end());
    call->copied.assign(inputs.size(), false);
    // What the op writes must be copied before it does.
    for (size_t i : info.write_args) {
      if (i >= inputs.size()) continue;
      call->inputs[i] = map_tensors(inputs[i], deep_copy);
      call->copied[i] = true;
    }
    return call;
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lk(mu_);
    ++errors_;
    report_error(std::string("precprobe: replay: tracking ") + info.name + " failed: " + e.what());
  }
  return nullptr;
}

void OriginTracker::on_end(Call& call, const std::vector<c10::IValue>& outputs) {
  try {
    bool bad = false;
    at::ScalarType dtype = at::ScalarType::Float;
    for (const c10::IValue& v : outputs) {
      for_each_tensor(v, [&](const at::Tensor& t) {
        if (!bad && !all_finite(t)) {
          bad = true;
          dtype = t.scalar_type();
        }
      });
    }
    if (!bad) return;
    Candidate c;
    c.seq = call.seq;
    c.op = call.info->name;
    c.overload = call.info->overload;
    c.out_dtype = dtype;
    c.inputs.reserve(call.inputs.size());
    for (size_t i = 0; i < call.inputs.size(); ++i)
      c.inputs.push_back(call.copied[i] ? call.inputs[i] : map_tensors(call.inputs[i], deep_copy));
    std::lock_guard<std::mutex> lk(mu_);
    auto at = std::lower_bound(candidates_.begin(), candidates_.end(), c.seq,
                               [](const Candidate& x, int64_t s) { return x.seq < s; });
    candidates_.insert(at, std::move(c));
    if (candidates_.size() > kMaxCandidates) candidates_.pop_back();
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lk(mu_);
    ++errors_;
    report_error(std::string("precprobe: replay: tracking ") + call.info->name +
                 " failed: " + e.what());
  }
}

const OriginTracker::Candidate* OriginTracker::find(int64_t seq) const {
  std::lock_guard<std::mutex> lk(mu_);
  for (const Candidate& c : candidates_)
    if (c.seq == seq) return &c;
  return nullptr;
}

bool OriginTracker::had_nonfinite_input(int64_t seq) const {
  std::lock_guard<std::mutex> lk(mu_);
  return std::find(bad_inputs_.begin(), bad_inputs_.end(), seq) != bad_inputs_.end();
}

OriginVerdict classify_origin(const OriginTracker::Candidate& c) {
  OriginVerdict v{"unknown", ""};
  try {
    auto handle = c10::Dispatcher::singleton().findSchema({c.op, c.overload});
    if (!handle) {
      v.why = "the op " + c.op + "." + c.overload + " has no schema to re-run it with";
      return v;
    }
    at::RecordFunctionGuard no_callbacks(false);
    at::NoGradGuard no_grad;
    c10::impl::ExcludeDispatchKeyGuard no_autocast(
        c10::DispatchKeySet({c10::DispatchKey::AutocastCPU, c10::DispatchKey::AutocastCUDA}));
    std::vector<c10::IValue> stack;
    for (const c10::IValue& in : c.inputs) {
      stack.push_back(map_tensors(in, [](const at::Tensor& t) {
        if (!t.defined()) return t;
        if (at::isComplexType(t.scalar_type())) return t.to(at::kComplexDouble);
        return at::isFloatingType(t.scalar_type()) ? t.to(at::kDouble) : t.clone();
      }));
    }
    handle->callBoxed(&stack);
    int64_t nan = 0, inf = 0;
    double abs_max = 0;
    for (const c10::IValue& out : stack) {
      for_each_tensor(out, [&](const at::Tensor& t) {
        if (!t.defined() || !at::isFloatingType(t.scalar_type()) || t.numel() == 0) return;
        const at::Tensor d = t.to(at::kDouble);
        nan += d.isnan().sum().item<int64_t>();
        inf += d.isinf().sum().item<int64_t>();
        const at::Tensor finite = d.masked_fill(d.isfinite().logical_not(), 0.0).abs();
        abs_max = std::max(abs_max, finite.max().item<double>());
      });
    }
    const std::string name = dtype_text(c.out_dtype);
    if (c.out_dtype == at::kDouble) {
      v.classification = nan > 0 ? "invalid" : "unknown";
      v.why = fmt::format(
          "the op already computes in float64 ({} NaN, {} Inf in the re-run); {}", nan, inf,
          nan > 0 ? "NaN from finite inputs is an invalid operation (log of a negative, 0/0, "
                    "inf - inf)"
                  : "Inf may be an overflow of float64 or a division by zero");
    } else if (nan > 0 || inf > 0) {
      v.classification = "invalid";
      v.why = fmt::format(
          "float64 re-run on the same inputs gives {} NaN and {} Inf too: an invalid operation "
          "on finite inputs (log of a negative number, 0/0, inf - inf, division by zero), not "
          "a lack of {} range",
          nan, inf, name);
    } else if (abs_max > dtype_max(c.out_dtype)) {
      v.classification = "range";
      v.why = fmt::format("float64 result reaches {:.3g}, beyond {}'s max {:.3g}: an overflow",
                          abs_max, name, dtype_max(c.out_dtype));
    } else {
      v.classification = "range";
      v.why = fmt::format(
          "float64 result is finite and stays within {}'s range (max |x| {:.3g} <= {:.3g}): an "
          "intermediate value inside the op overflowed in {}",
          name, abs_max, dtype_max(c.out_dtype), name);
    }
  } catch (const std::exception& e) {
    v.classification = "unknown";
    std::string what = e.what();
    if (auto* ce = dynamic_cast<const c10::Error*>(&e)) what = ce->what_without_backtrace();
    v.why = "re-running " + c.op + " in float64 failed: " + what.substr(0, 300);
  }
  return v;
}

int save_inputs(const std::vector<c10::IValue>& inputs, const std::string& dir,
                const std::string& record_name, int zstd_level, int64_t max_bytes) {
  int written = 0;
  size_t index = 0;
  auto save = [&](const at::Tensor& t) {
    const size_t i = index++;
    if (!t.defined()) return;
    if (static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size()) > max_bytes)
      return;
    const std::string path = dir + "/" + record_name + ".in" + std::to_string(i) + ".npy.zst";
    const std::string err = write_npy_zst(t, path, zstd_level);
    if (err.empty()) {
      ++written;
    } else {
      report_error("precprobe: replay: saving " + path + ": " + err);
    }
  };
  for (const c10::IValue& v : inputs) {
    // The same positions as Observer::capture_args gives the record's "in" entries.
    if (v.isTensor()) {
      save(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) save(t);
    } else if (v.isList() && !v.toListRef().empty() && v.toListRef()[0].isTensor()) {
      for (const auto& e : v.toListRef()) {
        if (e.isTensor()) {
          save(e.toTensor());
        } else {
          ++index;
        }
      }
    } else {
      ++index;
    }
  }
  return written;
}

}  // namespace detail
}  // namespace precprobe
