// `precprobe grads DIR` and `precprobe scale DIR`: gradient and loss-scale histories.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "cli_common.h"

namespace precprobe::cli {
namespace {

struct GradsArgs {
  std::string dir, param;
  bool json = false;
};

struct ScaleArgs {
  std::string dir;
  bool json = false;
};

void print_grad_overview(const GradHistory& h, const Terminal& term) {
  Table t({"param", "steps", "max grad norm", "last grad norm", "non-finite steps", "watch hits"});
  for (const ParamGradHistory& p : h.params) {
    const bool bad = p.nonfinite_steps > 0 || p.watch_hits > 0;
    t.add({p.param, num(static_cast<int64_t>(p.records.size())), num(p.max_grad_norm),
           p.records.empty() ? "-" : num(p.records.back().grad_norm), num(p.nonfinite_steps),
           num(p.watch_hits)},
          bad ? Tone::kYellow : Tone::kPlain);
  }
  t.print(std::cout, term);
}

void print_grad_steps(const ParamGradHistory& p, const Terminal& term) {
  std::cout << paint(term, Tone::kBold, p.param) << '\n';
  Table t({"step", "rank", "grad norm", "|g| max", "|g| mean", "nan", "inf", "weight norm",
           "update ratio", "watch"});
  for (const GradRecord& r : p.records) {
    std::string watch;
    for (const std::string& w : r.watch) watch += (watch.empty() ? "" : ", ") + w;
    const bool bad = r.grad_nan + r.grad_inf > 0 || !r.watch.empty();
    t.add(
        {num(r.step), num(int64_t{r.rank}), r.has_grad ? num(r.grad_norm) : "no grad",
         num(r.grad_abs_max), num(r.grad_abs_mean), num(r.grad_nan), num(r.grad_inf),
         r.has_weight ? num(r.weight_norm) : "-", r.has_weight ? num(r.update_ratio) : "-", watch},
        bad ? Tone::kRed : Tone::kPlain);
  }
  t.print(std::cout, term);
}

void print_grads(const GradHistory& h, const GradsArgs& args, const Terminal& term) {
  if (h.params.empty()) {
    std::cout << (args.param.empty() ? "No gradient records in this dump.\n"
                                     : "No parameter name contains '" + args.param + "'.\n");
    return;
  }
  if (args.param.empty()) {
    print_grad_overview(h, term);
  } else {
    for (const ParamGradHistory& p : h.params) print_grad_steps(p, term);
  }
  if (!h.hits.empty()) {
    std::cout << fmt::format("{} watchpoint hits, first: step {} {}\n", h.hits.size(),
                             h.hits.front().first, h.hits.front().second);
  }
}

void print_scale(const ScaleHistory& h, const Terminal& term) {
  if (h.entries.empty()) {
    std::cout << "No GradScaler records in this dump.\n";
    return;
  }
  Table t({"step", "rank", "opt", "scale", "next scale", "found_inf", "skipped", "event",
           "bad params"});
  int64_t skipped = 0;
  for (const ScaleEntry& e : h.entries) {
    skipped += e.skipped ? 1 : 0;
    t.add({num(e.step), num(int64_t{e.rank}), num(int64_t{e.optimizer}), num(e.scale),
           num(e.scale_next), e.found_inf ? "yes" : "no", e.skipped ? "yes" : "no", e.event,
           num(e.nonfinite_params)},
          e.skipped ? Tone::kYellow : Tone::kPlain);
  }
  t.print(std::cout, term);
  std::cout << fmt::format("{} optimizer steps, {} skipped, final scale {}\n", h.entries.size(),
                           skipped, num(h.entries.back().scale_next));
}

}  // namespace

void add_grads_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<GradsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "grads", "Gradient history per parameter: norms, NaN/Inf, update ratios, watchpoint hits");
  cmd->add_option("DIR", args->dir, "dump directory")->required();
  cmd->add_option("--param", args->param,
                  "show every step of the parameters whose name contains NAME");
  cmd->add_flag("--json", args->json, "print the result as JSON");
  cmd->footer(
      "Examples:\n  precprobe grads ./precprobe_dump\n"
      "  precprobe grads ./precprobe_dump --param fc1.weight");
  cmd->callback([args, &exit_code] {
    const Terminal term = Terminal::detect();
    auto reader = open_dump(args->dir);
    GradHistory h;
    {
      Progress progress(term, args->dir);
      ReadOptions read;
      read.progress = progress.callback();
      h = grad_history(*reader, args->param, read);
    }
    if (args->json) {
      print_json(h.to_json());
    } else {
      print_grads(h, *args, term);
    }
    exit_code = kExitClean;
  });
}

void add_scale_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ScaleArgs>();
  CLI::App* cmd = app.add_subcommand(
      "scale", "Loss-scale history of the GradScaler: scale, found_inf, skipped steps");
  cmd->add_option("DIR", args->dir, "dump directory")->required();
  cmd->add_flag("--json", args->json,
                "print a JSON array of {step, rank, optimizer, scale, scale_next, found_inf, "
                "skipped, event}");
  cmd->footer(
      "Example:\n  precprobe scale ./precprobe_dump\n"
      "  precprobe scale ./precprobe_dump --json | jq '[.[] | select(.skipped)] | length'");
  cmd->callback([args, &exit_code] {
    const Terminal term = Terminal::detect();
    auto reader = open_dump(args->dir);
    const ScaleHistory h = scale_history(*reader);
    if (args->json) {
      print_json(h.to_json());
    } else {
      print_scale(h, term);
    }
    exit_code = kExitClean;
  });
}

}  // namespace precprobe::cli
