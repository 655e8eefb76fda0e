// Fatal signals (include/precprobe/crash_flush.h): the handler writes crash.json itself,
// wakes the crash flusher thread, waits for it (bounded), then hands the signal on to the
// disposition installed before ours. Everything the handler calls is async-signal-safe:
// open/write/close/poll/clock_gettime/sigaction/raise/prctl and the formatting below.
#include "precprobe/crash_flush.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>

#include "capture/observer_internal.h"
#include "crash/crash_state.h"
#include "precprobe/dump_format.h"
#include "precprobe/error.h"

namespace precprobe {
namespace detail {
namespace {

constexpr int kFatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
constexpr const char* kFatalNames[] = {"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT"};
constexpr int kNumFatal = sizeof(kFatal) / sizeof(kFatal[0]);

int index_of(int sig) {
  for (int i = 0; i < kNumFatal; ++i)
    if (kFatal[i] == sig) return i;
  return 0;
}

// ---- set in normal context; read by the handler ----
std::atomic<bool> g_installed{false};
std::atomic<bool> g_armed{false};  // a debugger is started: write and flush
std::atomic<int> g_timeout_ms{2000};
std::atomic<int64_t> g_step{0};
char g_crash_path[4096];  // "<rank_dir>/crash.json"; written only while disarmed
struct sigaction g_previous[kNumFatal];
int g_wake[2] = {-1, -1};             // handler -> flusher
int g_ack[2] = {-1, -1};              // flusher -> handler
std::atomic<long> g_handling_tid{0};  // the thread handling a crash (0: none yet)
alignas(16) char g_alt_stack[64 * 1024];

// ---- the crash, filled by the handler before it wakes the flusher ----
struct Crash {
  int sig;
  int code;
  bool has_address;
  uintptr_t address;
  int64_t step;
  char op[160];
  bool has_thread;
  int64_t thread;
  long tid;
  char thread_name[17];
  int64_t time;
};
Crash g_crash;

// ---- the flusher's target (normal context only) ----
std::mutex g_target_mu;
std::shared_ptr<CrashTarget> g_target;

// ---- async-signal-safe text building ----
class Buf {
 public:
  void put(const char* s) {
    while (*s != '\0' && n_ + 1 < sizeof buf_) buf_[n_++] = *s++;
  }
  void put_int(int64_t v) {
    char tmp[24];
    int k = 0;
    uint64_t u = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    do {
      tmp[k++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u != 0);
    if (v < 0) tmp[k++] = '-';
    while (k > 0 && n_ + 1 < sizeof buf_) buf_[n_++] = tmp[--k];
  }
  void put_hex(uintptr_t v) {
    put("0x");
    char tmp[20];
    int k = 0;
    do {
      tmp[k++] = "0123456789abcdef"[v & 15u];
      v >>= 4;
    } while (v != 0);
    while (k > 0 && n_ + 1 < sizeof buf_) buf_[n_++] = tmp[--k];
  }
  /// A JSON string: quotes, backslashes and control bytes replaced by '?'.
  void put_string(const char* s) {
    put("\"");
    for (; *s != '\0' && n_ + 2 < sizeof buf_; ++s) {
      const auto c = static_cast<unsigned char>(*s);
      buf_[n_++] = c < 0x20 || c == '"' || c == '\\' ? '?' : *s;
    }
    put("\"");
  }
  const char* data() const { return buf_; }
  size_t size() const { return n_; }

 private:
  char buf_[1024];
  size_t n_ = 0;
};

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void copy_name(char* out, size_t cap, const char* in) {
  size_t i = 0;
  for (; in != nullptr && in[i] != '\0' && i + 1 < cap; ++i) out[i] = in[i];
  out[i] = '\0';
}

const char* signal_name(int sig) { return kFatalNames[index_of(sig)]; }

// The crash as JSON (crash.json, and CrashRecord for meta.json): CrashRecord's keys.
void crash_json(Buf& b, const Crash& c) {
  b.put("{\"signal\":");
  b.put_int(c.sig);
  b.put(",\"signal_name\":");
  b.put_string(signal_name(c.sig));
  b.put(",\"code\":");
  b.put_int(c.code);
  if (c.has_address) {
    b.put(",\"address\":\"");
    b.put_hex(c.address);
    b.put("\"");
  }
  b.put(",\"step\":");
  b.put_int(c.step);
  b.put(",\"op\":");
  b.put_string(c.op);
  if (c.has_thread) {
    b.put(",\"thr\":");
    b.put_int(c.thread);
  }
  b.put(",\"tid\":");
  b.put_int(c.tid);
  b.put(",\"thread_name\":");
  b.put_string(c.thread_name);
  b.put(",\"time\":");
  b.put_int(c.time);
  b.put("}\n");
}

void note_crash(int sig, const siginfo_t* info, long tid) {
  Crash& c = g_crash;
  c.sig = sig;
  c.code = info != nullptr ? info->si_code : 0;
  c.has_address = info != nullptr && info->si_code > 0 && sig != SIGABRT;
  c.address = c.has_address ? reinterpret_cast<uintptr_t>(info->si_addr) : 0;
  c.step = g_step.load(std::memory_order_relaxed);
  const InflightOps& ops = inflight();
  std::atomic_signal_fence(std::memory_order_acquire);
  const int32_t depth = ops.depth;
  const char* op = "";
  if (depth > 0) op = ops.names[(depth < InflightOps::kMax ? depth : InflightOps::kMax) - 1];
  copy_name(c.op, sizeof c.op, op);
  c.has_thread = ops.state != nullptr && ops.state->generation != 0;
  c.thread = c.has_thread ? ops.state->index : 0;
  c.tid = tid;
  c.thread_name[0] = '\0';
  ::prctl(PR_GET_NAME, c.thread_name, 0, 0, 0);
  c.thread_name[16] = '\0';
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  c.time = now.tv_sec;
}

void write_crash_file() {
  Buf b;
  crash_json(b, g_crash);
  const int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  write_all(fd, b.data(), b.size());
  ::close(fd);
}

int64_t now_ms() {
  struct timespec t {};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}

// Waits for the flusher's answer at most timeout_ms; true when it answered.
bool wait_for_flush(int timeout_ms) {
  const int64_t until = now_ms() + timeout_ms;
  for (;;) {
    const int64_t left = until - now_ms();
    if (left < 0) return false;
    struct pollfd p {};
    p.fd = g_ack[0];
    p.events = POLLIN;
    const int r = ::poll(&p, 1, static_cast<int>(left));
    if (r > 0) {
      char byte = 0;
      return ::read(g_ack[0], &byte, 1) == 1;
    }
    if (r < 0 && errno != EINTR) return false;
  }
}

void say(bool flushed, int timeout_ms) {
  Buf b;
  b.put("precprobe: ");
  b.put(signal_name(g_crash.sig));
  b.put(" at step ");
  b.put_int(g_crash.step);
  b.put(g_crash.op[0] != '\0' ? " in " : " outside any observed op");
  b.put(g_crash.op);
  b.put(flushed ? ": the dump holds what was complete; crash record "
                : ": the flush did not finish in ");
  if (!flushed) {
    b.put_int(timeout_ms);
    b.put(" ms; crash record ");
  }
  b.put(g_crash_path);
  b.put("\n");
  write_all(2, b.data(), b.size());
}

// Restores the previous disposition and hands the signal on: a fault re-executes and faults
// again there; a signal a process sent (si_code <= 0: kill, raise, abort) is raised again.
// (Our handlers use SA_NODEFER: the raise is delivered at once, to that disposition.)
void chain(int sig, const siginfo_t* info) {
  ::sigaction(sig, &g_previous[index_of(sig)], nullptr);
  if (info == nullptr || info->si_code <= 0) ::raise(sig);
}

long gettid_now() { return static_cast<long>(::syscall(SYS_gettid)); }

void on_fatal(int sig, siginfo_t* info, void*) {
  const int saved_errno = errno;
  const long tid = gettid_now();
  long expected = 0;
  if (!g_handling_tid.compare_exchange_strong(expected, tid)) {
    if (expected != tid) {
      // Another thread is handling a crash and will end the process: let it finish.
      const int64_t until = now_ms() + g_timeout_ms.load() + 1000;
      while (now_ms() < until) {
        struct timespec ms = {0, 1000000};
        ::nanosleep(&ms, nullptr);
      }
    }
    chain(sig, info);  // a fault inside our own handling: straight on
    errno = saved_errno;
    return;
  }
  if (g_armed.load(std::memory_order_acquire)) {
    note_crash(sig, info, tid);
    write_crash_file();
    const char byte = 1;
    bool flushed = false;
    const int timeout = g_timeout_ms.load();
    if (::write(g_wake[1], &byte, 1) == 1) flushed = wait_for_flush(timeout);
    say(flushed, timeout);
  }
  chain(sig, info);
  errno = saved_errno;
}

// ---- the flusher thread (normal context) ----

void mark_crashed(DumpWriter& writer) {
  const std::string path = writer.dir() + "/" + std::string(kMetaFile);
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  RunMeta meta;
  try {
    meta = RunMeta::parse(text, path);
  } catch (const Error&) {
    // unreadable: start from an empty one
  }
  Buf b;
  crash_json(b, g_crash);
  meta.state = "crashed";
  meta.signal = g_crash.sig;
  meta.step = g_crash.step;
  meta.crash =
      CrashRecord::parse(nlohmann::json::parse(std::string(b.data(), b.size()), nullptr, false));
  meta.writer = writer.counters();
  writer.write_meta(meta);
}

void flush_crash() {
  std::shared_ptr<CrashTarget> target;
  {
    // The crashed thread may hold this lock (in arm/disarm): give up rather than wait.
    std::unique_lock<std::mutex> lock(g_target_mu, std::try_to_lock);
    for (int tries = 0; !lock.owns_lock() && tries < 100; ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      static_cast<void>(lock.try_lock());  // the loop's condition reads the outcome
    }
    if (!lock.owns_lock()) return;
    target = g_target;
  }
  if (target == nullptr || target->writer == nullptr) return;
  try {
    if (target->drain) target->drain();
    target->writer->flush(/*wait=*/true);
    mark_crashed(*target->writer);
  } catch (const std::exception& e) {
    report_error(std::string("precprobe: flushing after a crash: ") + e.what());
  } catch (...) {
  }
}

void flusher_main() {
  sigset_t set;
  sigfillset(&set);
  for (int s : kFatal) sigdelset(&set, s);  // a fault here must still be delivered
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
#ifdef __linux__
  pthread_setname_np(pthread_self(), "precprobe-crash");
#endif
  for (;;) {
    char byte = 0;
    const ssize_t n = ::read(g_wake[0], &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1) return;
    flush_crash();
    const char ack = 1;
    write_all(g_ack[1], &ack, 1);
  }
}

void make_pipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw Error(std::string("install_crash_flush: pipe2 failed: ") + std::strerror(errno));
}

// A stack overflow faults with no stack left to run a handler on: give the installing
// thread (the training loop's) an alternate one, unless it has one.
void ensure_alt_stack() {
  stack_t current{};
  if (::sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE) == 0) return;
  stack_t s{};
  s.ss_sp = g_alt_stack;
  s.ss_size = sizeof g_alt_stack;
  s.ss_flags = 0;
  ::sigaltstack(&s, nullptr);
}

}  // namespace

void arm_crash_flush(const std::string& rank_dir, std::shared_ptr<CrashTarget> target) {
  g_armed.store(false, std::memory_order_release);
  const std::string path = rank_dir + "/" + std::string(kCrashFile);
  copy_name(g_crash_path, sizeof g_crash_path, path.c_str());
  {
    std::lock_guard<std::mutex> lock(g_target_mu);
    g_target = std::move(target);
  }
  g_armed.store(path.size() < sizeof g_crash_path, std::memory_order_release);
}

void disarm_crash_flush() noexcept {
  g_armed.store(false, std::memory_order_release);
  std::lock_guard<std::mutex> lock(g_target_mu);
  g_target.reset();
}

void set_crash_step(int64_t step) noexcept { g_step.store(step, std::memory_order_relaxed); }

}  // namespace detail

