// The global RecordFunction callbacks and the op-schema registry. Nesting depth and the
// autograd node stack are tracked here for every event, whether or not an Observer wants
// it, so start and end always pair up on each thread.
#include <ATen/core/function_schema.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "capture/observer.h"
#include "capture/observer_internal.h"
#include "crash/crash_state.h"
#include "precprobe/error.h"
#include "support/own_code.h"
#include "support/torch_compat.h"

namespace precprobe {
namespace detail {
namespace {

std::atomic<Observer*> g_observer{nullptr};
std::atomic<int> g_inside{0};  // threads inside an Observer call

// Process-wide: schema facts never change. Keyed by the schema's name pointer, which is
// stable for a dispatcher op (it points into the registered FunctionSchema).
std::mutex g_registry_mu;
std::unordered_map<const char*, std::unique_ptr<OpInfo>>& registry() {
  static auto* r = new std::unordered_map<const char*, std::unique_ptr<OpInfo>>();
  return *r;
}

bool writes(const c10::AliasInfo* a) {
  if (a == nullptr) return false;
  if (a->isWrite()) return true;
  for (const auto& c : a->containedTypes())
    if (writes(&c)) return true;
  return false;
}

// Arguments kernels write in place although their schema does not say so (no "a!"):
// batch norm's running statistics (aten::batch_norm, native_batch_norm,
// _batch_norm_impl_index, instance_norm... on LibTorch 1.13 and 2.x alike), updated in
// training mode without a version bump. Without this, the statistics of a running_var read
// by the next batch_norm were served from the cache: the values before the update.
bool written_unannotated(const std::string& arg) {
  return arg == "running_mean" || arg == "running_var";
}

// Ops whose output may be memory nothing wrote: a resize that grows its tensor (what lies past
// the old size is whatever the allocator handed out; LibTorch's slow convolutions get their
// output from at::empty + resize_), and set_ onto a Storage, whose bytes may never have been
// written by an op.
OpInfo::Regrows regrows(const std::string& name, const std::string& overload) {
  if (name == "aten::resize_" || name == "aten::resize_as_" || name == "aten::_resize_output_" ||
      name == "aten::resize" || name == "aten::resize_as" || name == "aten::_resize_output")
    return OpInfo::Regrows::kIfGrown;
  if (name == "aten::set_" && overload.rfind("source_Tensor", 0) != 0)
    return OpInfo::Regrows::kAlways;  // set_(), set_.source_Storage*
  return OpInfo::Regrows::kNo;
}

std::unique_ptr<OpInfo> make_info(const at::RecordFunction& fn) {
  auto schema = op_schema(fn);
  if (!schema) return nullptr;
  auto info = std::make_unique<OpInfo>();
  info->name = schema->name();
  info->overload = schema->overload_name();
  OpRecord probe;
  probe.op = info->name;
  info->outputs_uninitialized = probe.outputs_uninitialized();
  info->regrows = regrows(info->name, info->overload);
  info->dropout = ModuleOp::is_dropout(info->name);
  const auto& args = schema->arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (writes(args[i].alias_info()) || written_unannotated(args[i].name()))
      info->write_args.push_back(i);
    if (args[i].alias_info() != nullptr) info->alias_args.push_back(i);
    if (args[i].kwarg_only() && writes(args[i].alias_info())) info->out_args.push_back(i);
  }
  info->fresh_allocation = info->outputs_uninitialized && info->out_args.empty();
  const auto& returns = schema->returns();
  info->returns_view = !returns.empty() && info->write_args.empty();
  for (const auto& r : returns)
    info->returns_view = info->returns_view && r.alias_info() != nullptr && !writes(r.alias_info());
  return info;
}

// Counts the calling thread in while it uses the Observer, so that uninstall can wait.
struct Inside {
  Inside() { g_inside.fetch_add(1, std::memory_order_acq_rel); }
  ~Inside() { g_inside.fetch_sub(1, std::memory_order_acq_rel); }
};

struct OpContext;

constexpr char kEnginePrefix[] = "autograd::engine::evaluate_function: ";

// The node name of an engine "evaluate_function" event, else nullptr.
const char* engine_node_name(const at::RecordFunction& fn) {
  if (fn.scope() != at::RecordScope::FUNCTION) return nullptr;
  const char* name = fn.name();
  constexpr size_t n = sizeof(kEnginePrefix) - 1;
  return std::strncmp(name, kEnginePrefix, n) == 0 ? name + n : nullptr;
}

std::unique_ptr<at::ObserverContext> start_cb(const at::RecordFunction& fn) {
  if (tl_own_code) return nullptr;  // an ATen op precprobe calls itself (own_code.h)
  ThreadState& ts = thread_state();
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    ts.nodes.push_back(NodeFrame{fn.name(), fn.seqNr(), ts.depth});
    ts.depth = 0;
    inflight_push(fn.name(), &ts);  // for a crash record (crash_state.h)
    Inside in;
    Observer* o = g_observer.load(std::memory_order_acquire);
    return o ? o->on_node_start(fn) : nullptr;
  }
  const OpInfo* info = lookup_op(fn);
  if (info == nullptr) {
    // The engine's evaluation of a node also accumulates the gradients it produced
    // (InputBuffer): those ops are backward too, attributed to the node.
    if (const char* node = engine_node_name(fn)) {
      ts.nodes.push_back(NodeFrame{node, -1, ts.depth, /*engine=*/true});
      ts.depth = 0;
    }
    return nullptr;  // other events (user scopes...) are transparent
  }
  const int32_t depth = ts.depth++;
  inflight_push(info->name.c_str(), &ts);
  if (info->outputs_uninitialized && ts.uninitialized_depth < 0) ts.uninitialized_depth = depth;
  Inside in;
  Observer* o = g_observer.load(std::memory_order_acquire);
  return o ? o->on_op_start(fn, *info, depth) : nullptr;
}

void end_cb(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  if (tl_own_code) return;  // started under the same guard: nothing was counted
  ThreadState& ts = thread_state();
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    inflight_pop();
    if (!ts.nodes.empty()) {
      ts.depth = ts.nodes.back().saved_depth;
      ts.nodes.pop_back();
    }
    // Until the engine's frame ends, its ops belong to the node just run.
    if (!ts.nodes.empty() && ts.nodes.back().engine && ts.nodes.back().name == fn.name())
      ts.nodes.back().seqnr = fn.seqNr();
  } else if (lookup_op(fn) != nullptr) {
    --ts.depth;
    inflight_pop();
    if (ts.uninitialized_depth == ts.depth) ts.uninitialized_depth = -1;
  } else if (engine_node_name(fn) != nullptr) {
    if (!ts.nodes.empty() && ts.nodes.back().engine) {
      ts.depth = ts.nodes.back().saved_depth;
      ts.nodes.pop_back();
    }
  }
  if (ctx == nullptr) return;
  Inside in;
  Observer* o = g_observer.load(std::memory_order_acquire);
  if (o != nullptr) {
    o->on_end(fn, ctx);
  } else {
    Observer::abandon(ctx);  // detached meanwhile: the record goes out without outputs
  }
}

}  // namespace

