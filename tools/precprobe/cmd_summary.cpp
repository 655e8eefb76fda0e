// `precprobe summary DIR`: what a dump holds.
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> before fmt 11)

#include <CLI/CLI.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "precprobe/checklist.h"
#include "precprobe/op_watch.h"

namespace precprobe::cli {
namespace {

struct SummaryArgs {
  std::string dir;
  std::string by = "op";
  bool json = false;
  bool verbose = false;
};

std::string text_of(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// An array of meta.json as one line: strings as they are, {name, value} as name=value,
// {name, reason} as "name (reason)" (the seed report's lists).
std::string array_line(const nlohmann::json& a) {
  std::string s;
  for (const nlohmann::json& e : a) {
    std::string item = text_of(e);
    if (e.is_object() && e.contains("name")) {
      item = text_of(e["name"]);
      if (e.contains("value")) item += "=" + text_of(e["value"]);
      if (e.contains("reason")) item += " (" + text_of(e["reason"]) + ")";
    }
    s += (s.empty() ? "" : ", ") + item;
  }
  return s.empty() ? "(none)" : s;
}

// meta.json one level deep ("versions.torch  1.13.1"); the config is left to --json.
void print_meta(const RunMeta& run_meta, const Terminal& term) {
  const nlohmann::json meta = run_meta.to_json();
  if (meta.empty()) {
    std::cout << "  meta.json   (none)\n";
    return;
  }
  auto line = [](const std::string& key, const nlohmann::json& v) {
    if (v.is_primitive()) std::cout << fmt::format("  {:<29} {}\n", key, text_of(v));
    if (v.is_array()) std::cout << fmt::format("  {:<29} {}\n", key, array_line(v));
  };
  for (const auto& [key, value] : meta.items()) {
    if (key == "config" || key == "writer") continue;
    if (!value.is_object()) {
      line(key, value);
      continue;
    }
    for (const auto& [k2, v2] : value.items()) line(key + "." + k2, v2);
  }
  if (meta.contains("config"))
    std::cout << paint(term, Tone::kDim, "  (config: see --json)") << '\n';
}

void print_steps(const SummaryResult& s) {
  if (s.records_per_step.empty()) return;
  int64_t lo = s.records_per_step.front().second, hi = lo;
  for (const auto& [step, n] : s.records_per_step) {
    lo = std::min(lo, n);
    hi = std::max(hi, n);
  }
  const std::string per_step = lo == hi ? num(lo) : fmt::format("{}..{}", lo, hi);
  std::cout << fmt::format("steps         {}..{} ({} with op records), {} op records per step\n",
                           *s.step_min, *s.step_max, s.records_per_step.size(), per_step);
}

std::optional<double> figure(const CheckItem* c, std::string_view key) {
  if (c == nullptr) return std::nullopt;
  for (const auto& [k, v] : c->figures)
    if (k == key) return v;
  return std::nullopt;
}

// One line per replayed anomaly ("record": "on_anomaly") of the first rank that has any;
// the other ranks' are counted (a replay runs on every rank).
// The op watchpoints the run judged live: how many, the earliest, and how many steps it came
// before the first NaN/Inf (docs/watchpoints.md).
void print_op_watch(const SummaryResult& s, const Terminal& term) {
  const bool live = s.meta.config.is_object() && s.meta.config.contains("watch");
  if (s.op_watch_hits.empty()) {
    if (live) std::cout << paint(term, Tone::kGreen, "op watch      none") << '\n';
    return;
  }
  const OpWatchHit* early = nullptr;
  for (const OpWatchHit& h : s.op_watch_hits) {
    if (h.watch == "tensor_overflow") continue;
    if (s.first_nonfinite_step && h.step > *s.first_nonfinite_step) continue;
    if (!early || h.step < early->step) early = &h;
  }
  const OpWatchHit& first = early ? *early : s.op_watch_hits.front();
  std::string line =
      fmt::format("op watch      {} hits (earliest: {} in {} at step {}", s.op_watch_hits.size(),
                  first.watch, first.module.empty() ? "-" : first.module, first.step);
  if (early && s.first_nonfinite_step)
    line += fmt::format(", {} steps before the first NaN/Inf at step {}",
                        *s.first_nonfinite_step - early->step, *s.first_nonfinite_step);
  std::cout << paint(term, Tone::kYellow, line + "; precprobe watch DIR lists them)") << '\n';
}

void print_anomalies(const SummaryResult& s, const Terminal& term) {
  if (s.anomalies.empty()) return;
  const int rank = s.anomalies.front().rank;
  size_t elsewhere = 0;
  for (const AnomalyEvent& a : s.anomalies) {
    if (a.rank != rank) {
      ++elsewhere;
      continue;
    }
    std::cout << paint(term, Tone::kRed, "replay        " + describe(a)) << '\n';
  }
  if (elsewhere > 0) {
    std::cout << paint(term, Tone::kDim,
                       fmt::format("              (rank {} shown; {} more on other ranks: "
                                   "--json \"anomalies\")",
                                   rank, elsewhere))
              << '\n';
  }
  std::cout << paint(
                   term, Tone::kDim,
                   "              (precprobe repro DIR -o repro/repro.cpp: a program that re-runs "
                   "the origin op on its saved inputs)")
            << '\n';
}

// The loss, first -> last: each loss the user logged (names shown unless the one is "loss"),
// else the loss op's output the checklist judged.
void print_losses(const SummaryResult& s, const ChecklistResult& check, const Terminal& term) {
  const CheckItem* item = check.find("hp.loss_trend");
  const Tone tone =
      item != nullptr && item->verdict == Verdict::kProblem ? Tone::kRed : Tone::kPlain;
  auto line = [&](const std::string& name, double first, auto first_step, double last,
                  auto last_step, std::optional<double> bad) {
    std::string text =
        fmt::format("loss          {}{:.4g} (step {}) -> {:.4g} (step {})",
                    name.empty() ? "" : name + " ", first, first_step, last, last_step);
    if (bad) text += fmt::format(", first non-finite at step {}", *bad);
    std::cout << paint(term, tone, text) << '\n';
  };
  if (!s.losses.empty()) {
    const bool plain = s.losses.size() == 1 && s.losses[0].name == check_scalar::kLoss;
    constexpr size_t kShown = 4;
    for (size_t i = 0; i < s.losses.size() && i < kShown; ++i) {
      const LossSummary& l = s.losses[i];
      std::optional<double> bad;
      if (l.nonfinite_step) bad = double(*l.nonfinite_step);
      line(plain ? std::string() : l.name, l.first_value, l.first_step, l.last_value, l.last_step,
           bad);
    }
    if (s.losses.size() > kShown)
      std::cout << paint(term, Tone::kDim,
                         fmt::format("              ({} losses in all: --json \"losses\")",
                                     s.losses.size()))
                << '\n';
    return;
  }
  const auto first = figure(item, "first_value"), last = figure(item, "last_value");
  if (first && last) {
    line("", *first, *figure(item, "first_step"), *last, *figure(item, "last_step"),
         figure(item, "nonfinite_step"));
  }
}

void print_replicas(const SummaryResult& s, const Terminal& term) {
  const ReplicaSummary& rep = s.replicas;
  if (rep.checks == 0) return;
  if (rep.failed_checks == 0) {
    std::cout << paint(term, Tone::kGreen,
                       fmt::format("replicas      {} checks, all consistent", rep.checks))
              << '\n';
    return;
  }
  std::string names;
  for (size_t i = 0; i < rep.mismatched.size() && i < 8; ++i)
    names += (i ? ", " : "") + rep.mismatched[i];
  if (rep.mismatched.size() > 8) names += fmt::format(", ... ({} in all)", rep.mismatched.size());
  if (rep.structure_differs)
    names += (names.empty() ? "" : "; ") + std::string("structure differs");
  std::cout << paint(term, Tone::kRed,
                     fmt::format("replicas      {} of {} checks found ranks out of sync (first "
                                 "at step {}): {}",
                                 rep.failed_checks, rep.checks, *rep.first_failed_step, names))
            << '\n';
}

// The answer first: what was recorded, where the first NaN/Inf came from, the losses, the
// replayed anomalies, watchpoint hits, bad gradients, the checklist's problems, and whether
// data was lost.
void print_verdict(const SummaryResult& s, const ChecklistResult& check, const Terminal& term) {
  std::cout << paint(term, Tone::kBold, "dump          " + s.path) << '\n';
  if (s.step_min) {
    std::cout << fmt::format("recorded      steps {}..{} on {} rank(s), {} op records\n",
                             *s.step_min, *s.step_max, s.ranks.size(), s.op_records);
  } else {
    std::cout << fmt::format("recorded      no op records on {} rank(s)\n", s.ranks.size());
  }
  // How the run ended, before anything is read as a whole run.
  if (!s.run.stopped())
    std::cout << paint(term, Tone::kRed, "run           " + s.run.describe()) << '\n';
  const CheckItem* overflow = check.find("mp.overflow");
  if (overflow != nullptr && overflow->verdict == Verdict::kProblem) {
    std::cout << paint(term, Tone::kRed, "NaN/Inf       " + overflow->evidence) << '\n';
  } else if (s.nonfinite_op_records > 0) {
    std::cout << paint(term, Tone::kRed,
                       fmt::format("NaN/Inf       in the outputs of {} op records",
                                   s.nonfinite_op_records))
              << '\n';
  } else if (s.op_records > 0) {
    std::cout << paint(term, Tone::kGreen, "NaN/Inf       none in the op records") << '\n';
  }
  // A mask's -inf is the program's intent: said, and counted in none of the lines above.
  if (s.masking.any())
    std::cout << paint(term, Tone::kGreen, "masking       " + s.masking.describe()) << '\n';
  print_anomalies(s, term);
  print_losses(s, check, term);
  // Anomalies are the replayed bad steps only; the other signals have lines of their own.
  std::cout << paint(term, s.anomalies.empty() ? Tone::kGreen : Tone::kRed,
                     "anomalies     " + (s.anomalies.empty() ? std::string("none")
                                                             : fmt::format("{} replayed step(s) "
                                                                           "(above)",
                                                                           s.anomalies.size())))
            << '\n';
  if (!s.watch_hits.empty()) {
    int64_t hits = 0;
    for (const WatchHitCount& h : s.watch_hits) hits += h.count;
    const WatchHitCount& h = s.watch_hits.front();  // the earliest (summarize_dump's order)
    std::cout << paint(term, Tone::kYellow,
                       fmt::format("watchpoints   {} hits (earliest: {} {} at step {})", hits,
                                   h.param, h.watch, h.first_step))
              << '\n';
  } else if (s.grad_records > 0) {
    std::cout << paint(term, Tone::kGreen, "watchpoints   none") << '\n';
  }
  print_op_watch(s, term);
  std::vector<std::string> grads;
  if (s.nonfinite_grad_records > 0)
    grads.push_back(fmt::format("{} records with NaN/Inf", s.nonfinite_grad_records));
  if (s.scaler.skipped > 0)
    grads.push_back(fmt::format("{} step(s) skipped by the GradScaler", s.scaler.skipped));
  if (!grads.empty())
    std::cout << paint(term, Tone::kYellow, fmt::format("gradients     {}", fmt::join(grads, "; ")))
              << '\n';
  if (s.replicas.failed_checks > 0) print_replicas(s, term);
  const auto causes = check.problems_by_cause();
  if (causes.empty()) {
    std::cout << paint(term, Tone::kGreen,
                       "checklist     no problem (precprobe check for the items)")
              << '\n';
  } else {
    std::vector<std::string> ids;
    for (const CheckItem* c : causes) ids.push_back(c->id);
    std::cout << paint(term, Tone::kRed,
                       fmt::format("checklist     {} problem(s), likely cause first: {} "
                                   "(precprobe check for the evidence)",
                                   causes.size(), fmt::join(ids, ", ")))
              << '\n';
  }
  std::vector<std::string> lost;
  if (s.dropped > 0)
    lost.push_back(fmt::format("{} records dropped (writer queue full)", s.dropped));
  for (const StreamStatus& st : s.streams)
    if (st.present && st.truncated)
      lost.push_back(fmt::format("{} truncated ({} bytes lost)", st.path, st.truncated_bytes));
  if (s.bad_lines > 0) lost.push_back(fmt::format("{} unreadable lines", s.bad_lines));
  // A run that did not stop is never "complete", whatever its frames say.
  if (!s.run.stopped()) {
    const auto through = s.run.complete_through();
    lost.insert(
        lost.begin(),
        through ? fmt::format("partial: complete through step {} (the run did not stop)", *through)
                : std::string("partial: no step complete (the run did not stop)"));
  }
  std::cout << paint(term,
                     lost.empty() ? Tone::kGreen : (s.run.stopped() ? Tone::kYellow : Tone::kRed),
                     "data          " + (lost.empty() ? std::string("complete")
                                                      : fmt::format("{}", fmt::join(lost, "; "))))
            << '\n';
}

// --by module: where values grow, module by module, and where the first NaN/Inf appeared.
void print_modules(const SummaryResult& s, const Terminal& term) {
  std::cout << "modules (" << kModuleRule << "):\n";
  Table t({"module", "ops", "largest |output|", "NaN/Inf ops", "first NaN/Inf step"});
  for (const ModuleSummary& m : s.modules) {
    t.add(
        {m.module.empty() ? "(before any parameter)" : m.module, num(m.ops), num(m.max_abs_output),
         num(m.nonfinite_ops), m.first_nonfinite_step ? num(*m.first_nonfinite_step) : "-"},
        m.nonfinite_ops > 0 ? Tone::kRed : Tone::kPlain);
  }
  t.print(std::cout, term, "    ");
}

void print_summary(const SummaryResult& s, bool verbose, const Terminal& term) {
  std::cout << fmt::format("records       ops {}, scaler {}, grads {}, events {}\n", s.op_records,
                           s.scaler_records, s.grad_records, s.scalar_records);
  print_steps(s);
  const ScalerSummary& sc = s.scaler;
  if (sc.records > 0) {
    std::cout << fmt::format(
        "loss scale    final {}, skipped steps {}{}, backoffs {}, growths {}\n",
        sc.final_scale ? num(*sc.final_scale) : "-", sc.skipped,
        sc.first_skip_step ? fmt::format(" (first at step {})", *sc.first_skip_step) : "",
        sc.backoffs, sc.growths);
  }
  if (s.nonfinite_op_records > 0) {
    std::cout << paint(term, Tone::kRed,
                       fmt::format("non-finite    {} op records with NaN/Inf outputs{}\n",
                                   s.nonfinite_op_records, verbose ? ":" : " (--verbose: per op)"));
    if (verbose) {
      Table t({"op", "records"});
      for (const NameCount& c : s.nonfinite_ops) t.add({c.name, num(c.count)});
      t.print(std::cout, term, "    ");
    }
  } else {
    std::cout << paint(term, Tone::kGreen, "non-finite    none in op outputs") << '\n';
  }
  if (!s.op_watch_hits.empty() && verbose) {
    std::cout << "op watchpoints (docs/watchpoints.md):\n";
    Table t({"step", "rank", "module", "watch", "op", "value", "bound"});
    for (const OpWatchHit& h : s.op_watch_hits)
      t.add({num(h.step), num(int64_t{h.rank}), h.module.empty() ? "-" : h.module, h.watch,
             h.record, num(h.value), num(h.threshold)},
            Tone::kYellow);
    t.print(std::cout, term, "    ");
  }
  if (!s.watch_hits.empty() && verbose) {
    std::cout << "watchpoints:\n";
    Table t({"param", "watch", "hits", "first step"});
    for (const WatchHitCount& h : s.watch_hits)
      t.add({h.param, h.watch, num(h.count), num(h.first_step)}, Tone::kYellow);
    t.print(std::cout, term, "    ");
  }
  if (s.replicas.failed_checks == 0) print_replicas(s, term);  // failures: in the verdict
  if (!verbose) {
    std::cout << paint(term, Tone::kDim,
                       "(--verbose: meta.json, engine counters, watchpoints, streams)")
              << '\n';
    return;
  }
  std::string ranks;
  for (const RankInfo& r : s.ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r.rank);
  std::cout << fmt::format("ranks         {} ({})\n", s.ranks.size(), ranks);
  print_meta(s.meta, term);
  std::cout << "streams:\n";
  Table t({"file", "frames", "records", "bad lines", "state"});
  for (const StreamStatus& st : s.streams) {
    if (!st.present) continue;
    const std::string state =
        st.truncated ? fmt::format("truncated ({} bytes lost)", st.truncated_bytes) : "complete";
    t.add({st.path, num(static_cast<int64_t>(st.frames)), num(static_cast<int64_t>(st.records)),
           num(static_cast<int64_t>(st.bad_lines)), state},
          st.truncated ? Tone::kYellow : Tone::kPlain);
  }
  t.print(std::cout, term, "    ");
}

}  // namespace

void add_summary_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<SummaryArgs>();
  CLI::App* cmd = app.add_subcommand("summary",
                                     "What a dump holds: ranks, steps, versions, "
                                     "non-finite ops, loss scale, stream health");
  cmd->add_option("DIR", args->dir, "dump directory (or one rank<R>/ directory)")->required();
  cmd->add_flag("--json", args->json, "print the result as JSON");
  cmd->add_flag("--verbose,-v", args->verbose,
                "also print meta.json (versions, engine counters), watchpoint hits and the "
                "streams");
  cmd->add_option("--by", args->by,
                  "op: the summary as it is (default); module: also a table per module, with "
                  "its largest |output| and NaN/Inf ops (" +
                      std::string(kModuleRule) + "; --json: key \"modules\")")
      ->capture_default_str()
      ->check(CLI::IsMember({"op", "module"}));
  cmd->footer(
      "The first lines are the verdict: what was recorded, the origin of the first NaN/Inf,\n"
      "the replayed anomalies (\"record\": \"on_anomaly\"), the losses, anomalies (replayed steps "
      "only), watchpoint hits (the earliest named), gradients with NaN/Inf and skipped steps, the "
      "checklist's problems (precprobe check), lost data. A run that did not stop (a crash, a\n"
      "kill, or still running) says so first, with the last step complete; never \"data "
      "complete\".\nExit status 0 (the summary finds nothing; see overflow, check, compare).\n\n"
      "Example:\n  precprobe summary ./precprobe_dump\n  precprobe summary ./precprobe_dump --by "
      "module\n  precprobe summary ./precprobe_dump --json | jq .scaler");
  cmd->callback([args, &exit_code] {
    const Terminal term = Terminal::detect();
    auto reader = open_dump(args->dir);
    SummaryResult s;
    ChecklistResult check;
    {
      Progress progress(term, args->dir);
      ReadOptions read;
      read.progress = progress.callback();
      s = summarize_dump(*reader, read, args->by == "module");
      if (!args->json) check = run_checklist(*reader, {}, read);
    }
    if (args->json) {
      print_json(s.to_json());
    } else {
      print_verdict(s, check, term);
      print_summary(s, args->verbose, term);
      if (s.by_module) print_modules(s, term);
    }
    exit_code = kExitClean;
  });
}

}  // namespace precprobe::cli
