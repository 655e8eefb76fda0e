// How `compare` judges the non-tensor arguments of two runs' ops (docs/cli.md, "Arguments,
// across languages and versions"): what is the same argument spelled otherwise, and which
// numbers are constants of the program rather than data. Private to src/core/analysis.
#pragma once

#include <cstdint>
#include <limits>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "precprobe/records.h"

namespace precprobe::analysis_detail {

/// A one-element list against a list of that element repeated: [2] and [2,2] are the same
/// `int[2]` argument (ATen expands a single value to every dimension; Python's argument
/// parser does it before the call, LibTorch's C++ API after). JSON text of flat lists only.
bool same_after_broadcast(const std::string& x, const std::string& y);

/// One side passes None (an optional argument left to its default), the other a value.
bool spelled_default(const Arg& a, const Arg& b);

/// Non-tensor arguments that are constants of the program: at an op site (the op's name with
/// its call index in the step and its direction, per rank) the same value in every step of a
/// run that has the site in two steps or more. A constant that differs between the runs is a
/// different program (a port's eps, a multiplier, a kernel size), a divergence whatever its
/// size; a number that changes from step to step (a clipping coefficient, a learning rate
/// computed from an earlier item()) is data, judged by the noise model.
///
/// Thread-safe: compare's judges ask while the reading thread adds (compare_judges.h).
class ProgramConstants {
 public:
  /// Adds one (step, rank) group's ops.
  void add(const std::vector<OpRecord>& ops);
  /// Whether input `input` of `r`'s site is a constant of the run.
  bool constant(const OpRecord& r, size_t input) const;
  /// Whether constant(r, input) is final: no group added later can change it (the site's
  /// value has varied). Groups may be added in any order: the answers depend on the set.
  bool settled(const OpRecord& r, size_t input) const;

 private:
  struct Site {
    std::string value;
    int64_t steps = 0, last_step = std::numeric_limits<int64_t>::min();
    bool varies = false;
  };
  /// The key of input `input` of r's site, into `key`: rank, name (op.call.direction), input.
  static void site_key(const OpRecord& r, size_t input, std::string& key);
  mutable std::shared_mutex mutex_;  // over sites_
  std::unordered_map<std::string, Site> sites_;
};

}  // namespace precprobe::analysis_detail
