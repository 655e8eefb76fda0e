// Shared by the CUDA tests (tests/cuda/, built only with PRECPROBE_WITH_CUDA): whether a
// device is there, and what to do when it is not.
#pragma once

#include <torch/torch.h>

#include <cstdlib>
#include <string>

#include "precprobe_catch.h"

namespace precprobe::test {

/// True when LibTorch sees a CUDA device. Without one the test case WARNs and checks
/// nothing, unless PRECPROBE_REQUIRE_CUDA is set (scripts/gpu-check.sh sets it): then it fails.
inline bool cuda_or_skip() {
  if (torch::cuda::is_available()) return true;
  const char* require = std::getenv("PRECPROBE_REQUIRE_CUDA");
  if (require != nullptr && *require != '\0' && std::string(require) != "0") {
    FAIL("no CUDA device, and PRECPROBE_REQUIRE_CUDA is set");
  }
  WARN("no CUDA device: nothing checked");
  return false;
}

}  // namespace precprobe::test
