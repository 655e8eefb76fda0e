// Differences between LibTorch versions, in one place. Every use of an API that changed
// between 1.13 and 2.x goes through here, guarded by TORCH_VERSION_MAJOR/MINOR.
#pragma once

#include <torch/csrc/api/include/torch/version.h>

#define PRECPROBE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||            \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))
