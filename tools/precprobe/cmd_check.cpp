// `precprobe check DIR`: the accuracy checklist, one verdict and its evidence per item.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "cli_common.h"
#include "precprobe/checklist.h"
#include "precprobe/error.h"

namespace precprobe::cli {
namespace {

struct CheckArgs {
  std::string dir;
  std::string module_hash;
  bool json = false;
};

Tone tone_of(Verdict v) {
  switch (v) {
    case Verdict::kProblem:
      return Tone::kRed;
    case Verdict::kOk:
      return Tone::kGreen;
    case Verdict::kNotApplicable:
      return Tone::kDim;
  }
  return Tone::kPlain;
}

void print_checklist(const ChecklistResult& r, const Terminal& term) {
  const auto causes = r.problems_by_cause();
  if (!causes.empty()) {
    std::cout << paint(term, Tone::kBold, "Problems, likely cause first:") << '\n';
    for (size_t i = 0; i < causes.size(); ++i)
      std::cout << fmt::format("  {}. ", i + 1) << paint(term, Tone::kRed, causes[i]->id) << ": "
                << causes[i]->evidence << '\n';
    std::cout << '\n';
  }
  std::string group;
  for (const CheckItem& c : r.items) {
    if (c.group != group) {
      group = c.group;
      std::cout << paint(term, Tone::kBold, group) << '\n';
    }
    const std::string verdict = fmt::format("{:<8}", to_string(c.verdict));
    std::cout << "  " << paint(term, tone_of(c.verdict), verdict) << c.title << '\n';
    std::cout << "          " << paint(term, Tone::kDim, c.evidence) << '\n';
  }
  int problems = 0;
  for (const CheckItem& c : r.items) problems += c.verdict == Verdict::kProblem;
  std::cout << (problems == 0
                    ? paint(term, Tone::kGreen, "No problem found.")
                    : paint(term, Tone::kRed, fmt::format("{} problem(s) found.", problems)))
            << '\n';
}

uint64_t parse_hash(const std::string& text) {
  size_t used = 0;
  uint64_t v = 0;
  try {
    v = std::stoull(text, &used, 16);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw Error("precprobe check: --module-hash '" + text +
                "' is not a hexadecimal 64-bit hash (e.g. 0123456789abcdef)");
  return v;
}

}  // namespace

void add_check_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<CheckArgs>();
  CLI::App* cmd = app.add_subcommand(
      "check", "Accuracy checklist: data, hyper-parameters, API use, mixed precision");
  cmd->add_option("DIR", args->dir, "dump directory")->required();
  cmd->add_option("--module-hash", args->module_hash,
                  "expected module_hash of the model at start (hex)");
  cmd->add_flag("--json", args->json, "print the result as JSON");
  cmd->footer(
      "Each item says problem, ok or n/a (not decidable from this dump, and why), with the\n"
      "evidence. Rules and thresholds: docs/checklist.md.\n"
      "Exit status 1 when an item is a problem.\n\n"
      "Example:\n  precprobe check ./precprobe_dump\n"
      "  precprobe check ./precprobe_dump --json | jq '.items[] | select(.verdict==\"problem\")'");
  cmd->callback([args, &exit_code] {
    const Terminal term = Terminal::detect();
    ChecklistOptions options;
    if (!args->module_hash.empty()) options.module_hash = parse_hash(args->module_hash);
    auto reader = open_dump(args->dir);
    ChecklistResult r;
    {
      Progress progress(term, args->dir);
      ReadOptions read;
      read.progress = progress.callback();
      r = run_checklist(*reader, options, read);
    }
    if (args->json) {
      print_json(r.to_json());
    } else {
      print_checklist(r, term);
    }
    exit_code = r.problem() ? kExitFound : kExitClean;
  });
}

}  // namespace precprobe::cli
