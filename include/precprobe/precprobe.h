// Everything precprobe offers a LibTorch training program. Include this one header.
#pragma once

#include "precprobe/checklist_probe.h"
#include "precprobe/core.h"
#include "precprobe/debugger.h"
#include "precprobe/distributed.h"
#include "precprobe/dropout.h"
#include "precprobe/grad_monitor.h"
#include "precprobe/grad_scaler.h"
#include "precprobe/hash.h"
#include "precprobe/scope.h"
#include "precprobe/seed.h"
#include "precprobe/signal_flush.h"
#include "precprobe/state.h"
