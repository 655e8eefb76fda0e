// Runs the precprobe_repro_train helper in a child process and parses what it prints.
#pragma once

#include <cstdio>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

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
  const std::string cmd = std::string(PRECPROBE_REPRO_TRAIN) + " " + args + " 2>/dev/null";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    throw std::runtime_error("cannot run " + cmd);
  }
  TrainRun run;
  char buf[8192];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) {
    run.output.append(buf, n);
  }
  run.status = ::pclose(pipe);
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
