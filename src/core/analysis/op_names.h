// OpNames: a fixed list of op names that a rule of the analysis names (random draws,
// selections, decisions ...), looked up with one hash of the name. Compared one by one, as
// `op == "aten::..."` does, each of compare's judgements spent a strlen and a compare per
// listed name: a fifth of the instructions of `compare` of two runs that differ everywhere.
// Private to precprobe::core.
#pragma once

#include <initializer_list>
#include <string_view>
#include <unordered_set>

namespace precprobe::analysis_detail {

class OpNames {
 public:
  /// `names` must outlive the set: string literals.
  OpNames(std::initializer_list<std::string_view> names) : names_(names) {}
  bool contains(std::string_view op) const { return names_.count(op) > 0; }

 private:
  std::unordered_set<std::string_view> names_;
};

}  // namespace precprobe::analysis_detail
