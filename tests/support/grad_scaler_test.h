// What the GradScaler tests share: LibTorch, the scaler's headers, the names they use and
// the IEEE special values. Exact float comparisons are the point of these tests, so the
// warning against them is off in the files that include this.
#pragma once

#include <torch/torch.h>

#pragma GCC diagnostic ignored "-Wfloat-equal"

#include <cmath>
#include <limits>

#include "precprobe/error.h"
#include "precprobe/grad_scaler.h"
#include "precprobe_catch.h"
#include "support/ieee_specials.h"

using precprobe::GradScaler;
using precprobe::GradScalerOptions;
using precprobe::ScalerRecord;

using precprobe::test::kInf;
using precprobe::test::kNaN;
