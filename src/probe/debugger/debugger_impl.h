// PrecisionDebugger::Impl: the state behind PrecisionDebugger, shared by debugger.cpp (life
// cycle, meta.json) and debugger_step.cpp (steps, run_step). Private to src/probe.
//
// Threads: the controlling thread (the training loop), as PrecisionDebugger.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "capture/observer.h"
#include "precprobe/debugger.h"
#include "precprobe/dump_format.h"
#include "precprobe/grad_monitor.h"
#include "replay/replay.h"
#if __has_include("precprobe/dropout.h")
#include "precprobe/dropout.h"
#define PRECPROBE_HAVE_DROPOUT 1
#endif

namespace precprobe {

struct PrecisionDebugger::Impl {
  DebuggerOptions options;
  int rank = 0;
  int world_size = 1;
  bool rank_selected = true;
  std::string rank_dir;
  std::string malloc_tuning;  // tune_malloc()'s outcome, for meta.json

  std::shared_ptr<DumpWriter> writer;
  std::unique_ptr<detail::Observer> observer;
  std::shared_ptr<torch::nn::Module> model;
  std::shared_ptr<torch::nn::Module> model_set;  // the last start(models, ...)'s, reused
  std::unique_ptr<GradMonitor> monitor;
  const torch::nn::Module* monitored = nullptr;  // the module `monitor` watches
#ifdef PRECPROBE_HAVE_DROPOUT
  std::unique_ptr<DropoutGuard> no_dropout;
#endif
  bool started = false;
  bool ever_started = false;
  int64_t step = 0;
  int64_t observer_step = -1;  // the step the observer's naming state belongs to
  std::string start_time;
  nlohmann::json seed_report;   // null unless seeded
  nlohmann::json module_order;  // meta.json's "modules" and "module_types"; null: none
  c10::intrusive_ptr<c10d::ProcessGroup> process_group;  // null: rank from the environment
  bool installed_signal_flush = false;
  bool installed_crash_flush = false;
  int64_t replica_checks = 0;
  int64_t replica_mismatches = 0;  // checks that found a difference
  // "record": "on_anomaly" (replay.h): the optimizers of start(model, optimizer) or
  // start(models, optimizers), the watch, and whether the step being replayed is recorded now.
  std::vector<torch::optim::Optimizer*> optimizers;
  std::unique_ptr<detail::AnomalyWatch> watch;
  bool replaying = false;
  bool warned_step = false;
  /// The step a run_step() ran is still open: the next run_step(), step() or stop() ends it,
  /// so what the program does right after run_step (log_scalar of its loss) belongs to it.
  bool step_open = false;

  bool step_selected() const {
    return options.step.contains(step) && !(observer && observer->overflow_done()) &&
           (options.record == RecordMode::kAlways || replaying);
  }
  void set_replay_recording(bool on);
  /// Options ($PRECPROBE_CONFIG wins, validated) and where this rank writes.
  void configure(const DebuggerOptions& given, int rank, int world_size);
  void sync_attachment();
  void setup_monitor(const std::shared_ptr<torch::nn::Module>& m);
  /// The parameters not observed yet this step (the observer's grad hook observes the
  /// others before zero_grad clears their gradients).
  void observe_grads() noexcept;
  void observe_grads(const std::vector<size_t>& which) noexcept;
  void check_replicas_if_due() noexcept;
  /// Ends the current step (gradient monitor, step_end, replica check) and counts the next.
  void end_step();
  // The op watchpoints' hits handed to on_watch (on the thread of step() and stop()).
  std::function<void(const OpWatchHit&)> on_op_watch;
  size_t op_watch_delivered = 0;
  void deliver_op_watch() noexcept;
  /// The writer of a started debugger (crash_flush.h, signal_flush.h) learns the step.
  void publish_step() noexcept;
  RunMeta run_meta(bool final_meta) const;
  DebuggerCounters counters() const;
};

}  // namespace precprobe
