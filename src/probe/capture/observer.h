// Observer: the RecordFunction callbacks behind PrecisionDebugger. It decides per op call
// whether it is recorded (level, step, data_mode, list, scope, overflow limit), names it
// (op, overload, call index, direction, thread, depth, scope, autograd node), captures its
// arguments into a StatsEngine and turns finished calls into OpRecords for the writer.
//
// Depth: the number of enclosing dispatcher ops on this thread. Autograd resets it: the
// ops an autograd node runs start again at depth 0 under that node (so level L1 records,
// in backward, the node itself and the outermost ops it runs). Engine-internal events
// ("autograd::engine::evaluate_function: ...") are transparent.
//
// Threads: attach(), detach(), begin_step(), end_step(), drain() and set_parameters() are
// called from the controlling thread; set_parameters() only while detached. The callbacks
// run on any thread. Only one Observer is attached in a process at a time.
#pragma once

#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "precprobe/masking.h"
#include "precprobe/module_placement.h"
#include "precprobe/options.h"
#include "precprobe/writer.h"
#include "stats/stats_engine.h"

namespace precprobe {
namespace detail {

struct OpInfo;
struct ThreadState;
class OriginTracker;  // replay_origin.h
class FiniteMemo;

/// Calls per op name this step, indexed by OpInfo::name_index: a load and an add where a
/// map keyed by the name hashed it for every op. Autograd nodes (no OpInfo) are counted
/// by name, apart.
class OpCallCounts {
 public:
  /// The call number of this call (0 for the first this step), counting it.
  int64_t next(uint32_t name_index) {
    if (name_index >= counts_.size()) counts_.resize(name_index + 64, 0);
    return counts_[name_index]++;
  }
  void clear() { std::fill(counts_.begin(), counts_.end(), 0); }

 private:
  std::vector<int64_t> counts_;
};

struct ObserverCounters {
  uint64_t ops_seen = 0;         ///< op and node events observed while attached
  uint64_t ops_recorded = 0;     ///< records submitted to the writer
  uint64_t overflows = 0;        ///< overflow_check records
  uint64_t errors = 0;           ///< exceptions caught in callbacks or while emitting
  uint64_t tensors_skipped = 0;  ///< task tensor: larger than max_tensor_bytes
  EngineCounters engine;
};

class Observer {
 public:
  /// `writer` must outlive the Observer. `rank_dir` is where tensor files go.
  Observer(const DebuggerOptions& options, DumpWriter* writer, std::string rank_dir);
  ~Observer();  ///< detaches and drains
  Observer(const Observer&) = delete;
  Observer& operator=(const Observer&) = delete;

  /// Names the parameters (by storage); only while detached.
  void set_parameters(const std::vector<std::pair<std::string, at::Tensor>>& named);
  /// The parameter name of `t`, or nullptr.
  const std::string* parameter_name(const at::Tensor& t) const;
  /// The model's modules, meta.json's {"modules": ..., "module_types": ...}, which place
  /// overflow_check's records in their modules (observer_place.cpp); only while detached.
  void set_modules(const nlohmann::json& module_meta);
  /// The ops that follow run in an optimizer's step() (true) or not (OpRecord::optimizer),
  /// as the program tells (PrecisionDebugger::mark_optimizer). Any thread.
  void mark_optimizer(bool in_step) noexcept {
    optimizer_step_.store(in_step, std::memory_order_relaxed);
  }

  /// Installs / removes the global callback. attach() throws precprobe::Error when another
  /// Observer is attached.
  void attach();
  void detach() noexcept;
  bool attached() const noexcept { return handle_ != 0; }

  /// Per-step state: call indices, seq, scope range. `step` is written into records.
  void begin_step(int64_t step);
  /// Queues a writer flush after this step's records and forgets the stats cache.
  void end_step();
  /// Finishes all statistics and submits every finished record.
  void drain();
  /// True once overflow_check has written overflow_nums records.
  bool overflow_done() const noexcept { return overflow_done_.load(std::memory_order_acquire); }

  ObserverCounters counters() const;

