// A run in a low-precision format on the CPU, for the proof tests of `precprobe precision`:
// every op's floating inputs and outputs are rounded through fp16, bf16, fp8 E4M3FN or fp8
// E5M2, forward and backward, and each op reports whether it turned finite inputs into
// Inf/NaN or non-zero values into zeros. Only the outermost dispatcher calls (depth 0, the
// ops the debugger records at L1) round: an op that calls others computes inside in float
// and rounds its result once, as a low-precision kernel does.
//
// How: a boxed fallback on the dispatcher's TESTING_ONLY_GenericMode key (in LibTorch 1.13
// and 2.x), switched on for a thread with FormatEmulation::Active. The fallback rounds the
// op's floating tensor arguments (differentiably: casts, or RoundFp8 for fp8, whose backward
// rounds the gradient too), redispatches below itself and rounds the results. Ops whose schema
// aliases (views, in-place, out=) pass unrounded: their values come from tensors already
// rounded. Ops are named as the PrecisionDebugger names them, "<op>.<call>.<dir>": calls are
// counted per op name and direction for the outermost dispatcher calls (depth 0), direction
// backward inside an autograd node (a RecordFunction callback on BACKWARD_FUNCTION, as the
// debugger), and the counts restart at next_step(). Rounding can be paused (Rounding guard)
// for the parts real mixed precision keeps in fp32 (the loss, the loss scale) while the
// counting goes on, so that names stay those of an fp32 run of the same code.
//
// round_fp8() rounds one value to nearest, ties to even, like c10's casts: E4M3FN has no
// Inf, so beyond 448 (and its tie 464) it gives NaN; E5M2 gives +-Inf beyond 57344.
//
// One emulation at a time per process (a test); single-threaded use. precprobe's DropoutGuard
// registers a fallback on the same key when it forces dropout to p = 0: a test binary that
// registers this one runs its debuggers with "keep_dropout": true.
#pragma once

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace precprobe::test {

enum class Emulated { kFp16, kBf16, kE4m3, kE5m2 };

/// `x` rounded to the nearest E4M3FN (e4m3 = true) or E5M2 value, ties to even.
inline double round_fp8(double x, bool e4m3) {
  if (std::isnan(x) || !(x < 0 || x > 0)) return x;  // NaN, +-0
  const int mantissa = e4m3 ? 3 : 2;
  const int min_exp = e4m3 ? -6 : -14;  // the smallest normal's exponent
  const double max = e4m3 ? 448.0 : 57344.0;
  const double a = std::fabs(x);
  int e = std::isinf(a) ? 1024 : std::ilogb(a);
  if (e < min_exp) e = min_exp;  // subnormals share the smallest normal's quantum
  const double quantum = std::ldexp(1.0, e - mantissa);
  const double r = std::isinf(a) ? a : std::nearbyint(a / quantum) * quantum;  // ties to even
  const double overflow = e4m3 ? std::numeric_limits<double>::quiet_NaN() : HUGE_VAL;
  const double out = r > max ? overflow : r;
  return std::signbit(x) ? -out : out;
}

namespace emulation_detail {

inline at::Tensor round_values(const at::Tensor& x, bool e4m3) {
  at::Tensor y = x.detach().to(at::kDouble).contiguous().clone();
  double* p = y.data_ptr<double>();
  for (int64_t i = 0; i < y.numel(); ++i) p[i] = round_fp8(p[i], e4m3);
  return y.to(x.scalar_type());
}

// fp8 rounding as an autograd function: the gradient is rounded on its way back too.
struct RoundFp8 : torch::autograd::Function<RoundFp8> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, bool e4m3) {
    ctx->saved_data["e4m3"] = e4m3;
    return round_values(x, e4m3);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard off(c10::DispatchKey::TESTING_ONLY_GenericMode);
    const bool e4m3 = ctx->saved_data["e4m3"].toBool();
    return {grads[0].defined() ? round_values(grads[0], e4m3) : grads[0], at::Tensor()};
  }
};

/// Per op name "<op>.<call>.<dir>": what rounding its results did.
struct OpFacts {
  int64_t calls = 0;
  int64_t nonfinite_origin = 0;  ///< calls whose outputs turned non-finite from finite inputs
  int64_t flushed = 0;           ///< output elements non-zero before rounding, zero after
  int64_t elements = 0;          ///< output elements finite and non-zero before rounding
};

struct State {
  bool on = false;
  Emulated format = Emulated::kFp16;
  bool rounding = true;
  int depth = 0;
  int nodes = 0;  // autograd nodes running (BACKWARD_FUNCTION scope)
  std::map<std::pair<std::string, int>, int64_t> calls;
  std::map<std::string, OpFacts> facts;
};

inline State& state() {
  static State s;
  return s;
}

inline bool floating(const at::Tensor& t) {
  return t.defined() && (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble);
}

// Differentiable rounding (the caller excludes the mode key).
inline at::Tensor round_tensor(const at::Tensor& t, Emulated f) {
  switch (f) {
    case Emulated::kFp16:
      return t.to(at::kHalf).to(t.scalar_type());
    case Emulated::kBf16:
      return t.to(at::kBFloat16).to(t.scalar_type());
    default:
      return RoundFp8::apply(t, f == Emulated::kE4m3);
  }
}

