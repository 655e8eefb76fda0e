// PrecisionDebugger: observes every ATen op of the chosen steps, forward and backward, and
// streams per-op tensor statistics to a compressed, crash-safe dump (one stream per rank).
//
// **Example**:
//
//     auto opts = precprobe::DebuggerOptions::from_json_file("config.json");
//     precprobe::PrecisionDebugger dbg(opts);
//     dbg.start(model);              // parameter names; dropout forced to p=0
//     for (auto& batch : loader) {
//       auto loss = torch::nll_loss(model->forward(batch.data), batch.target);
//       loss.backward(); opt.step(); opt.zero_grad();
//       dbg.step();                  // ends the step: flushes a frame
//     }
//     dbg.stop();                    // also done by the destructor
//
// Several models and optimizers (a GAN): parameters are named "G.conv1.weight", "D.0.weight".
//
//     dbg.start({{"G", generator}, {"D", discriminator}}, {&opt_g, &opt_d});
//
// Switched off ("enable": false in the config, or PRECPROBE_DISABLE=1) every member is a
// cheap no-op and run_step() only calls its lambda: the program needs no `if`. While started,
// a fatal signal leaves a crash record and what was complete (precprobe/crash_flush.h).
//
// Threads: construct, start(), stop(), step() and run_step() from one controlling thread
// (the training loop). Ops are observed on every thread (autograd engine threads, user threads). At
// most one debugger is started in a process at a time; start() on a second throws. Nothing here
// throws into a training step: errors while observing are reported through
// precprobe::report_error() and counted.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/FunctionRef.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "precprobe/options.h"
#include "precprobe/scope.h"  // Scope, declared here before it had its own header
#include "precprobe/writer.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d
namespace torch {
namespace nn {
class Module;
}
namespace optim {
class Optimizer;
}
}  // namespace torch