void before_own_write(const at::Tensor& t) noexcept {
  Inside in;
  Observer* o = g_observer.load(std::memory_order_acquire);
  if (o != nullptr) o->before_write(t);
}

const OpInfo* lookup_op(const at::RecordFunction& fn) {
  thread_local std::unordered_map<const char*, const OpInfo*> cache;
  const char* key = fn.name();
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (!op_overload_name(fn, nullptr)) return nullptr;  // not a dispatcher op: key unstable
  std::lock_guard<std::mutex> lk(g_registry_mu);
  auto& reg = registry();
  auto r = reg.find(key);
  if (r == reg.end()) {
    auto info = make_info(fn);
    if (!info) return nullptr;
    static std::unordered_map<std::string, uint32_t> name_indices;  // under g_registry_mu
    info->name_index =
        name_indices.emplace(info->name, static_cast<uint32_t>(name_indices.size())).first->second;
    r = reg.emplace(key, std::move(info)).first;
  }
  cache.emplace(key, r->second.get());
  return r->second.get();
}

ThreadState& thread_state() noexcept {
  thread_local ThreadState ts;
  return ts;
}

uint64_t install_callbacks(Observer* o) {
  Observer* expected = nullptr;
  if (!g_observer.compare_exchange_strong(expected, o))
    throw Error("precprobe: another PrecisionDebugger is already started in this process");
  auto cb = at::RecordFunctionCallback(&start_cb, &end_cb)
                .needsInputs(true)
                .needsOutputs(true)
                .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION});
  return at::addGlobalCallback(std::move(cb));
}

void uninstall_callbacks(uint64_t handle) noexcept {
  try {
    at::removeCallback(handle);
  } catch (...) {
    report_error("precprobe: removing the op callback failed");
  }
  g_observer.store(nullptr, std::memory_order_release);
  while (g_inside.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

}  // namespace detail
}  // namespace precprobe
