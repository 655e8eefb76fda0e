// The torch-free part of precprobe: records, the dump format, writer and reader, options,
// analysis, the checklist, the LR range test and the repro program writer. Include this
// one header for all of them.
#pragma once

#include "precprobe/analysis.h"
#include "precprobe/checklist.h"
#include "precprobe/dump_format.h"
#include "precprobe/error.h"
#include "precprobe/lr_range.h"
#include "precprobe/masking.h"
#include "precprobe/options.h"
#include "precprobe/precision.h"
#include "precprobe/reader.h"
#include "precprobe/records.h"
#include "precprobe/report.h"
#include "precprobe/repro.h"
#include "precprobe/run_state.h"
#include "precprobe/version.h"
#include "precprobe/writer.h"
