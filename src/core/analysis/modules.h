// Module attribution of ops (compare --by module, summary --by module). LibTorch modules have
// no forward hooks, so an op is placed by the parameters it reads: an op consuming a parameter
// ("blocks.2.fc.weight") belongs to that parameter's module ("blocks.2.fc"); the ops after it
// in the same step, until the next such op, inherit it.
#pragma once

#include <optional>
#include <string>

#include "precprobe/records.h"

namespace precprobe::analysis_detail {

/// The module of the first parameter among `r`'s inputs ("(root)" for a parameter of the
/// top-level module), or nothing when it reads no parameter.
std::optional<std::string> consumed_module(const OpRecord& r);

}  // namespace precprobe::analysis_detail
