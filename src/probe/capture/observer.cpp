// Observer: see observer.h. The callbacks never throw: every body is wrapped, failures
// are reported and counted, and a record that was already queued is still ended.
#include "capture/observer.h"

#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <cstdlib>

#include "capture/observer_internal.h"
#include "precprobe/debugger.h"
#include "precprobe/error.h"
#include "replay/replay_origin.h"
#include "scaler/scaled_grads.h"
#include "support/own_code.h"

namespace precprobe {
namespace detail {
namespace {

std::atomic<uint64_t> g_generation{0};

struct OpContext final : at::ObserverContext {
  std::shared_ptr<PendingOp> op;
  // Slots created from this serial on (by ops nested in this one) may be stale when it
  // ends if they were captured inside a kernel (Slot::untracked).
  uint64_t serial_after_inputs = 0;
  bool writes = false;          // the op writes one of its arguments
  bool below_autograd = false;  // the op runs inside another op's kernel
  bool alias_unread = false;    // a view or alias of uninitialized memory: so is the output
  bool output_unread = false;   // a set_ onto a Storage, a resize_ of unread memory
  bool mark_unread = false;     // an aten::empty* outside kernels: mark_unread_memory()
  int64_t numel_before = -1;    // a resize's self before it: a grown output is unread
  bool range = false;           // its tensors get range statistics (Observer::range_for)
  bool save = false;
  std::string name;                        // full name, when saving tensors
  const char* origin = "(autograd node)";  // process-lifetime op name, for diagnostics
  OriginTracker* tracker = nullptr;        // during a replay: the call as the tracker sees it
  std::shared_ptr<OriginTracker::Call> tracked;
};

bool any_requires_grad(c10::ArrayRef<const c10::IValue> values) {
  for (const auto& v : values) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().requires_grad()) return true;
    if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList().vec())
        if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

// Whether the first output of a resize has more elements than its self had before.
bool grew(const std::vector<c10::IValue>& outs, int64_t numel_before) {
  if (outs.empty() || !outs[0].isTensor() || !outs[0].toTensor().defined()) return false;
  return outs[0].toTensor().numel() > numel_before;
}

// A resize or set_ (OpInfo::regrows): whether its output will be unread.
void note_regrow(StatsEngine& engine, const OpInfo& info, c10::ArrayRef<const c10::IValue> inputs,
                 OpContext& ctx) {
  if (info.regrows == OpInfo::Regrows::kAlways) {
    ctx.output_unread = true;
    return;
  }
  if (inputs.empty() || !inputs[0].isTensor()) return;
  const at::Tensor& self = inputs[0].toTensor();
  ctx.numel_before = self.defined() ? self.numel() : 0;
  // Resizing memory nothing wrote (at::empty's) leaves it unwritten, grown or not.
  if (self.defined() && engine.known_unread(self)) ctx.output_unread = true;
}

// Inside another op's kernel (VariableType's AutoDispatchBelowADInplaceOrView), ops write
// tensors without bumping their version counters.
bool below_ad_inplace_or_view() {
  return c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::ADInplaceOrView);
}

bool scope_prefix_matches(const std::string& path, const std::string& prefix) {
  if (path.compare(0, prefix.size(), prefix) != 0) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '/';
}

}  // namespace

Observer::Observer(const DebuggerOptions& options, DumpWriter* writer, std::string rank_dir)
    : options_(options),
      list_(options.list),
      writer_(writer),
      rank_dir_(std::move(rank_dir)),
      generation_(++g_generation) {
  EngineConfig cfg;
  cfg.async = options.async_stats;
  // Tuning knob for measurements (docs/debugger.md): tensors below this many elements are
  // summarised on the capturing thread.
  if (const char* v = std::getenv("PRECPROBE_INLINE_NUMEL")) cfg.inline_numel = std::atoll(v);
  cfg.with_hash = options.summary_mode == SummaryMode::kHash;
  cfg.carry = options.reuse_across_steps;
  const int level = options.zstd_level;
  cfg.save_tensor = [level](const at::Tensor& t, const std::string& path) {
    return write_npy_zst(t, path, level);
  };
  cfg.emit = [this](PendingOp& op) { emit(op); };
  engine_ = std::make_unique<StatsEngine>(std::move(cfg));
  if (options.task == Task::kOverflowCheck) finite_ = std::make_unique<FiniteMemo>();
}

Observer::~Observer() {
  detach();
  engine_.reset();  // drains: emit() still needs the members above
}

