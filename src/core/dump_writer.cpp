// DumpWriter: producers move records into a bounded queue; one thread takes the whole
// queue at a time (one lock per batch, not per record), encodes each record straight into
// its stream's frame buffer and closes frames by count, by age and on flush().
//
// records_written counts records whose frame reached write(2); records still buffered
// when an I/O error stops the writer are counted as dropped, so written + dropped always
// equals the number of submit() calls once the writer is closed.
#include <fcntl.h>
#ifdef __linux__
#include <pthread.h>
#endif
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iterator>
#include <mutex>
#include <optional>
#include <thread>
#include <variant>

#include "dump_files.h"
#include "file_output.h"
#include "frame_digest.h"
#include "frame_stream.h"
#include "precprobe/dump_format.h"
#include "precprobe/error.h"
#include "precprobe/writer.h"
#include "records_binary.h"

namespace fs = std::filesystem;

namespace precprobe {
namespace detail {
namespace {
std::atomic<WriterBatchHook> g_batch_hook{nullptr};
}  // namespace
void set_writer_batch_hook(WriterBatchHook hook) noexcept { g_batch_hook.store(hook); }
}  // namespace detail

namespace {

using Clock = std::chrono::steady_clock;

struct FlushRequest {
  uint64_t ticket = 0;
  int64_t step_end = -1;  ///< >= 0: append the step_end event of this step after the flush
};
using Item = std::variant<OpRecord, ScalerRecord, GradRecord, ScalarRecord, FlushRequest>;

constexpr size_t kStreams = std::size(kAllStreams);

StreamKind kind_of(const Item& item) noexcept {
  switch (item.index()) {
    case 0:
      return StreamKind::kOps;
    case 1:
      return StreamKind::kScaler;
    case 2:
      return StreamKind::kGrads;
    default:
      return StreamKind::kEvents;
  }
}

void prepare_directory(const WriterOptions& o) {
  if (o.dir.empty()) throw Error("dump directory: the path is empty");
  std::error_code ec;
  fs::create_directories(o.dir, ec);
  if (ec || !fs::is_directory(o.dir, ec)) {
    throw Error(fmt::format("cannot create dump directory '{}': {}", o.dir,
                            ec ? ec.message() : "a file of that name exists"));
  }
  bool empty = fs::is_empty(o.dir, ec);
  if (ec) throw Error(fmt::format("cannot list dump directory '{}': {}", o.dir, ec.message()));
  if (!empty && !o.overwrite) {
    throw Error(
        fmt::format("dump directory '{}' is not empty; choose another dump_path, remove it, or set "
                    "\"overwrite\": true to replace its dump files",
                    o.dir));
  }
  if (!empty) {
    // Only our own files go: a stream this run never opens must not survive from the last.
    for (StreamKind k : kAllStreams) fs::remove(fs::path(o.dir) / stream_file_name(k), ec);
    fs::remove(fs::path(o.dir) / kBinaryOpsFile, ec);
    fs::remove(fs::path(o.dir) / kMetaFile, ec);
    fs::remove(fs::path(o.dir) / kMetaTempFile, ec);
    fs::remove(fs::path(o.dir) / kCrashFile, ec);
  }
  // Fail now, not in the middle of a run, when the directory cannot take files.
  std::string probe = (fs::path(o.dir) / ".precprobe_write_probe").string();
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && ::write(fd, "x", 1) == 1;
  int err = errno;
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  if (!ok) {
    throw Error(fmt::format("dump directory '{}' is not writable: {}", o.dir, std::strerror(err)));
  }
}

}  // namespace

struct DumpWriter::Impl {
  explicit Impl(WriterOptions o) : opt(std::move(o)) {
    if (opt.watch && opt.watch->enable) watcher = std::make_unique<OpWatcher>(*opt.watch);
    if (opt.queue_capacity == 0) opt.queue_capacity = 1;
    if (opt.flush_every_records == 0) opt.flush_every_records = 1;
    if (opt.flush_interval_ms <= 0) opt.flush_interval_ms = 1;
  }

