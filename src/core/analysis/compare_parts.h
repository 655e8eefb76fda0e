// compare.cpp's parts (private to src/core/analysis): how two paired ops' arguments are
// compared (compare_args.cpp), one paired op judged (compare_pair.cpp), a place of ops of one
// run only judged by its outputs (compare_place.cpp). compare_origins.h follows the tensors a
// group's paired ops read back to the ops that made them. No state; any thread.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "align.h"
#include "arg_rules.h"
#include "compare_group.h"
#include "precprobe/analysis.h"
#include "precprobe/records.h"

namespace precprobe::analysis_detail {

/// Whether `field` (a comparison's classification, cause or io) is `value`: the lengths
/// first, and no strlen of the literal (a fifth of compare's string compares).
inline bool equals(const std::string& field, std::string_view value) noexcept {
  return std::string_view(field) == value;
}

inline constexpr double kCompareInf = std::numeric_limits<double>::infinity();

// ---- compare_args.cpp

/// Two paired ops' inputs (or outputs) against each other, into oc.args[first...] (oc.args
/// already sized: their count is the longer side's); returns the largest tensor error and
/// sets `value_differs` when a non-tensor argument differs in a way rounding cannot explain.
/// An argument spelled otherwise (dimensions counted from the end, a reshape's -1, a default
/// on one side) is the same argument.
double compare_args(const OpRecord& a, const OpRecord& b, bool inputs, OpCompare& oc, size_t first,
                    bool& value_differs);

/// `ac` as a default ArgCompare, and `oc` as a default OpCompare whose arguments are `args`
/// default ones, keeping the storage of their strings and vectors: a comparison judged into
/// one judged before allocates only what outgrows it (compare_group keeps them a thread).
void reset_keeping_storage(ArgCompare& ac);
void reset_keeping_storage(OpCompare& oc, size_t args);

// ---- compare_pair.cpp

struct PairVerdict {
  OpCompare oc;
  bool divergent = false;
  bool beyond_rounding_only = false;  // divergent by the ratio alone (no value, no constant)
};

/// Where each tensor input of a paired op was made (provenance.h), for the inputs whose
/// difference no compared op explains: made by ops of one run only, or before the step.
struct InputOrigin {
  bool judged = false;       ///< its difference is this op's to report, beyond `bound`
  bool before_step = false;  ///< no op of the step made it, in either run
  bool data = false;         ///< the one-run ops that made it all ran before the model
  double bound = 0;          ///< the rounding the one-run ops that made it may add (relative)
  /// A gradient accumulated onto a different value in each run (compare_dead.h): made_a/b
  /// name the accumulation and what it added onto.
  bool carried = false;
  std::vector<std::string> made_a, made_b;
  /// The numbers the one-run ops of one run pass that those of the other do not
  /// (OpCompare::made_by_values).
  std::string values;
};

/// What compare_pair knows of the ops before it.
struct Upstream {
  const std::vector<InputOrigin>* origins = nullptr;  ///< by input index, or null
  double seen_error = 0;  ///< the largest relative output error of the group's compared ops
};

/// Which ops a comparison is of: A's place and names, B's seq and name.
void identify(const OpRecord& a, const OpRecord& b, OpCompare& oc);
/// x / scale with 0 / 0 = 0 and x / 0 = infinity.
double relative(double x, double scale);
/// |x| at its largest over a tensor's finite values.
double magnitude(const TensorStats& t);
/// A paired op judged (docs/cli.md, "Noise model", "Differences made by ops of one run only"),
/// into `v`, whatever it held (its storage is kept: reset_keeping_storage).
void compare_pair(const OpRecord& a_in, const OpRecord& b, const CompareOptions& opt,
                  double loss_scale, const ProgramConstants* const_a,
                  const ProgramConstants* const_b, ConstantsUse* use, const Upstream& up,
                  PairVerdict& v);

// ---- compare_place.cpp

/// The rounding bound of an op's first output.
double output_bound(const OpRecord& r);

/// One comparison of a place: the verdict, and the ops of A and B it compared.
struct PlaceVerdict {
  PairVerdict v;
  int64_t ka = -1, kb = -1;
};

class Provenance;

/// Where a place ends: the group's pairs and the position in them of the compared pair that
/// closes the place (pairs->size() at the group's end), and where each run's tensors were
/// made.
struct PlaceEnd {
  const Provenance* prov_a = nullptr;
  const Provenance* prov_b = nullptr;
  const AlignPairs* pairs = nullptr;
  size_t at = 0;
};

/// The comparisons of one place of ops of one run only (`only_a`, `only_b`: positions in a
/// and b), divergent or not, in A's order.
std::vector<PlaceVerdict> compare_place(const std::vector<OpRecord>& a,
                                        const std::vector<OpRecord>& b,
                                        const std::vector<int64_t>& only_a,
                                        const std::vector<int64_t>& only_b, double seen_error,
                                        const CompareOptions& opt, const PlaceEnd& end);

}  // namespace precprobe::analysis_detail