void Observer::set_parameters(const std::vector<std::pair<std::string, at::Tensor>>& named) {
  params_.clear();
  param_tensors_.clear();
  for (const auto& [name, t] : named) {
    param_tensors_.push_back(t);
    const void* s = storage_of(t);
    const size_t dot = name.rfind('.');
    if (s != nullptr)
      params_.emplace(
          s, ParamName{name, t.numel(), dot == std::string::npos ? "(root)" : name.substr(0, dot)});
  }
  placing_ = finite_ != nullptr && !params_.empty();  // overflow_check places its records
}

const Observer::ParamName* Observer::param_of(const at::Tensor& t) const {
  if (params_.empty()) return nullptr;
  auto it = params_.find(storage_of(t));
  // A view of the whole parameter (weight.t()) keeps the name; a slice does not.
  if (it == params_.end() || it->second.numel != t.numel()) return nullptr;
  return &it->second;
}

const std::string* Observer::parameter_name(const at::Tensor& t) const {
  const ParamName* p = param_of(t);
  return p != nullptr ? &p->name : nullptr;
}

void Observer::take_control() noexcept {
  controller_.store(&thread_state(), std::memory_order_release);
}

bool Observer::outside_step(const ThreadState& ts) const noexcept {
  return ts.nodes.empty() && &ts != controller_.load(std::memory_order_acquire);
}

int64_t Observer::next_call(ThreadState& ts, bool background, Direction dir, const OpInfo& info) {
  if (!background) return op_calls_[static_cast<int>(dir)].next(info.name_index);
  if (ts.own_calls_generation != generation_ || ts.own_calls_step != step_) {
    ts.own_calls_generation = generation_;
    ts.own_calls_step = step_;
    std::fill(ts.own_calls.begin(), ts.own_calls.end(), 0);
  }
  // Forward only: a thread outside the step runs no autograd node.
  if (info.name_index >= ts.own_calls.size()) ts.own_calls.resize(info.name_index + 64, 0);
  return ts.own_calls[info.name_index]++;
}

void Observer::attach() {
  if (handle_ != 0) return;
  thread_index();  // the controlling thread is thread 0
  take_control();
  {
    // Unobserved steps left the gradients as they are: stale until a backward writes them.
    std::lock_guard<std::mutex> lk(hook_mu_);
    for (HookParam& h : hook_params_) remember_grad(h);
  }
  handle_ = install_callbacks(this);
}

void Observer::detach() noexcept {
  if (handle_ == 0) return;
  uninstall_callbacks(handle_);
  handle_ = 0;
}

void Observer::begin_step(int64_t step) {
  take_control();
  {
    std::lock_guard<std::mutex> lk(flagged_mu_);
    flagged_.clear();
  }
  std::lock_guard<std::mutex> lk(engine_->order_mutex());
  step_ = step;
  step_now_.store(step, std::memory_order_release);
  seq_ = 0;
  backward_seen_.store(false, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> hk(hook_mu_);
    for (HookParam& h : hook_params_) h.observed = false;
  }
  op_calls_[0].clear();
  op_calls_[1].clear();
  node_calls_.clear();
  in_range_ = false;
}

void Observer::end_step() {
  end_placement();
  optimizer_step_.store(false, std::memory_order_relaxed);  // a step() that threw left it
  auto marker = make_pending_op();
  marker->flush_marker = true;
  {
    std::lock_guard<std::mutex> lk(engine_->order_mutex());
    marker->header.step = step_;  // the step_end event the writer appends (dump_format.h)
    engine_->push_op(std::move(marker));
  }
  engine_->clear_cache();
}

void Observer::drain() {
  end_placement();
  engine_->drain();
}

uint32_t Observer::thread_index() {
  ThreadState& ts = thread_state();
  if (ts.generation != generation_) {
    ts.generation = generation_;
    ts.index = next_thread_.fetch_add(1, std::memory_order_relaxed);
  }
  return ts.index;
}

