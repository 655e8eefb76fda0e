// Build information of the probe: which LibTorch it was compiled against.
#include <string>

#include "support/torch_compat.h"

namespace precprobe {
namespace detail {

std::string torch_version_string() { return TORCH_VERSION; }

}  // namespace detail
}  // namespace precprobe