namespace precprobe {

namespace detail {
inline std::shared_ptr<torch::nn::Module> module_ptr(const std::shared_ptr<torch::nn::Module>& m) {
  return m;
}
template <typename ModuleT>
std::shared_ptr<torch::nn::Module> module_ptr(const std::shared_ptr<ModuleT>& m) {
  return std::static_pointer_cast<torch::nn::Module>(m);
}
// A module held by value: a pointer that does not own it.
template <typename ModuleT,
          std::enable_if_t<std::is_base_of<torch::nn::Module, ModuleT>::value, int> = 0>
std::shared_ptr<torch::nn::Module> module_ptr(ModuleT& m) {
  return std::shared_ptr<torch::nn::Module>(std::shared_ptr<torch::nn::Module>(), &m);
}
// A ModuleHolder (TORCH_MODULE types, torch::nn::Sequential, ...): shares its ownership.
template <typename HolderT, typename = decltype(std::declval<const HolderT&>().ptr())>
std::shared_ptr<torch::nn::Module> module_ptr(const HolderT& h) {
  return std::static_pointer_cast<torch::nn::Module>(h.ptr());
}
/// What a run_step() lambda may return: its losses, handed to the "on_anomaly" checks.
/// One tensor is "the loss"; a std::vector, std::tuple or std::pair of tensors are several,
/// named "loss/0", "loss/1", ... in the dump; void: no loss (only gradients are checked).
template <typename R, typename = void>
struct StepLosses {
  static constexpr bool kValid = false;
};
template <>
struct StepLosses<void> {
  static constexpr bool kValid = true;
  static constexpr bool kSeveral = false;
};
template <>
struct StepLosses<at::Tensor> {
  static constexpr bool kValid = true;
  static constexpr bool kSeveral = false;
  static void collect(const at::Tensor& t, std::vector<at::Tensor>& out) { out.push_back(t); }
};
template <>
struct StepLosses<std::vector<at::Tensor>> {
  static constexpr bool kValid = true;
  static constexpr bool kSeveral = true;
  static void collect(const std::vector<at::Tensor>& v, std::vector<at::Tensor>& out) {
    out.insert(out.end(), v.begin(), v.end());
  }
};
template <typename... T>
struct StepLosses<std::tuple<T...>,
                  std::enable_if_t<(std::is_same<std::decay_t<T>, at::Tensor>::value && ...)>> {
  static constexpr bool kValid = true;
  static constexpr bool kSeveral = true;
  static void collect(const std::tuple<T...>& t, std::vector<at::Tensor>& out) {
    std::apply([&out](const auto&... x) { (out.push_back(x), ...); }, t);
  }
};
template <typename A, typename B>
struct StepLosses<std::pair<A, B>,
                  std::enable_if_t<std::is_same<std::decay_t<A>, at::Tensor>::value &&
                                   std::is_same<std::decay_t<B>, at::Tensor>::value>> {
  static constexpr bool kValid = true;
  static constexpr bool kSeveral = true;
  static void collect(const std::pair<A, B>& p, std::vector<at::Tensor>& out) {
    out.push_back(p.first);
    out.push_back(p.second);
  }
};
}  // namespace detail

/// One model of several given to PrecisionDebugger::start: its parameters are named
/// "<name>.<parameter>" (`{"G", generator}` names `G.conv1.weight`). The module is any form
/// start(model) takes: a ModuleHolder (`Net`, `torch::nn::Sequential`), a shared_ptr to a
/// module, or a module held by value (not owned: it must outlive stop()).
struct NamedModel {
  template <typename ModelT>
  NamedModel(std::string model_name, ModelT&& model)
      : name(std::move(model_name)), module(detail::module_ptr(std::forward<ModelT>(model))) {}
  std::string name;
  std::shared_ptr<torch::nn::Module> module;
};

/// Counters of a debugger, readable at any time.
struct DebuggerCounters {
  uint64_t ops_seen = 0;            ///< op calls observed while started
  uint64_t ops_recorded = 0;        ///< op records submitted to the writer
  uint64_t tensors_summarised = 0;  ///< statistics computed (cache misses)
  uint64_t tensors_cached = 0;      ///< statistics reused from an earlier op
  /// Of tensors_cached: reused from an earlier step ("reuse_across_steps").
  uint64_t tensors_carried = 0;
  uint64_t bytes_summarised = 0;  ///< tensor bytes read to compute the statistics
  uint64_t errors = 0;            ///< problems reported while observing
  uint64_t replays = 0;           ///< anomalous steps replayed ("record": "on_anomaly")
  int64_t snapshot_bytes = 0;     ///< tensor bytes of the step snapshot (on_anomaly)
  WriterCounters writer;          ///< of this rank's writer
};

class PrecisionDebugger {
 public:
  /// Uses $PRECPROBE_CONFIG when set, else `options`. Throws precprobe::Error on a bad
  /// configuration; creates nothing on disk yet. Switched off ("enable": false, or the
  /// environment variable PRECPROBE_DISABLE=1, which skips reading any configuration)
  /// every member is a cheap no-op (enabled()). PRECPROBE_DISABLE other than 0/1, false/true,
  /// no/yes, off/on or empty throws precprobe::Error naming it.
  explicit PrecisionDebugger(DebuggerOptions options = {});
  /// Reads a config.json ($PRECPROBE_CONFIG overrides; PRECPROBE_DISABLE=1: reads nothing).
  /// Throws precprobe::Error.
  explicit PrecisionDebugger(const std::string& config_path);
  /// As PrecisionDebugger(options), with rank and world size from `process_group` instead of
  /// RANK/WORLD_SIZE; "replica_check_every" runs its replica checks over this group. Throws
  /// precprobe::Error when the group is null. The group must outlive the debugger.
  PrecisionDebugger(DebuggerOptions options,
                    const c10::intrusive_ptr<c10d::ProcessGroup>& process_group);
  /// Stops (flushes, closes the dump); never throws.
  ~PrecisionDebugger();
  PrecisionDebugger(const PrecisionDebugger&) = delete;
  PrecisionDebugger& operator=(const PrecisionDebugger&) = delete;

  /// Starts observing. The first start() creates dump_path/rank<R>/ (throws
  /// precprobe::Error when it is unwritable or not empty without "overwrite") and writes
  /// meta.json. Later start()s continue the same dump.
  void start();
  /// As start(), and names parameters (records show "param": "fc1.weight") and enables
  /// the gradient monitor. The model must outlive stop().
  void start(const std::shared_ptr<torch::nn::Module>& model);
  template <typename ModuleHolderT>
  void start(const ModuleHolderT& holder) {
    start(std::static_pointer_cast<torch::nn::Module>(holder.ptr()));
  }
  /// As start(model), for a shared_ptr to a module type (e.g. `net.ptr()`).
  template <typename ModuleT>
  void start(const std::shared_ptr<ModuleT>& model) {
    start(std::static_pointer_cast<torch::nn::Module>(model));
  }
  /// As start(model), for a module held by value (`Net model; dbg.start(model);`): the
  /// debugger keeps a pointer that does not own it; the module must outlive stop().
  template <typename ModuleT,
            std::enable_if_t<std::is_base_of<torch::nn::Module, ModuleT>::value, int> = 0>
  void start(ModuleT& model) {
    start(std::shared_ptr<torch::nn::Module>(std::shared_ptr<torch::nn::Module>(), &model));
  }

