// Module attribution of ops (compare --by module, summary --by module). LibTorch modules have
// no forward hooks, so an op is placed by the parameters it reads: an op consuming a parameter
// ("blocks.2.fc.weight") belongs to that parameter's module ("blocks.2.fc"); the ops after it
// in the same step, until the next such op, inherit it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "precprobe/records.h"

namespace precprobe::analysis_detail {

/// The module of the first parameter among `r`'s inputs ("(root)" for a parameter of the
/// top-level module), or nothing when it reads no parameter.
std::optional<std::string> consumed_module(const OpRecord& r);

/// What the module attribution needs of one op of a step.
struct ModuleOp {
  std::optional<std::string> consumed;  ///< consumed_module() of the record
  Direction dir = Direction::kForward;
  int64_t sn = -1;  ///< OpRecord::seqnr: links a forward op to its autograd node
};

/// The module of each op of one step of one rank, `ops` in seq order (the rule of
/// `precprobe precision` and `overflow`): a forward op reading a parameter belongs to its
/// module and the forward ops after it inherit it; a backward op belongs to the module of
/// the forward op that made its autograd node (the same "sn"), else the same rule within
/// the backward. "" before any.
std::vector<std::string> attribute_modules(const std::vector<ModuleOp>& ops);

}  // namespace precprobe::analysis_detail
