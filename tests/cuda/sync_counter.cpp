// libprecprobe_sync_counter.so: an LD_PRELOAD shim that counts the CUDA runtime's calls that
// make the host wait for the device (cudaDeviceSynchronize, cudaStreamSynchronize,
// cudaEventSynchronize, the synchronous cudaMemcpy/cudaMemset family) and, for context, the
// non-blocking polls (cudaStreamQuery, cudaEventQuery) and device-to-host cudaMemcpyAsync,
// then calls the real function (dlsym RTLD_NEXT). It sees calls that go through libcudart.so's
// dynamic symbols: LibTorch's (a wheel loads libcudart as a shared library) and precprobe's
// own; a program linked with cudart_static is invisible to it (all counts stay 0).
//
//   LD_PRELOAD=build/tests/libprecprobe_sync_counter.so PRECPROBE_SYNC_COUNTER_OUT=counts.jsonl
//   prog
//
// At exit, with PRECPROBE_SYNC_COUNTER_OUT set, one JSON line of totals is appended there.
// A program that wants counts of a region (tests/cuda/test_cuda_sync.cpp, bench_cuda_step)
// finds precprobe_sync_counter_read() with dlsym(RTLD_DEFAULT, ...): present only when the
// shim is loaded. No CUDA header is needed: handles are pointers, enums and errors ints.
#include <dlfcn.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>

namespace {

enum Counter : int {
  kDeviceSynchronize,
  kStreamSynchronize,
  kEventSynchronize,
  kMemcpy,  // cudaMemcpy, cudaMemcpy2D, cudaMemcpyToSymbol, cudaMemcpyFromSymbol
  kMemset,  // cudaMemset (synchronous with respect to the host for most memory)
  kStreamQuery,
  kEventQuery,
  kMemcpyAsyncD2H,
  kCount
};

const char* const kNames[kCount] = {"cudaDeviceSynchronize", "cudaStreamSynchronize",
                                    "cudaEventSynchronize",  "cudaMemcpy (sync)",
                                    "cudaMemset (sync)",     "cudaStreamQuery (poll)",
                                    "cudaEventQuery (poll)", "cudaMemcpyAsync D2H or default"};

std::atomic<unsigned long long> g_counts[kCount];

template <typename Fn>
Fn real(const char* name) {
  void* f = ::dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    std::fprintf(stderr, "precprobe_sync_counter: no %s after the shim (%s)\n", name, dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

void bump(Counter c) { g_counts[c].fetch_add(1, std::memory_order_relaxed); }

constexpr int kMemcpyDeviceToHost = 2;
constexpr int kMemcpyDefault = 4;

struct AtExit {
  ~AtExit() {
    const char* path = std::getenv("PRECPROBE_SYNC_COUNTER_OUT");
    if (path == nullptr || *path == '\0') return;
    FILE* f = std::fopen(path, "a");
    if (f == nullptr) return;
    char exe[512] = {0};
    FILE* cmd = std::fopen("/proc/self/cmdline", "r");
    if (cmd != nullptr) {
      size_t n = std::fread(exe, 1, sizeof exe - 1, cmd);
      for (size_t i = 0; i + 1 < n; ++i)
        if (exe[i] == '\0') exe[i] = ' ';
      for (size_t i = 0; i < n; ++i)
        if (exe[i] == '"' || exe[i] == '\\') exe[i] = '\'';
      std::fclose(cmd);
    }
    std::fprintf(f, "{\"cmdline\": \"%s\"", exe);
    for (int i = 0; i < kCount; ++i)
      std::fprintf(f, ", \"%s\": %llu", kNames[i], g_counts[i].load());
    std::fprintf(f, "}\n");
    std::fclose(f);
  }
} g_at_exit;

}  // namespace

extern "C" {

/// Copies up to `n` counters into `out`; returns how many there are.
__attribute__((visibility("default"))) int precprobe_sync_counter_read(unsigned long long* out,
                                                                       int n) {
  for (int i = 0; i < n && i < kCount; ++i) out[i] = g_counts[i].load();
  return kCount;
}

/// The name of counter `i`, or nullptr.
__attribute__((visibility("default"))) const char* precprobe_sync_counter_name(int i) {
  return i >= 0 && i < kCount ? kNames[i] : nullptr;
}

int cudaDeviceSynchronize() {
  static auto f = real<int (*)()>("cudaDeviceSynchronize");
  bump(kDeviceSynchronize);
  return f();
}

int cudaStreamSynchronize(void* stream) {
  static auto f = real<int (*)(void*)>("cudaStreamSynchronize");
  bump(kStreamSynchronize);
  return f(stream);
}

int cudaEventSynchronize(void* event) {
  static auto f = real<int (*)(void*)>("cudaEventSynchronize");
  bump(kEventSynchronize);
  return f(event);
}

int cudaMemcpy(void* dst, const void* src, size_t count, int kind) {
  static auto f = real<int (*)(void*, const void*, size_t, int)>("cudaMemcpy");
  bump(kMemcpy);
  return f(dst, src, count, kind);
}

int cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                 size_t height, int kind) {
  static auto f =
      real<int (*)(void*, size_t, const void*, size_t, size_t, size_t, int)>("cudaMemcpy2D");
  bump(kMemcpy);
  return f(dst, dpitch, src, spitch, width, height, kind);
}

int cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset, int kind) {
  static auto f =
      real<int (*)(const void*, const void*, size_t, size_t, int)>("cudaMemcpyToSymbol");
  bump(kMemcpy);
  return f(symbol, src, count, offset, kind);
}

int cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset, int kind) {
  static auto f = real<int (*)(void*, const void*, size_t, size_t, int)>("cudaMemcpyFromSymbol");
  bump(kMemcpy);
  return f(dst, symbol, count, offset, kind);
}

int cudaMemset(void* dst, int value, size_t count) {
  static auto f = real<int (*)(void*, int, size_t)>("cudaMemset");
  bump(kMemset);
  return f(dst, value, count);
}

int cudaStreamQuery(void* stream) {
  static auto f = real<int (*)(void*)>("cudaStreamQuery");
  bump(kStreamQuery);
  return f(stream);
}

int cudaEventQuery(void* event) {
  static auto f = real<int (*)(void*)>("cudaEventQuery");
  bump(kEventQuery);
  return f(event);
}

int cudaMemcpyAsync(void* dst, const void* src, size_t count, int kind, void* stream) {
  static auto f = real<int (*)(void*, const void*, size_t, int, void*)>("cudaMemcpyAsync");
  if (kind == kMemcpyDeviceToHost || kind == kMemcpyDefault) bump(kMemcpyAsyncD2H);
  return f(dst, src, count, kind, stream);
}

}  // extern "C"
