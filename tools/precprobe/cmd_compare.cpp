// `precprobe compare A B`: op-by-op comparison of two runs (A = the run under test, N;
// B = the benchmark), msprobe's statistics columns, --first and --exact.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <iostream>
#include <tuple>

#include "cli_common.h"
#include "precprobe/error.h"

namespace precprobe::cli {
namespace {

constexpr size_t kRowsShown = 50;
constexpr size_t kPlacesShown = 10;  // places where the op sequences differ
constexpr size_t kNamesShown = 3;    // op names per run and place
constexpr size_t kGroupsShown = 8;   // (step, rank) groups of one dump only

struct CompareArgs {
  std::string a, b;
  bool first = false, exact = false, all = false, json = false;
  std::optional<int64_t> step;
  std::optional<int> rank;
  std::vector<int> ranks;  // --ranks R1 R2: two ranks of one run (or of A and B)
  double rtol = 0;
  double noise_factor = 10;
  unsigned threads = 0;
  double inherited_weight = 10;
  std::string by = "op";
};

// The ops before the first parameter of a step: the data pipeline, and what else runs
// before the model (zero_grad).
std::string module_label(const std::string& m) {
  return m.empty() ? "data (before any parameter)" : m;
}

void print_modules(const CompareResult& r, const Terminal& term) {
  if (r.modules.empty()) return;
  const ModuleCompare* first = nullptr;
  Table t({"module", "ops", "match", "noise", "divergent", "max ratio", "first divergent op",
           "step", "error", "bound"});
  for (const ModuleCompare& m : r.modules) {
    const std::string name = module_label(m.module);
    if (m.first_divergent) {
      const OpCompare& f = *m.first_divergent;
      if (!first || std::tie(f.step, f.seq_a) <
                        std::tie(first->first_divergent->step, first->first_divergent->seq_a))
        first = &m;
      t.add({name, num(m.ops), num(m.match), num(m.noise), num(m.divergent), num(m.max_ratio),
             f.name, num(f.step), num(f.error), num(f.bound)},
            Tone::kRed);
    } else {
      t.add({name, num(m.ops), num(m.match), num(m.noise), num(m.divergent), num(m.max_ratio), "",
             "", "", ""});
    }
  }
  t.print(std::cout, term);
  if (first) {
    const OpCompare& f = *first->first_divergent;
    std::cout << paint(term, Tone::kRed,
                       fmt::format("First divergent module: {} ({} at step {}: error {}, bound "
                                   "{}, ratio {})",
                                   module_label(first->module), f.name, f.step, num(f.error),
                                   num(f.bound), num(f.ratio)))
              << '\n';
  } else {
    std::cout << paint(term, Tone::kGreen, "No module has a divergent op.") << '\n';
  }
}

std::string pct(double v) { return std::isnan(v) ? "N/A" : num(v) + "%"; }

std::string dtypes(const ArgCompare& a) {
  return a.dtype_n == a.dtype_b ? a.dtype_n : a.dtype_n + "/" + a.dtype_b;
}

void add_arg_row(Table& t, const OpCompare& o, const ArgCompare& a) {
  const std::string result = a.warning ? "Warning" : "";
  if (!a.tensor) {
    t.add({num(o.step), num(int64_t{o.rank}), o.name, a.io, num(int64_t{a.index}), "", "", "", "",
           "", "", "", "", "", a.note.empty() ? result : a.note, o.classification},
          a.warning ? Tone::kRed : Tone::kPlain);
    return;
  }
  t.add({num(o.step), num(int64_t{o.rank}), o.name, a.io, num(int64_t{a.index}), dtypes(a),
         num(a.max.diff), num(a.min.diff), num(a.mean.diff), num(a.norm.diff), pct(a.max.rel_pct),
         pct(a.min.rel_pct), pct(a.mean.rel_pct), pct(a.norm.rel_pct),
         a.note.empty() ? result : result + " (" + a.note + ")", o.classification},
        a.warning ? Tone::kRed : Tone::kPlain);
}

Table stats_table() {
  return Table({"step", "rank", "name", "io", "#", "dtype", "Max diff", "Min diff", "Mean diff",
                "Norm diff", "MaxRelErr", "MinRelErr", "MeanRelErr", "NormRelErr", "result",
                "class"});
}

std::string names_cell(const std::vector<std::string>& names, int64_t count) {
  std::string cell;
  size_t shown = 0;
  for (; shown < names.size() && shown < kNamesShown; ++shown)
    cell += (shown > 0 ? ", " : "") + names[shown];
  if (count > static_cast<int64_t>(shown))
    cell += fmt::format(" (+{} more)", count - static_cast<int64_t>(shown));
  return cell;
}

std::string groups_text(const std::vector<std::pair<int64_t, int>>& groups) {
  std::string text;
  for (size_t k = 0; k < groups.size() && k < kGroupsShown; ++k)
    text += fmt::format("{}step {} rank {}", k > 0 ? ", " : "", groups[k].first, groups[k].second);
  if (groups.size() > kGroupsShown)
    text += fmt::format(" and {} more", groups.size() - kGroupsShown);
  return text;
}

std::string count_of(int64_t n, const char* what) {
  return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s");
}

// Said first, before any number: the ops one run ran and the other did not, and where. The
// numbers that follow are about the ops paired around them. `lead` starts the first line
// ("Not identical: "), else it starts with a capital.
void print_sequence(const CompareResult& r, const Terminal& term, std::string lead) {
  auto opening = [&lead](std::string text) {
    if (lead.empty()) {
      text[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(text[0])));
      return text;
    }
    text = lead + text;
    lead.clear();
    return text;
  };
  int64_t in_places = 0;
  if (r.first_sequence_diff) {
    int64_t in_a = 0, in_b = 0;
    for (const SequenceDiff& d : r.sequence_diffs) {
      in_a += d.count_a;
      in_b += d.count_b;
    }
    in_places = in_a + in_b;
    const SequenceDiff& f = *r.first_sequence_diff;
    std::cout << paint(term, Tone::kRed,
                       opening(fmt::format(
                           "the runs ran different ops: {} only in A and {} only "
                           "in B, at {} in {}; the first at step {}, rank {}, "
                           "seq {} of A / {} of B.",
                           count_of(in_a, "op"), in_b,
                           count_of(static_cast<int64_t>(r.sequence_diffs.size()), "place"),
                           count_of(r.aligned_by_lcs, "(step, rank) group"), f.step, f.rank,
                           f.seq_a, f.seq_b)))
              << '\n';
    std::cout << "Ops pair only with an op of the same content (op, direction, shapes, "
                 "parameter); the ops listed here are not compared.\n";
    Table t({"step", "rank", "seq A", "seq B", "only in A", "only in B"});
    for (size_t k = 0; k < r.sequence_diffs.size() && k < kPlacesShown; ++k) {
      const SequenceDiff& d = r.sequence_diffs[k];
      t.add({num(d.step), num(int64_t{d.rank}), num(d.seq_a), num(d.seq_b),
             names_cell(d.names_a, d.count_a), names_cell(d.names_b, d.count_b)},
            Tone::kYellow);
    }
    t.print(std::cout, term);
    if (r.sequence_diffs.size() > kPlacesShown)
      std::cout << fmt::format("  ... {} more places (--json lists all)\n",
                               r.sequence_diffs.size() - kPlacesShown);
  }
  if (!r.only_a.empty() || !r.only_b.empty()) {
    const int64_t ops = static_cast<int64_t>(r.unmatched.size()) - in_places;
    std::cout << paint(term, Tone::kYellow,
                       opening(fmt::format(
                           "{} in one dump only ({}, not compared):{}{}",
                           count_of(static_cast<int64_t>(r.only_a.size() + r.only_b.size()),
                                    "(step, rank) group"),
                           count_of(ops, "op"),
                           r.only_a.empty() ? "" : " A only: " + groups_text(r.only_a) + ".",
                           r.only_b.empty() ? "" : " B only: " + groups_text(r.only_b) + ".")))
              << '\n';
  }
}

void print_totals(const CompareResult& r) {
  std::cout << fmt::format("{} ops matched, {} with warnings, {} unmatched", r.matched, r.warnings,
                           r.unmatched.size());
  if (r.aligned_by_lcs > 0)
    std::cout << fmt::format(", {} (step, rank) groups aligned by content", r.aligned_by_lcs);
  if (r.aligned_approximately > 0)
    std::cout << fmt::format(" ({} approximately: alignment work bound reached)",
                             r.aligned_approximately);
  if (r.aligned_by_thread > 0)
    std::cout << fmt::format(", {} paired per thread (threads interleaved differently)",
                             r.aligned_by_thread);
  std::cout << '\n';
  std::cout << fmt::format("{} match, {} noise, {} divergent; {:.1f}% of ops aligned\n",
                           r.match_ops, r.noise_ops, r.divergent_ops, 100 * r.aligned_fraction);
  if (r.dead_ops > 0 && !r.dead.empty()) {
    const DeadDifference& d = r.dead.front();
    std::cout << fmt::format(
        "Dead differences, not divergent: {} of the noise ops made a difference no op reads "
        "before it is overwritten, set to None or freed (gradients the runs zero at different "
        "times); the first: {} at step {}, rank {}, module {}{}: {} (--json lists all)\n",
        r.dead_ops, d.name, d.step, d.rank, module_label(d.module),
        d.param.empty() ? "" : ", the gradient of " + d.param, d.reason);
  }
  if (r.background_a + r.background_b > 0)
    std::cout << fmt::format(
        "Not compared: {} ops of A and {} of B ran on threads outside the training step "
        "(data-loader workers; their timing is the scheduler's); the step's ops that consume "
        "their data are compared.\n",
        r.background_a, r.background_b);
}

void print_statistics(const CompareResult& r, const CompareArgs& args, const Terminal& term) {
  print_sequence(r, term, "");
  Table t = stats_table();
  size_t hidden = 0;
  for (const OpCompare& o : r.ops) {
    for (const ArgCompare& a : o.args) {
      if (!args.all && !a.warning) continue;
      if (!args.all && t.size() >= kRowsShown) {
        ++hidden;
        continue;
      }
      add_arg_row(t, o, a);
    }
  }
  if (t.size() > 0) t.print(std::cout, term);
  if (hidden > 0) std::cout << fmt::format("  ... {} more rows (--all or --json)\n", hidden);
  print_totals(r);
}

void print_op_detail(const OpCompare& o, const Terminal& term, double weight) {
  std::cout << fmt::format("  rank {}, step {}, seq {} (B: {}), {}{}, module {}{}\n", o.rank,
                           o.step, o.seq_a, o.seq_b, o.direction,
                           o.scope.empty() ? "" : ", scope " + o.scope, module_label(o.module),
                           o.param.empty() ? "" : ", parameter " + o.param);
  auto names = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& n : v) s += (s.empty() ? "" : ", ") + n;
    return s.empty() ? std::string("none (made before the step)") : s;
  };
  if (o.cause == "one_run_ops" || o.cause == "data")
    std::cout << fmt::format(
        "  an input differs beyond the rounding of the ops that made it, and no compared op "
        "explains it: it was made by ops of one run only{}\n    A: {}\n    B: {}\n",
        o.cause == "data" ? ", in the data pipeline before the model (the batch differs)" : "",
        names(o.made_by_a), names(o.made_by_b));
  if (!o.made_by_values.empty())
    std::cout << fmt::format("    what differs among their arguments: {}\n", o.made_by_values);
  if (o.cause == "accumulated") {
    auto joined = [](const std::vector<std::string>& v) {
      std::string s;
      for (const std::string& n : v) s += (s.empty() ? "" : " ") + n;
      return s;
    };
    std::cout << fmt::format(
        "  it reads a gradient accumulated onto a different value in each run: the runs zero "
        "gradients at different times, and this op reads the difference{}\n    A: {}\n    B: "
        "{}\n",
        o.param.empty() ? "" : " (the gradient of " + o.param + ")", joined(o.made_by_a),
        joined(o.made_by_b));
  }
  if (o.cause == "before_step")
    std::cout << "  an input made before the first compared step differs: the runs did not start "
                 "alike (the loaded state, or data prepared before the loop)\n";
  if (o.cause == "draws")
    std::cout << "  inputs equal, draws differ: the runs' random generators were in different "
                 "states here. Seed both alike once the model is built (torch.manual_seed(seed) "
                 "/ torch::manual_seed(seed)) and look for random ops of one run only before "
                 "this one: Python's DataLoader draws a seed from the global generator each time "
                 "an epoch starts unless it is given generator= (docs/python.md)\n";
  if (o.classification != "match")
    std::cout << fmt::format(
        "  noise model: error {} (inherited from inputs {}), rounding bound {} (n = {}), "
        "ratio error / (bound + {} x inherited) {}: {}\n",
        num(o.error), num(o.inherited), num(o.bound), o.terms, num(weight), num(o.ratio),
        o.classification);
  if (!o.after_flip.empty())
    std::cout << fmt::format("  downstream of a near-tie flip: {} (seq {}) chose other elements\n",
                             o.after_flip, o.after_flip_seq);
  size_t said = 0, unsaid = 0;  // a stack of 64 samples: the first few
  for (const ArgCompare& a : o.args) {
    if (o.classification != "divergent" || a.exact || (a.tensor && a.note.empty())) continue;
    if (said++ < 3)
      std::cout << fmt::format("  {} #{} differs beyond rounding: {}\n", a.io, a.index, a.note);
    else
      ++unsaid;
  }
  if (unsaid > 0) std::cout << fmt::format("  ... and {} more arguments alike\n", unsaid);
  std::cout << fmt::format("  relative error: inputs {}, outputs {}, added by this op {}\n",
                           num(o.input_error), num(o.output_error), num(o.score));
  Table t({"io", "#", "dtype", "shape", "max N", "max B", "mean N", "mean B", "norm N", "norm B",
           "error", "abs error", "note"});
  for (const ArgCompare& a : o.args) {
    if (!a.tensor) {
      t.add({a.io, num(int64_t{a.index}), "", "", "", "", "", "", "", "", num(a.error),
             num(a.abs_error), a.note});
      continue;
    }
    t.add({a.io, num(int64_t{a.index}), dtypes(a), shape_str(a.shape_n), num(a.max.n), num(a.max.b),
           num(a.mean.n), num(a.mean.b), num(a.norm.n), num(a.norm.b), num(a.error),
           num(a.abs_error), a.note},
          a.exact ? Tone::kPlain : Tone::kYellow);
  }
  t.print(std::cout, term);
}