// Rounds every floating tensor among stack[first, first + n); false when one is non-finite
// afterwards.
inline bool round_range(torch::jit::Stack& stack, size_t first, size_t n, bool round, Emulated f,
                        std::vector<at::Tensor>* before) {
  bool finite = true;
  auto one = [&](const at::Tensor& t) -> at::Tensor {
    if (!floating(t)) return t;
    at::Tensor r = round ? round_tensor(t, f) : t;
    if (before) before->push_back(t);
    finite = finite && at::isfinite(r).all().item<bool>();
    return r;
  };
  for (size_t i = first; i < first + n; ++i) {
    c10::IValue& v = stack[i];
    if (v.isTensor()) {
      v = one(v.toTensor());
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      for (size_t k = 0; k < list.size(); ++k) list.set(k, one(list.get(k)));
    }
  }
  return finite;
}

inline bool aliases(const c10::FunctionSchema& s) {
  for (const auto& a : s.arguments())
    if (a.alias_info() != nullptr) return true;
  for (const auto& r : s.returns())
    if (r.alias_info() != nullptr) return true;
  return false;
}

inline void fallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                     torch::jit::Stack* stack) {
  State& st = state();
  const c10::FunctionSchema& schema = op.schema();
  const bool top = st.depth == 0;
  std::string name;
  if (top) {
    const int dir = st.nodes > 0 ? 1 : 0;
    const int64_t call = st.calls[{schema.name(), dir}]++;
    name = schema.name() + "." + std::to_string(call) + (dir ? ".backward" : ".forward");
  }
  // Only the ops the debugger records at L1 (depth 0) round, inputs and outputs, as a
  // low-precision kernel computes in float and rounds its result once: an op that calls
  // others (2.x's mul.Scalar calls mul.Tensor) would otherwise have its result rounded, and
  // its zeros made, inside, where its own count does not see them.
  const bool round = st.rounding && !aliases(schema) && top;
  const size_t num_args = schema.arguments().size();
  bool inputs_finite = true;
  {
    c10::impl::ExcludeDispatchKeyGuard off(c10::DispatchKey::TESTING_ONLY_GenericMode);
    inputs_finite =
        round_range(*stack, stack->size() - num_args, num_args, round, st.format, nullptr);
  }
  ++st.depth;
  try {
    op.redispatchBoxed(ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER,
                                                c10::DispatchKey::TESTING_ONLY_GenericMode),
                       stack);
  } catch (...) {
    --st.depth;
    throw;
  }
  --st.depth;
  const size_t num_returns = schema.returns().size();
  c10::impl::ExcludeDispatchKeyGuard off(c10::DispatchKey::TESTING_ONLY_GenericMode);
  std::vector<at::Tensor> before;
  const bool outputs_finite =
      round_range(*stack, stack->size() - num_returns, num_returns, round, st.format, &before);
  if (!top) return;
  OpFacts& f = st.facts[name];
  ++f.calls;
  if (!outputs_finite && inputs_finite) ++f.nonfinite_origin;
  if (!round) return;
  size_t k = 0;
  for (size_t i = stack->size() - num_returns; i < stack->size(); ++i) {
    auto count = [&](const at::Tensor& r) {
      if (!floating(r) || k >= before.size()) return;
      const at::Tensor& b = before[k++];
      f.flushed += at::logical_and(b.ne(0), r.eq(0)).sum().item<int64_t>();
      f.elements += at::logical_and(b.ne(0), at::isfinite(b)).sum().item<int64_t>();
    };
    const c10::IValue& v = (*stack)[i];
    if (v.isTensor()) count(v.toTensor());
    if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList().vec()) count(t);
  }
}

}  // namespace emulation_detail

using emulation_detail::OpFacts;

/// Switches the emulation on for this thread while alive.
class FormatEmulation {
 public:
  explicit FormatEmulation(Emulated format)
      : include_(c10::DispatchKey::TESTING_ONLY_GenericMode),
        nodes_(at::addThreadLocalCallback(
            at::RecordFunctionCallback(
                [](const at::RecordFunction&) -> std::unique_ptr<at::ObserverContext> {
                  ++emulation_detail::state().nodes;
                  return nullptr;
                },
                [](const at::RecordFunction&, at::ObserverContext*) {
                  --emulation_detail::state().nodes;
                })
                .scopes({at::RecordScope::BACKWARD_FUNCTION}))) {
    auto& st = emulation_detail::state();
    st = emulation_detail::State{};
    st.on = true;
    st.format = format;
  }
  ~FormatEmulation() {
    at::removeCallback(nodes_);
    emulation_detail::state().on = false;
  }
  FormatEmulation(const FormatEmulation&) = delete;
  FormatEmulation& operator=(const FormatEmulation&) = delete;

  /// Call counts restart (the debugger's step()).
  void next_step() { emulation_detail::state().calls.clear(); }
  /// Facts per op name, over all steps so far.
  const std::map<std::string, OpFacts>& facts() const { return emulation_detail::state().facts; }

  /// Pauses rounding (ops are still counted) while alive: the fp32 parts of mixed precision.
  class Fp32 {
   public:
    Fp32() : was_(emulation_detail::state().rounding) {
      emulation_detail::state().rounding = false;
    }
    ~Fp32() { emulation_detail::state().rounding = was_; }
    Fp32(const Fp32&) = delete;
    Fp32& operator=(const Fp32&) = delete;

   private:
    bool was_;
  };

 private:
  c10::impl::IncludeDispatchKeyGuard include_;
  at::CallbackHandle nodes_;
};

/// Registers the fallback; include from one translation unit of a test.
#define PRECPROBE_REGISTER_FORMAT_EMULATION()                    \
  TORCH_LIBRARY_IMPL(_, TESTING_ONLY_GenericMode, m) {           \
    m.fallback(torch::CppFunction::makeFromBoxedFunction<        \
               &precprobe::test::emulation_detail::fallback>()); \
  }

}  // namespace precprobe::test