Observer::Selection Observer::select(const std::string& op, Direction dir, int64_t call,
                                     bool background) {
  Selection s;
  if (dir == Direction::kForward ? !options_.dump_forward : !options_.dump_backward) return s;
  if (options_.max_calls_per_op >= 0 && call >= options_.max_calls_per_op) return s;
  const bool range = options_.scope.size() == 2;
  if (!list_.empty() || range || options_.task == Task::kTensor) {
    s.name = op;
    s.name += '.';
    s.name += std::to_string(call);
    s.name += dir == Direction::kForward ? ".forward" : ".backward";
  }
  const bool listed = list_.empty() || list_.matches(s.name);
  bool scoped = true;
  if (range && background) {
    scoped = in_range_;
  } else if (range) {
    if (!in_range_ && s.name == options_.scope[0]) in_range_ = true;
    scoped = in_range_;
    if (in_range_ && s.name == options_.scope[1]) in_range_ = false;
  } else if (options_.scope.size() == 1) {
    scoped = scope_prefix_matches(Scope::current_path(), options_.scope[0]);
  }
  if (options_.task == Task::kTensor) {
    s.record = true;
    s.save = listed && scoped;
  } else {
    s.record = listed && scoped;
  }
  return s;
}

std::shared_ptr<PendingOp> Observer::make_op(const std::string& op, const std::string& overload,
                                             Direction dir, int32_t depth) {
  auto p = make_pending_op();
  OpRecord& h = p->header;
  h.step = step_;
  h.seq = seq_++;
  h.op = op;
  h.overload = overload;
  h.dir = dir;
  h.depth = depth;
  return p;
}

std::unique_ptr<at::ObserverContext> Observer::on_op_start(const at::RecordFunction& fn,
                                                           const OpInfo& info, int32_t depth) {
  ops_seen_.fetch_add(1, std::memory_order_relaxed);
  std::shared_ptr<PendingOp> op;
  const bool grad_on = grad_enabled();  // the caller's mode
  try {
    OwnCodeGuard own;                      // our own ATen calls are not observed
    GradOffGuard no_grad_for_us(grad_on);  // restores the caller's mode on exit
    std::unique_ptr<OpContext> ctx;
    std::unique_ptr<at::ObserverContext> fast;  // overflow_check
    const bool wanted = !overflow_done() && (options_.level == Level::kL2 || depth == 0);
    if (wanted && finite_) {
      fast = overflow_start(fn, info, depth, grad_on);
    } else if (finite_ && placing_held() && (options_.level == Level::kL2 || depth == 0)) {
      overflow_place(fn, info, depth, grad_on);  // a record waits for its module
    } else if (wanted) {
      ThreadState& ts = thread_state();
      const Direction dir = ts.nodes.empty() ? Direction::kForward : Direction::kBackward;
      const bool background = outside_step(ts);
      Selection sel;
      {
        std::lock_guard<std::mutex> lk(engine_->order_mutex());
        const int64_t call = next_call(ts, background, dir, info);
        sel = select(info.name, dir, call, background);
        if (sel.record) {
          op = make_op(info.name, info.overload, dir, depth);
          op->header.call = call;
          op->header.background = background;
          engine_->push_op(op);
        }
      }
      if (op) {
        set_capture_origin(info.name.c_str());
        OpRecord& h = op->header;
        h.thread = thread_index();
        h.scope = Scope::current_path();
        if (dir == Direction::kBackward) {
          h.node = ts.nodes.back().name;
          h.seqnr = ts.nodes.back().seqnr;
        } else {
          h.grad = grad_on;  // a training pass (on) or an evaluation/sampling pass (off)
          h.optimizer = !background && optimizer_step_.load(std::memory_order_relaxed);
        }
        ctx = std::make_unique<OpContext>();
        ctx->origin = info.name.c_str();
        ctx->op = op;
        ctx->save = sel.save;
        ctx->name = std::move(sel.name);
        auto inputs = fn.inputs();
        // Only an op that may have made an autograd node gets its number: otherwise
        // seqNr() is just the next free number, which a later op will take.
        if (dir == Direction::kForward && grad_on && any_requires_grad(inputs))
          h.seqnr = fn.seqNr();
        ctx->writes = !info.write_args.empty();
        ctx->range = range_for(dir, grad_on);
        ctx->below_autograd = depth > 0 && below_ad_inplace_or_view();
        ctx->mark_unread = info.fresh_allocation && depth == 0;
        if (options_.dump_inputs || options_.task == Task::kOverflowCheck) {
          CaptureOptions how;
          how.untracked = ctx->below_autograd;
          how.range = ctx->range;
          // Outside kernels, statistics taken inside one are not trusted: it may have
          // written the tensor after them.
          if (!ctx->below_autograd) how.reuse_before = 0;
          // Inside a kernel, a buffer this op overwrites or hands back unread (copy_'s
          // destination, resolve_conj's self) may be the kernel's own output, not written
          // yet: garbage that must not be read (it can hold NaN/Inf bit patterns).
          // So may the fresh allocation of an enclosing aten::empty* (2.x's deterministic
          // mode fills it with NaN through fill_, inside empty).
          const bool in_empty = ts.uninitialized_depth >= 0 && depth > ts.uninitialized_depth;
          AliasCapture alias;
          alias.positions = &info.alias_args;
          alias.unread_if_new = ctx->below_autograd || in_empty;
          alias.destinations = &info.out_args;
          capture_args(inputs, op->in, *op, sel.save ? &ctx->name : nullptr, true, how, &alias);
          // A view (as_strided, transpose, resolve_conj...) of memory not written yet reads
          // the same garbage; an op that writes it makes it defined.
          ctx->alias_unread = alias.any_unread && !ctx->writes;
        }
        if (info.regrows != OpInfo::Regrows::kNo) note_regrow(*engine_, info, inputs, *ctx);
        ctx->serial_after_inputs = engine_->next_serial();
        if (OriginTracker* t = origin_tracker_.load(std::memory_order_acquire)) {
          ctx->tracked = t->on_start(info, op->header, inputs);
          if (ctx->tracked) ctx->tracker = t;
        }
      }
    }
    if (depth == 0 && !param_tensors_.empty()) {
      const float scale = scaled_grads_window();  // one atomic load per op outside a window
      if (scale > 0.0f && thread_state().nodes.empty())
        check_scaled_grad_read(fn.inputs(), info, scale);
    }
    if (!info.write_args.empty()) {
      auto inputs = fn.inputs();
      if (grad_hook_armed_.load(std::memory_order_acquire)) maybe_run_grad_hook(inputs, info);
      // Whether recorded or not: nothing queued may still read what this op overwrites,
      // and no statistics cached for its storage are reused (before_write() returns after
      // a load and a compare when neither applies).
      for (size_t i : info.write_args)
        if (i < inputs.size())
          for_each_tensor(inputs[i], [this](const at::Tensor& t) { written(t); });
    }
    if (fast) return fast;
    return ctx;
  } catch (const std::exception& e) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    report_error(std::string("precprobe: observing ") + info.name + " failed: " + e.what());
  } catch (...) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    report_error("precprobe: observing " + info.name + " failed");
  }
  if (op) engine_->end_op(*op);  // queued: it must end or it blocks every later record
  return nullptr;
}