void print_first(const CompareResult& r, const CompareArgs& args, const Terminal& term) {
  print_sequence(r, term, "");
  if (r.found) {
    std::cout << paint(term, Tone::kRed, "First divergent op: " + r.first->name) << '\n';
    print_op_detail(*r.first, term, args.inherited_weight);
  } else {
    std::cout << paint(term, Tone::kGreen,
                       fmt::format("No divergent op: every difference is within {} times its "
                                   "rounding bound{}.",
                                   num(args.noise_factor),
                                   r.excused_ops > 0 ? " or downstream of a near-tie flip" : ""))
              << '\n';
    if (r.max_noise) {
      const OpCompare& m = *r.max_noise;
      std::cout << fmt::format(
          "{} ops differ by rounding noise (largest: {} at step {}, rank {}: error {}, "
          "inherited {}, bound {}, ratio {})\n",
          r.noise_ops, m.name, m.step, m.rank, num(m.error), num(m.inherited), num(m.bound),
          num(m.ratio));
    }
  }
  if (r.first_excused) {
    const OpCompare& e = *r.first_excused;
    std::cout << fmt::format(
        "{} op(s) beyond their rounding bound are downstream of a near-tie flip, not divergent "
        "(first: {} at step {}, rank {}, ratio {}, after {} (seq {}), whose indices differ: "
        "tied elements chosen differently move values, which statistics cannot bound; "
        "docs/cli.md, \"Near-tie flips\")\n",
        r.excused_ops, e.name, e.step, e.rank, num(e.ratio), e.after_flip, e.after_flip_seq);
  }
  print_totals(r);
}