  /// As start(model), and the optimizer joins the step snapshot of "record": "on_anomaly"
  /// (needed there; with "always" it is not used). `model` is any form start(model) takes;
  /// `optimizer` is SGD, Adam, AdamW, RMSprop or Adagrad (start throws precprobe::Error for
  /// another under "on_anomaly") and must outlive stop().
  void start(const std::shared_ptr<torch::nn::Module>& model, torch::optim::Optimizer& optimizer);
  template <typename ModuleHolderT>
  void start(const ModuleHolderT& holder, torch::optim::Optimizer& optimizer) {
    start(std::static_pointer_cast<torch::nn::Module>(holder.ptr()), optimizer);
  }
  template <typename ModuleT>
  void start(const std::shared_ptr<ModuleT>& model, torch::optim::Optimizer& optimizer) {
    start(std::static_pointer_cast<torch::nn::Module>(model), optimizer);
  }
  template <typename ModuleT,
            std::enable_if_t<std::is_base_of<torch::nn::Module, ModuleT>::value, int> = 0>
  void start(ModuleT& model, torch::optim::Optimizer& optimizer) {
    start(std::shared_ptr<torch::nn::Module>(std::shared_ptr<torch::nn::Module>(), &model),
          optimizer);
  }

  /// Several models and optimizers: as start(model, optimizer) for all of them. Parameters
  /// are named "<name>.<parameter>"; the gradient monitor, dropout forcing, observe_batch's
  /// checks and the "on_anomaly" snapshot (every optimizer's state) cover every model.
  /// Throws precprobe::Error for no model, an empty name, a name with a '.', a name given
  /// twice, a null module or a null optimizer (and, under "on_anomaly", no optimizer or an
  /// optimizer the snapshot cannot copy). Models and optimizers must outlive stop().
  ///
  ///     dbg.start({{"G", generator}, {"D", discriminator}}, {&opt_g, &opt_d});
  void start(std::vector<NamedModel> models, std::vector<torch::optim::Optimizer*> optimizers = {});

  /// Runs one training step `f` (zero_grad, forward, backward, optimizer step) and returns
  /// what f returned, as it returned it: the loss (a tensor), several losses (a
  /// std::vector, std::tuple or std::pair of tensors: a GAN's d_loss and g_loss, no stacking
  /// needed) or nothing. The step stays open after run_step returns: what the program does
  /// next (`dbg.log_scalar("loss", l.item<double>())`, the ops of that `.item()`) belongs
  /// to the step f ran, and the next run_step(), step() or stop() ends it (current_step() is
  /// the step just run until then). A step() right after run_step() ends that same step; a
  /// loop of plain step()s works as before.
  /// "record": "always": f() is recorded as any step. "record": "on_anomaly": the state
  /// before the step is kept (parameters, buffers, optimizer state, RNG), f runs
  /// unobserved, and when a trigger fires ("on_anomaly" config: every returned loss is
  /// checked for NaN/Inf) the state is put back and f runs again with every op recorded;
  /// the "anomaly" event says what happened and where (docs/debugger.md, "Record on
  /// anomaly"). Training continues from that second run, whose result run_step returns.
  /// Every checked step writes its losses (scalars "loss", or "loss/0", "loss/1", ... for
  /// several) and its gradients' norms (grads records). The parameters and optimizer state
  /// are copied by a helper thread while f's forward runs: f must not change a weight in
  /// place before backward (found, and the snapshot falls back to a copy before each step)
  /// nor through .data() (not found). Exceptions thrown by f propagate unchanged; the
  /// debugger's own failures are reported and counted. A debugger switched off ("enable":
  /// false, PRECPROBE_DISABLE=1) only calls f.
  ///
  ///     torch::Tensor loss = dbg.run_step([&] {
  ///       opt.zero_grad();
  ///       auto l = loss_fn(model->forward(x), y);
  ///       l.backward();
  ///       opt.step();
  ///       return l;
  ///     });
  ///     dbg.log_scalar("loss", loss.item<double>());  // the step just run
  ///
  ///     auto [d_loss, g_loss] = dbg.run_step([&] { ...; return std::make_tuple(d, g); });
  template <typename F>
  std::decay_t<std::invoke_result_t<F&>> run_step(F&& f) {
    using R = std::decay_t<std::invoke_result_t<F&>>;
    static_assert(detail::StepLosses<R>::kValid,
                  "run_step: the lambda must return a torch::Tensor, a std::vector of them, a "
                  "std::tuple or std::pair of them, or nothing");
    if (!enabled_) return f();
    if constexpr (std::is_void<R>::value) {
      run_step_impl(
          [&]() -> std::vector<at::Tensor> {
            f();
            return {};
          },
          false);
    } else {
      std::optional<R> out;
      run_step_impl(
          [&]() -> std::vector<at::Tensor> {
            out.reset();  // a replay runs f again: run_step returns the second result
            out.emplace(f());
            std::vector<at::Tensor> losses;
            detail::StepLosses<R>::collect(*out, losses);
            return losses;
          },
          detail::StepLosses<R>::kSeveral);
      return std::move(*out);
    }
  }