void install_crash_flush(int timeout_ms) {
  using namespace detail;  // NOLINT(google-build-using-namespace): this file's own state
  if (timeout_ms < 0)
    throw Error("install_crash_flush: timeout_ms must be >= 0, got " + std::to_string(timeout_ms));
  g_timeout_ms.store(timeout_ms);
  static std::once_flag started;
  std::call_once(started, [] {
    make_pipe(g_wake);
    make_pipe(g_ack);
    std::thread(flusher_main).detach();
  });
  if (g_installed.exchange(true)) return;
  ensure_alt_stack();
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fatal;
  // SA_NODEFER: a fault inside the handler re-enters it and goes straight on (the recursion
  // guard), and the signal raised again for the previous disposition arrives at once.
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < kNumFatal; ++i) {
    if (::sigaction(kFatal[i], &sa, &g_previous[i]) != 0) {
      const int err = errno;
      for (int k = 0; k < i; ++k) ::sigaction(kFatal[k], &g_previous[k], nullptr);
      g_installed.store(false);
      throw Error(std::string("install_crash_flush: sigaction failed: ") + std::strerror(err));
    }
  }
}

void uninstall_crash_flush() noexcept {
  using namespace detail;  // NOLINT(google-build-using-namespace)
  if (!g_installed.exchange(false)) return;
  for (int i = 0; i < kNumFatal; ++i) {
    struct sigaction now;
    if (::sigaction(kFatal[i], nullptr, &now) != 0) continue;
    // Restore only where ours is still the handler (the program may have installed its own).
    if ((now.sa_flags & SA_SIGINFO) != 0 && now.sa_sigaction == on_fatal)
      ::sigaction(kFatal[i], &g_previous[i], nullptr);
  }
}

bool crash_flush_installed() noexcept { return detail::g_installed.load(); }

}  // namespace precprobe