void print_exact(const CompareResult& r, const CompareArgs& args, const Terminal& term) {
  if (r.identical) {
    std::cout << paint(term, Tone::kGreen,
                       fmt::format("Identical: {} ops bitwise equal.", r.matched))
              << '\n';
    return;
  }
  print_sequence(r, term, "Not identical: ");
  const bool ops_differ = r.first_sequence_diff || !r.only_a.empty() || !r.only_b.empty();
  if (r.first) {
    std::cout << paint(term, Tone::kRed,
                       (ops_differ ? "First paired op that differs: " : "First op that differs: ") +
                           r.first->name)
              << '\n';
    print_op_detail(*r.first, term, args.inherited_weight);
  } else {
    std::cout << "Every paired op is bitwise equal.\n";
  }
  // What --first would name: a difference here is not yet a divergence.
  if (const auto& d = r.first_divergent) {
    std::cout << paint(term, Tone::kRed,
                       fmt::format("First divergent op (as --first names it): {} at step {}, "
                                   "rank {}, seq {}{}",
                                   d->name, d->step, d->rank, d->seq_a,
                                   d->module.empty() ? "" : ", module " + d->module))
              << '\n';
  } else if (!r.identical) {
    std::cout << "No divergent op (as --first says): the paired ops agree within their "
                 "rounding\n";
  }
  print_totals(r);
}

