// Errors and the error handler.
//
// Setup mistakes (a bad config key, an unwritable dump path) throw precprobe::Error with a
// message that names the key, value or path. Nothing is ever thrown into a training step:
// problems found while an op runs or while the writer thread works are passed to
// report_error(), which counts them and calls the handler. The default handler writes to
// stderr at most once a second. All functions here may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace precprobe {

/// Thrown for setup errors; what() says what was wrong and what is allowed.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Receives messages about problems that were not thrown (they happened inside a step).
using ErrorHandler = std::function<void(const std::string& message)>;

/// Replaces the handler; an empty function restores the default (stderr, ≤ 1 line/s).
void set_error_handler(ErrorHandler handler);

/// Counts the problem and passes it to the handler. Never throws.
void report_error(const std::string& message) noexcept;

/// Number of report_error() calls since the process started.
uint64_t error_count() noexcept;

}  // namespace precprobe
