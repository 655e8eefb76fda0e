// Runs the precprobe_repro_train helper in a child process and parses what it prints.
#pragma once

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli_run.h"

namespace precprobe_test {

struct TrainRun {
  std::string initial_seed;
  std::vector<std::string> losses;            // float bit patterns, hex, one per step
  std::map<std::string, std::string> params;  // name -> bit patterns of every element
  std::string module_hash;                    // precprobe::module_hash of the trained model, hex
  std::string output;                         // everything the helper printed to stdout
  int status = -1;
};

inline TrainRun run_helper(const std::string& args) {
  const precprobe::test::CliRun r =
      precprobe::test::run_shell(std::string(PRECPROBE_REPRO_TRAIN) + " " + args + " 2>/dev/null");
  TrainRun run;
  run.output = r.out;
  run.status = r.status;
  std::istringstream in(run.output);
  std::string kind;
  while (in >> kind) {
    if (kind == "initial_seed") {
      in >> run.initial_seed;
    } else if (kind == "loss") {
      std::string step, hex;
      in >> step >> hex;
      run.losses.push_back(hex);
    } else if (kind == "module_hash") {
      in >> run.module_hash;
    } else if (kind == "param") {
      std::string name, hex;
      in >> name >> hex;
      run.params[name] = hex;
    } else {
      std::string rest;
      std::getline(in, rest);
    }
  }
  return run;
}

}  // namespace precprobe_test
