// Forcing dropout to p = 0 while a guard lives, for every dropout LibTorch can run:
// torch::nn::Dropout, Dropout2d, Dropout3d, AlphaDropout, FeatureAlphaDropout, the
// functional forms (torch::dropout, torch::nn::functional::dropout*, in-place variants) and
// at::native_dropout, the attention ops' `dropout_p` (scaled_dot_product_attention and its
// fused kernels, nn.MultiheadAttention), the recurrent ops' `dropout` between layers (LSTM,
// GRU, RNN, cuDNN's), including calls from code that never heard of precprobe. With dropout
// gone, two seeded runs differ only where arithmetic differs, which is what precprobe looks
// for.
//
// **Example**:
//
//     precprobe::DropoutGuard no_dropout;   // until the end of the scope
//     auto y = model->forward(x);           // every dropout inside runs with p = 0
//
// How: a boxed kernel on LibTorch's dispatch key TESTING_ONLY_GenericMode (above Autograd)
// rewrites the dropout probability to 0 and redispatches; the guard includes that key in this
// thread's dispatch key set. The kernels are registered once per process, at the first
// guard (not by static registration, which a static library's linker may drop). If another
// library already registered a kernel or fallback on that key, the first guard throws
// precprobe::Error instead.
//
// Threads: the key is thread-local state. A guard covers the thread that created it and the
// threads LibTorch hands work to with a copy of that state: the autograd engine's device
// threads (backward on CUDA; on CPU backward runs on the calling thread) and at::launch
// (inter-op pool). Threads that do not copy it: a plain std::thread started by user code
// (create a DropoutGuard in that thread too) and OpenMP intra-op workers (at::parallel_for;
// they run kernel loops below the dispatcher, so no dropout op is dispatched there). A guard
// must be destroyed on the thread that created it (it cannot be copied or moved). Guards
// nest: each thread counts its live guards; dropout comes back when the last one is gone.
#pragma once

#include <string>
#include <vector>

namespace precprobe {

class DropoutGuard {
 public:
  /// Registers the kernels on first use in the process. Throws precprobe::Error when the
  /// dispatch key is taken by another library.
  DropoutGuard();
  /// Restores normal dropout on this thread when this is the last live guard. Never throws.
  ~DropoutGuard();
  DropoutGuard(const DropoutGuard&) = delete;
  DropoutGuard& operator=(const DropoutGuard&) = delete;
  DropoutGuard(DropoutGuard&&) = delete;
  DropoutGuard& operator=(DropoutGuard&&) = delete;

  /// Whether dropout runs with p = 0 on this thread: a guard lives here, or this thread
  /// inherited the state (an autograd engine thread working for a guarded thread).
  static bool active();
  /// The number of DropoutGuards alive on this thread.
  static int depth();
  /// The ops whose dropout probability the guard sets to 0 in the running LibTorch, as
  /// "aten::name.overload": every op that applies a dropout in its forward (a float `p` in
  /// a *dropout* op, `dropout_p` of the attention ops, `dropout` of the recurrent ones).
  static std::vector<std::string> guarded_ops();
};

}  // namespace precprobe