  /// `t` is about to be written outside an observed op (before_own_write(), own_code.h):
  /// as before an observed in-place op. Any thread; never throws.
  void before_write(const at::Tensor& t) noexcept;

  /// The gradient monitor's hook. Each parameter of `params` is observed once a step: right
  /// before an op clears its gradient (aten::detach_ / zero_ outside backward, i.e.
  /// zero_grad) when that gradient changed since the parameter was last observed and a
  /// backward ran this step — the last moment this step's gradient can be read — or else
  /// at the end of the step (take_unobserved_grads()). `fn` gets the positions in `params`
  /// of every parameter whose gradient is fresh and not yet observed this step, on the op's
  /// thread. Several models cleared at different points of one step (a GAN's
  /// D.zero_grad(), later G.zero_grad()) are each observed at their own. Set only while
  /// detached; arm_grad_hook(true) arms it, begin_step() starts a new round.
  void set_grad_hook(std::vector<at::Tensor> params,
                     std::function<void(const std::vector<size_t>&)> fn);
  void arm_grad_hook(bool on) noexcept { grad_hook_armed_.store(on, std::memory_order_release); }
  /// The positions of the parameters not observed yet this step, now marked observed (their
  /// gradients' state remembered): the debugger observes them at step().
  std::vector<size_t> take_unobserved_grads();

  /// While set (the replay of an anomalous step, replay.h), every recorded op call is also
  /// shown to `t`; nullptr: none (the default, no cost). `t` must outlive its setting.
  void set_origin_tracker(OriginTracker* t) noexcept {
    origin_tracker_.store(t, std::memory_order_release);
  }

  // The callbacks (called through static trampolines).
  std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn, const OpInfo& info,
                                                   int32_t depth);
  std::unique_ptr<at::ObserverContext> on_node_start(const at::RecordFunction& fn);
  void on_end(const at::RecordFunction& fn, at::ObserverContext* ctx);
  /// Ends a call whose Observer detached meanwhile (no outputs captured).
  static void abandon(at::ObserverContext* ctx) noexcept;

  /// overflow_check's own path (observer_overflow.cpp): no record is built for an op whose
  /// outputs hold no NaN/Inf; each new output is read once by the cheapest test.
  std::unique_ptr<at::ObserverContext> overflow_start(const at::RecordFunction& fn,
                                                      const OpInfo& info, int32_t depth,
                                                      bool grad_on);
  void overflow_end(const at::RecordFunction& fn, at::ObserverContext* ctx);
  /// overflow_check once it is done: the ops still placed while a record waits for its module.
  void overflow_place(const at::RecordFunction& fn, const OpInfo& info, int32_t depth,
                      bool grad_on);
  /// Whether overflow_place() has work: a record waits for its module. Any thread.
  bool placing_held() const noexcept { return holding_.load(std::memory_order_acquire); }

 private:
  struct Selection {
    bool record = false;
    bool save = false;
    std::string name;
  };
  /// `background`: an op of a thread outside the step (outside_step()): it is recorded while
  /// the step is inside a scope range but never opens or closes one.
  Selection select(const std::string& op, Direction dir, int64_t call, bool background = false);
  /// Whether an op on the thread of `ts` runs outside the training step: not on the controlling
  /// thread (the one that called start() or step() last) and not inside an autograd node (the
  /// engine's threads run the step's backward). Data-loader workers and other threads the
  /// program starts: their ops are recorded with OpRecord::background, their own call counts,
  /// and at whatever step they happen to run in (docs/debugger.md, "Threads").
  bool outside_step(const ThreadState& ts) const noexcept;
  /// The call index of this call of `info`'s op: counted per step for the step's ops, per
  /// thread for a thread outside the step. Under engine_->order_mutex().
  int64_t next_call(ThreadState& ts, bool background, Direction dir, const OpInfo& info);
  /// The calling thread controls the steps from now on (start(), step()).
  void take_control() noexcept;
  std::shared_ptr<PendingOp> make_op(const std::string& op, const std::string& overload,
                                     Direction dir, int32_t depth);
  /// The arguments an op writes or hands back as (a view of) its output.
  struct AliasCapture {
    const std::vector<size_t>* positions = nullptr;  ///< OpInfo::alias_args
    bool unread_if_new = false;                      ///< not read when this step has not seen them
    bool any_unread = false;  ///< out: one of them is uninitialized memory (unread)
    /// OpInfo::out_args: out= destinations, never read at the op's start.
    const std::vector<size_t>* destinations = nullptr;
  };