std::unique_ptr<at::ObserverContext> Observer::on_node_start(const at::RecordFunction& fn) {
  ops_seen_.fetch_add(1, std::memory_order_relaxed);
  backward_seen_.store(true, std::memory_order_relaxed);
  std::shared_ptr<PendingOp> op;
  try {
    // overflow_check: a node's record has no outputs, so it never shows an overflow.
    if (overflow_done() || finite_) return nullptr;
    OwnCodeGuard own;  // our own ATen calls are not observed
    GradOffGuard no_grad;
    const NodeFrame& node = thread_state().nodes.back();
    Selection sel;
    {
      std::lock_guard<std::mutex> lk(engine_->order_mutex());
      const int64_t call = node_calls_[node.name]++;
      sel = select(node.name, Direction::kBackward, call);
      if (!sel.record) return nullptr;
      op = make_op(node.name, "", Direction::kBackward, 0);
      op->header.call = call;
      engine_->push_op(op);
    }
    set_capture_origin("(autograd node)");
    op->header.thread = thread_index();
    op->header.scope = Scope::current_path();
    op->header.node = node.name;
    op->header.seqnr = node.seqnr;
    auto ctx = std::make_unique<OpContext>();
    ctx->op = op;
    ctx->save = sel.save;
    ctx->name = std::move(sel.name);
    ctx->range = range_for(Direction::kBackward, false);
    if (options_.dump_inputs || options_.task == Task::kOverflowCheck) {
      CaptureOptions how;
      how.range = ctx->range;
      capture_args(fn.inputs(), op->in, *op, sel.save ? &ctx->name : nullptr, true, how, nullptr);
    }
    return ctx;
  } catch (const std::exception& e) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    report_error(std::string("precprobe: observing a backward node failed: ") + e.what());
  } catch (...) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    report_error("precprobe: observing a backward node failed");
  }
  if (op) engine_->end_op(*op);
  return nullptr;
}

