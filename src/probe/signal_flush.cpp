// SIGTERM/SIGINT: a self-pipe wakes a flusher thread; the handler waits (bounded) and
// chains to the previous disposition. See include/precprobe/signal_flush.h.
#include "precprobe/signal_flush.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "precprobe/debugger.h"
#include "precprobe/error.h"
#include "precprobe/writer.h"

namespace precprobe {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT};

int g_wake[2] = {-1, -1};  // handler -> flusher: one byte, the signal number
int g_done[2] = {-1, -1};  // flusher -> handler: one byte per completed flush
std::atomic<int> g_timeout_ms{2000};
std::atomic<unsigned> g_completed{0};
std::atomic<bool> g_installed{false};
struct sigaction g_previous[2];

int index_of(int sig) { return sig == SIGTERM ? 0 : 1; }

// Rewrites meta.json with the state and the writer's counters (the flusher thread only).
void mark_signalled(DumpWriter& writer, int sig) {
  const std::string path = writer.dir() + "/meta.json";
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nlohmann::json meta = nlohmann::json::parse(text, nullptr, false);
  if (!meta.is_object()) meta = nlohmann::json::object();
  meta["state"] = "signalled";
  meta["signal"] = sig;
  meta["writer"] = nlohmann::json::parse(to_json(writer.counters()), nullptr, false);
  writer.write_meta(meta.dump());
}

void flush_for(int sig) {
  try {
    PrecisionDebugger* dbg = PrecisionDebugger::current();
    DumpWriter* writer = dbg != nullptr ? dbg->writer() : nullptr;
    if (writer == nullptr) return;
    writer->flush(true);
    mark_signalled(*writer, sig);
  } catch (const std::exception& e) {
    report_error(std::string("precprobe: flushing on signal: ") + e.what());
  }
}

void flusher_main() {
  // Signals go to other threads: a handler running here would wait for itself.
  sigset_t set;
  sigemptyset(&set);
  for (int s : kSignals) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  for (;;) {
    unsigned char sig = 0;
    const ssize_t n = ::read(g_wake[0], &sig, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1) return;
    flush_for(sig);
    g_completed.fetch_add(1);
    const unsigned char one = 1;
    while (::write(g_done[1], &one, 1) < 0 && errno == EINTR) {
    }
  }
}

// Calls what was installed before us, as the kernel would have.
void chain(int sig, siginfo_t* info, void* context) {
  const struct sigaction& prev = g_previous[index_of(sig)];
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction != nullptr) prev.sa_sigaction(sig, info, context);
    return;
  }
  if (prev.sa_handler == SIG_IGN) return;
  if (prev.sa_handler == SIG_DFL) {
    // Default disposition: end the process as the signal would have. The signal is
    // blocked while this handler runs; it is delivered when the handler returns.
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(sig, &dfl, nullptr);
    ::raise(sig);
    return;
  }
  prev.sa_handler(sig);
}

// Async-signal-safe: write(2), poll(2), read(2), sigaction(2), raise(3) only.
void on_signal(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  // Drain completions of earlier signals so the wait below sees only this one.
  unsigned char drain[16];
  while (::read(g_done[0], drain, sizeof drain) > 0) {
  }
  const unsigned char byte = static_cast<unsigned char>(sig);
  if (::write(g_wake[1], &byte, 1) == 1) {
    struct pollfd p;
    p.fd = g_done[0];
    p.events = POLLIN;
    p.revents = 0;
    int left = g_timeout_ms.load(std::memory_order_relaxed);
    // EINTR restarts with the full timeout at worst: still bounded per interruption.
    while (::poll(&p, 1, left) < 0 && errno == EINTR) {
    }
  }
  errno = saved_errno;
  chain(sig, info, context);
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
    make_pipe(g_done, true, false);  // the handler drains it without blocking
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

}  // namespace precprobe
