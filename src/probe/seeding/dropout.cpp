// DropoutGuard: a boxed kernel on TESTING_ONLY_GenericMode that sets `p` to 0 (see
// /work/shared/notes/libtorch-internals.md, "Forcing dropout to p=0").
#include "precprobe/dropout.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <iterator>
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

// Every aten op with a dropout probability argument named "p". Composite ops
// (dropout, feature_dropout, ...) are caught before they decompose, so the kernels they
// would call never see a non-zero p either.
constexpr const char* kDropoutOps[] = {
    "dropout",       "dropout_",       "feature_dropout",       "feature_dropout_",
    "alpha_dropout", "alpha_dropout_", "feature_alpha_dropout", "feature_alpha_dropout_",
    "native_dropout"};

// LibTorch 2.x's attention ops, whose dropout is an argument "dropout_p" applied inside the
// kernel (the fused CPU and CUDA kernels never call aten::dropout: Python's
// nn.MultiheadAttention and TransformerEncoderLayer train through them). Registered where the
// running LibTorch has them.
constexpr const char* kAttentionOps[] = {"scaled_dot_product_attention",
                                         "_scaled_dot_product_attention_math",
                                         "_scaled_dot_product_flash_attention",
                                         "_scaled_dot_product_flash_attention_for_cpu",
                                         "_scaled_dot_product_efficient_attention",
                                         "_scaled_dot_product_cudnn_attention",
                                         "_scaled_dot_product_fused_attention_overrideable"};

bool has_op(const char* name) {
  return c10::Dispatcher::singleton()
      .findSchema(c10::OperatorName(std::string("aten::") + name, ""))
      .has_value();
}

// The ops whose dropout probability the guard sets to 0, in the running LibTorch.
std::vector<const char*> guarded_ops() {
  std::vector<const char*> ops(std::begin(kDropoutOps), std::end(kDropoutOps));
  for (const char* name : kAttentionOps)
    if (has_op(name)) ops.push_back(name);
  return ops;
}

thread_local int t_depth = 0;
// Whether the key was included before this thread's outermost guard (an autograd thread
// may have inherited it): the outermost guard restores exactly that.
thread_local bool t_included_before = false;

void zero_p(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const size_t base = stack->size() - args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].name() == "p" || args[i].name() == "dropout_p") {
      (*stack)[base + i] = c10::IValue(0.0);
    }
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
void check_key_is_free() {
  auto& dispatcher = c10::Dispatcher::singleton();
  if (dispatcher.hasBackendFallbackForDispatchKey(kKey)) {
    throw Error(
        "DropoutGuard: another library already registered a fallback for dispatch key "
        "TESTING_ONLY_GenericMode; precprobe needs that key to force dropout to p=0. Set "
        "keep_dropout or remove the other registration.");
  }
  for (const char* name : guarded_ops()) {
    auto op = dispatcher.findOp(c10::OperatorName(std::string("aten::") + name, ""));
    if (op && op->hasKernelForDispatchKey(kKey)) {
      throw Error(std::string("DropoutGuard: another library already registered a kernel "
                              "for aten::") +
                  name + " on dispatch key TESTING_ONLY_GenericMode; precprobe needs that key.");
    }
  }
}

std::unique_ptr<Registration> make_registration() {
  check_key_is_free();
  auto reg = std::make_unique<Registration>();
  try {
    // Every other op passes through the key untouched (costs one bit test per dispatch).
    reg->fallthrough =
        std::make_unique<torch::Library>(torch::Library::IMPL, "_", kKey, __FILE__, __LINE__);
    reg->fallthrough->fallback(torch::CppFunction::makeFallthrough());
    reg->kernels =
        std::make_unique<torch::Library>(torch::Library::IMPL, "aten", kKey, __FILE__, __LINE__);
    for (const char* name : guarded_ops()) {
      reg->kernels->impl(name, torch::CppFunction::makeFromBoxedFunction<&zero_p>());
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

}  // namespace precprobe
