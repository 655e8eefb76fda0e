// Records for the masking tests (tests/core/test_masking*.cpp): tensor statistics with -inf,
// NaN and +Inf counts, a bool mask, the -inf scalar as the probe writes it.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/analysis_fixtures.h"
#include "precprobe/records.h"

namespace precprobe::test {

// Statistics of a float tensor of `shape` holding `ninf` -inf, `nan` NaN and `pinf` +Inf, the
// other elements in [0.1, 0.9]; an activation (requires grad) unless said.
inline Arg tens(std::vector<int64_t> shape, int64_t ninf = 0, int64_t nan = 0, int64_t pinf = 0,
                std::string param = "", bool rg = true) {
  TensorStats t;
  t.dtype = "Float";
  t.shape = std::move(shape);
  t.numel = 1;
  for (int64_t d : t.shape) t.numel *= d;
  t.ninf = ninf;
  t.nan = nan;
  t.pinf = pinf;
  t.pos = t.numel - ninf - nan - pinf;
  t.min = 0.1;
  t.max = 0.9;
  t.mean = 0.5;
  t.norm = 0.5 * std::sqrt(static_cast<double>(t.pos));
  t.requires_grad = rg;
  t.param = std::move(param);
  return Arg{t, ""};
}

inline Arg mask_arg() {  // a bool mask: no statistics of interest
  TensorStats t;
  t.dtype = "Bool";
  t.shape = {8, 8};
  t.numel = 64;
  t.zero = 36;
  t.pos = 28;
  t.min = 0;
  t.max = 1;
  return Arg{t, ""};
}

inline const Arg kMinusInf = varg("\"-inf\"");  // as the probe writes a -inf scalar (arg_json.cpp)

}  // namespace precprobe::test