  /// run_step() for a caller that knows the shape of the step's result only once f has run
  /// (the Python module): f returns the step's losses and sets `several` before it returns
  /// (read after f: several losses are named "loss/<i>", one is "loss"). Otherwise exactly
  /// run_step().
  void run_step_losses(c10::function_ref<std::vector<at::Tensor>()> f, const bool& several);

  /// Stops observing; flushes. Ends the step a run_step() left open. Idempotent.
  void stop() noexcept;

  /// Ends the current step: gradient monitor, frame flush (and the step's "step_end" event
  /// once its records are written), replica check when one is due ("replica_check_every": a
  /// collective over the debugger's process group), step counter + 1. After run_step() it
  /// ends the step run_step ran (not one more).
  void step();

  /// The ops that follow run inside an optimizer's step() (true), or no longer (false). The
  /// records carry it ("opt": docs/dump-format.md), and the commands that name a module tell
  /// the optimizer's work from what ran between backward and it, gradient clipping under
  /// no_grad included (docs/cli.md, "Modules"). LibTorch's optimizers have no hooks: a C++
  /// program may call it around opt.step(); the Python door calls it from PyTorch's
  /// optimizer step hooks. step() clears it. Never throws.
  void mark_optimizer(bool in_step) noexcept;

  /// The step being recorded (0 before the first step()); after run_step(), the step it ran
  /// until the next run_step(), step() or stop().
  int64_t current_step() const noexcept;
  /// Whether the debugger does anything: false with "enable": false or PRECPROBE_DISABLE=1
  /// (then every member returns at once and run_step() only calls its lambda).
  bool enabled() const noexcept { return enabled_; }
  bool started() const noexcept;
  int rank() const noexcept;
  int world_size() const noexcept;

  /// Logs a scalar (e.g. the loss) for this step to events.jsonl.zst.
  void log_scalar(const std::string& name, double value) noexcept;

  /// Registers a training or evaluation batch for `precprobe check` (before its forward
  /// pass): NaN/Inf counts and per-channel mean/std of `inputs` (dim 1 is the channel),
  /// for integer `targets` the label histogram, label-order hash and share of
  /// `ignore_index`; the mode of the model given to start(model) (train/eval, its
  /// BatchNorm/Dropout modules) and the grad mode. `epoch` (-1: unknown) lets the check
  /// compare label orders across epochs. The first call also checks the initial weights.
  /// One pass over the batch, not observed as ops; does nothing while not started; never
  /// throws. Rules: docs/checklist.md.
  void observe_batch(const at::Tensor& inputs, const at::Tensor& targets, int64_t epoch = -1,
                     int64_t ignore_index = -100) noexcept;
  /// The module_hash the model is expected to have at start (e.g. of a checkpoint);
  /// `precprobe check` reports a mismatch.
  void expect_module_hash(uint64_t hash) noexcept;

  /// The model given to the current start(model), or nullptr. After start(models, ...): a
  /// module whose children are the named models.
  const torch::nn::Module* model() const noexcept;

  /// The parameter name of `t` when it is a parameter of the started model, else "".
  std::string parameter_name(const at::Tensor& t) const;

  /// This rank's writer (nullptr before the first start()): GradScaler writes here.
  DumpWriter* writer() noexcept;

  DebuggerCounters counters() const noexcept;
  const DebuggerOptions& options() const noexcept;

  /// Called for each op watchpoint hit (config "watch": the model's activations against their
  /// own history; docs/watchpoints.md), on the thread that calls step() or stop(), at the
  /// first step() after the hit's record was written (asynchronous statistics: a step or two
  /// after the hit's step; stop() delivers the rest). Exceptions are caught and reported
  /// through report_error(). Replaces an earlier callback; an empty one turns it off.
  void on_watch(std::function<void(const OpWatchHit&)> callback);
  /// Every op watchpoint hit judged so far, in the order they fired: what events.jsonl.zst
  /// holds ("watch") and `precprobe watch DIR` recomputes.
  std::vector<OpWatchHit> watch_hits() const;

  /// The started debugger of this process, or nullptr.
  static PrecisionDebugger* current() noexcept;

 private:
  /// run_step() without its result type: `f` runs the lambda and returns its losses;
  /// `several` (read once f has returned): they are named "loss/<i>" rather than "loss".
  void run_step_impl(c10::function_ref<std::vector<at::Tensor>()> f, const bool& several);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool enabled_ = true;  ///< here, not in Impl: run_step's switched-off path is inline
};

}  // namespace precprobe