void Observer::on_end(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  if (finite_) {
    overflow_end(fn, ctx);
    return;
  }
  auto* c = static_cast<OpContext*>(ctx);
  PendingOp& op = *c->op;
  set_capture_origin(c->origin);
  try {
    OwnCodeGuard own;  // our own ATen calls are not observed
    GradOffGuard no_grad;
    const bool outputs = options_.dump_outputs || options_.task == Task::kOverflowCheck;
    if (outputs && fn.scope() != at::RecordScope::BACKWARD_FUNCTION) {
      const std::vector<c10::IValue>& outs = fn.outputs();
      if (c->mark_unread)
        for (const c10::IValue& v : outs) for_each_tensor(v, mark_unread_memory);
      // An output whose slot was captured inside a kernel while this op ran (by this op's
      // own input capture when it writes, or by an op nested in it) is summarised again:
      // the kernel may have written it since, without a version bump.
      CaptureOptions how;
      how.untracked = c->below_autograd;
      how.fresh = c->writes;
      how.reuse_before = c->serial_after_inputs;
      how.unread = c->alias_unread || c->output_unread ||
                   (c->numel_before >= 0 && grew(outs, c->numel_before));
      how.range = c->range;
      capture_args(c10::ArrayRef<const c10::IValue>(outs.data(), outs.size()), op.out, op,
                   c->save ? &c->name : nullptr, false, how, nullptr);
    }
    if (c->tracked) c->tracker->on_end(*c->tracked, fn.outputs());
    if (op.header.dir == Direction::kBackward && fn.scope() != at::RecordScope::BACKWARD_FUNCTION &&
        !param_tensors_.empty() && scaled_grads_window() > 0.0f)
      note_backward_outputs(fn.outputs());
  } catch (const std::exception& e) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    report_error(std::string("precprobe: observing the outputs of ") + op.header.op +
                 " failed: " + e.what());
  } catch (...) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    report_error("precprobe: observing the outputs of " + op.header.op + " failed");
  }
  engine_->end_op(op);
}

void Observer::abandon(at::ObserverContext* ctx) noexcept {
  // overflow_check's contexts hold no queued record.
  if (auto* c = dynamic_cast<OpContext*>(ctx)) c->op->ended.store(true, std::memory_order_release);
}

bool Observer::keep_overflow(OpRecord& r) {
  if (overflow_done()) return false;
  // The analyses' masking rule (precprobe/masking.h): a mask writer is no overflow; it is
  // held back, and written before a NaN born of its -inf later in its step, so that
  // `precprobe overflow` on this dump names both, as on a statistics dump.
  if (r.step != mask_writers_step_) {
    mask_writers_.clear();
    mask_writers_step_ = r.step;
  }
  switch (masks_.observe(r)) {
    case MaskWatch::Role::kWriter:
      if (mask_writers_.size() >= kMaxMaskWriters) mask_writers_.erase(mask_writers_.begin());
      mask_writers_[r.seq] = std::move(r);
      return false;
    case MaskWatch::Role::kCarrier:
      return false;
    case MaskWatch::Role::kBorn: {
      auto w = mask_writers_.find(masks_.writer_seq());
      if (w != mask_writers_.end()) {
        if (writer_->submit(std::move(w->second)))
          ops_recorded_.fetch_add(1, std::memory_order_relaxed);
        mask_writers_.erase(w);
      }
      break;
    }
    case MaskWatch::Role::kNone:
      if (!r.outputs_non_finite() || r.inputs_non_finite()) return false;
      break;
  }
  ++overflow_count_;
  overflows_.fetch_add(1, std::memory_order_relaxed);
  if (options_.overflow_nums >= 0 && overflow_count_ >= options_.overflow_nums)
    overflow_done_.store(true, std::memory_order_release);
  return true;
}

void Observer::written(const at::Tensor& t) {
  engine_->before_write(t);
  if (finite_) finite_->forget(storage_of(t));
}

void Observer::before_write(const at::Tensor& t) noexcept {
  try {
    OwnCodeGuard own;
    written(t);
  } catch (const std::exception& e) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    report_error(std::string("precprobe: before a write by precprobe: ") + e.what());
  } catch (...) {
    errors_.fetch_add(1, std::memory_order_relaxed);
  }
}

ObserverCounters Observer::counters() const {
  ObserverCounters c;
  c.ops_seen = ops_seen_.load(std::memory_order_relaxed);
  c.ops_recorded = ops_recorded_.load(std::memory_order_relaxed);
  c.overflows = overflows_.load(std::memory_order_relaxed);
  c.errors = errors_.load(std::memory_order_relaxed);
  c.tensors_skipped = tensors_skipped_.load(std::memory_order_relaxed);
  c.engine = engine_->counters();
  return c;
}

}  // namespace detail
}  // namespace precprobe
