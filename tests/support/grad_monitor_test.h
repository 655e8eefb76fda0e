// What the GradMonitor tests share (test_grad_monitor.cpp, test_grad_watchpoints.cpp):
// LibTorch, the monitor's header, the names they use, the IEEE special values and the set of
// watchpoints a record hit. Exact float comparisons are intended in these tests, so the
// warning against them is off in the files that include this.
#pragma once

#include <torch/torch.h>

#pragma GCC diagnostic ignored "-Wfloat-equal"

#include <limits>
#include <set>
#include <string>

#include "precprobe/grad_monitor.h"
#include "precprobe_catch.h"

using precprobe::GradMonitor;
using precprobe::GradMonitorOptions;
using precprobe::GradRecord;

namespace {
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::set<std::string> watches(const GradRecord& r) { return {r.watch.begin(), r.watch.end()}; }
}  // namespace
