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
#include "support/ieee_specials.h"

using precprobe::GradMonitor;
using precprobe::GradMonitorOptions;
using precprobe::GradRecord;

// The specials as double, as in the other test helpers (one definition per bundle); the
// tests assign them to float elements, where they stay NaN and +-Inf exactly.
using precprobe::test::kInf;
using precprobe::test::kNaN;

namespace {

std::set<std::string> watches(const GradRecord& r) { return {r.watch.begin(), r.watch.end()}; }
}  // namespace
