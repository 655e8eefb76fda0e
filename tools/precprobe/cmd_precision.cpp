// `precprobe precision DIR --to fp16|bf16|e4m3|e5m2`: which ops and modules of an fp32 run
// fit a low-precision format, the loss scale for fp16 gradients, and the modules to keep in
// fp32 under autocast (docs/precision.md).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <iostream>

#include "cli_common.h"
#include "precprobe/precision.h"

namespace precprobe::cli {
namespace {

struct PrecisionArgs {
  std::string dir;
  std::string to;
  std::string scaling = "none";
  size_t top = 20;
  bool json = false;
};

// A share as a percentage: "0" when none, three significant digits otherwise.
std::string pct(double share) {
  if (!(share > 0)) return "0";
  if (share < 1e-6) return "<0.0001%";
  return fmt::format("{:.3g}%", 100 * share);
}

// A power of two as "2^9 (512)".
std::string pow2(double scale) {
  const int e = static_cast<int>(std::lround(std::log2(scale)));
  return std::abs(e) <= 30 ? fmt::format("2^{} ({})", e, num(scale)) : fmt::format("2^{}", e);
}

Tone tone_of(PrecisionVerdict v) {
  return v == PrecisionVerdict::kKeepFp32          ? Tone::kRed
         : v == PrecisionVerdict::kFitsWithScaling ? Tone::kYellow
                                                   : Tone::kPlain;
}

std::string module_name(const std::string& m) { return m.empty() ? "(before any parameter)" : m; }

void print_header(const PrecisionResult& r, const FloatFormat& f, const Terminal& term) {
  std::cout << paint(term, Tone::kBold,
                     fmt::format("precision     {} ({}): max {}, smallest normal 2^{}, smallest "
                                 "subnormal 2^{}; overflow at |x| {} {}",
                                 f.name, f.long_name, num(f.max), f.min_normal_exponent,
                                 f.min_subnormal_exponent, f.tie_overflows ? ">=" : ">",
                                 num(f.overflow_threshold)))
            << '\n';
  std::cout << fmt::format(
      "dump          {}: steps {}..{}, {} op records, {} output tensors with range statistics{}\n",
      r.path, r.step_min.value_or(0), r.step_max.value_or(0), r.op_records, r.tensors_with_range,
      r.tensors_without_range > 0
          ? fmt::format(" ({} without: not judged)", r.tensors_without_range)
          : "");
  if (r.ops_outside_graph + r.ops_passing_on > 0)
    std::cout << paint(term, Tone::kDim,
                       fmt::format("              not judged: {} forward ops outside the autograd "
                                   "graph (zero_grad, clip_grad_norm_, data preparation), {} ops "
                                   "passing values on (views, copies)",
                                   r.ops_outside_graph, r.ops_passing_on))
              << '\n';
  int counts[3] = {0, 0, 0};
  for (const OpPrecision& o : r.ops) ++counts[static_cast<int>(o.verdict)];
  const Tone tone = counts[2] > 0 ? Tone::kRed : counts[1] > 0 ? Tone::kYellow : Tone::kGreen;
  std::cout << paint(term, tone,
                     fmt::format("verdict       {} ops: {} fit, {} fit only with per-tensor "
                                 "scaling, {} must stay in fp32",
                                 r.ops.size(), counts[0], counts[1], counts[2]))
            << '\n';
  for (const std::string& n : r.notes)
    std::cout << paint(term, Tone::kYellow, "note          " + n) << '\n';
}

void print_ops(const PrecisionResult& r, size_t top, const Terminal& term) {
  const bool tensor = r.scaling == PrecisionScaling::kTensor;
  std::cout << fmt::format(
      "ops, most harmful first (shares of finite non-zero output elements, "
      "{}):\n",
      tensor ? "each tensor scaled by a power of two to the format's max" : "unscaled");
  Table t({"op", "module", "overflow", "subnormal", "flush to 0", "verdict"});
  size_t shown = 0;
  for (const OpPrecision& o : r.ops) {
    if (shown++ == top) break;
    const PrecisionShares& s = tensor ? o.scaled : o.unscaled;
    t.add({o.op, module_name(o.module), pct(s.overflow), pct(s.subnormal), pct(s.flush_to_zero),
           std::string(to_string(o.verdict))},
          tone_of(o.verdict));
  }
  t.print(std::cout, term);
  if (r.ops.size() > top)
    std::cout << paint(term, Tone::kDim,
                       fmt::format("  ({} more; --top N or --json for all)", r.ops.size() - top))
              << '\n';
}

void print_modules(const PrecisionResult& r, const Terminal& term) {
  const bool tensor = r.scaling == PrecisionScaling::kTensor;
  std::cout << "modules (" << kModuleRule << "):\n";
  Table t({"module", "ops", "overflow", "subnormal", "flush to 0", "worst op", "plan"});
  for (const ModulePrecision& m : r.modules) {
    const PrecisionShares& s = tensor ? m.scaled : m.unscaled;
    t.add(
        {module_name(m.module), num(m.ops), pct(s.overflow), pct(s.subnormal), pct(s.flush_to_zero),
         std::string(to_string(m.verdict)), m.keep_fp32 ? "fp32" : std::string(r.format)},
        m.keep_fp32 ? Tone::kRed : Tone::kPlain);
  }
  t.print(std::cout, term);
}

void print_loss_scale(const PrecisionResult& r, const Terminal& term) {
  const LossScaleAdvice& ls = r.loss_scale;
  if (r.scaling == PrecisionScaling::kTensor) {
    std::cout
        << "loss scale    none needed with per-tensor scaling (each gradient tensor is scaled "
           "on its own; --scaling none for loss scaling)\n";
    return;
  }
  if (!ls.available) {
    std::cout << "loss scale    no backward op with range statistics: nothing to say\n";
    return;
  }
  // 2^-64 and 2^64 are the limits considered.
  const std::string low = pow2(ls.low) + (ls.low <= 0x1p-64 ? " or less" : "");
  const std::string high = pow2(ls.high) + (ls.high >= 0x1p64 ? " or more" : "");
  std::cout << fmt::format(
      "loss scale    gradients neither overflow nor flush more than 0.1% of their non-zero "
      "elements for scales {} .. {}{}\n",
      low, high, ls.feasible ? "" : " (empty: no scale does both)");
  std::cout << paint(term, ls.feasible ? Tone::kGreen : Tone::kRed,
                     fmt::format("              recommended initial scale {}: flushes {} of "
                                 "gradient elements, {} skipped steps over this run",
                                 pow2(ls.recommended), pct(ls.flush_at_recommended),
                                 ls.at_recommended.skipped_steps))
            << '\n';
  const ScalerReplay& d = ls.default_65536;
  std::string line = fmt::format("              GradScaler's default 65536: ");
  if (d.skipped_steps == 0) {
    line += fmt::format("no overflow, flushes {} of gradient elements", pct(d.flush_to_zero));
  } else {
    line += fmt::format("overflows: {} skipped step(s) (first at step {}) backing off to {}",
                        d.skipped_steps, *d.first_skipped_step, pow2(d.final_scale));
  }
  std::cout << paint(term,
                     d.skipped_steps > 0 || d.flush_to_zero > 0.001 ? Tone::kYellow : Tone::kPlain,
                     line)
            << '\n';
}

void print_plan(const PrecisionResult& r, const Terminal& term) {
  const std::vector<std::string> keep = r.keep_fp32_modules();
  if (keep.empty()) {
    std::cout << paint(term, Tone::kGreen,
                       fmt::format("plan          every module fits {}{}", r.format,
                                   r.scaling == PrecisionScaling::kNone && r.loss_scale.available &&
                                           r.format == "fp16"
                                       ? fmt::format(" (with loss scale {})",
                                                     pow2(r.loss_scale.recommended))
                                       : ""))
              << '\n';
    return;
  }
  std::string names;
  for (const std::string& m : keep) names += (names.empty() ? "" : ", ") + module_name(m);
  if (r.format == "e4m3" || r.format == "e5m2") {  // autocast has no fp8
    std::cout << paint(term, Tone::kRed,
                       fmt::format("plan          keep out of {} (in fp32 or bf16): {}", r.format,
                                   names))
              << '\n';
    return;
  }
  std::cout << paint(term, Tone::kRed, "plan          keep in fp32 under autocast: " + names)
            << '\n';
  std::cout
      << paint(term, Tone::kDim,
               "              (LibTorch: run those modules' forward with autocast off and "
               "float32 inputs:\n"
               "               at::autocast::set_enabled(false); y = m->forward(x.to(at::kFloat)); "
               "at::autocast::set_enabled(true);)")
      << '\n';
  std::string outside;  // "(root)", "(top level)", ...: no child module to run so
  for (const std::string& m : keep)
    if (!m.empty() && m.front() == '(') outside += (outside.empty() ? "" : ", ") + m;
  if (!outside.empty())
    std::cout << paint(term, Tone::kDim,
                       "              (" + outside +
                           ": ops outside every child module (docs/cli.md, \"Modules\"): run "
                           "those ops themselves so)")
              << '\n';
}

}  // namespace

void add_precision_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<PrecisionArgs>();
  CLI::App* cmd = app.add_subcommand(
      "precision",
      "Which ops and modules of a run fit fp16, bf16 or fp8 (from its range statistics), the "
      "loss scale for fp16 gradients, and the modules to keep in fp32");
  cmd->add_option("DIR", args->dir,
                  "dump directory, recorded with \"statistics\": {\"range\": true}")
      ->required();
  cmd->add_option("--to", args->to, "the format: fp16, bf16, e4m3 (OCP FP8 E4M3FN) or e5m2")
      ->required()
      ->check(CLI::IsMember({"fp16", "bf16", "e4m3", "e5m2"}));
  cmd->add_option("--scaling", args->scaling,
                  "none: values as they are (default); tensor: each tensor scaled by the power "
                  "of two that brings its |max| closest to the format's max")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "tensor"}));
  cmd->add_option("--top", args->top, "ops shown in the table")->capture_default_str();
  cmd->add_flag("--json", args->json, "print the result as JSON");
  cmd->footer(
      "Exit status: 0 the plan keeps no module in fp32 and (without per-tensor scaling) a loss "
      "scale suits the gradients, 1 otherwise, 2 usage or input error (also: a dump without "
      "range statistics).\n\n"
      "Example:\n  precprobe precision ./precprobe_dump --to bf16\n"
      "  precprobe precision ./precprobe_dump --to e4m3 --scaling tensor --json | jq '.modules'");
  cmd->callback([args, &exit_code] {
    const Terminal term = Terminal::detect();
    auto reader = open_dump(args->dir);
    PrecisionOptions options;
    options.format = FloatFormat::find(args->to);
    options.scaling =
        args->scaling == "tensor" ? PrecisionScaling::kTensor : PrecisionScaling::kNone;
    PrecisionResult r;
    {
      Progress progress(term, args->dir);
      ReadOptions read;
      read.progress = progress.callback();
      r = analyse_precision(*reader, options, read);
    }
    if (args->json) {
      print_json(r.to_json());
    } else {
      print_header(r, *options.format, term);
      print_ops(r, args->top, term);
      print_modules(r, term);
      print_loss_scale(r, term);
      print_plan(r, term);
    }
    const bool fits =
        r.keep_fp32_modules().empty() && (r.scaling == PrecisionScaling::kTensor ||
                                          !r.loss_scale.available || r.loss_scale.feasible);
    exit_code = fits ? kExitClean : kExitFound;
  });
}

}  // namespace precprobe::cli
