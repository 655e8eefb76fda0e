// DropoutGuard: a boxed kernel on TESTING_ONLY_GenericMode that sets the dropout probability
// of every op applying one to 0 (include/precprobe/dropout.h; docs/reproducibility.md).
#include "precprobe/dropout.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "precprobe/error.h"

namespace precprobe {
namespace {

// Sits above Autograd and Autocast, so the rewritten call is recorded by autograd with
// p = 0 and its backward is the identity. No stock LibTorch kernel uses it.
constexpr auto kKey = c10::DispatchKey::TESTING_ONLY_GenericMode;

// The ops whose dropout probability the guard sets to 0: every aten op (every overload) of the
// running LibTorch that applies a dropout in a forward pass, found by its schema, so that
// ops a newer LibTorch adds are covered without a list to keep:
//  - a float `p` in an op named *dropout* (dropout, feature_/alpha_ variants, native_dropout,
//    _fused_dropout; `p` elsewhere is a norm's order or a Bernoulli probability);
//  - a float `dropout_p`: the attention ops (scaled_dot_product_attention and its fused CPU,
//    flash, efficient, cuDNN and overrideable kernels, which apply it inside the kernel and
//    never call aten::dropout: Python's nn.MultiheadAttention trains through them);
//  - a float `dropout`: the recurrent ops (lstm, gru, rnn_tanh, rnn_relu, their cuDNN, MIOpen,
//    MPS and quantized kernels: dropout between layers).
// Backward ops are left alone (autograd hands them the p their forward ran with, 0 under the
// guard), and so are the ops that take a dropout probability without applying it:
// _fused_sdp_choice (picks a kernel), _cudnn_init_dropout_state, _fill_mem_eff_dropout_mask_.
// Composite ops are caught before they decompose, so the kernels they would call never see a
// non-zero p either.
bool is_dropout_probability(const c10::Argument& arg) {
  return arg.type()->kind() == c10::TypeKind::FloatType &&
         (arg.name() == "p" || arg.name() == "dropout_p" || arg.name() == "dropout");
}

bool applies_dropout(const c10::FunctionSchema& schema) {
  const std::string& name = schema.name();
  if (name.rfind("aten::", 0) != 0) return false;
  const auto ends_with = [&](const char* tail) {
    const size_t n = std::char_traits<char>::length(tail);
    return name.size() >= n && name.compare(name.size() - n, n, tail) == 0;
  };
  if (ends_with("_backward") || name == "aten::_fused_sdp_choice" ||
      name == "aten::_cudnn_init_dropout_state" || name == "aten::_fill_mem_eff_dropout_mask_")
    return false;
  const bool dropout_name = name.find("dropout") != std::string::npos;
  for (const auto& arg : schema.arguments())
    if (is_dropout_probability(arg) && (arg.name() != "p" || dropout_name)) return true;
  return false;
}

// "name" or "name.overload", as torch::Library::impl takes them.
std::string qualified(const c10::OperatorName& op) {
  std::string name = op.name.substr(std::char_traits<char>::length("aten::"));
  if (!op.overload_name.empty()) name += "." + op.overload_name;
  return name;
}

// The ops the guard covers in the running LibTorch, in the dispatcher's order.
std::vector<c10::OperatorName> guarded_op_names() {
  std::vector<c10::OperatorName> out;
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const auto& name : dispatcher.getAllOpNames()) {
    const auto op = dispatcher.findSchema(name);
    if (op && applies_dropout(op->schema())) out.push_back(name);
  }
  return out;
}

thread_local int t_depth = 0;
// Whether the key was included before this thread's outermost guard (an autograd thread
// may have inherited it): the outermost guard restores exactly that.
thread_local bool t_included_before = false;

void zero_p(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const size_t base = stack->size() - args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    if (is_dropout_probability(args[i])) (*stack)[base + i] = c10::IValue(0.0);
  }
  op.redispatchBoxed(ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kKey), stack);
}

struct Registration {
  // Deregister themselves when destroyed; they must live as long as the process can
  // dispatch, so they are held by a function-local static below.
  std::unique_ptr<torch::Library> fallthrough;
  std::unique_ptr<torch::Library> kernels;
};

// Throws when another library already put a kernel or a fallback on kKey: two users of
// a testing key would silently fight (or LibTorch would abort on the duplicate fallback).
void check_key_is_free(const std::vector<c10::OperatorName>& guarded) {
  auto& dispatcher = c10::Dispatcher::singleton();
  if (dispatcher.hasBackendFallbackForDispatchKey(kKey)) {
    throw Error(
        "DropoutGuard: another library already registered a fallback for dispatch key "
        "TESTING_ONLY_GenericMode; precprobe needs that key to force dropout to p=0. Set "
        "keep_dropout or remove the other registration.");
  }
  for (const auto& name : guarded) {
    auto op = dispatcher.findOp(name);
    if (op && op->hasKernelForDispatchKey(kKey)) {
      throw Error(
          "DropoutGuard: another library already registered a kernel for aten::" + qualified(name) +
          " on dispatch key TESTING_ONLY_GenericMode; precprobe needs that key.");
    }
  }
}

std::unique_ptr<Registration> make_registration() {
  const std::vector<c10::OperatorName> guarded = guarded_op_names();
  check_key_is_free(guarded);
  auto reg = std::make_unique<Registration>();
  try {
    // Every other op passes through the key untouched (costs one bit test per dispatch).
    reg->fallthrough =
        std::make_unique<torch::Library>(torch::Library::IMPL, "_", kKey, __FILE__, __LINE__);
    reg->fallthrough->fallback(torch::CppFunction::makeFallthrough());
    reg->kernels =
        std::make_unique<torch::Library>(torch::Library::IMPL, "aten", kKey, __FILE__, __LINE__);
    for (const auto& name : guarded) {
      reg->kernels->impl(qualified(name).c_str(),
                         torch::CppFunction::makeFromBoxedFunction<&zero_p>());
    }
  } catch (const c10::Error& e) {
    throw Error(std::string("DropoutGuard: registering the p=0 kernels on dispatch key "
                            "TESTING_ONLY_GenericMode failed: ") +
                e.what_without_backtrace());
  }
  return reg;
}

// Registers once per process; a failure is remembered and rethrown by every later guard.
void ensure_registered() {
  static std::mutex mutex;
  static std::unique_ptr<Registration> registration;
  static std::string failure;
  std::lock_guard<std::mutex> lock(mutex);
  if (registration) {
    return;
  }
  if (!failure.empty()) {
    throw Error(failure);
  }
  try {
    registration = make_registration();
  } catch (const Error& e) {
    failure = e.what();
    throw;
  }
}

}  // namespace

DropoutGuard::DropoutGuard() {
  ensure_registered();
  if (t_depth == 0) {
    t_included_before = c10::impl::tls_is_dispatch_key_included(kKey);
    c10::impl::tls_set_dispatch_key_included(kKey, true);
  }
  ++t_depth;
}

DropoutGuard::~DropoutGuard() {
  if (--t_depth == 0) {
    c10::impl::tls_set_dispatch_key_included(kKey, t_included_before);
  }
}

bool DropoutGuard::active() {
  // The key is only ever included by a guard (here or on the thread this one works for),
  // so the TLS bit is the truth, also on autograd threads whose t_depth is 0.
  return c10::impl::tls_is_dispatch_key_included(kKey);
}

int DropoutGuard::depth() { return t_depth; }

std::vector<std::string> DropoutGuard::guarded_ops() {
  std::vector<std::string> out;
  for (const auto& name : guarded_op_names()) out.push_back("aten::" + qualified(name));
  return out;
}

}  // namespace precprobe
