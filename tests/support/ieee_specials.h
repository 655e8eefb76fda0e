// NaN and infinity as the test helpers of the core spell them (analysis_fixtures.h,
// records_test_util.h), defined once: a test bundle includes both headers in one
// translation unit (cmake/PrecprobeTestBundle.cmake).
#pragma once

#include <limits>

namespace precprobe::test {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace precprobe::test
