// The floor of L1 statistics, measured: a global RecordFunction callback, registered as the
// debugger's (inputs and outputs, function and backward scopes), that does the least any
// implementation of L1 statistics must do and nothing else. For each outermost op (depth 0,
// depth reset under an autograd node, as Observer counts it) it summarises, with the
// library's own single-pass kernel (summarize()), every tensor version not summarised yet
// this step: the inputs first read (parameters, the batch, optimizer state), and every
// output; of an autograd node, its inputs (the debugger records no node outputs). "Not summarised
// yet" is one probe of a per-thread hash set keyed by (storage, offset, numel, dtype, version), so
// a view of memory read at the same version (t(), view, detach) is not read again, as the
// debugger's cache does not read it. A storage freed and handed out again within a step, at
// the same version, reads as seen: the floor can only err low, the side a floor may err on.
//
// What it leaves out, so that it is a floor and not a rival: no record, no writer, no names or
// call counts, no in-place safety (an in-place op's input is not summarised before the op
// writes it: the worker mode may read a newer version), no arguments other than tensors.
//
//   kInline  the kernel runs on the op's thread, at the op's end: what L1 must cost where no
//            core is idle (BENCHMARKS.md's "default threading", and the CPU of all threads).
//   kWorker  the op's thread only hands a reference to the tensor to one worker thread (a
//            vector under a mutex), which summarises it: what the training thread must pay
//            with a free core (setting (a)). Holding the reference delays the tensor's free.
//   kNonFinite  overflow_check's floor: each new output of an outermost op is tested for
//            NaN/Inf on the op's thread (has_non_finite(), the test overflow_check runs), inputs
//            are not read.
//
// bytes() counts the bytes summarised, to set beside the debugger's "stats read".
#pragma once

#include <ATen/record_function.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "stats/stats.h"
#include "support/torch_compat.h"

namespace precprobe {
namespace bench {

class FloorProbe {
 public:
  enum class Mode { kInline, kWorker, kNonFinite };

  explicit FloorProbe(Mode mode) : mode_(mode) {
    instance() = this;
    if (mode_ == Mode::kWorker) worker_ = std::thread([this] { work(); });
    handle_ = at::addGlobalCallback(
        at::RecordFunctionCallback(&start_cb, &end_cb)
            .needsInputs(true)
            .needsOutputs(true)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  }
  ~FloorProbe() {
    at::removeCallback(handle_);
    if (worker_.joinable()) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
      }
      cv_.notify_one();
      worker_.join();
    }
    instance() = nullptr;
  }
  FloorProbe(const FloorProbe&) = delete;
  FloorProbe& operator=(const FloorProbe&) = delete;

  /// A new step: every tensor is summarised again once.
  void end_step() { generation_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  struct Ctx : at::ObserverContext {
    bool outermost = false;
    bool node = false;
    int saved_depth = 0;
  };
  struct ThreadState {
    int depth = 0;
    bool busy = false;  // inside our own kernel: its ATen calls (if any) are not ops of the step
    uint64_t generation = ~uint64_t{0};
    std::unordered_set<uint64_t> seen;
    std::unordered_map<const char*, bool> is_op;
  };
  // The probe the callbacks serve (read on every observed thread).
  static std::atomic<FloorProbe*>& instance() {
    static std::atomic<FloorProbe*> p{nullptr};
    return p;
  }
  static ThreadState& ts() {
    thread_local ThreadState s;
    return s;
  }
  static uint64_t key_of(const at::Tensor& t) {
    uint64_t h = reinterpret_cast<uintptr_t>(detail::storage_of(t));
    h = h * 0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(t.storage_offset());
    h = h * 0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(t.numel());
    h = h * 0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(t._version()) << 8 ^
        static_cast<uint64_t>(t.scalar_type());
    return h ^ (h >> 29);
  }

  void take(const at::Tensor& t, ThreadState& s) {
    if (!t.defined() || !t.has_storage()) return;
    const uint64_t g = generation_.load(std::memory_order_relaxed);
    if (s.generation != g) {
      s.seen.clear();
      s.generation = g;
    }
    if (!s.seen.insert(key_of(t)).second) return;
    bytes_.fetch_add(static_cast<uint64_t>(t.numel()) * t.element_size(),
                     std::memory_order_relaxed);
    if (mode_ == Mode::kNonFinite) {
      s.busy = true;
      nonfinite_.fetch_add(detail::has_non_finite(t) ? 1 : 0, std::memory_order_relaxed);
      s.busy = false;
      return;
    }
    if (mode_ == Mode::kInline) {
      s.busy = true;
      TensorStats st;
      detail::summarize(t, st, false);
      s.busy = false;
      return;
    }
    bool wake = false, full = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      full = queue_.size() >= kMaxQueued;
      if (!full) queue_.push_back(t);
      wake = sleeping_;
    }
    if (wake) cv_.notify_one();
    if (full) {  // the worker is behind: back-pressure, as the debugger's
      s.busy = true;
      TensorStats st;
      detail::summarize(t, st, false);
      s.busy = false;
    }
  }
  void take_all(c10::ArrayRef<const c10::IValue> values, ThreadState& s) {
    for (const auto& v : values) {
      if (v.isTensor()) {
        take(v.toTensor(), s);
      } else if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorList().vec()) take(t, s);
      }
    }
  }
  void work() {
    std::vector<at::Tensor> batch;
    ts().busy = true;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        sleeping_ = true;
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        sleeping_ = false;
        if (queue_.empty()) return;
        batch.swap(queue_);
      }
      for (const at::Tensor& t : batch) {
        TensorStats st;
        detail::summarize(t, st, false);
      }
      batch.clear();
    }
  }

  static bool is_op(const at::RecordFunction& fn, ThreadState& s) {
    auto it = s.is_op.find(fn.name());
    if (it != s.is_op.end()) return it->second;
    const bool op = detail::op_overload_name(fn, nullptr);
    s.is_op.emplace(fn.name(), op);
    return op;
  }
  static std::unique_ptr<at::ObserverContext> start_cb(const at::RecordFunction& fn) {
    ThreadState& s = ts();
    FloorProbe* self = instance();
    if (s.busy || self == nullptr) return nullptr;
    if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
      auto c = std::make_unique<Ctx>();
      c->node = true;
      c->saved_depth = s.depth;
      s.depth = 0;
      self->take_all(fn.inputs(), s);
      return c;
    }
    if (!is_op(fn, s)) return nullptr;
    auto c = std::make_unique<Ctx>();
    c->outermost = s.depth++ == 0;
    if (c->outermost && self->mode_ != Mode::kNonFinite) self->take_all(fn.inputs(), s);
    return c;
  }
  static void end_cb(const at::RecordFunction& fn, at::ObserverContext* ctx) {
    if (ctx == nullptr) return;
    ThreadState& s = ts();
    FloorProbe* self = instance();
    auto* c = static_cast<Ctx*>(ctx);
    if (c->node) {
      s.depth = c->saved_depth;
    } else {
      --s.depth;
    }
    if (c->outermost && self != nullptr) {
      const std::vector<c10::IValue>& outs = fn.outputs();
      self->take_all(c10::ArrayRef<c10::IValue>(outs), s);
    }
  }

  static constexpr size_t kMaxQueued = 4096;
  const Mode mode_;
  at::CallbackHandle handle_ = 0;
  std::atomic<uint64_t> generation_{0}, bytes_{0}, nonfinite_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<at::Tensor> queue_;
  bool sleeping_ = false, stop_ = false;
  std::thread worker_;
};

}  // namespace bench
}  // namespace precprobe
