// overflow_check's path through the Observer: it only has to find the ops whose outputs
// hold NaN/Inf while their inputs did not. Each new output is read once by the exponent-bit
// test (has_non_finite); an op whose outputs are finite builds nothing and writes nothing.
// Only for an op that does produce NaN/Inf from finite inputs (rare: overflow_nums of them
// end the task) is a full record built, with the statistics of its inputs and outputs.
//
// Inputs: an out-of-place op leaves them as they were, so they are tested only when an
// output is non-finite, at the op's end. An argument the op writes is tested at its start,
// before the write, unless FiniteMemo knows it (the output of an earlier tested op, or
// uninitialized memory inside a kernel): the optimizer's chains of in-place updates read each
// tensor once. In the rare record, such an argument's values are gone: it keeps dtype and shape,
// with counts 0 and statistics NaN (as for uninitialized memory). Ops that return views of their
// arguments (OpInfo::returns_view) are not read at all: they cannot be an origin.
#include <ATen/core/grad_mode.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "capture/observer.h"
#include "capture/observer_internal.h"
#include "precprobe/debugger.h"
#include "precprobe/error.h"
#include "precprobe/mask_ops.h"
#include "precprobe/masking.h"
#include "scaler/scaled_grads.h"
#include "support/own_code.h"

namespace precprobe {
namespace detail {
namespace {

struct OverflowContext final : at::ObserverContext {
  const OpInfo* info = nullptr;
  int64_t call = 0;
  int32_t depth = 0;
  Direction dir = Direction::kForward;
  bool grad_on = false;             // the caller's grad mode
  bool background = false;          // a thread outside the step (Observer::outside_step)
  bool written_non_finite = false;  // an argument it writes held NaN/Inf before
  int64_t place_index = -1;         // its index in the step's placement (observer_place.cpp)
  uint64_t place_epoch = 0;         // of that placement
  // The op's inputs, held from its start: the dispatcher frees the boxed arguments right
  // after the start callbacks, so fn.inputs() must not be read at the end (a TensorList
  // built for the call, as torch::stack({a, b}) builds one, is gone by then). Reading them
  // at the end crashed the program in aten::stack (issue 35).
  c10::SmallVector<c10::IValue, 4> inputs;
};

bool any_requires_grad(c10::ArrayRef<const c10::IValue> values) {
  bool any = false;
  for (const auto& v : values)
    for_each_tensor(v,
                    [&](const at::Tensor& t) { any = any || (t.defined() && t.requires_grad()); });
  return any;
}

// A non-tensor argument that is -inf: masked_fill(mask, -inf), full(size, -inf).
bool minus_inf_argument(c10::ArrayRef<const c10::IValue> values) {
  for (const c10::IValue& v : values) {
    if (v.isDouble() && std::isinf(v.toDouble()) && v.toDouble() < 0) return true;
    if (v.isScalar() && !v.toScalar().isComplex() && !v.toScalar().isIntegral(true)) {
      const double d = v.toScalar().toDouble();
      if (std::isinf(d) && d < 0) return true;
    }
  }
  return false;
}

bool is_written(const OpInfo& info, size_t i) {
  return std::find(info.write_args.begin(), info.write_args.end(), i) != info.write_args.end();
}

// An out= argument: what it held before is not the op's input (OpInfo::out_args).
bool is_destination(const OpInfo& info, size_t i) {
  return std::find(info.out_args.begin(), info.out_args.end(), i) != info.out_args.end();
}

}  // namespace

std::unique_ptr<at::ObserverContext> Observer::overflow_start(const at::RecordFunction& fn,
                                                              const OpInfo& info, int32_t depth,
                                                              bool grad_on) {
  ThreadState& ts = thread_state();
  const Direction dir = ts.nodes.empty() ? Direction::kForward : Direction::kBackward;
  const bool background = outside_step(ts);
  auto inputs = fn.inputs();
  int64_t call = 0, place_index = -1;
  uint64_t place_epoch = 0;
  bool record = false;
  std::vector<std::shared_ptr<PendingOp>> release;  // held records now placed
  {
    std::lock_guard<std::mutex> lk(engine_->order_mutex());
    call = next_call(ts, background, dir, info);
    place_index = place_locked(fn, inputs, info, depth, dir, background, grad_on, ts, release);
    place_epoch = placement_epoch_locked();
    record = select(info.name, dir, call, background).record;
  }
  for (const auto& op : release) engine_->end_op(*op);
  if (!record) return nullptr;
  auto ctx = std::make_unique<OverflowContext>();
  ctx->info = &info;
  ctx->call = call;
  ctx->place_index = place_index;
  ctx->place_epoch = place_epoch;
  ctx->depth = depth;
  ctx->dir = dir;
  ctx->grad_on = grad_on;
  ctx->background = background;
  ctx->inputs.assign(inputs.begin(), inputs.end());
  if (!info.write_args.empty()) {
    for (size_t i : info.write_args) {
      if (i >= inputs.size() || is_destination(info, i)) continue;
      for_each_tensor(inputs[i], [&](const at::Tensor& t) {
        if (!ctx->written_non_finite && !finite_->known(t) && has_non_finite(t))
          ctx->written_non_finite = true;
      });
    }
  }
  return ctx;
}

void Observer::overflow_end(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  auto* c = static_cast<OverflowContext*>(ctx);
  const OpInfo& info = *c->info;
  std::shared_ptr<PendingOp> op;
  bool held = false;  // waits for its module (observer_place.cpp)
  try {
    OwnCodeGuard own;  // our own ATen calls are not observed
    GradOffGuard no_grad;
    if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION || overflow_done()) return;
    const std::vector<c10::IValue>& outs = fn.outputs();
    if (c->dir == Direction::kBackward && !param_tensors_.empty() && scaled_grads_window() > 0.0f)
      note_backward_outputs(outs);
    // A view's NaN/Inf were its argument's: not read (the dataset a select indexes).
    if (info.returns_view) return;
    bool bad = false;
    for (const c10::IValue& v : outs)
      for_each_tensor(v, [&](const at::Tensor& t) {
        if (!t.defined()) return;
        // Garbage is never read. Inside a kernel it is remembered as "finite", so that the
        // op writing it next does not read it either. Outside kernels a program may fill
        // it through data_ptr() (a data loader's memcpy, at::tensor({...})) with no op, so
        // it is not remembered: the next op reads it (an empty's memory is marked, finite).
        // A resize or set_ hands back its self's values, or memory nothing wrote.
        const bool unwritten = info.outputs_uninitialized || info.regrows != OpInfo::Regrows::kNo;
        if (unwritten && c->depth == 0) {
          if (info.fresh_allocation) mark_unread_memory(t);
        } else if (unwritten || !has_non_finite(t)) {
          finite_->note(t);
        } else {
          bad = true;
        }
      });
    if (!bad || c->written_non_finite) return;
    // NaN/Inf came out: an origin only if none went in, or if what went in is a mask's -inf
    // (a writer ran earlier in the step) and NaN or +Inf came out (a fully masked softmax row).
    const c10::ArrayRef<const c10::IValue> inputs(c->inputs.data(), c->inputs.size());
    std::vector<at::Tensor> bad_inputs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (is_written(info, i)) continue;  // tested before the op wrote it
      for_each_tensor(inputs[i], [&](const at::Tensor& t) {
        if (t.defined() && !finite_->known(t) && has_non_finite(t)) bad_inputs.push_back(t);
      });
    }
    bool may_write_mask = MaskWatch::may_write(info.name) && minus_inf_argument(inputs);
    if (!bad_inputs.empty()) {
      // An additive mask of 0 and -inf given to an add (a causal mask made before recording,
      // added to the scores): a writer, recorded for keep_overflow to judge.
      if (!may_write_mask && MaskWatch::may_take_mask(info.name))
        may_write_mask = std::all_of(bad_inputs.begin(), bad_inputs.end(), only_zero_or_minus_inf);
      // Given -inf: a mask extended (a padding mask filled into a causal one, recorded for
      // keep_overflow to judge), or in a step with a mask, a NaN born of it; else nothing.
      // An attention op takes a -inf as its attn_mask even with no writer recorded before it
      // (SDPA makes it inside, from a bool mask): its NaN is born there.
      if (!may_write_mask && mask_step_.load(std::memory_order_acquire) != current_step() &&
          !is_attention_op(info.name))
        return;
      bool made_nan = false;
      for (const c10::IValue& v : outs)
        for_each_tensor(v, [&](const at::Tensor& t) { made_nan = made_nan || has_nan_or_pinf(t); });
      if (!made_nan && !may_write_mask) return;  // the mask carried on
      for (const at::Tensor& t : bad_inputs)
        if (has_nan_or_pinf(t)) return;  // NaN/+Inf went in: an earlier op's
      if (!made_nan) mask_step_.store(current_step(), std::memory_order_release);
    } else if (may_write_mask) {
      // A mask writer, unless its record says otherwise (keep_overflow): NaN out of a -inf
      // later in this step may be born of it.
      mask_step_.store(current_step(), std::memory_order_release);
    }
    // The rare record: statistics of everything, as the statistics task takes them.
    set_capture_origin(info.name.c_str());
    {
      std::lock_guard<std::mutex> lk(engine_->order_mutex());
      op = make_op(info.name, info.overload, c->dir, c->depth);
      op->header.call = c->call;
      op->header.background = c->background;
      engine_->push_op(op);
    }
    OpRecord& h = op->header;
    h.thread = thread_index();
    h.scope = Scope::current_path();
    const ThreadState& ts = thread_state();
    if (c->dir == Direction::kBackward && !ts.nodes.empty()) {
      h.node = ts.nodes.back().name;
      h.seqnr = ts.nodes.back().seqnr;
    }
    if (c->dir == Direction::kForward) {
      h.grad = c->grad_on;
      h.optimizer = !c->background && optimizer_step_.load(std::memory_order_relaxed);
    }
    if (c->dir == Direction::kForward && c->grad_on && any_requires_grad(inputs))
      h.seqnr = fn.seqNr();
    for (size_t i = 0; i < inputs.size(); ++i) {
      CaptureOptions how;
      how.unread = is_written(info, i);  // its values before the write are gone
      how.fresh = how.unread;
      capture_args(inputs.slice(i, 1), op->in, *op, nullptr, true, how, nullptr);
    }
    CaptureOptions how;
    how.fresh = !info.write_args.empty();
    capture_args(c10::ArrayRef<const c10::IValue>(outs.data(), outs.size()), op->out, *op, nullptr,
                 false, how, nullptr);
    std::lock_guard<std::mutex> lk(engine_->order_mutex());
    held = place_record_locked(op, c->place_index, c->place_epoch);
  } catch (const std::exception& e) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    report_error(std::string("precprobe: checking the outputs of ") + info.name +
                 " for NaN/Inf failed: " + e.what());
  } catch (...) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    report_error("precprobe: checking the outputs of " + info.name + " for NaN/Inf failed");
  }
  if (op && !held) engine_->end_op(*op);
}

}  // namespace detail
}  // namespace precprobe