  /// `how` applies to every tensor; outputs of aten::empty* ops are also `unread`.
  void capture_args(c10::ArrayRef<const c10::IValue> values, ArgRefs& out, const PendingOp& op,
                    const std::string* save_name, bool inputs, const CaptureOptions& how,
                    AliasCapture* alias);
  void capture_tensor(const at::Tensor& t, int64_t list_index, ArgRefs& out,
                      const std::string* save_path, const CaptureOptions& how);
  std::string tensor_path(const std::string& name, bool input, size_t index) const;
  void emit(PendingOp& op);
  // overflow_check's placement (observer_place.cpp), under engine_->order_mutex().
  /// Adds the op to the placement; its index in the step, or -1 when nothing is placed (no
  /// model). The held records whose module is now known are moved to `release` (to end_op()
  /// once the lock is let go).
  int64_t place_locked(const at::RecordFunction& fn, c10::ArrayRef<const c10::IValue> inputs,
                       const OpInfo& info, int32_t depth, Direction dir, bool background,
                       bool grad_on, const ThreadState& ts,
                       std::vector<std::shared_ptr<PendingOp>>& release);
  /// The module of the op placed at `index`, or nullopt while the ops after it have not
  /// decided it.
  std::optional<std::string> module_at_locked(int64_t index);
  /// Sets the module of `op` (placed at `index`) now, or holds it (not ended) until it is
  /// known: true when held.
  bool place_record_locked(const std::shared_ptr<PendingOp>& op, int64_t index, uint64_t epoch);
  uint64_t placement_epoch_locked() const noexcept { return placement_epoch_; }
  void release_known_locked(std::vector<std::shared_ptr<PendingOp>>& release);
  /// The step's end (or drain): every op placed; the held records are ended.
  void end_placement();
  /// overflow_check: whether `r` is written (an origin); a mask writer is held back (may be
  /// moved from) and written before a NaN born of its mask.
  bool keep_overflow(OpRecord& r);
  /// The step begin_step() set last, for any thread.
  int64_t current_step() const noexcept { return step_now_.load(std::memory_order_acquire); }
  /// Whether an op's tensors get range statistics ("range": true: ops under grad mode and
  /// the backward; "all": every op). `grad_on`: the caller's grad mode at the op's start.
  bool range_for(Direction dir, bool grad_on) const noexcept {
    return options_.range_stats == RangeStats::kAll ||
           (options_.range_stats == RangeStats::kTraining &&
            (dir == Direction::kBackward || grad_on));
  }
  uint32_t thread_index();
  void maybe_run_grad_hook(c10::ArrayRef<const c10::IValue> inputs, const OpInfo& info);
  /// Before `t` is written: nothing queued reads it after, no cached statistics of its
  /// storage are reused, overflow_check forgets it.
  void written(const at::Tensor& t);
  /// Inside GradScaler's scaled-gradient window (scaled_grads.h): records a
  /// "check/scaled_grad_read/<op>" event when this op of user code reads, without writing
  /// it, a parameter's gradient or a tensor a recorded backward op produced in the window
  /// (torch::autograd::grad results), unless it is an unscaling mul/div by a scalar.
  void check_scaled_grad_read(c10::ArrayRef<const c10::IValue> inputs, const OpInfo& info,
                              float scale);

  DebuggerOptions options_;
  NameMatcher list_;
  DumpWriter* writer_;
  // emit()'s argument vectors of written records (DumpWriter::take_spare_args), taken a
  // batch at a time; emits are serialised by the engine. Declared before engine_, whose
  // destruction emits what is left.
  static constexpr size_t kSpareArgsBatch = 128;
  std::vector<std::vector<Arg>> spare_args_;
  std::string rank_dir_;
  std::unique_ptr<StatsEngine> engine_;
  uint64_t generation_;
  std::atomic<uint32_t> next_thread_{0};
  std::atomic<const ThreadState*> controller_{nullptr};  ///< see outside_step()
  uint64_t handle_ = 0;

