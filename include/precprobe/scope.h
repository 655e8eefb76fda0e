// precprobe::Scope: names a region of code; the op records made while it lives carry the
// scope path ("a/b"), which the "scope" config key selects by.
//
// **Example**:
//
//     {
//       precprobe::Scope s("encoder");
//       auto h = encoder->forward(x);  // records: "scope": "encoder"
//     }
//
// Thread-local (each thread has its own path); nest freely. Torch-free.
#pragma once

#include <string>

namespace precprobe {

/// Names a region of code; records made while it lives carry the scope path ("a/b").
/// Thread-local; nest freely. Non-copyable, non-movable.
class Scope {
 public:
  explicit Scope(std::string name);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  /// The current thread's scope path, "" outside any Scope.
  static const std::string& current_path() noexcept;
};

}  // namespace precprobe