  WriterOptions opt;

  // Shared state, guarded by mu.
  std::mutex mu;
  std::condition_variable cv_work;     // writer waits for items
  std::condition_variable cv_space;    // kBlock producers wait for room
  std::condition_variable cv_flushed;  // flush(wait) waits for its ticket
  std::deque<Item> queue;
  size_t queued_records = 0;  // flush requests are not counted
  // Waking the writer costs the submitting thread a futex call and, on a busy machine, a
  // context switch of the core it runs on; woken for each record, the writer handled about
  // one record per wake (perf sched:sched_switch, bench_debugger L1: ~380 wakes per step).
  // Records are taken in batches instead: a submit wakes the writer when kWakeRecords wait,
  // or when the writer had found nothing to do (idle); otherwise the writer looks again
  // within kBatchLatency. Flushes and close() wake it at once.
  static constexpr size_t kWakeRecords = 64;
  static constexpr auto kBatchLatency = std::chrono::milliseconds(10);
  bool writer_idle = true;
  bool urgent = false;  // a flush request waits in the queue
  bool stopping = false;
  bool thread_done = false;
  uint64_t flush_requested = 0;
  uint64_t flush_done = 0;

  std::atomic<bool> failed{false};
  std::atomic<uint64_t> written{0}, dropped{0}, bytes_in{0}, bytes_out{0}, frames{0};

  // The op watchpoints: judged on the writer thread; the module order arrives with the
  // first meta.json (pending_modules, under meta_mu); the hits are read from any thread.
  std::unique_ptr<OpWatcher> watcher;
  std::atomic<bool> modules_pending{false};
  bool modules_set = false;  // the first write_meta(RunMeta) gave them
  std::optional<RunMeta> pending_modules;
  mutable std::mutex hits_mu;
  std::vector<OpWatchHit> hits;
  std::vector<OpWatchHit> fresh_hits;  // writer thread: of the record being written

  // Argument vectors of written op records, for take_spare_args() (kept once it was called).
  static constexpr size_t kMaxSpareArgs = 1024;
  std::atomic<bool> spares_wanted{false};
  std::atomic<size_t> spare_count{0};  // spare_args.size(), read without the lock
  std::mutex spare_mu;
  std::vector<std::vector<Arg>> spare_args;  // under spare_mu
  std::vector<std::vector<Arg>> kept_args;   // writer thread: of this batch

  std::mutex close_mu;
  bool closed = false;
  std::mutex meta_mu;
  std::thread thread;

  // Writer-thread state.
  struct Stream {
    FrameWriter file;
    size_t records = 0;  // in the frame being built
    Clock::time_point first{};
    FrameDigest digest;    // of the frame being built (op records, when opt.frame_digests)
    size_t uncounted = 0;  // of `records`: the writer's own lines (watch hits), not submitted
    size_t submitted() const { return records - std::min(uncounted, records); }
  };
  std::array<Stream, kStreams> streams;
  BinaryOpEncoder ops_encoder;  // opt.ops_encoding kBinary
  std::string error_scratch;

