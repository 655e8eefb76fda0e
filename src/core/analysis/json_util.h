// JSON conversions shared by the analyses . NaN and infinities
// become null, as JSON has no spelling for them.
#pragma once

#include <nlohmann/json.hpp>

#include "precprobe/analysis.h"

namespace precprobe::analysis_detail {

/// A double as JSON: null when not finite.
nlohmann::json number(double v);
nlohmann::json to_json(const TensorStats& t);
nlohmann::json to_json(const Arg& a);
nlohmann::json to_json(const OpBrief& op);
nlohmann::json to_json(const StreamStatus& s);

}  // namespace precprobe::analysis_detail
