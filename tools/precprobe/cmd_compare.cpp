// `precprobe compare A B`: op-by-op comparison of two runs (A = the run under test, N;
// B = the benchmark), msprobe's statistics columns, --first and --exact.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <tuple>

#include "cli_common.h"

namespace precprobe::cli {
namespace {

constexpr size_t kRowsShown = 50;
constexpr size_t kUnmatchedShown = 10;

struct CompareArgs {
  std::string a, b;
  bool first = false, exact = false, all = false, json = false;
  std::optional<int64_t> step;
  std::optional<int> rank;
  std::vector<int> ranks;  // --ranks R1 R2: two ranks of one run (or of A and B)
  double rtol = 0;
  double noise_factor = 10;
  double inherited_weight = 10;
  std::string by = "op";
};

void print_modules(const CompareResult& r, const Terminal& term) {
  if (r.modules.empty()) return;
  const ModuleCompare* first = nullptr;
  Table t({"module", "ops", "match", "noise", "divergent", "max ratio", "first divergent op",
           "step", "error", "bound"});
  for (const ModuleCompare& m : r.modules) {
    const std::string name = m.module.empty() ? "(before any parameter)" : m.module;
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
                                   first->module.empty() ? "(before any parameter)" : first->module,
                                   f.name, f.step, num(f.error), num(f.bound), num(f.ratio)))
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

void print_unmatched(const CompareResult& r, const Terminal& term) {
  if (r.unmatched.empty()) return;
  std::cout << paint(term, Tone::kYellow,
                     fmt::format("{} ops present in one run only:", r.unmatched.size()))
            << '\n';
  Table t({"side", "step", "rank", "seq", "name"});
  for (size_t i = 0; i < r.unmatched.size() && i < kUnmatchedShown; ++i) {
    const UnmatchedOp& u = r.unmatched[i];
    t.add({u.side == "a" ? "only A" : "only B", num(u.step), num(int64_t{u.rank}), num(u.seq),
           u.name});
  }
  t.print(std::cout, term);
  if (r.unmatched.size() > kUnmatchedShown)
    std::cout << fmt::format("  ... {} more (--json lists all)\n",
                             r.unmatched.size() - kUnmatchedShown);
}

void print_totals(const CompareResult& r) {
  std::cout << fmt::format("{} ops matched, {} with warnings, {} unmatched", r.ops.size(),
                           r.warnings, r.unmatched.size());
  if (r.aligned_by_lcs > 0)
    std::cout << fmt::format(", {} (step, rank) groups aligned by sequence", r.aligned_by_lcs);
  std::cout << '\n';
  std::cout << fmt::format("{} match, {} noise, {} divergent; {:.1f}% of ops aligned\n",
                           r.match_ops, r.noise_ops, r.divergent_ops, 100 * r.aligned_fraction);
}

void print_statistics(const CompareResult& r, const CompareArgs& args, const Terminal& term) {
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
  print_unmatched(r, term);
  print_totals(r);
}

void print_op_detail(const OpCompare& o, const Terminal& term, double weight) {
  std::cout << fmt::format("  rank {}, step {}, seq {} (B: {}), {}{}\n", o.rank, o.step, o.seq_a,
                           o.seq_b, o.direction, o.scope.empty() ? "" : ", scope " + o.scope);
  if (o.classification != "match")
    std::cout << fmt::format(
        "  noise model: error {} (inherited from inputs {}), rounding bound {} (n = {}), "
        "ratio error / (bound + {} x inherited) {}: {}\n",
        num(o.error), num(o.inherited), num(o.bound), o.terms, num(weight), num(o.ratio),
        o.classification);
  if (!o.after_flip.empty())
    std::cout << fmt::format("  downstream of a near-tie flip: {} (seq {}) chose other elements\n",
                             o.after_flip, o.after_flip_seq);
  for (const ArgCompare& a : o.args) {
    if (o.classification == "divergent" && !a.tensor && !a.exact)
      std::cout << fmt::format("  {} #{} differs beyond rounding: {}\n", a.io, a.index, a.note);
  }
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
  print_unmatched(r, term);
  print_totals(r);
}

void print_exact(const CompareResult& r, const CompareArgs& args, const Terminal& term) {
  if (r.identical) {
    std::cout << paint(term, Tone::kGreen,
                       fmt::format("Identical: {} ops bitwise equal.", r.ops.size()))
              << '\n';
    return;
  }
  if (r.first) {
    std::cout << paint(term, Tone::kRed, "First op that differs: " + r.first->name) << '\n';
    print_op_detail(*r.first, term, args.inherited_weight);
  } else {
    std::cout << paint(term, Tone::kRed, "Not identical: the runs hold different ops.") << '\n';
  }
  print_unmatched(r, term);
  print_totals(r);
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
  cmd->add_option("--by", args->by,
                  "op: per op (default); module: also per module (an op consuming parameter "
                  "fc1.weight belongs to fc1, the ops after it inherit it)")
      ->capture_default_str()
      ->check(CLI::IsMember({"op", "module"}));
  cmd->add_flag("--all", args->all, "statistics mode: print every tensor, not only warnings");
  cmd->add_flag("--json", args->json, "print the result as JSON");
  cmd->footer(
      "Statistics mode (default) prints msprobe's Max/Min/Mean/Norm diff (A - B) and relative\n"
      "errors, 'Warning' when |diff| / (max(|A|, |B|) + 1e-10) > 0.5 for any of them.\n"
      "Every compared op is classified: match (identical), noise (within --noise-factor\n"
      "times its rounding bound gamma_n = n u / (1 - n u), see docs/cli.md), divergent.\n"
      "Exit status 1 when something differs (statistics mode: warnings or unmatched ops;\n"
      "--first: a divergent op; --exact: not identical).\n\n"
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
    opt.by_module = args->by == "module";
    CompareResult r;
    {
      Progress progress(term, args->a + " and " + args->b);
      r = compare_dumps(*a, *b, opt, progress.callback());
    }
    if (args->json) {
      print_json(r.to_json());
    } else {
      if (args->exact) {
        print_exact(r, *args, term);
      } else if (args->first) {
        print_first(r, *args, term);
      } else {
        print_statistics(r, *args, term);
      }
      print_modules(r, term);
    }
    exit_code = r.differs() ? kExitFound : kExitClean;
  });
}

}  // namespace precprobe::cli