  template <class R>
  bool submit(R&& r) noexcept;
  void request_flush(bool wait, int64_t step_end = -1) noexcept;
  void write_step_end(int64_t step);
  void watch(const OpRecord* r);
  void run() noexcept;
  void process(Item& item);
  // The argument vectors of `item` (an op record just written) kept for take_spare_args();
  // published at the end of each batch and before a flush completes.
  void keep_spares(Item& item) noexcept;
  void publish_spares() noexcept;
  void encode(StreamKind kind, const Item& item);
  void end_frame(size_t i);
  void end_all_frames(bool sync);
  void end_aged_frames(Clock::time_point now);
  std::optional<Clock::time_point> next_deadline() const;
  void fail(const std::string& message);
  void close_streams();
};

template <class R>
bool DumpWriter::Impl::submit(R&& r) noexcept {
  try {
    std::unique_lock<std::mutex> lock(mu);
    if (stopping || failed.load(std::memory_order_relaxed)) {
      dropped.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    if (queued_records >= opt.queue_capacity) {
      if (opt.policy == OverflowPolicy::kDrop) {
        dropped.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      cv_space.wait(lock, [&] { return queued_records < opt.queue_capacity || stopping; });
      if (stopping) {
        dropped.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
    }
    queue.emplace_back(std::in_place_type<std::decay_t<R>>, std::move(r));
    ++queued_records;
    const bool wake = queued_records == kWakeRecords || (writer_idle && queued_records == 1);
    lock.unlock();
    if (wake) cv_work.notify_one();
    return true;
  } catch (...) {  // bad_alloc: the record is lost, the step goes on
    dropped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
}

void DumpWriter::Impl::request_flush(bool wait, int64_t step_end) noexcept {
  try {
    std::unique_lock<std::mutex> lock(mu);
    if (stopping || thread_done) return;
    uint64_t ticket = ++flush_requested;
    queue.emplace_back(FlushRequest{ticket, step_end});
    urgent = true;
    cv_work.notify_one();
    if (wait) cv_flushed.wait(lock, [&] { return flush_done >= ticket || thread_done; });
  } catch (...) {
  }
}

void DumpWriter::Impl::run() noexcept {
#ifdef __linux__
  pthread_setname_np(pthread_self(), "precprobe-write");  // top -H, perf, gdb
#endif
  std::deque<Item> batch;
  for (bool last = false; !last;) {
    {
      std::unique_lock<std::mutex> lock(mu);
      // Busy: a batch of kWakeRecords, a flush, or within kBatchLatency of the last look.
      // Idle: the first record.
      auto ready = [&] {
        return queued_records >= kWakeRecords || urgent || stopping ||
               (writer_idle && !queue.empty());
      };
      std::optional<Clock::time_point> deadline = next_deadline();
      if (!writer_idle) {
        const auto soon = Clock::now() + kBatchLatency;
        if (!deadline || soon < *deadline) deadline = soon;
      }
      if (deadline) {
        cv_work.wait_until(lock, *deadline, ready);
      } else {
        cv_work.wait(lock, ready);
      }
      writer_idle = queue.empty();
      urgent = false;
    }
    if (auto hook = detail::g_batch_hook.load()) hook();
    {
      std::lock_guard<std::mutex> lock(mu);
      batch.swap(queue);
      queued_records = 0;
      last = stopping;  // close() admits nothing after setting it: this batch is the last
    }
    cv_space.notify_all();
    const bool spares = spares_wanted.load(std::memory_order_relaxed);
    for (Item& item : batch) {
      try {
        if (spares && std::holds_alternative<FlushRequest>(item)) publish_spares();
        process(item);
        if (spares) keep_spares(item);
      } catch (const std::exception& e) {  // bad_alloc while encoding: stop, don't terminate
        fail(std::string("out of memory in the writer thread: ") + e.what());
        if (auto* f = std::get_if<FlushRequest>(&item)) {
          std::lock_guard<std::mutex> lock(mu);
          flush_done = std::max(flush_done, f->ticket);
          cv_flushed.notify_all();
        } else {
          dropped.fetch_add(1, std::memory_order_relaxed);
        }
      }
    }
    publish_spares();
    batch.clear();
    end_aged_frames(Clock::now());
  }
  try {  // a last step never ended: the hits of its ops that waited for their module
    if (watcher && !failed.load(std::memory_order_relaxed)) watch(nullptr);
  } catch (const std::exception& e) {
    fail(std::string("out of memory in the writer thread: ") + e.what());
  }
  close_streams();
  std::lock_guard<std::mutex> lock(mu);
  thread_done = true;
  flush_done = flush_requested;
  cv_flushed.notify_all();
}

void DumpWriter::Impl::keep_spares(Item& item) noexcept {
  auto* r = std::get_if<OpRecord>(&item);
  if (r == nullptr) return;
  try {
    // Not past what publish_spares() can take: a vector kept beyond it would only be freed.
    const size_t room =
        kMaxSpareArgs - std::min(kMaxSpareArgs, spare_count.load(std::memory_order_relaxed));
    for (std::vector<Arg>* args : {&r->inputs, &r->outputs})
      if (args->capacity() != 0 && kept_args.size() < room) kept_args.push_back(std::move(*args));
  } catch (...) {  // bad_alloc: freed with the batch
  }
}

void DumpWriter::Impl::publish_spares() noexcept {
  if (kept_args.empty()) return;
  std::lock_guard<std::mutex> lock(spare_mu);
  try {
    while (!kept_args.empty() && spare_args.size() < kMaxSpareArgs) {
      spare_args.push_back(std::move(kept_args.back()));
      kept_args.pop_back();
    }
  } catch (...) {
  }
  spare_count.store(spare_args.size(), std::memory_order_relaxed);
  kept_args.clear();
}

void DumpWriter::Impl::process(Item& item) {
  if (auto* f = std::get_if<FlushRequest>(&item)) {
    // The step's last hits (of ops that waited for their module) before its step_end event.
    if (f->step_end >= 0 && watcher && !failed.load(std::memory_order_relaxed)) watch(nullptr);
    end_all_frames(opt.fsync);
    if (f->step_end >= 0) write_step_end(f->step_end);
    std::lock_guard<std::mutex> lock(mu);
    flush_done = std::max(flush_done, f->ticket);
    cv_flushed.notify_all();
    return;
  }
  if (failed.load(std::memory_order_relaxed)) {
    dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  encode(kind_of(item), item);
}

void DumpWriter::Impl::encode(StreamKind kind, const Item& item) {
  auto i = static_cast<size_t>(kind);
  Stream& s = streams[i];
  if (!s.file.is_open()) {
    const bool binary = kind == StreamKind::kOps && opt.ops_encoding == OpsEncoding::kBinary;
    std::string path =
        (fs::path(opt.dir) / (binary ? kBinaryOpsFile : stream_file_name(kind))).string();
    if (!s.file.open(path, opt.zstd_level, &error_scratch)) {
      dropped.fetch_add(1, std::memory_order_relaxed);
      fail(error_scratch);
      return;
    }
  }
  std::visit(
      [&](const auto& r) {
        using R = std::decay_t<decltype(r)>;
        if constexpr (!std::is_same_v<R, FlushRequest> && !std::is_same_v<R, OpRecord>)
          append_json(r, s.file.buffer());
        if constexpr (std::is_same_v<R, OpRecord>) {
          if (opt.ops_encoding == OpsEncoding::kBinary) {
            ops_encoder.append(r, s.file.buffer());
          } else {
            append_json(r, s.file.buffer());
          }
          if (opt.frame_digests) digest_detail::add(s.digest, r);
        }
      },
      item);
  if (s.records++ == 0) s.first = Clock::now();
  if (s.records >= opt.flush_every_records) end_frame(i);
  if (watcher && kind == StreamKind::kOps) watch(&std::get<OpRecord>(item));
}

// The record as written, judged: each hit's event follows it into events.jsonl.zst (not a
// submitted record: the counters stay those of submit()). An op that reads no parameter waits
// for its module (modules.h): its hits come with a later record's, or at its step's end
// (`r` nullptr).
void DumpWriter::Impl::watch(const OpRecord* r) {
  // A plain load first: the read-modify-write only once, when meta.json brought the modules.
  if (modules_pending.load(std::memory_order_relaxed) && modules_pending.exchange(false)) {
    std::lock_guard<std::mutex> lock(meta_mu);
    if (pending_modules) watcher->set_modules(*pending_modules);
    pending_modules.reset();
  }
  fresh_hits.clear();
  if (r)
    watcher->observe(*r, fresh_hits);
  else
    watcher->end_step(fresh_hits);
  if (fresh_hits.empty()) return;
  Stream& events = streams[static_cast<size_t>(StreamKind::kEvents)];
  for (const OpWatchHit& h : fresh_hits) {
    ++events.uncounted;
    encode(StreamKind::kEvents, Item(std::in_place_type<ScalarRecord>, to_scalar_record(h)));
  }
  std::lock_guard<std::mutex> lock(hits_mu);
  hits.insert(hits.end(), fresh_hits.begin(), fresh_hits.end());
}

// After end_all_frames(): every earlier record is in a frame that write(2) took, so the event
// goes out in a frame of its own, after them (a reader that finds it may trust the step).
void DumpWriter::Impl::write_step_end(int64_t step) {
  if (failed.load(std::memory_order_relaxed)) return;
  ScalarRecord r;
  r.step = step;
  r.name = std::string(kStepEndEventName);
  r.value = static_cast<double>(step);
  const uint64_t before = written.load(std::memory_order_relaxed);
  const uint64_t dropped_before = dropped.load(std::memory_order_relaxed);
  encode(StreamKind::kEvents, Item(std::in_place_type<ScalarRecord>, std::move(r)));
  const auto events = static_cast<size_t>(StreamKind::kEvents);
  end_frame(events);  // (encode() ended it already when flush_every_records is 1)
  if (opt.fsync && streams[events].file.is_open() && !failed.load(std::memory_order_relaxed) &&
      !streams[events].file.sync(&error_scratch))
    fail(error_scratch);
  // Not a submitted record: written + dropped still equals the number of submit() calls.
  if (written.load(std::memory_order_relaxed) > before)
    written.fetch_sub(1, std::memory_order_relaxed);
  if (dropped.load(std::memory_order_relaxed) > dropped_before)
    dropped.fetch_sub(1, std::memory_order_relaxed);
}

void DumpWriter::Impl::end_frame(size_t i) {
  Stream& s = streams[i];
  if (s.records == 0 || failed.load(std::memory_order_relaxed)) return;
  uint64_t in0 = s.file.bytes_in(), out0 = s.file.bytes_out();
  const bool digested = s.digest.records > 0;
  if (!s.file.end_frame(&error_scratch, digested ? &s.digest : nullptr)) {
    fail(error_scratch);
    return;
  }
  if (digested) s.digest = FrameDigest{};
  written.fetch_add(s.submitted(), std::memory_order_relaxed);
  bytes_in.fetch_add(s.file.bytes_in() - in0, std::memory_order_relaxed);
  bytes_out.fetch_add(s.file.bytes_out() - out0, std::memory_order_relaxed);
  frames.fetch_add(1, std::memory_order_relaxed);
  s.records = 0;
  s.uncounted = 0;
}

void DumpWriter::Impl::end_all_frames(bool sync) {
  for (size_t i = 0; i < kStreams; ++i) {
    end_frame(i);
    if (sync && streams[i].file.is_open() && !failed.load(std::memory_order_relaxed) &&
        !streams[i].file.sync(&error_scratch)) {
      fail(error_scratch);
    }
  }
}

void DumpWriter::Impl::end_aged_frames(Clock::time_point now) {
  auto interval = std::chrono::milliseconds(opt.flush_interval_ms);
  for (size_t i = 0; i < kStreams; ++i) {
    if (streams[i].records > 0 && now - streams[i].first >= interval) end_frame(i);
  }
}

std::optional<Clock::time_point> DumpWriter::Impl::next_deadline() const {
  std::optional<Clock::time_point> deadline;
  for (const Stream& s : streams) {
    if (s.records == 0) continue;
    auto t = s.first + std::chrono::milliseconds(opt.flush_interval_ms);
    if (!deadline || t < *deadline) deadline = t;
  }
  return deadline;
}

void DumpWriter::Impl::fail(const std::string& message) {
  if (failed.exchange(true)) return;
  for (Stream& s : streams) {  // buffered records will never reach the file
    dropped.fetch_add(s.submitted(), std::memory_order_relaxed);
    s.records = 0;
    s.uncounted = 0;
    s.file.buffer().clear();
  }
  report_error(fmt::format("dump writer stopped, later records are dropped: {}", message));
  cv_space.notify_all();
}

void DumpWriter::Impl::close_streams() {
  end_all_frames(opt.fsync);
  for (Stream& s : streams) {
    if (!s.file.close(&error_scratch)) fail(error_scratch);
  }
}

// ---- DumpWriter ----

DumpWriter::DumpWriter(WriterOptions options) {
  prepare_directory(options);
  impl_ = std::make_unique<Impl>(std::move(options));
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

DumpWriter::~DumpWriter() { close(); }

void DumpWriter::write_meta(const RunMeta& meta) {
  if (impl_->watcher && !impl_->modules_set) {
    impl_->modules_set = true;
    std::lock_guard<std::mutex> lock(impl_->meta_mu);
    impl_->pending_modules = meta;
    impl_->modules_pending.store(true);
  }
  // A path or host name that is not UTF-8 is written with U+FFFD, never thrown.
  write_meta(meta.to_json().dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
}

void DumpWriter::write_meta(const std::string& json_text) {
  std::lock_guard<std::mutex> lock(impl_->meta_mu);
  fs::path dir(impl_->opt.dir);
  // meta.json is tiny and names the format version: durable before it replaces the
  // previous one, so a reader never finds it empty.
  detail::write_whole_file((dir / kMetaFile).string(), json_text, (dir / kMetaTempFile).string(),
                           /*durable=*/true);
}

bool DumpWriter::submit(OpRecord&& r) noexcept { return impl_->submit(std::move(r)); }
bool DumpWriter::submit(ScalerRecord&& r) noexcept { return impl_->submit(std::move(r)); }
bool DumpWriter::submit(GradRecord&& r) noexcept { return impl_->submit(std::move(r)); }
bool DumpWriter::submit(ScalarRecord&& r) noexcept { return impl_->submit(std::move(r)); }

void DumpWriter::take_spare_args(std::vector<std::vector<Arg>>& into, size_t max) noexcept {
  Impl& m = *impl_;
  m.spares_wanted.store(true, std::memory_order_relaxed);
  if (m.spare_count.load(std::memory_order_relaxed) == 0) return;  // no lock taken for none
  std::lock_guard<std::mutex> lock(m.spare_mu);
  try {
    for (; max > 0 && !m.spare_args.empty(); --max) {
      into.push_back(std::move(m.spare_args.back()));
      m.spare_args.pop_back();
    }
  } catch (...) {  // bad_alloc: the producer builds its own
  }
  m.spare_count.store(m.spare_args.size(), std::memory_order_relaxed);
}

void DumpWriter::flush(bool wait) noexcept { impl_->request_flush(wait); }

void DumpWriter::end_step(int64_t step, bool wait) noexcept {
  impl_->request_flush(wait, step < 0 ? 0 : step);
}

void DumpWriter::close() noexcept {
  std::lock_guard<std::mutex> guard(impl_->close_mu);
  if (impl_->closed) return;
  impl_->closed = true;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv_work.notify_all();
  impl_->cv_space.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

WriterCounters DumpWriter::counters() const noexcept {
  WriterCounters c;
  c.records_written = impl_->written.load(std::memory_order_relaxed);
  c.records_dropped = impl_->dropped.load(std::memory_order_relaxed);
  c.bytes_uncompressed = impl_->bytes_in.load(std::memory_order_relaxed);
  c.bytes_compressed = impl_->bytes_out.load(std::memory_order_relaxed);
  c.frames = impl_->frames.load(std::memory_order_relaxed);
  c.failed = impl_->failed.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(impl_->hits_mu);
  c.watch_hits = impl_->hits.size();
  return c;
}

std::vector<OpWatchHit> DumpWriter::watch_hits(size_t from) const {
  std::lock_guard<std::mutex> lock(impl_->hits_mu);
  if (from >= impl_->hits.size()) return {};
  return {impl_->hits.begin() + static_cast<std::ptrdiff_t>(from), impl_->hits.end()};
}

const std::string& DumpWriter::dir() const noexcept { return impl_->opt.dir; }

}  // namespace precprobe
