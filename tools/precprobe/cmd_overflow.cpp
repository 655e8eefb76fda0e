// `precprobe overflow DIR`: the op that produced the first NaN/Inf, and how far it spread.
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> before fmt 11)

#include <CLI/CLI.hpp>
#include <iostream>

#include "cli_common.h"

namespace precprobe::cli {
namespace {

struct OverflowArgs {
  std::string dir;
  bool json = false;
};

void print_args(const char* label, const std::vector<Arg>& args) {
  for (size_t i = 0; i < args.size(); ++i)
    std::cout << fmt::format("  {:<8}#{} {}\n", i == 0 ? label : "", i, arg_str(args[i]));
}

void print_op(const OpBrief& o, const std::optional<std::string>& module) {
  std::cout << fmt::format("  {:<8}{}\n", "op", o.op);
  if (module) std::cout << fmt::format("  {:<8}{}\n", "module", *module);
  std::cout << fmt::format("  {:<8}rank {}, step {}, seq {}, {}, depth {}\n", "where", o.rank,
                           o.step, o.seq, o.direction, o.depth);
  if (!o.scope.empty()) std::cout << fmt::format("  {:<8}{}\n", "scope", o.scope);
  if (!o.node.empty()) std::cout << fmt::format("  {:<8}{}\n", "node", o.node);
  if (!o.params.empty())
    std::cout << fmt::format("  {:<8}{}\n", "params", fmt::join(o.params, ", "));
  print_args("inputs", o.inputs);
  print_args("outputs", o.outputs);
}

void print_rank_table(const OverflowResult& r, const Terminal& term) {
  if (r.ranks.size() < 2) return;
  std::cout << "per rank:\n";
  Table t({"rank", "origin", "step", "seq", "later ops", "steps affected"});
  for (const RankOverflow& ro : r.ranks) {
    t.add({num(int64_t{ro.rank}), ro.found ? ro.origin.name : "-",
           ro.found ? num(ro.origin.step) : "-", ro.found ? num(ro.origin.seq) : "-",
           num(ro.later_nonfinite_ops), num(ro.steps_affected)},
          ro.found ? Tone::kPlain : Tone::kDim);
  }
  t.print(std::cout, term);
}

// A mask's -inf, said once: the program's intent, not counted.
void print_masking(const OverflowResult& r, const Terminal& term) {
  if (r.masking.any())
    std::cout << paint(term, Tone::kDim, "masking: " + r.masking.describe()) << '\n';
}

// Which steps "no NaN/Inf" covers, and whether the run stopped.
void print_clean(const OverflowResult& r, const Terminal& term) {
  std::string steps;
  if (r.step_min) {
    steps = r.step_min == r.step_max ? fmt::format(" of step {}", *r.step_min)
                                     : fmt::format(" of steps {}..{}", *r.step_min, *r.step_max);
  }
  if (r.masking.any()) steps += " other than masking's -inf";
  if (r.run.stopped()) {
    std::cout << paint(term, Tone::kGreen, "No NaN/Inf in any recorded op" + steps + ".") << '\n';
    print_masking(r, term);
    return;
  }
  const auto through = r.run.complete_through();
  std::string partial;
  if (r.step_max && (!through || *r.step_max > *through))
    partial = fmt::format(" (step {} only in part)", *r.step_max);
  std::cout << paint(term, Tone::kYellow, "No NaN/Inf in any recorded op" + steps + partial + ",")
            << '\n'
            << paint(term, Tone::kRed,
                     "but " + r.run.describe() + ": what came after is not in the dump.")
            << '\n';
  print_masking(r, term);
}

void print_overflow(const OverflowResult& r, const Terminal& term) {
  if (!r.any_nonfinite) {
    print_clean(r, term);
    return;
  }
  if (!r.run.stopped()) std::cout << paint(term, Tone::kRed, "note: " + r.run.describe()) << '\n';
  const RankOverflow* mine = nullptr;
  for (const RankOverflow& ro : r.ranks) {
    if (r.found && ro.rank == r.origin.rank) mine = &ro;
  }
  if (r.found) {
    std::cout << paint(term, Tone::kRed, "First non-finite value produced by " + r.origin.name)
              << '\n';
    print_op(r.origin, r.origin_module);
    if (r.reason) std::cout << fmt::format("  {:<8}{}\n", "why", *r.reason);
    if (r.masked_by) {
      std::cout << fmt::format("  {:<8}{} (step {}, seq {}{})\n", "mask", r.masked_by->name,
                               r.masked_by->step, r.masked_by->seq,
                               r.masked_by->module ? ", module " + *r.masked_by->module : "");
    }
    std::cout << fmt::format(
        "spread: {} later ops with non-finite outputs; {} steps affected ({}{})\n",
        mine->later_nonfinite_ops, mine->steps_affected,
        fmt::join(mine->first_steps_affected, ", "),
        mine->steps_affected > static_cast<int64_t>(mine->first_steps_affected.size()) ? ", ..."
                                                                                       : "");
    if (mine->nonfinite_before_origin)
      std::cout << paint(term, Tone::kYellow,
                         "note: an earlier op already received a non-finite input: " +
                             mine->first_nonfinite_input->name +
                             fmt::format(" (step {}, seq {})", mine->first_nonfinite_input->step,
                                         mine->first_nonfinite_input->seq))
                << '\n';
  } else {
    std::cout << paint(term, Tone::kYellow,
                       "NaN/Inf present, but no recorded op turned finite inputs into them:")
              << '\n';
    for (const RankOverflow& ro : r.ranks) {
      if (!ro.first_nonfinite_input) continue;
      std::cout << fmt::format("  rank {}: first seen as an input of {} (step {}, seq {})\n",
                               ro.rank, ro.first_nonfinite_input->name,
                               ro.first_nonfinite_input->step, ro.first_nonfinite_input->seq);
    }
    std::cout << "  the value came from outside the recorded ops (input data, parameters, or "
                 "code that ran before recording started).\n";
  }
  print_masking(r, term);
  print_rank_table(r, term);
}

}  // namespace

void add_overflow_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<OverflowArgs>();
  CLI::App* cmd = app.add_subcommand(
      "overflow", "Find the op that produced the first NaN/Inf (its inputs finite) and its spread");
  cmd->add_option("DIR", args->dir, "dump directory")->required();
  cmd->add_flag("--json", args->json, "print the result as JSON");
  cmd->footer(
      "The origin is the earliest op (by step, then start order) whose inputs are all finite\n"
      "and whose outputs are not; an op nested inside it that does the same is preferred.\n"
      "The origin's module is named as `precprobe precision` attributes it, when parameters\n"
      "were named (dbg.start(model)).\n"
      "A mask's -inf (masked_fill(mask, -inf), full(-inf), where(m, x, -inf)) and the ops that\n"
      "carry it on are no NaN/Inf; an op that turns it into NaN (a softmax of a fully masked\n"
      "row) is an origin, with why and the mask (docs/debugger.md, \"Masks\").\n"
      "Exit status 1 when NaN/Inf was found, or when the run did not stop (crashed, killed or\n"
      "still running: what came after the last complete step is unknown).\n\n"
      "Example:\n  precprobe overflow ./precprobe_dump\n"
      "  precprobe overflow ./precprobe_dump --json | jq -r .name");
  cmd->callback([args, &exit_code] {
    const Terminal term = Terminal::detect();
    auto reader = open_dump(args->dir);
    OverflowResult r;
    {
      Progress progress(term, args->dir);
      ReadOptions read;
      read.progress = progress.callback();
      r = find_overflow(*reader, read);
    }
    if (args->json) {
      print_json(r.to_json());
    } else {
      print_overflow(r, term);
    }
    exit_code = r.any_nonfinite || !r.run.stopped() ? kExitFound : kExitClean;
  });
}

}  // namespace precprobe::cli
