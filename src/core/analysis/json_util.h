// JSON conversions shared by the analyses (nlohmann stays inside src/). NaN and infinities
// become null, as JSON has no spelling for them.
#pragma once

#include <nlohmann/json.hpp>

#include "precprobe/analysis.h"

namespace precprobe::analysis_detail {

/// JSON text; invalid UTF-8 in strings (they come from records) is replaced, not thrown.
template <typename J>
std::string dump(const J& j, int indent = -1) {
  return j.dump(indent, ' ', false, J::error_handler_t::replace);
}

/// A double as JSON: null when not finite.
nlohmann::json number(double v);
nlohmann::json to_json(const TensorStats& t);
nlohmann::json to_json(const Arg& a);
nlohmann::json to_json(const OpBrief& op);
nlohmann::json to_json(const StreamStatus& s);
/// Parses JSON text; an empty or malformed text gives an empty object.
nlohmann::json parse_or_empty(const std::string& text);

}  // namespace precprobe::analysis_detail
