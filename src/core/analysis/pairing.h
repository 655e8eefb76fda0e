// Which op of run B each op of run A is compared with, in one (step, rank) group of
// `compare` (docs/cli.md, "Pairing"). Two ops can pair only when they compute the same thing
// by their content key: the op (the reshape family as one), the direction, the shape of
// every tensor input and output, and the parameter a tensor is, where both runs name one.
// Equal key sequences pair in order (O(n)); each thread's sequence equal, per thread;
// otherwise the sequences are aligned by content (align.h) and the ops of one run only are
// reported as SequenceDiffs, never compared. Private to src/core/analysis; no state.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "align.h"
#include "precprobe/analysis.h"
#include "precprobe/records.h"

namespace precprobe::analysis_detail {

enum class PairedBy : uint8_t {
  kSequence,  ///< the sequences are the same op for op: paired in order
  kThread,    ///< each thread ran the same ops, interleaved differently: paired per thread
  kContent,   ///< the sequences differ: aligned by content, ops of one run left unpaired
};

struct GroupPairing {
  AlignPairs pairs;  ///< in A's order; -1 on one side: an op of the other run only
  PairedBy by = PairedBy::kSequence;
  bool approximate = false;  ///< the alignment hit its work bound (align.h)
};

/// The reshape family (aten::view, _reshape_alias, reshape, _unsafe_view, flatten), one op
/// for pairing: LibTorch 1.13 reshapes through _reshape_alias and 2.x through view, Python's
/// torch.flatten is LibTorch's x.view({n, -1}).
bool is_reshape_op(std::string_view op) noexcept;

/// A 0-d tensor that is no parameter: a number Python wrapped where it passes one to a
/// Tensor overload (x * 0.5 is aten::mul.Tensor with a 0-d double in Python, aten::mul.Scalar
/// in C++). It pairs, and is compared, as the number it is.
bool is_wrapped_number(const TensorStats& t) noexcept;
/// The number a wrapped number holds (one finite element); nullopt otherwise.
std::optional<double> wrapped_value(const TensorStats& t);

/// Pairs the ops of one group; `a` and `b` are in seq order.
GroupPairing pair_ops(const std::vector<OpRecord>& a, const std::vector<OpRecord>& b,
                      size_t max_cost);

/// Appends the places where `pairs` (from pair_ops) leave ops of one run only.
void add_sequence_diffs(const std::vector<OpRecord>& a, const std::vector<OpRecord>& b,
                        const AlignPairs& pairs, std::vector<SequenceDiff>& out);

}  // namespace precprobe::analysis_detail