// Exit 2 when no (step, rank) is in both dumps: "Identical" would be said of nothing.
void require_common_groups(const CompareResult& r, const CompareArgs& args) {
  if (r.groups_compared > 0) return;
  std::string selected;
  if (args.step) selected += fmt::format(" at step {}", *args.step);
  if (args.ranks.size() == 2) {
    selected += fmt::format(" (rank {} of A, rank {} of B)", args.ranks[0], args.ranks[1]);
  } else if (args.rank) {
    selected += fmt::format(" on rank {}", *args.rank);
  }
  const std::string narrowed = selected.empty() ? "" : ", or widen --step/--rank/--ranks";
  std::string why;
  if (r.ops_a == 0 || r.ops_b == 0) {
    why = r.ops_a == 0 && r.ops_b == 0 ? "neither dump holds op records" + selected
          : r.ops_a == 0 ? fmt::format("A ({}) holds no op records{}", args.a, selected)
                         : fmt::format("B ({}) holds no op records{}", args.b, selected);
    why +=
        ". Check what was recorded with `precprobe summary DIR` (config.json's `step`, "
        "`list`, `scope` and `level` select the ops the debugger records)" +
        narrowed;
  } else {
    why = fmt::format(
        "the dumps hold no (step, rank) in common{}: A has {}; B has {}. Record "
        "the same steps in both runs, or compare two ranks with --ranks R1 R2",
        selected, groups_text(r.only_a), groups_text(r.only_b));
  }
  throw Error("nothing to compare: " + why + ".");
}

}  // namespace

