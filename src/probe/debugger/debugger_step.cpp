// PrecisionDebugger's steps: step(), run_step() and the end of a step (gradient monitor,
// step_end event, replica check), log_scalar(). The life cycle and meta.json are in
// debugger.cpp.
#include <ATen/record_function.h>

#include <string>
#include <utility>

#include "crash/crash_state.h"
#include "debugger/debugger_impl.h"
#include "precprobe/distributed.h"
#include "precprobe/error.h"
#include "support/own_code.h"

namespace precprobe {

// Each parameter once per recorded step: before zero_grad clears its gradient (the
// observer's hook) or at step(), whichever comes first.
void PrecisionDebugger::Impl::observe_grads() noexcept {
  if (!monitor || !writer || !observer) return;
  try {
    observe_grads(observer->take_unobserved_grads());
  } catch (const std::exception& e) {
    report_error(std::string("precprobe: gradient monitor: ") + e.what());
  }
}

void PrecisionDebugger::Impl::observe_grads(const std::vector<size_t>& which) noexcept {
  if (!monitor || !writer || which.empty()) return;
  detail::OwnCodeGuard own;  // its ATen calls (detach, a first copy) are not the program's
  monitor->observe_params(step, which, writer.get());
}

// Every replica_check_every steps, at the end of the step (a collective on every rank, even
// on ranks the "rank" filter does not dump). Records, in the events stream of dumped ranks:
// replicas/tensors, replicas/mismatched (count), replicas/structure_differs and one
// replicas/differs/<name> = 1 per differing tensor (the first kMaxNames).
void PrecisionDebugger::Impl::check_replicas_if_due() noexcept {
  const int64_t every = options.replica_check_every;
  if (every <= 0 || !process_group || !model || (step + 1) % every != 0) return;
  constexpr size_t kMaxNames = 32;
  try {
    ReplicaReport r;
    {
      at::RecordFunctionGuard no_callbacks(false);  // its ATen calls are not observed
      r = check_replicas(*model, process_group);
    }
    ++replica_checks;
    if (!r.consistent()) {
      ++replica_mismatches;
      report_error("precprobe: step " + std::to_string(step) + ": " + r.summary());
    }
    if (!writer) return;
    auto scalar = [&](std::string name, double value) {
      ScalarRecord s;
      s.step = step;
      s.name = std::move(name);
      s.value = value;
      writer->submit(std::move(s));
    };
    namespace cs = check_scalar;
    scalar(std::string(cs::kReplicaTensors), static_cast<double>(r.tensors));
    scalar(std::string(cs::kReplicaMismatched), static_cast<double>(r.mismatched.size()));
    scalar(std::string(cs::kReplicaStructureDiffers), r.structure_differs ? 1.0 : 0.0);
    for (size_t i = 0; i < r.mismatched.size() && i < kMaxNames; ++i)
      scalar(std::string(cs::kReplicaDiffersPrefix) + r.mismatched[i], 1.0);
  } catch (const std::exception& e) {
    report_error(std::string("precprobe: replica check failed: ") + e.what());
  } catch (...) {
    report_error("precprobe: replica check failed");
  }
}

void PrecisionDebugger::Impl::publish_step() noexcept { detail::set_crash_step(step); }

// The step's records go out first, then its "step_end" event (DumpWriter::end_step): with
// the observer attached the end travels through the statistics engine behind the step's
// records (the worker emits them later); otherwise straight to the writer.
void PrecisionDebugger::Impl::end_step() {
  step_open = false;
  const bool observing = started && observer && observer->attached();
  if (observing) observe_grads();
  // The replica check's scalars belong to this step: submitted before the step's end goes
  // to the writer, so that its step_end event follows them. (After it, the statistics
  // worker's end marker raced the training thread's submits: two seeded DDP runs wrote
  // step_end and the last step's replica scalars in either order.)
  if (started) check_replicas_if_due();
  if (observing) {
    observer->end_step();
    if (!options.async_stats) observer->drain();  // sync: the end is emitted now, not later
  } else if (started && writer) {
    writer->end_step(step);
  }
  ++step;
  publish_step();
  deliver_op_watch();
  if (started && observer) {
    observer->begin_step(step);
    observer_step = step;
    sync_attachment();
    observer->arm_grad_hook(monitor != nullptr);
  }
}

void PrecisionDebugger::run_step_losses(c10::function_ref<std::vector<at::Tensor>()> f,
                                        const bool& several) {
  if (!enabled_) {
    f();
    return;
  }
  run_step_impl(f, several);
}

void PrecisionDebugger::run_step_impl(c10::function_ref<std::vector<at::Tensor>()> f,
                                      const bool& several) {
  Impl& d = *impl_;
  if (d.step_open) d.end_step();  // the previous run_step's step
  if (d.started && d.watch && d.watch->bound()) {
    d.watch->run(d.step, f, several, [&d](bool on) { d.set_replay_recording(on); });
  } else {
    f();
  }
  d.step_open = true;  // ended by the next run_step(), step() or stop()
}

void PrecisionDebugger::mark_optimizer(bool in_step) noexcept {
  if (enabled_ && impl_->observer) impl_->observer->mark_optimizer(in_step);
}

void PrecisionDebugger::step() {
  Impl& d = *impl_;
  if (!enabled_) {
    ++d.step;
    return;
  }
  if (d.step_open) {  // run_step's step: this step() ends it
    d.end_step();
    return;
  }
  if (d.started && d.watch && d.watch->bound() && !d.warned_step) {
    d.warned_step = true;
    report_error(
        "precprobe: \"record\": \"on_anomaly\" watches only the steps run through "
        "run_step(); this step() ended a step that was neither snapshot nor checked");
  }
  d.end_step();
}

void PrecisionDebugger::Impl::deliver_op_watch() noexcept {
  if (!writer || !on_op_watch) return;
  try {
    const std::vector<OpWatchHit> fresh = writer->watch_hits(op_watch_delivered);
    op_watch_delivered += fresh.size();
    for (const OpWatchHit& h : fresh) {
      try {
        on_op_watch(h);
      } catch (const std::exception& e) {
        report_error(std::string("precprobe: the on_watch callback threw: ") + e.what());
      } catch (...) {
        report_error("precprobe: the on_watch callback threw");
      }
    }
  } catch (...) {
    report_error("precprobe: delivering op watchpoint hits failed");
  }
}

void PrecisionDebugger::on_watch(std::function<void(const OpWatchHit&)> callback) {
  impl_->on_op_watch = std::move(callback);
}

std::vector<OpWatchHit> PrecisionDebugger::watch_hits() const {
  return impl_->writer ? impl_->writer->watch_hits() : std::vector<OpWatchHit>{};
}

void PrecisionDebugger::log_scalar(const std::string& name, double value) noexcept {
  try {
    if (!impl_->writer) return;
    ScalarRecord r;
    r.step = impl_->step;
    r.name = name;
    r.value = value;
    impl_->writer->submit(std::move(r));
  } catch (...) {
    report_error("precprobe: log_scalar failed");
  }
}

}  // namespace precprobe
