// SnapshotCopier: the part of a StepSnapshot's capture that overlaps the step. A step
// changes a parameter and its optimizer state only in optimizer.step(), after backward(): a
// helper thread copies them while forward runs, and a gradient hook on each parameter holds
// backward, at the first hook of the step, until every copy is done. Every step() of the
// step comes after a backward, so none writes a parameter or its state before its copy —
// also not one that this step gave no gradient (LibTorch's SGD moves it through .data()
// when it has a momentum or weight decay, which no version counter shows).
//
// One job per parameter: its (live, saved) pairs, the parameter first and then its optimizer
// state tensors, cut into chunks. The helper takes the jobs from the last parameter to the
// first; a thread that must wait (the first hook, finish()) copies the chunks not begun
// itself.
//
// Validity rests on version counters (every in-place op through the dispatcher bumps its
// tensor's): the tensors must still be at the versions start() read when the training thread
// looks, after the copies — at the first hook, else at finish(). The training thread runs no
// op while it looks, so no write is under way then. Conservative: a write after a copy fails
// the check as well. Not seen: writes that bump no version (through .data(), a raw
// data_ptr(), set_data()) and writes by other threads.
//
// Threads: start(), finish(), abandon() and bind() on the training thread; the hooks on the
// thread running backward (CPU: the one that called it). The helper thread is this object's.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace precprobe {
namespace detail {

class SnapshotCopier {
 public:
  /// One tensor to copy: plain bytes (both dense, same layout, CPU), and who it is.
  struct Pair {
    at::Tensor live, saved;
    const std::string* param = nullptr;  // the parameter's name
    const char* member = nullptr;        // null for the parameter; "exp_avg" for its state
  };

  SnapshotCopier();
  ~SnapshotCopier();
  SnapshotCopier(const SnapshotCopier&) = delete;
  SnapshotCopier& operator=(const SnapshotCopier&) = delete;

  /// Whether `live` can be copied into `saved` by the helper: both on the CPU, strided,
  /// dense, with the same sizes, strides and dtype, and neither a lazy conj/neg view.
  static bool plain(const at::Tensor& live, const at::Tensor& saved);

  /// Installs a hook on each of `params` that requires a gradient and starts the helper; the
  /// jobs of start() are indexed as `params`. Throws (c10::Error) when a hook cannot be
  /// installed; then nothing is left installed.
  void bind(const std::vector<at::Tensor>& params);
  /// Removes the hooks and stops the helper (waits for it). Never throws.
  void unbind() noexcept;
  bool bound() const noexcept { return shared_ != nullptr; }

  /// Starts copying: `jobs[i]` belongs to the i-th parameter of bind(); every tensor's
  /// version is read now. The jobs are the copier's until finish() or abandon(). Throws
  /// (c10::Error: an inference tensor has no version) before anything is started.
  void start(std::vector<std::vector<Pair>>& jobs);
  /// Waits for every copy (the training thread copies what the helper has not begun) and,
  /// where no hook did, checks the versions. Returns "" when every copy is valid, else the
  /// name of the first tensor found written ("fc.weight", "fc.weight's exp_avg").
  std::string finish() noexcept;
  /// As finish(), without the check (the step threw: its snapshot is not used).
  void abandon() noexcept;
  bool running() const noexcept;

  struct Shared;

 private:
  std::shared_ptr<Shared> shared_;
  std::vector<std::pair<at::Tensor, unsigned>> hooks_;  // (parameter, hook index)
  std::thread helper_;
};

}  // namespace detail
}  // namespace precprobe
