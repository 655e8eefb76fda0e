// SIGTERM/SIGINT: a self-pipe wakes a flusher thread; the handler waits (bounded) and
// chains to the previous disposition. See include/precprobe/signal_flush.h.
#include "precprobe/signal_flush.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "debugger/debugger_internal.h"
#include "precprobe/dump_format.h"
#include "precprobe/error.h"
#include "precprobe/writer.h"

namespace precprobe {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT};

int g_wake[2] = {-1, -1};  // handler -> flusher: one byte, the signal number
std::atomic<int> g_timeout_ms{2000};
std::atomic<unsigned> g_completed{0};
std::atomic<bool> g_installed{false};
struct sigaction g_previous[2];

int index_of(int sig) { return sig == SIGTERM ? 0 : 1; }

// Rewrites meta.json with the state and the writer's counters (the flusher thread only).
void mark_signalled(DumpWriter& writer, int sig) {
  const std::string path = writer.dir() + "/" + std::string(kMetaFile);
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  RunMeta meta;
  try {
    meta = RunMeta::parse(text, path);
  } catch (const Error&) {
    // unreadable: start from an empty one, as before
  }
  meta.state = "signalled";
  meta.signal = sig;
  meta.writer = writer.counters();
  writer.write_meta(meta);
}

void flush_for(int sig) {
  try {
    std::shared_ptr<DumpWriter> writer = detail::started_debugger_writer();
    if (writer == nullptr) return;
    writer->flush(true);
    mark_signalled(*writer, sig);
  } catch (const std::exception& e) {
    report_error(std::string("precprobe: flushing on signal: ") + e.what());
  }
}

// Re-delivers the signal to the disposition that was installed before ours: a user
// handler runs in a real signal context (on whichever thread the kernel picks); the default
// disposition ends the process as the signal would have. Ours is not reinstalled: a second
// signal goes straight to the previous disposition.
void chain(int sig) {
  const struct sigaction& prev = g_previous[index_of(sig)];
  if (!(prev.sa_flags & SA_SIGINFO) && prev.sa_handler == SIG_IGN) return;
  ::sigaction(sig, &prev, nullptr);
  ::kill(::getpid(), sig);
}

// Flushes on a helper thread and waits for it at most `timeout_ms`: the flush needs the
// writer's queue lock, which a stuck producer may hold.
void flush_bounded(int sig) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread([sig, done] {
    flush_for(sig);
    done->set_value();
  }).detach();
  if (finished.wait_for(std::chrono::milliseconds(g_timeout_ms.load())) ==
      std::future_status::ready)
    g_completed.fetch_add(1);
}

void flusher_main() {
  // Signals go to other threads: this one must stay free to flush.
  sigset_t set;
  sigemptyset(&set);
  for (int s : kSignals) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  for (;;) {
    unsigned char sig = 0;
    const ssize_t n = ::read(g_wake[0], &sig, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1) return;
    flush_bounded(sig);
    chain(sig);
  }
}

// Async-signal-safe: one write(2) to the self-pipe. The interrupted thread goes on at
// once (it may hold a lock the flush needs); the flusher thread flushes and chains.
void on_signal(int sig, siginfo_t*, void*) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  ssize_t n = ::write(g_wake[1], &byte, 1);
  (void)n;
  errno = saved_errno;
}

void make_pipe(int fds[2], bool nonblocking_read, bool nonblocking_write) {
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw Error(std::string("install_signal_flush: pipe2 failed: ") + std::strerror(errno));
  if (nonblocking_read) ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  if (nonblocking_write) ::fcntl(fds[1], F_SETFL, ::fcntl(fds[1], F_GETFL) | O_NONBLOCK);
}

}  // namespace

void install_signal_flush(int timeout_ms) {
  if (timeout_ms < 0)
    throw Error("install_signal_flush: timeout_ms must be >= 0, got " + std::to_string(timeout_ms));
  g_timeout_ms.store(timeout_ms);
  static std::once_flag started;
  std::call_once(started, [] {
    make_pipe(g_wake, false, true);  // the handler never blocks on a full pipe
    std::thread(flusher_main).detach();
  });
  if (g_installed.exchange(true)) return;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int s : kSignals) {
    if (::sigaction(s, &sa, &g_previous[index_of(s)]) != 0) {
      g_installed.store(false);
      throw Error(std::string("install_signal_flush: sigaction failed: ") + std::strerror(errno));
    }
  }
}

void uninstall_signal_flush() noexcept {
  if (!g_installed.exchange(false)) return;
  for (int s : kSignals) ::sigaction(s, &g_previous[index_of(s)], nullptr);
}

unsigned signal_flushes_completed() noexcept { return g_completed.load(); }

bool signal_flush_installed() noexcept { return g_installed.load(); }

}  // namespace precprobe
