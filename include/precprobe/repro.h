// precprobe repro: a standalone LibTorch program that re-runs one recorded op on the inputs
// the dump saved (the origin of a replayed anomaly, "record": "on_anomaly", or any op of a
// task "tensor" dump). Torch-free: this side only reads the dump and writes text and files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "precprobe/reader.h"
#include "precprobe/records.h"

namespace precprobe {

struct ReproOptions {
  std::optional<int> rank;      ///< --rank: default the rank of the chosen anomaly, else the first
  std::optional<int64_t> step;  ///< --step: the origin `precprobe overflow` finds in this step
  std::string record;           ///< --record: any record name, e.g. "aten::exp.0.forward"
  /// The program to write; CMakeLists.txt and repro_in<i>.npy go beside it.
  std::string output = "precprobe_repro/repro.cpp";
};

struct ReproResult {
  int rank = 0;
  int64_t step = 0;
  OpRecord record;
  std::string chosen_by;  ///< why this record, for people
  std::string source_path, cmake_path;
  std::vector<std::string> input_files;  ///< the .npy files written, in `in` order
  std::string build_command;             ///< cmake configure, build and run
};

/// Picks the record (--record; else --step's overflow origin; else the first anomaly event's
/// origin_record), checks that every tensor input was saved, then writes the program, its
/// CMakeLists.txt and the decompressed inputs. Throws precprobe::Error (nothing written)
/// when the record, a tensor file or an argument cannot be used, naming it and what to do.
ReproResult write_repro(DumpReader& reader, const ReproOptions& options);

/// The C++ source of the program for record `r` (exposed for tests). `data_dir` is where it
/// looks for repro_in<i>.npy when not given a directory on its command line.
std::string repro_source(const OpRecord& r, const std::string& origin, const std::string& data_dir);

/// The CMakeLists.txt that builds `source_file` (a file name) as executable `target`.
std::string repro_cmake(const std::string& source_file, const std::string& target);

}  // namespace precprobe