void add_compare_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "Compare two dumps op by op (A = run under test, B = benchmark)");
  cmd->add_option("A", args->a, "dump under test (msprobe's N, 'NPU')")->required();
  cmd->add_option("B", args->b, "benchmark dump (msprobe's B, 'bench'); with --ranks, default A");
  CLI::Option* first =
      cmd->add_flag("--first", args->first, "report the first op that adds divergence");
  CLI::Option* exact = cmd->add_flag("--exact", args->exact,
                                     "bitwise identity (hashes, or all statistics when no hashes)");
  first->excludes(exact);
  cmd->add_option("--step", args->step, "compare this step only");
  CLI::Option* rank = cmd->add_option("--rank", args->rank, "compare this rank only");
  cmd->add_option("--ranks", args->ranks,
                  "compare rank R1 of A with rank R2 of B (of A when B is not given)")
      ->expected(2)
      ->type_name("R1 R2")
      ->excludes(rank);
  cmd->add_option("--noise-factor", args->noise_factor,
                  "an op is divergent when the error it adds exceeds this many times its "
                  "rounding bound")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--inherited-weight", args->inherited_weight,
                  "how many times the error inherited from the inputs (a lower bound, seen "
                  "through statistics) counts")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--rtol", args->rtol,
                  "also require a divergent op to add more than this relative error (0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option(
         "--by", args->by,
         "op: per op (default); module: also per module (" + std::string(kModuleRule) + ")")
      ->capture_default_str()
      ->check(CLI::IsMember({"op", "module"}));
  cmd->add_option("--threads", args->threads,
                  "threads that judge the runs while they are read, the reading one included "
                  "(0: one a core, at most 4); the result is the same whatever the number")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  cmd->add_flag("--all", args->all, "statistics mode: print every tensor, not only warnings");
  cmd->add_flag("--json", args->json, "print the result as JSON");
  cmd->footer(
      "Statistics mode (default) prints msprobe's Max/Min/Mean/Norm diff (A - B) and relative\n"
      "errors, 'Warning' when |diff| / (max(|A|, |B|) + 1e-10) > 0.5 for any of them.\n"
      "Every compared op is classified: match (identical), noise (within --noise-factor\n"
      "times its rounding bound: ~lambda sqrt(n) u for a sum of n terms, Higham & Mary's\n"
      "probabilistic bound; see docs/cli.md, 'Noise model'), divergent. Gradients of a run\n"
      "whose GradScaler scaled the loss are compared with the scale divided out; how small\n"
      "an error is found (1e-4 in a float32 port, tens of % bf16 vs fp32): 'Sensitivity'.\n"
      "Ops pair only with an op of the same content (op, direction, tensor shapes, parameter);\n"
      "when the runs ran different ops that is said first, with the places and the ops of\n"
      "one run only, which are not compared.\n"
      "Exit status 1 when something differs (statistics mode: warnings or ops of one run\n"
      "only; --first: a divergent op; --exact: not identical, different ops included; and\n"
      "when a run did not stop: crashed, killed or still running);\n"
      "2 when nothing can be compared (no (step, rank) with op records in both dumps).\n\n"
      "Examples:\n"
      "  precprobe compare run_bf16 run_fp32 --first\n"
      "  precprobe compare run_a run_b --exact --json | jq .identical\n"
      "  precprobe compare run_a run_b --step 3 --rank 0 --all\n"
      "  precprobe compare ddp_dump --ranks 0 1 --exact      # replicas that should agree");
  cmd->callback([args, &exit_code] {
    const Terminal term = Terminal::detect();
    if (args->b.empty()) {
      if (args->ranks.empty())
        throw CLI::ValidationError("B", "a second dump B is required (or --ranks R1 R2)");
      args->b = args->a;
    }
    auto a = open_dump(args->a);
    auto b = open_dump(args->b);
    CompareOptions opt;
    opt.first = args->first;
    opt.exact = args->exact;
    opt.step = args->step;
    opt.rank = args->rank;
    if (args->ranks.size() == 2) opt.ranks = std::make_pair(args->ranks[0], args->ranks[1]);
    opt.rtol = args->rtol;
    opt.noise_factor = args->noise_factor;
    opt.inherited_weight = args->inherited_weight;
    opt.threads = args->threads;
    opt.by_module = args->by == "module";
    // What is printed is kept; the other ops are counted (memory for the ops printed only).
    opt.keep_ops = args->first || args->exact ? KeepOps::kDivergent
                   : args->json || args->all  ? KeepOps::kAll
                                              : KeepOps::kWarned;
    CompareResult r;
    {
      Progress progress(term, args->a + " and " + args->b);
      r = compare_dumps(*a, *b, opt, progress.callback());
    }
    require_common_groups(r, *args);
    // A run that did not stop holds fewer (or partial) steps: said first, and a difference.
    const RunState run_a = run_state(*a), run_b = run_state(*b);
    if (args->json) {
      nlohmann::json j = r.to_json();
      j["run_a"] = run_a.to_json();
      j["run_b"] = run_b.to_json();
      print_json(j);
    } else {
      if (!run_a.stopped()) std::cout << paint(term, Tone::kRed, "A: " + run_a.describe()) << '\n';
      if (!run_b.stopped()) std::cout << paint(term, Tone::kRed, "B: " + run_b.describe()) << '\n';
      if (args->exact) {
        print_exact(r, *args, term);
      } else if (args->first) {
        print_first(r, *args, term);
      } else {
        print_statistics(r, *args, term);
      }
      print_modules(r, term);
    }
    exit_code = r.differs() || !run_a.stopped() || !run_b.stopped() ? kExitFound : kExitClean;
  });
}

}  // namespace precprobe::cli