  // Parameters: StorageImpl* -> (name, numel, module). Read-only while attached.
  struct ParamName {
    std::string name;
    int64_t numel = 0;
    std::string module;  // "b0.qkv" of "b0.qkv.weight"; "(root)" for the top module's
  };
  std::unordered_map<const void*, ParamName> params_;
  /// The parameter `t` is (or a view of the whole of), or nullptr.
  const ParamName* param_of(const at::Tensor& t) const;
  std::vector<at::Tensor> param_tensors_;  // the same parameters, for their gradients

  std::mutex flagged_mu_;  // scaled-gradient reads already recorded: (step, op)
  std::set<std::pair<int64_t, std::string>> flagged_;
  // Storages of the outputs of backward ops recorded in scaled-gradient window
  // `window_id_` (under flagged_mu_); forgotten when another window opens.
  // Weak references keep the StorageImpl addresses from being reused for new tensors.
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> window_grads_;
  uint64_t window_id_ = 0;
  void note_backward_outputs(const std::vector<c10::IValue>& outputs);

  // Under engine_->order_mutex(): per-step naming state.
  int64_t step_ = 0;
  int64_t seq_ = 0;
  OpCallCounts op_calls_[2];                             // per (op name, dir)
  std::unordered_map<std::string, int64_t> node_calls_;  // per autograd node name
  bool in_range_ = false;

  std::atomic<uint64_t> ops_seen_{0}, ops_recorded_{0}, overflows_{0}, errors_{0};
  std::atomic<uint64_t> tensors_skipped_{0};
  std::atomic<bool> overflow_done_{false};
  // overflow_check and masks (keep_overflow): the step of the last op that may have written
  // a mask (fast path, any thread), and, on the emitting side, the rule and the writers of
  // the step held back.
  std::atomic<int64_t> step_now_{0}, mask_step_{-1};
  static constexpr size_t kMaxMaskWriters = 64;
  MaskWatch masks_;
  std::map<int64_t, OpRecord> mask_writers_;  // by seq
  int64_t mask_writers_step_ = -1;
  /// A parameter of the gradient monitor's hook and its gradient as last observed or cleared.
  struct HookParam {
    at::Tensor param;
    const void* grad = nullptr;  // storage of the gradient; null: none
    int64_t version = -1;        // its version counter then
    bool observed = false;       // this step
  };
  bool grad_fresh(const HookParam& h) const;
  void remember_grad(HookParam& h) const;
  std::mutex hook_mu_;  // hook_params_
  std::vector<HookParam> hook_params_;
  std::function<void(const std::vector<size_t>&)> grad_hook_;
  std::atomic<bool> grad_hook_armed_{false};
  std::atomic<bool> backward_seen_{false};  ///< an autograd node ran this step
  std::atomic<OriginTracker*> origin_tracker_{nullptr};
  int64_t overflow_count_ = 0;               // emitter only
  std::unique_ptr<FiniteMemo> finite_;       // overflow_check only
  std::atomic<bool> optimizer_step_{false};  // mark_optimizer()
  // overflow_check's placement, under engine_->order_mutex(): the rule, the ops placed and
  // taken this step, the modules taken last (for a record made after later ops were taken),
  // and the records waiting for their module, by index.
  ModulePlacer placer_;
  bool placing_ = false;  // overflow_check with a model
  int64_t placed_ = 0, taken_ = 0;
  uint64_t placement_epoch_ = 0;  // + 1 at each end_placement(): an index names its epoch's op
  std::deque<std::pair<int64_t, std::string>> taken_modules_;
  std::vector<std::pair<int64_t, std::shared_ptr<PendingOp>>> held_;
  std::atomic<bool> holding_{false};  // !held_.empty()
};

}  // namespace detail
}  // namespace precprobe
