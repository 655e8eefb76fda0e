// The message of the precprobe::Error a call throws, for tests that check what an error
// says.
#pragma once

#include <functional>
#include <string>

#include "precprobe/error.h"

namespace precprobe::test {

/// e.what() of the precprobe::Error `fn` throws; "<no precprobe::Error thrown>" when none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const precprobe::Error& e) {
    return e.what();
  }
  return "<no precprobe::Error thrown>";
}

}  // namespace precprobe::test
