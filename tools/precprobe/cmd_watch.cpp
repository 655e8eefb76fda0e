// `precprobe watch DIR`: the op watchpoints (docs/watchpoints.md) judged on a dump read back,
// with the options its run used (or the defaults, or a config.json's "watch"), set against the
// hits the run wrote live, and the early warning before the first NaN/Inf.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "cli_common.h"
#include "precprobe/op_watch.h"
#include "precprobe/options.h"

namespace precprobe::cli {
namespace {

struct WatchArgs {
  std::string dir;
  std::string config;
  bool defaults = false;
  bool json = false;
};

// "tensor_too_large fired at step 4 in fc1, 120 steps before the first NaN/Inf (step 124)".
std::string early_line(const WatchReport& r) {
  if (!r.early) return {};
  const OpWatchHit& e = *r.early;
  const std::string where =
      fmt::format("{} fired at step {} in {} ({})", e.watch, e.step,
                  e.module.empty() ? "(before any parameter)" : e.module, e.record);
  if (!r.first_nonfinite_step) return where + "; no NaN/Inf followed in the dump";
  return fmt::format("{}, {} steps before the first NaN/Inf (step {}, {})", where,
                     r.steps_earlier(), *r.first_nonfinite_step, *r.first_nonfinite_op);
}

void print_watch(const WatchReport& r, const Terminal& term) {
  if (r.hits.empty()) {
    std::cout << paint(term, Tone::kGreen, "No op watchpoint hit.") << '\n';
  } else {
    std::cout << paint(term, Tone::kRed, fmt::format("{} op watchpoint hits:", r.hits.size()))
              << '\n';
    Table t({"step", "rank", "module", "watch", "op", "value", "bound", "detail"});
    for (const OpWatchHit& h : r.hits)
      t.add({num(h.step), num(int64_t{h.rank}), h.module.empty() ? "-" : h.module, h.watch,
             h.record, num(h.value), num(h.threshold), h.detail});
    t.print(std::cout, term);
  }
  if (r.early) std::cout << paint(term, Tone::kYellow, "early warning: " + early_line(r)) << '\n';
  if (r.live) {
    std::cout << (r.same_as_live()
                      ? paint(term, Tone::kDim,
                              fmt::format("The run judged them live: the same {} hits.",
                                          r.recorded.size()))
                      : paint(term, Tone::kYellow,
                              fmt::format("The run judged {} hits live; these options give {}.",
                                          r.recorded.size(), r.hits.size())))
              << '\n';
  }
}

}  // namespace

void add_watch_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<WatchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "watch", "Judge the op watchpoints (activations against their own history) on a dump");
  cmd->add_option("DIR", args->dir, "dump directory")->required();
  cmd->add_option("--config", args->config,
                  "a config.json whose \"watch\" gives the thresholds (default: those the run "
                  "used, else the defaults)");
  cmd->add_flag("--defaults", args->defaults, "judge with the default thresholds");
  cmd->add_flag("--json", args->json, "print the result as JSON");
  cmd->footer(
      "Watched: forward ops of a training pass whose first output is a floating tensor that\n"
      "requires grad (the model's activations). A hit is the start of a condition in a module:\n"
      "tensor_overflow, tensor_all_zero, activation_dead_fraction, tensor_too_large,\n"
      "tensor_too_small, tensor_range, activation_saturated (docs/watchpoints.md).\n"
      "Exit status 1 when a watchpoint fired.\n\n"
      "Example:\n  precprobe watch ./precprobe_dump\n"
      "  precprobe watch ./precprobe_dump --json | jq '.hits[] | [.step, .module, .watch]'");
  cmd->callback([args, &exit_code] {
    const Terminal term = Terminal::detect();
    auto reader = open_dump(args->dir);
    std::optional<OpWatchOptions> options;
    if (!args->config.empty()) options = DebuggerOptions::from_json_file(args->config).watch;
    if (args->defaults) options = OpWatchOptions{};
    const WatchReport r = watch_report(*reader, options);
    if (args->json) {
      print_json(r.to_json());
    } else {
      print_watch(r, term);
    }
    exit_code = r.hits.empty() ? kExitClean : kExitFound;
  });
}

}  // namespace precprobe::cli
