// `precprobe repro DIR`: writes a standalone LibTorch program that re-runs one recorded op
// (by default the origin of the first replayed anomaly) on the inputs the dump saved.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>

#include "cli_common.h"
#include "precprobe/repro.h"

namespace precprobe::cli {
namespace {

struct ReproArgs {
  std::string dir;
  std::optional<int> rank;
  std::optional<int64_t> step;
  std::string record;
  std::string output = "precprobe_repro/repro.cpp";
};

}  // namespace

void add_repro_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ReproArgs>();
  CLI::App* cmd = app.add_subcommand(
      "repro",
      "Write a standalone LibTorch program that re-runs one op on its saved inputs (by "
      "default the origin of the first replayed anomaly)");
  cmd->add_option("DIR", args->dir, "dump directory")->required();
  cmd->add_option("--rank", args->rank,
                  "rank to read (default: the rank of the anomaly, else the first rank)");
  cmd->add_option("--step", args->step,
                  "without --record: the op precprobe overflow blames in this step (else the "
                  "first op there with a NaN/Inf output); with --record: the step of that record");
  cmd->add_option("--record", args->record,
                  "any op record by name, <op>.<call>.<dir>, e.g. aten::exp.0.forward (its "
                  "first occurrence unless --step)");
  cmd->add_option("-o,--output", args->output,
                  "the program to write (.cpp); CMakeLists.txt and the inputs repro_in<i>.npy "
                  "go into the same directory")
      ->capture_default_str();
  cmd->footer(
      "Needs the op's tensor inputs saved in the dump, tensors/step<N>/<name>.in<i>.npy.zst:\n"
      "a dump from \"record\": \"on_anomaly\" (the debugger replays an anomalous step and saves\n"
      "the inputs of the op that produced the first NaN/Inf) or from task \"tensor\".\n"
      "The program loads the inputs (BFloat16 ones were saved as float32 and are converted\n"
      "back), calls the op through the dispatcher with the recorded non-tensor arguments\n"
      "and prints each output's dtype, shape, NaN/+Inf/-Inf counts and largest finite |x|,\n"
      "beside the figures the dump recorded. It needs LibTorch and nothing else (no zstd).\n\n"
      "Example:\n"
      "  precprobe repro ./precprobe_dump -o repro/repro.cpp\n"
      "  cmake -S repro -B repro/build -DCMAKE_PREFIX_PATH=/path/to/libtorch\n"
      "  cmake --build repro/build && repro/build/repro\n"
      "  precprobe repro ./precprobe_dump --step 37 -o repro/repro.cpp\n"
      "  precprobe repro ./precprobe_dump --record aten::addmm.2.forward --step 37 -o r/r.cpp");
  cmd->callback([args, &exit_code] {
    auto reader = open_dump(args->dir);
    ReproOptions o;
    o.rank = args->rank;
    o.step = args->step;
    o.record = args->record;
    o.output = args->output;
    const ReproResult r = write_repro(*reader, o);
    std::cout << fmt::format("record        {} (rank {}, step {}): {}\n", r.record.name(), r.rank,
                             r.step, r.chosen_by);
    for (size_t i = 0; i < r.record.inputs.size(); ++i) {
      const Arg& a = r.record.inputs[i];
      std::cout << fmt::format("  in{:<3} {}\n", i,
                               a.is_tensor() ? arg_str(a) : "value " + display_value(a.value));
    }
    for (size_t i = 0; i < r.record.outputs.size(); ++i)
      std::cout << fmt::format("  out{:<2} {}\n", i, arg_str(r.record.outputs[i]));
    std::cout << fmt::format("wrote         {}\n              {}\n", r.source_path, r.cmake_path);
    for (const std::string& f : r.input_files) std::cout << "              " << f << '\n';
    std::cout << "build and run:\n" << r.build_command << '\n';
    exit_code = kExitClean;
  });
}

}  // namespace precprobe::cli
