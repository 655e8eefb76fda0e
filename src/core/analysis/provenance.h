// Where the tensors an op reads were made, within one run's (step, rank) group, for `compare`
// (docs/cli.md, "Differences made by ops of one run only"). Records hold statistics, not
// tensor identities, so a tensor is recognised by its statistics: an input whose dtype,
// shape, counts, min, max, mean, norm (and hash, when both have one) are those of an output
// of an earlier op of the group was made by the latest such op. Exact equality of seven
// float64 statistics of a float tensor names one tensor in practice; where several tensors
// share them (all-zero buffers of one shape) the latest is taken, which can only make a
// difference look explained, never raise one. Private to src/core/analysis; no state
// beyond the group it was built on.
#pragma once

#include <cstdint>
#include <vector>

#include "precprobe/records.h"

namespace precprobe::analysis_detail {

/// A digest of a tensor's statistics (equal statistics, equal digests).
uint64_t stats_digest(const TensorStats& t);
/// The same statistics, bit for bit (hashes compared where both have one).
bool same_stats(const TensorStats& x, const TensorStats& y);

class Provenance {
 public:
  /// `ops`: one group of one run in seq order; it must outlive this.
  explicit Provenance(const std::vector<OpRecord>& ops);

  /// The index in `ops` of the op that made input `input` of op `op`: the latest op before it
  /// with an output of the same statistics; -1 when none did (made before the step, or by
  /// an op not recorded). Each is searched once and kept: compare asks for each input of a
  /// compared op twice (compare_origins.h: Origins, Reconciler).
  int64_t producer(size_t op, size_t input) const;

 private:
  struct Made {
    uint64_t digest;
    size_t op;
    const TensorStats* stats;
  };
  static bool by_digest_then_op(const Made& x, const Made& y) {
    return x.digest < y.digest || (x.digest == y.digest && x.op < y.op);
  }
  int64_t search(size_t op, size_t input) const;
  static constexpr int64_t kNotSearched = -2;

  const std::vector<OpRecord>& ops_;
  std::vector<Made> made_;  // by digest, then op: one allocation a group, not one an output
  std::vector<size_t> first_input_;     // by op: where its inputs start in found_
  mutable std::vector<int64_t> found_;  // by input of every op: producer(), or kNotSearched
};

}  // namespace precprobe::analysis_detail
