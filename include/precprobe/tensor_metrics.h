// msprobe's tensor-mode metrics of a tensor against its benchmark (docs/cli.md):
// torch-free, float64; part of the analyses (precprobe/analysis.h includes this header).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace precprobe {

/// msprobe's tensor-mode metrics, float64; see docs/cli.md for the definitions.
struct TensorMetrics {
  double cosine = 0;           ///< NaN when unsupported (one element) or one norm is ~0
  double euclidean = 0;        ///< ||N - B||_2
  double max_abs_err = 0;      ///< max |N - B|
  double max_rel_err = 0;      ///< max |N - B| / |B|, B == 0 counted as machine epsilon
  double one_thousandth = 0;   ///< share of elements with relative error < 0.001
  double five_thousandth = 0;  ///< share of elements with relative error < 0.005
  /// "Yes" | "No" | "None" (not decidable: empty tensor or cosine unsupported).
  std::string accuracy = "None";
  std::string message;     ///< why a metric is missing, msprobe's wording
  bool comparable = true;  ///< false when NaN/Inf positions differ or the tensor is empty

  nlohmann::json to_json() const;
};

/// Compares a tensor N with its benchmark B (count elements each), as msprobe does.
TensorMetrics compare_tensors(const double* n, const double* b, size_t count);

}  // namespace precprobe
