// Command-line flags shared by the LibTorch ports (tests/ports/README.md): the common ones
// (--data, --steps, --seed, --threads, --dump, --config, --load-state, --save-state, --lr)
// and each program's own numeric flags and switches (its planted bugs), declared with their
// faithful defaults.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ports {

struct Flags {
  std::string data = "data";  // the dataset root: ROOT/FashionMNIST/raw holds the idx files
  int64_t steps = 20;
  uint64_t seed = 1234;
  int threads = 1;
  std::string dump;    // empty: no debugger
  std::string config;  // msprobe's config.json
  std::string load_state;
  std::string save_state;
  double lr = 0;
  std::map<std::string, double> values;  // the program's own flags, e.g. "--momentum"
  std::set<std::string> switches;        // the program's switches that were given

  double value(const std::string& name) const { return values.at(name); }
  bool has(const std::string& name) const { return switches.count(name) != 0; }
  // The debugger runs when the command line asks for a dump (--dump, or --config alone).
  bool debugger() const { return !dump.empty() || !config.empty(); }
  std::string mnist_root() const { return data + "/FashionMNIST/raw"; }
};

// `own`: the program's numeric flags with their defaults; `own_switches`: its switches.
inline Flags parse_flags(int argc, char** argv, double default_lr,
                         const std::vector<std::pair<std::string, double>>& own = {},
                         const std::set<std::string>& own_switches = {}) {
  Flags f;
  f.lr = default_lr;
  for (const auto& kv : own) f.values[kv.first] = kv.second;

  auto usage = [&](int code) {
    std::fprintf(code == 0 ? stdout : stderr,
                 "usage: %s --data ROOT [--steps N] [--seed N] [--threads N] [--dump DIR]\n"
                 "          [--config FILE] [--load-state FILE] [--save-state FILE] [--lr X]",
                 argv[0]);
    for (const auto& kv : own)
      std::fprintf(code == 0 ? stdout : stderr, " [%s X]", kv.first.c_str());
    for (const auto& s : own_switches)
      std::fprintf(code == 0 ? stdout : stderr, " [%s]", s.c_str());
    std::fprintf(code == 0 ? stdout : stderr, "\n");
    std::exit(code);
  };

  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        usage(2);
      }
      return argv[++i];
    };
    try {
      if (a == "--data") {
        f.data = next();
      } else if (a == "--steps") {
        f.steps = std::stoll(next());
      } else if (a == "--seed") {
        f.seed = std::stoull(next());
      } else if (a == "--threads") {
        f.threads = std::stoi(next());
      } else if (a == "--dump") {
        f.dump = next();
      } else if (a == "--config") {
        f.config = next();
      } else if (a == "--load-state") {
        f.load_state = next();
      } else if (a == "--save-state") {
        f.save_state = next();
      } else if (a == "--lr") {
        f.lr = std::stod(next());
      } else if (f.values.count(a)) {
        f.values[a] = std::stod(next());
      } else if (own_switches.count(a)) {
        f.switches.insert(a);
      } else if (a == "--help" || a == "-h") {
        usage(0);
      } else {
        std::fprintf(stderr, "unknown flag %s\n", a.c_str());
        usage(2);
      }
    } catch (const std::logic_error&) {  // std::stod & co.: not a number
      std::fprintf(stderr, "%s: bad value\n", a.c_str());
      usage(2);
    }
  }
  return f;
}

}  // namespace ports
