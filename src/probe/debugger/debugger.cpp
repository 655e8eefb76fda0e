// PrecisionDebugger: configuration, the start/step/stop life cycle, meta.json (RunMeta). The op
// observation itself is in observer.cpp, the statistics pipeline in stats_engine.cpp.
#include "precprobe/debugger.h"

#include <torch/nn/module.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <utility>

#include "crash/crash_state.h"
#include "debugger/debugger_impl.h"
#include "debugger/debugger_internal.h"
#include "precprobe/checklist_probe.h"
#include "precprobe/crash_flush.h"
#include "precprobe/distributed.h"
#include "precprobe/error.h"
#include "precprobe/signal_flush.h"
#include "precprobe/version.h"
#include "support/malloc_tuning.h"
#include "support/torch_compat.h"
#if __has_include("precprobe/seed.h")
#include "precprobe/seed.h"
#define PRECPROBE_HAVE_SEED 1
#endif

namespace precprobe {
namespace {

std::atomic<PrecisionDebugger*> g_current{nullptr};

// The started debugger's writer, for the signal flusher: shared so that a debugger being
// stopped or destroyed on the training thread never frees a writer the flusher is using.
std::mutex g_signal_mu;
std::shared_ptr<DumpWriter> g_signal_writer;

void set_signal_writer(std::shared_ptr<DumpWriter> w) {
  std::lock_guard<std::mutex> lock(g_signal_mu);
  g_signal_writer = std::move(w);
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

// PRECPROBE_DISABLE: switches every debugger of the process off (docs/debugger.md).
bool disabled_by_env() {
  const char* v = std::getenv("PRECPROBE_DISABLE");
  if (v == nullptr) return false;
  const std::string s(v);
  for (const char* off : {"", "0", "false", "no", "off"})
    if (s == off) return false;
  for (const char* on : {"1", "true", "yes", "on"})
    if (s == on) return true;
  throw Error("PRECPROBE_DISABLE='" + s +
              "' is not understood; allowed: 1, true, yes, on (the debugger is off) or 0, "
              "false, no, off, empty (on)");
}

}  // namespace

namespace detail {
std::shared_ptr<DumpWriter> started_debugger_writer() {
  std::lock_guard<std::mutex> lock(g_signal_mu);
  return g_signal_writer;
}
}  // namespace detail

void PrecisionDebugger::Impl::sync_attachment() {
  if (!observer) return;
  const bool want = started && step_selected();
  if (want && !observer->attached()) {
    observer->attach();
  } else if (!want && observer->attached()) {
    observer->detach();
    // Unobserved ops may now change tensors in place: finish what still reads them.
    observer->drain();
  }
}

// The replay of an anomalous step: records it like a step of "record": "always", then
// finishes its records (gradients, drain, on disk) before run_step ends the step.
void PrecisionDebugger::Impl::set_replay_recording(bool on) {
  if (on) {
    replaying = true;
    sync_attachment();
    if (observer) observer->arm_grad_hook(monitor != nullptr);
    return;
  }
  if (observer && observer->attached()) {
    observe_grads();
    observer->end_step();
  }
  replaying = false;
  sync_attachment();
  if (writer) writer->flush(/*wait=*/true);
}

void PrecisionDebugger::Impl::setup_monitor(const std::shared_ptr<torch::nn::Module>& m) {
  if (!observer || !m || !options.grad_monitor) return;
  if (monitored != m.get()) {
    monitor = std::make_unique<GradMonitor>(*m);
    monitored = m.get();
  }
  std::vector<at::Tensor> params = m->parameters(/*recurse=*/true);
  observer->set_grad_hook(std::move(params),
                          [this](const std::vector<size_t>& which) { observe_grads(which); });
  observer->arm_grad_hook(true);
}

DebuggerCounters PrecisionDebugger::Impl::counters() const {
  DebuggerCounters c;
  if (observer) {
    auto o = observer->counters();
    c.ops_seen = o.ops_seen;
    c.ops_recorded = o.ops_recorded;
    c.tensors_summarised = o.engine.summarised;
    c.tensors_cached = o.engine.cached;
    c.tensors_carried = o.engine.carried;
    c.bytes_summarised = o.engine.bytes;
    c.errors = o.errors + o.engine.save_errors;
  }
  if (watch) {
    c.errors += watch->errors();
    c.replays = watch->replays();
    c.snapshot_bytes = watch->snapshot_bytes();
  }
  if (writer) c.writer = writer->counters();
  return c;
}

RunMeta PrecisionDebugger::Impl::run_meta(bool final_meta) const {
  RunMeta m;
  m.format_version = dump_format_version(options.ops_encoding);
  m.precprobe_version = PRECPROBE_VERSION_STRING;
  m.torch_version = TORCH_VERSION;
  m.rank = rank;
  m.world_size = world_size;
  m.rank_source = process_group ? "process_group" : "environment";
  m.task = std::string(to_string(options.task));
  m.level = std::string(to_string(options.level));
  m.config = options.to_json_value();
  if (!seed_report.is_null()) m.seed_report = seed_report;
  if (module_order.is_object())
    for (const auto& [key, value] : module_order.items()) m.other[key] = value;
  m.host = host_name();
  m.pid = static_cast<int64_t>(::getpid());
  m.device = "cpu";
  m.start_time = start_time;
  m.state = final_meta ? "stopped" : "running";
  m.step = step;
  m.ops_grad_mode = true;    // the observer records each forward op's grad mode (OpRecord::grad)
  m.step_end_events = true;  // end_step(): DumpWriter::end_step
  if (final_meta) {
    m.stop_time = utc_now();
    const DebuggerCounters c = counters();
    nlohmann::json k;
    k["ops_seen"] = c.ops_seen;
    k["ops_recorded"] = c.ops_recorded;
    k["tensors_summarised"] = c.tensors_summarised;
    k["tensors_cached"] = c.tensors_cached;
    k["tensors_carried"] = c.tensors_carried;
    if (!malloc_tuning.empty()) k["malloc"] = malloc_tuning;
    k["bytes_summarised"] = c.bytes_summarised;
    k["errors"] = c.errors;
    if (observer) {
      auto o = observer->counters();
      k["overflows"] = o.overflows;
      k["tensors_skipped"] = o.tensors_skipped;
      k["tensors_saved"] = o.engine.saved;
      k["stats_inline"] = o.engine.inline_computed;
      k["carry_mismatches"] = o.engine.carry_mismatches;
      k["stats_worker"] = o.engine.worker_computed;
      k["claimed_for_write"] = o.engine.claimed_for_write;
      k["waited_for_write"] = o.engine.waited_for_write;
      k["backpressure"] = o.engine.backpressure;
      k["stale"] = o.engine.stale;
    }
    if (options.record == RecordMode::kOnAnomaly) k["replays"] = c.replays;
    if (options.replica_check_every > 0) {
      k["replica_checks"] = replica_checks;
      k["replica_mismatches"] = replica_mismatches;
    }
    m.counters = std::move(k);
    m.writer = c.writer;
    m.dropped = c.writer.records_dropped;
  }
  return m;
}

void PrecisionDebugger::Impl::configure(const DebuggerOptions& given, int r, int world) {
  options = DebuggerOptions::from_env_or(given);
  options.validate();
  NameMatcher check(options.list);  // a bad "name-regex(...)" throws here, not later
  rank = r;
  world_size = world;
  rank_selected = options.rank.contains(rank);
  rank_dir = options.dump_path + "/rank" + std::to_string(rank);
}

PrecisionDebugger::PrecisionDebugger(DebuggerOptions options) : impl_(std::make_unique<Impl>()) {
  if (disabled_by_env()) {
    impl_->options = std::move(options);
    impl_->options.enable = enabled_ = false;
    return;
  }
  impl_->configure(options, rank_from_env(), world_size_from_env());
  enabled_ = impl_->options.enable;
}

PrecisionDebugger::PrecisionDebugger(DebuggerOptions options,
                                     const c10::intrusive_ptr<c10d::ProcessGroup>& process_group)
    : impl_(std::make_unique<Impl>()) {
  if (!process_group) {
    throw Error(
        "PrecisionDebugger(options, process_group): the process group is null; pass the "
        "group the training uses, or use PrecisionDebugger(options) to take the rank from "
        "RANK/WORLD_SIZE");
  }
  if (disabled_by_env()) {
    impl_->options = std::move(options);
    impl_->options.enable = enabled_ = false;
    return;
  }
  impl_->configure(options, process_group->getRank(), process_group->getSize());
  impl_->process_group = process_group;
  enabled_ = impl_->options.enable;
}

PrecisionDebugger::PrecisionDebugger(const std::string& config_path)
    : PrecisionDebugger([&config_path] {
        if (disabled_by_env()) return DebuggerOptions{};  // switched off: no file is read
        const char* env = std::getenv("PRECPROBE_CONFIG");
        return DebuggerOptions::from_json_file(env && *env ? std::string(env) : config_path);
      }()) {}

PrecisionDebugger::~PrecisionDebugger() {
  stop();
  if (impl_->installed_signal_flush) uninstall_signal_flush();
  if (impl_->installed_crash_flush) uninstall_crash_flush();
  impl_->observer.reset();  // joins the statistics worker
  if (impl_->writer) impl_->writer->close();
}

void PrecisionDebugger::start() { start(std::shared_ptr<torch::nn::Module>()); }

void PrecisionDebugger::start(const std::shared_ptr<torch::nn::Module>& model) {
  Impl& d = *impl_;
  if (d.started || !enabled_) return;
  if (d.options.record == RecordMode::kOnAnomaly && d.optimizers.empty()) {
    throw Error(
        "precprobe: \"record\": \"on_anomaly\" needs the optimizer (its state is part of "
        "the snapshot a replayed step starts from): call start(model, optimizer) (several: "
        "start(models, optimizers)) and run each step through run_step()");
  }
  PrecisionDebugger* expected = nullptr;
  if (!g_current.compare_exchange_strong(expected, this))
    throw Error("precprobe: another PrecisionDebugger is already started in this process");
  try {
    if (d.options.replica_check_every > 0 && (!d.process_group || !model)) {
      throw Error("precprobe: 'replica_check_every' is " +
                  std::to_string(d.options.replica_check_every) + " but the debugger has no " +
                  (d.process_group ? std::string("model: call start(model)")
                                   : std::string("process group: construct it with "
                                                 "PrecisionDebugger(options, process_group)")) +
                  ", or set 'replica_check_every' to 0");
    }
    if (!d.ever_started) {
      d.start_time = utc_now();
#ifdef PRECPROBE_HAVE_SEED
      if (d.options.seed)
        d.seed_report = seed_all(*d.options.seed, d.options.is_deterministic).to_json_value();
#endif
      if (d.rank_selected) {
        WriterOptions w;
        w.dir = d.rank_dir;
        w.overwrite = d.options.overwrite;
        w.queue_capacity = d.options.queue_capacity;
        w.policy = d.options.overflow_policy;
        w.flush_every_records = d.options.flush_every_records;
        w.flush_interval_ms = d.options.flush_interval_ms;
        w.zstd_level = d.options.zstd_level;
        w.ops_encoding = d.options.ops_encoding;
        w.fsync = d.options.fsync;
        if (d.options.watch.enable) w.watch = d.options.watch;
        d.writer = std::make_shared<DumpWriter>(std::move(w));
        d.observer = std::make_unique<detail::Observer>(d.options, d.writer.get(), d.rank_dir);
      }
      d.ever_started = true;
      if (d.options.signal_flush && !signal_flush_installed()) {
        install_signal_flush();
        d.installed_signal_flush = true;
      }
      if (d.options.crash_flush && !crash_flush_installed()) {
        install_crash_flush(d.options.crash_flush_timeout_ms);
        d.installed_crash_flush = true;
      }
    }
    d.model = model;
    try {  // what places dropout ops in modules; a model it cannot walk goes without it
      d.module_order = model ? detail::module_order(*model) : nlohmann::json();
    } catch (const std::exception&) {
      d.module_order = nlohmann::json();
    }
    if (d.observer) {
      std::vector<std::pair<std::string, at::Tensor>> named;
      if (model)
        for (const auto& p : model->named_parameters(/*recurse=*/true))
          named.emplace_back(p.key(), p.value());
      d.observer->set_parameters(named);
      d.observer->set_modules(d.module_order);
      if (model && d.writer) {
        ScalarRecord r;
        r.step = d.step;
        r.name = std::string(check_scalar::kParamsNamed);
        r.value = static_cast<double>(named.size());
        d.writer->submit(std::move(r));
      }
      if (d.optimizers.size() > 1 && d.writer) {  // the checklist: a GAN's two players
        ScalarRecord r;
        r.step = d.step;
        r.name = std::string(check_scalar::kOptimizers);
        r.value = static_cast<double>(d.optimizers.size());
        d.writer->submit(std::move(r));
      }
      d.setup_monitor(model);
      if (d.options.record == RecordMode::kOnAnomaly) {
        if (!d.watch)
          d.watch = std::make_unique<detail::AnomalyWatch>(d.options, d.writer.get(),
                                                           d.observer.get(), d.rank_dir);
        d.watch->bind(model.get(), d.optimizers);
      }
      if (d.observer_step != d.step) {
        d.observer->begin_step(d.step);
        d.observer_step = d.step;
      }
    }
#ifdef PRECPROBE_HAVE_DROPOUT
    // "on_anomaly" watches a real run: its dropout stays as the program set it.
    if (!d.options.keep_dropout && d.options.record == RecordMode::kAlways)
      d.no_dropout = std::make_unique<DropoutGuard>();
#endif
    d.malloc_tuning = detail::tune_malloc(d.options.tune_malloc);
    d.started = true;
    d.sync_attachment();
    if (d.writer) d.writer->write_meta(d.run_meta(false));
    set_signal_writer(d.writer);
    if (d.writer) {  // a fatal signal now writes crash.json and flushes (crash_flush.h)
      auto target = std::make_shared<detail::CrashTarget>();
      target->writer = d.writer;
      target->drain = [observer = d.observer.get()] {
        if (observer) observer->drain();
      };
      detail::arm_crash_flush(d.rank_dir, std::move(target));
    }
    d.publish_step();
  } catch (...) {
    d.started = false;
    d.optimizers.clear();
    if (d.watch) d.watch->unbind();
    if (d.observer) d.observer->detach();
#ifdef PRECPROBE_HAVE_DROPOUT
    d.no_dropout.reset();
#endif
    g_current.store(nullptr);
    detail::rethrow_c10_as_error("precprobe: PrecisionDebugger::start failed inside LibTorch");
  }
}

void PrecisionDebugger::stop() noexcept {
  Impl& d = *impl_;
  if (!d.started) return;
  set_signal_writer(nullptr);
  try {
    if (d.step_open) d.end_step();  // the step the last run_step() ran
    d.started = false;
    d.sync_attachment();
    if (d.observer) d.observer->drain();
    if (d.writer) {
      d.writer->flush(/*wait=*/true);
      d.writer->write_meta(d.run_meta(true));
      d.deliver_op_watch();
    }
  } catch (const std::exception& e) {
    report_error(std::string("precprobe: stopping the debugger: ") + e.what());
  } catch (...) {
    report_error("precprobe: stopping the debugger failed");
  }
#ifdef PRECPROBE_HAVE_DROPOUT
  d.no_dropout.reset();
#endif
  if (d.observer) d.observer->arm_grad_hook(false);
  if (d.watch) d.watch->unbind();
  d.optimizers.clear();
  d.model.reset();
  detail::disarm_crash_flush();
  PrecisionDebugger* self = this;
  g_current.compare_exchange_strong(self, nullptr);
}

void PrecisionDebugger::start(const std::shared_ptr<torch::nn::Module>& model,
                              torch::optim::Optimizer& optimizer) {
  Impl& d = *impl_;
  if (d.started || !enabled_) return;
  d.optimizers = {&optimizer};
  start(model);
}

void PrecisionDebugger::start(std::vector<NamedModel> models,
                              std::vector<torch::optim::Optimizer*> optimizers) {
  Impl& d = *impl_;
  if (d.started || !enabled_) return;
  for (size_t i = 0; i < optimizers.size(); ++i) {
    if (optimizers[i] == nullptr)
      throw Error("precprobe: start(models, optimizers): optimizer " + std::to_string(i) +
                  " is null");
  }
  std::shared_ptr<torch::nn::Module> set = detail::model_set(models, d.model_set);
  d.model_set = set;
  d.optimizers = std::move(optimizers);
  start(set);
}

int64_t PrecisionDebugger::current_step() const noexcept { return impl_->step; }
bool PrecisionDebugger::started() const noexcept { return impl_->started; }
int PrecisionDebugger::rank() const noexcept { return impl_->rank; }
int PrecisionDebugger::world_size() const noexcept { return impl_->world_size; }

std::string PrecisionDebugger::parameter_name(const at::Tensor& t) const {
  if (impl_->observer) {
    const std::string* n = impl_->observer->parameter_name(t);
    return n ? *n : std::string();
  }
  return std::string();
}

const torch::nn::Module* PrecisionDebugger::model() const noexcept { return impl_->model.get(); }

void PrecisionDebugger::observe_batch(const at::Tensor& inputs, const at::Tensor& targets,
                                      int64_t epoch, int64_t ignore_index) noexcept {
  if (!enabled_) return;
  detail::observe_batch_of(*this, model(), inputs, targets, epoch, ignore_index);
}

void PrecisionDebugger::expect_module_hash(uint64_t hash) noexcept {
  if (!enabled_) return;
  precprobe::expect_module_hash(*this, hash);
}

DumpWriter* PrecisionDebugger::writer() noexcept { return impl_->writer.get(); }
DebuggerCounters PrecisionDebugger::counters() const noexcept {
  try {
    return impl_->counters();
  } catch (...) {
    return {};
  }
}
const DebuggerOptions& PrecisionDebugger::options() const noexcept { return impl_->options; }
PrecisionDebugger* PrecisionDebugger::current() noexcept { return g_current.load(); }

}  // namespace precprobe
