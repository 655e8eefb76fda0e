// OriginTracker and the float64 re-run of an origin op: see replay_origin.h.
#include "replay/replay_origin.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <fmt/format.h>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <limits>

#include "capture/observer_internal.h"
#include "precprobe/error.h"

namespace precprobe {
namespace detail {
namespace {

constexpr size_t kMaxCandidates = 16;
constexpr size_t kMaxZeroOutputs = 4096;  // outputs whose zeros are underflows, per replay

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

// The smallest normal magnitude of a format narrower than float64 (0 for others).
double min_normal(at::ScalarType s) {
  switch (s) {
    case at::ScalarType::Half:
      return 6.103515625e-05;
    case at::ScalarType::BFloat16:
    case at::ScalarType::Float:
      return static_cast<double>(std::numeric_limits<float>::min());
    default:
      return 0.0;
  }
}

// Ops that draw random numbers: a re-run would advance the generator the replay uses.
bool draws_random(const std::string& op) {
  for (const char* w : {"rand", "dropout", "bernoulli", "normal", "uniform", "multinomial",
                        "exponential", "cauchy", "geometric", "poisson"})
    if (op.find(w) != std::string::npos) return true;
  return false;
}

// Runs op.overload through the dispatcher on float64 copies of `inputs` (never the tensors
// themselves: an in-place op writes its copy), callbacks, autograd and autocast off; the
// floating-point exceptions it raised in *raised. Returns its outputs. Throws c10::Error.
std::vector<c10::IValue> rerun_in_float64(const std::string& op, const std::string& overload,
                                          const std::vector<c10::IValue>& inputs, int* raised) {
  auto handle = c10::Dispatcher::singleton().findSchema({op, overload});
  if (!handle) return {};
  at::RecordFunctionGuard no_callbacks(false);
  at::NoGradGuard no_grad;
  c10::impl::ExcludeDispatchKeyGuard no_autocast(
      c10::DispatchKeySet({c10::DispatchKey::AutocastCPU, c10::DispatchKey::AutocastCUDA}));
  std::vector<c10::IValue> stack;
  for (const c10::IValue& in : inputs) {
    stack.push_back(map_tensors(in, [](const at::Tensor& t) {
      if (!t.defined()) return t;
      if (at::isComplexType(t.scalar_type()))
        return t.to(at::kComplexDouble, /*non_blocking=*/false, /*copy=*/true);
      return at::isFloatingType(t.scalar_type())
                 ? t.to(at::kDouble, /*non_blocking=*/false, /*copy=*/true)
                 : t.clone();
    }));
  }
  // IEEE 754 tells overflow, divide-by-zero and invalid apart by the exceptions the
  // arithmetic raises; the float64 re-run's flags say which, read right after it.
  std::feclearexcept(FE_ALL_EXCEPT);
  handle->callBoxed(&stack);
  if (raised != nullptr) *raised = std::fetestexcept(FE_OVERFLOW | FE_DIVBYZERO | FE_INVALID);
  return stack;
}

// Ops that copy values without arithmetic.
bool passes_values_on(const std::string& op) {
  for (const char* o :
       {"aten::_to_copy", "aten::to", "aten::copy_", "aten::clone", "aten::contiguous", "aten::cat",
        "aten::stack", "aten::index", "aten::index_select", "aten::gather", "aten::_unsafe_view",
        "aten::reshape", "aten::flatten", "aten::repeat"})
    if (op == o) return true;
  return false;
}

// A floating tensor narrower than float64 that holds an exact zero, read here.
bool narrow_with_zeros(const at::Tensor& t) {
  return t.defined() && t.numel() > 0 && min_normal(t.scalar_type()) > 0 && !t.is_inference() &&
         t.layout() == c10::kStrided && t.eq(0).any().item<bool>();
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
  bool minus_inf_inputs = false;
  const OpInfo* info = nullptr;
  std::vector<c10::IValue> inputs;  // references; written arguments deep-copied
  std::vector<bool> copied;
};

std::shared_ptr<OriginTracker::Call> OriginTracker::on_start(
    const OpInfo& info, const OpRecord& header, c10::ArrayRef<const c10::IValue> inputs) {
  try {
    // Memory nothing wrote, or (resize, set_) handed back: never an origin.
    if (header.outputs_uninitialized() || info.regrows != OpInfo::Regrows::kNo) return nullptr;
    {
      std::lock_guard<std::mutex> lk(mu_);
      // Later ops cannot win once enough earlier candidates are kept.
      if (candidates_.size() >= kMaxCandidates && header.seq > candidates_.back().seq)
        return nullptr;
    }
    const bool skip_self = overwrites_self(info.name);
    bool minus_inf = false;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (i == 0 && skip_self) continue;
      // An out= destination's old values are not an input (often memory nothing wrote).
      if (std::find(info.out_args.begin(), info.out_args.end(), i) != info.out_args.end()) continue;
      bool finite = true;
      for_each_tensor(inputs[i], [&](const at::Tensor& t) { finite = finite && all_finite(t); });
      if (finite) continue;
      // -inf alone (a mask's) leaves it a candidate; NaN or +Inf came from an earlier op.
      bool masked = true;
      for_each_tensor(inputs[i],
                      [&](const at::Tensor& t) { masked = masked && !has_nan_or_pinf(t); });
      if (!masked) {
        std::lock_guard<std::mutex> lk(mu_);
        bad_inputs_.push_back(header.seq);
        return nullptr;
      }
      minus_inf = true;
    }
    auto call = std::make_shared<Call>();
    call->seq = header.seq;
    call->minus_inf_inputs = minus_inf;
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
    // Given a mask's -inf, only NaN or +Inf out makes an origin (-inf out is carried on).
    for (const c10::IValue& v : outputs) {
      for_each_tensor(v, [&](const at::Tensor& t) {
        if (!bad && (call.minus_inf_inputs ? has_nan_or_pinf(t) : !all_finite(t))) {
          bad = true;
          dtype = t.scalar_type();
        }
      });
    }
    if (!bad) {
      if (!call.minus_inf_inputs) note_underflow(call, outputs);
      return;
    }
    Candidate c;
    c.seq = call.seq;
    c.minus_inf_inputs = call.minus_inf_inputs;
    c.op = call.info->name;
    c.overload = call.info->overload;
    c.out_dtype = dtype;
    c.underflow = underflow_input(call);
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

void OriginTracker::note_underflow(const Call& call, const std::vector<c10::IValue>& outputs) {
  if (draws_random(call.info->name)) return;
  bool zeros = false;
  for (const c10::IValue& v : outputs)
    if (v.isTensor()) zeros = zeros || narrow_with_zeros(v.toTensor());
  if (!zeros) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (zeros_.size() >= kMaxZeroOutputs) return;
  }
  auto remember = [this](const at::Tensor& t, const Candidate::Underflow& what) {
    Zeros z;
    z.version = static_cast<uint32_t>(t._version());
    z.alive = t.unsafeGetTensorImpl()->unsafe_storage().getWeakStorageImpl();
    z.what = what;
    std::lock_guard<std::mutex> lk(mu_);
    zeros_.insert_or_assign(storage_of(t), std::move(z));
  };
  // A copy (a cast, autocast's included, a concatenation, a gather) hands underflowed zeros
  // on: its output's zeros are the same underflow. (Views share the storage already.)
  if (passes_values_on(call.info->name)) {
    if (const auto from = underflow_input(call)) {
      for (const c10::IValue& v : outputs)
        if (v.isTensor() && narrow_with_zeros(v.toTensor())) remember(v.toTensor(), *from);
      return;
    }
  }
  std::vector<c10::IValue> again;
  try {
    again = rerun_in_float64(call.info->name, call.info->overload, call.inputs, nullptr);
  } catch (const std::exception&) {
    return;  // an op without a float64 kernel: its zeros stay unexplained, nothing is wrong
  }
  for (size_t i = 0; i < outputs.size() && i < again.size(); ++i) {
    if (!outputs[i].isTensor() || !again[i].isTensor()) continue;
    const at::Tensor& t = outputs[i].toTensor();
    const at::Tensor& y = again[i].toTensor();
    if (!narrow_with_zeros(t) || !y.defined() || y.sizes() != t.sizes() ||
        !at::isFloatingType(y.scalar_type()))
      continue;
    const at::Tensor yd = y.to(at::kDouble).abs();
    // Zero here, non-zero in float64 and too small for the dtype: rounded to zero (or
    // flushed, when the program flushes subnormals).
    const at::Tensor lost =
        t.eq(0).logical_and(yd.ne(0)).logical_and(yd.lt(min_normal(t.scalar_type())));
    const int64_t n = lost.sum().item<int64_t>();
    if (n == 0) continue;
    Candidate::Underflow what;
    what.seq = call.seq;
    what.op = call.info->name;
    what.zeros = n;
    what.example = yd.masked_select(lost).max().item<double>();
    what.dtype = t.scalar_type();
    remember(t, what);
  }
}

std::optional<OriginTracker::Candidate::Underflow> OriginTracker::underflow_input(
    const Call& call) {
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    if (call.copied[i] || !call.inputs[i].isTensor()) continue;
    const at::Tensor& t = call.inputs[i].toTensor();
    const void* storage = storage_of(t);
    if (storage == nullptr || t.is_inference()) continue;
    std::optional<Candidate::Underflow> found;
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = zeros_.find(storage);
      // The weak reference keeps the address from being reused by another storage; the
      // version says nothing wrote it since.
      if (it != zeros_.end() && it->second.version == static_cast<uint32_t>(t._version()))
        found = it->second.what;
    }
    if (found && t.eq(0).any().item<bool>()) {
      found->input = i;
      return found;
    }
  }
  return std::nullopt;
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

namespace {

// Ops that turn a finite, exactly-zero input into ±Inf (IEEE 754's divide-by-zero
// exception): the fallback when the exception flags could not be read (below).
bool can_divide_by_zero(const std::string& op) {
  static const char* const kOps[] = {
      "aten::div",     "aten::div_",        "aten::true_divide", "aten::reciprocal",
      "aten::log",     "aten::log2",        "aten::log10",       "aten::log1p",
      "aten::rsqrt",   "aten::pow",         "aten::atanh",       "aten::xlogy",
      "aten::digamma", "aten::polygamma",   "aten::lgamma",      "aten::floor_divide",
      "aten::addcdiv", "aten::log_softmax", "aten::logit",       "aten::special_xlog1py"};
  for (const char* o : kOps)
    if (op == o) return true;
  return false;
}

bool has_zero_input(const std::vector<c10::IValue>& inputs) {
  bool zero = false;
  for (const c10::IValue& in : inputs) {
    if (in.isScalar()) zero = zero || std::fpclassify(in.toScalar().toDouble()) == FP_ZERO;
    for_each_tensor(in, [&](const at::Tensor& t) {
      if (!zero && t.defined() && t.numel() > 0 && !t.is_complex())
        zero = t.eq(0).any().item<bool>();
    });
  }
  return zero;
}

// Below this many elements per output ATen runs an element-wise kernel on the calling
// thread (at::internal::GRAIN_SIZE), so the exception flags it raised are this thread's.
constexpr int64_t kOneThreadNumel = 32768;

}  // namespace

OriginVerdict classify_origin(const OriginTracker::Candidate& c) {
  OriginVerdict v{"unknown", ""};
  try {
    for (const c10::IValue& in : c.inputs) {
      if (in.isScalar() && !in.toScalar().isComplex() && !std::isfinite(in.toScalar().toDouble())) {
        v.classification = "inherited";
        v.why = "the op was given a non-finite number (" +
                std::to_string(in.toScalar().toDouble()) +
                ") as an argument: it came from the program, not from the op's arithmetic";
        return v;
      }
    }
    if (!c10::Dispatcher::singleton().findSchema({c.op, c.overload})) {
      v.why = "the op " + c.op + "." + c.overload + " has no schema to re-run it with";
      return v;
    }
    int raised = 0;
    const std::vector<c10::IValue> stack = rerun_in_float64(c.op, c.overload, c.inputs, &raised);
    int64_t nan = 0, inf = 0, largest_numel = 0;
    double abs_max = 0;
    bool on_cpu = true;
    for (const c10::IValue& out : stack) {
      for_each_tensor(out, [&](const at::Tensor& t) {
        if (!t.defined() || !at::isFloatingType(t.scalar_type()) || t.numel() == 0) return;
        on_cpu = on_cpu && t.is_cpu();
        largest_numel = std::max<int64_t>(largest_numel, t.numel());
        const at::Tensor d = t.to(at::kDouble);
        nan += d.isnan().sum().item<int64_t>();
        inf += d.isinf().sum().item<int64_t>();
        const at::Tensor finite = d.masked_fill(d.isfinite().logical_not(), 0.0).abs();
        abs_max = std::max(abs_max, finite.max().item<double>());
      });
    }
    // Flags are per thread: trusted when the kernel ran on this one (CPU, small outputs).
    const bool flags_read = on_cpu && largest_numel < kOneThreadNumel;
    const std::string name = dtype_text(c.out_dtype);
    if (nan > 0) {
      v.classification = "invalid";
      v.why = fmt::format(
          "the float64 re-run on the same finite inputs gives {} NaN{}: an invalid operation "
          "(0/0, inf - inf, 0 * inf, sqrt or log of a negative number), not a lack of range",
          nan, inf > 0 ? fmt::format(" and {} Inf", inf) : std::string());
    } else if (inf > 0) {
      // Vectorised math (SLEEF's log, exp) returns ±Inf without raising the flag, so an
      // exact zero into an op that divides or takes a log counts as well.
      const bool by_zero =
          (flags_read && (raised & FE_DIVBYZERO) != 0 && (raised & FE_OVERFLOW) == 0) ||
          (can_divide_by_zero(c.op) && has_zero_input(c.inputs));
      v.classification = by_zero ? "divide_by_zero" : "overflow";
      v.why = by_zero ? fmt::format(
                            "the float64 re-run gives {} Inf too, from an exact zero (x/0, "
                            "log(0)): a division by zero, which no format's range avoids",
                            inf)
                      : fmt::format(
                            "the float64 re-run gives {} Inf too: the exact result is finite "
                            "but beyond float64's range (max 1.8e308) as well, so no "
                            "floating-point format holds it (the inputs are too large)",
                            inf);

    } else if (abs_max > dtype_max(c.out_dtype)) {
      v.classification = "range";
      v.why =
          fmt::format("float64 result reaches {:.3g}, beyond {}'s max {:.3g}: an overflow of {}",
                      abs_max, name, dtype_max(c.out_dtype), name);
    } else if (c.out_dtype == at::kDouble) {
      v.why = "the op already computes in float64 and its re-run is finite: not reproduced";
    } else {
      v.classification = "range";
      v.why = fmt::format(
          "float64 result is finite and stays within {}'s range (max |x| {:.3g} <= {:.3g}): an "
          "intermediate value inside the op overflowed in {}",
          name, abs_max, dtype_max(c.out_dtype), name);
    }
    // A zero that an earlier op produced by underflow: the exception to name is that op's.
    const bool from_zero = v.classification == "divide_by_zero" ||
                           (v.classification == "invalid" && can_divide_by_zero(c.op));
    if (from_zero && c.underflow) {
      const auto& u = *c.underflow;
      v.why = fmt::format(
          "input {} holds {} where {} (op {} of the step) underflowed: its float64 re-run "
          "gives non-zero values there (up to {:.3g}), below {}'s smallest normal {:.3g}, "
          "which it rounded to zero; this op's {} follows from that zero",
          u.input, u.zeros == 1 ? std::string("a zero") : fmt::format("{} zeros", u.zeros), u.op,
          u.seq, u.example, dtype_text(u.dtype), min_normal(u.dtype),
          v.classification == "invalid" ? "0/0" : "division by zero");
      v.classification = "underflow";
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
    } else if (list_holds_tensor(v)) {
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
