// The torch-free part of precprobe: records, dump writer and reader, options, analysis.
#pragma once

#include "precprobe/analysis.h"
#include "precprobe/error.h"
#include "precprobe/options.h"
#include "precprobe/reader.h"
#include "precprobe/records.h"
#include "precprobe/report.h"
#include "precprobe/version.h"
#include "precprobe/writer.h"
