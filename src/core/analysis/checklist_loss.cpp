// The checklist's loss item, hp.loss_trend (precprobe/checklist.h). Every scalar the user
// logged with "loss" in its name is a loss and is judged on its own. The losses of a game
// (several optimizers; a discriminator's and a generator's loss; two losses moving against
// each other) are judged for divergence only (NaN/Inf, explosion): in a GAN neither player's
// loss is meant to decrease. Without a logged loss, the output of the loss op of each
// training step. Rules and thresholds: docs/checklist.md.
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> before fmt 11)

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "checklist_items.h"

namespace precprobe::checklist_detail {
namespace {

using Points = std::vector<std::pair<int64_t, double>>;
using Figures = std::vector<std::pair<std::string, double>>;
using Series = Observed::Series;

struct Judged {
  Verdict verdict = Verdict::kNotApplicable;
  std::string text;
  Figures figures;
};

size_t window_of(size_t n) { return std::max<size_t>(3, n / 5); }

double window_mean(const Points& l, size_t from, size_t n) {
  double m = 0;
  for (size_t i = from; i < from + n; ++i) m += l[i].second / double(n);
  return m;
}

// Root mean square: the size of the values whatever their sign (a critic's loss may be < 0).
double window_rms(const Points& l, size_t from, size_t n) {
  double ms = 0;
  for (size_t i = from; i < from + n; ++i) ms += l[i].second * l[i].second / double(n);
  return std::sqrt(ms);
}

// First and last values, for the verdict `summary` and the report open with.
Figures ends_of(const Points& l) {
  if (l.empty()) return {};
  return {{"first_step", double(l.front().first)},
          {"first_value", l.front().second},
          {"last_step", double(l.back().first)},
          {"last_value", l.back().second}};
}

// One loss. `game`: judged for divergence only, not for decrease.
Judged judge(const Points& l, bool game) {
  Judged j;
  j.figures = ends_of(l);
  const auto bad =
      std::find_if(l.begin(), l.end(), [](const auto& p) { return !std::isfinite(p.second); });
  if (bad != l.end()) j.figures.emplace_back("nonfinite_step", double(bad->first));
  if (l.size() < kMinLossPoints) {
    j.text = fmt::format("{} loss values; need {}", l.size(), kMinLossPoints);
    return j;
  }
  if (bad != l.end()) {
    j.verdict = Verdict::kProblem;
    j.text = fmt::format("loss is {} at step {}, {:.4g} at step {}", bad->second, bad->first,
                         l.front().second, l.front().first);
    return j;
  }
  const size_t w = window_of(l.size());
  const double first = window_mean(l, 0, w), last = window_mean(l, l.size() - w, w);
  const Figures ends = j.figures;
  j.figures = {{"points", double(l.size())},
               {"window", double(w)},
               {"first_mean", first},
               {"last_mean", last}};
  j.figures.insert(j.figures.end(), ends.begin(), ends.end());
  const std::string means =
      fmt::format("mean of the first {} values {:.4g}, of the last {} {:.4g} (steps {}..{})", w,
                  first, w, last, l.front().first, l.back().first);
  if (game) {
    const double rms_first = window_rms(l, 0, w), rms_last = window_rms(l, l.size() - w, w);
    if (rms_last > kExplodeFactor * rms_first) {
      j.verdict = Verdict::kProblem;
      j.text = fmt::format(
          "exploding: the last {} values are {:.3g}x the size of the first {} "
          "(root mean square {:.4g} -> {:.4g}, more than {}x)",
          w, rms_last / rms_first, w, rms_first, rms_last, kExplodeFactor);
    } else {
      j.verdict = Verdict::kOk;
      j.text = "finite, not exploding: " + means;
    }
  } else if (last > first * kDivergeFactor) {
    j.verdict = Verdict::kProblem;
    j.text = "diverging: " + means;
  } else if (last > first * (1 - kMinRelDecrease)) {
    j.verdict = Verdict::kProblem;
    j.text = "not decreasing: " + means;
  } else {
    j.verdict = Verdict::kOk;
    j.text = means;
  }
  return j;
}

// A player's role from the loss's name: 'D' (discriminator, critic), 'G' (generator) or 0.
// The name is split into words at anything that is not a letter or digit and around "loss":
// "d_loss", "loss_D", "lossG", "disc_loss", "Generator Loss", "loss_G_GAN".
char role_of(const std::string& name) {
  std::string lower;
  for (char ch : name) lower += char(std::tolower(static_cast<unsigned char>(ch)));
  for (size_t at = lower.find("loss"); at != std::string::npos; at = lower.find("loss"))
    lower.replace(at, 4, " ");
  static const std::set<std::string> kD = {"d", "dis", "disc", "discriminator", "critic", "netd"};
  static const std::set<std::string> kG = {"g", "gen", "generator", "netg"};
  char role = 0;
  std::string word;
  for (size_t i = 0; i <= lower.size(); ++i) {
    if (i < lower.size() && std::isalnum(static_cast<unsigned char>(lower[i]))) {
      word += lower[i];
      continue;
    }
    if (kD.count(word)) role = 'D';
    if (kG.count(word)) role = 'G';
    word.clear();
  }
  return role;
}

// Pearson correlation and relative trends of two losses over the steps both logged (the last
// value of a step when one logs several); nullopt with fewer than kMinLossPoints such steps.
struct Motion {
  double correlation = 0, trend_a = 0, trend_b = 0;
};

std::optional<Motion> motion_of(const Points& a, const Points& b) {
  std::map<int64_t, double> at_a(a.begin(), a.end()), at_b(b.begin(), b.end());
  Points pa, pb;
  for (const auto& [step, va] : at_a) {
    auto it = at_b.find(step);
    if (it == at_b.end() || !std::isfinite(va) || !std::isfinite(it->second)) continue;
    pa.emplace_back(step, va);
    pb.emplace_back(step, it->second);
  }
  if (pa.size() < kMinLossPoints) return std::nullopt;
  const size_t n = pa.size(), w = window_of(n);
  const double ma = window_mean(pa, 0, n), mb = window_mean(pb, 0, n);
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < n; ++i) {
    sab += (pa[i].second - ma) * (pb[i].second - mb);
    saa += (pa[i].second - ma) * (pa[i].second - ma);
    sbb += (pb[i].second - mb) * (pb[i].second - mb);
  }
  Motion m;
  m.correlation = saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0.0;
  const auto trend = [&](const Points& p) {
    const double first = window_mean(p, 0, w), last = window_mean(p, n - w, w);
    return std::fabs(first) > 0 ? (last - first) / std::fabs(first) : 0.0;
  };
  m.trend_a = trend(pa);
  m.trend_b = trend(pb);
  return m;
}

bool opposed(const Motion& m) {
  const bool apart = (m.trend_a < -kMinRelDecrease && m.trend_b > kMinRelDecrease) ||
                     (m.trend_a > kMinRelDecrease && m.trend_b < -kMinRelDecrease);
  return apart || m.correlation < kOpposedCorrelation;
}

// The losses that are moves of a game (judged for divergence only), and why.
struct Game {
  std::set<size_t> members;
  std::string why;
};

Game find_game(const std::vector<Series>& losses, int64_t optimizers) {
  Game g;
  if (optimizers >= 2) {
    for (size_t i = 0; i < losses.size(); ++i) g.members.insert(i);
    g.why = fmt::format(
        "{} optimizers: the players of a game (a GAN's generator and "
        "discriminator) each minimise their own loss against the other",
        optimizers);
    return g;
  }
  std::vector<std::string> d, gen;
  for (size_t i = 0; i < losses.size(); ++i) {
    const char role = role_of(losses[i].name);
    if (role == 'D') d.push_back(losses[i].name);
    if (role == 'G') gen.push_back(losses[i].name);
    if (role != 0) g.members.insert(i);
  }
  if (!d.empty() && !gen.empty()) {
    g.why = fmt::format("{} and {} are a discriminator's and a generator's losses (a GAN)",
                        join_first(d, 3), join_first(gen, 3));
    return g;
  }
  g.members.clear();
  std::vector<std::string> pairs;
  for (size_t i = 0; i < losses.size(); ++i) {
    for (size_t k = i + 1; k < losses.size(); ++k) {
      const auto m = motion_of(losses[i].points, losses[k].points);
      if (!m || !opposed(*m)) continue;
      g.members.insert({i, k});
      pairs.push_back(fmt::format("{} ({:+.0f}%) and {} ({:+.0f}%), correlation {:.2f}",
                                  losses[i].name, 100 * m->trend_a, losses[k].name,
                                  100 * m->trend_b, m->correlation));
    }
  }
  if (!pairs.empty())
    g.why = fmt::format("losses moving against each other: {}", join_first(pairs, 3));
  return g;
}

int64_t optimizers_of(const Observed& o, const std::vector<ScalerRecord>& scaler) {
  std::set<int> opts;
  for (const ScalerRecord& r : scaler)
    if (r.rank == scaler.front().rank) opts.insert(r.optimizer);
  return std::max(static_cast<int64_t>(opts.size()),
                  static_cast<int64_t>(o.optimizers.value_or(0.0)));
}

std::string lower(const std::string& s) {
  std::string out;
  for (char ch : s) out += char(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

// Without a logged loss: the loss op's output in each training step, judged in full.
CheckItem check_loss_records(CheckItem c, const RecordsView& rv) {
  const std::string from = fmt::format(
      " (from the output of {}; dbg.log_scalar(\"loss\", v) chooses another)", rv.loss_op);
  Judged j = judge(rv.loss, false);
  if (j.verdict == Verdict::kNotApplicable && rv.loss.empty()) {
    j.text = fmt::format(
        "no loss logged (dbg.log_scalar(\"loss\", v)) and no loss op "
        "recorded in a training step; need {} values",
        kMinLossPoints);
  } else {
    j.text += from;
  }
  set(c, j.verdict, j.text);
  c.figures = std::move(j.figures);
  return c;
}

}  // namespace

CheckItem check_loss(const Observed& o, const RecordsView& rv,
                     const std::vector<ScalerRecord>& scaler) {
  CheckItem c = item("hp.loss_trend", "hyper-parameters", "loss decreasing, not diverging");
  if (o.losses.empty()) return check_loss_records(std::move(c), rv);
  const Game game = find_game(o.losses, optimizers_of(o, scaler));
  std::vector<Judged> judged;
  for (size_t i = 0; i < o.losses.size(); ++i)
    judged.push_back(judge(o.losses[i].points, game.members.count(i) > 0));

  // The loss whose figures the item carries (summary and the report show them): the first
  // with a problem, else the one named "loss", else the first one judged.
  size_t primary = 0;
  const auto first_with = [&](auto pred) {
    for (size_t i = 0; i < judged.size(); ++i)
      if (pred(i)) return std::optional<size_t>(i);
    return std::optional<size_t>();
  };
  if (auto p = first_with([&](size_t i) { return judged[i].verdict == Verdict::kProblem; }))
    primary = *p;
  else if (auto n = first_with([&](size_t i) { return lower(o.losses[i].name) == "loss"; }))
    primary = *n;
  else if (auto k = first_with([&](size_t i) { return judged[i].verdict == Verdict::kOk; }))
    primary = *k;
  c.figures = judged[primary].figures;

  Verdict v = Verdict::kNotApplicable;
  std::vector<std::string> parts;
  for (size_t i = 0; i < judged.size(); ++i) {
    if (judged[i].verdict == Verdict::kProblem ||
        (judged[i].verdict == Verdict::kOk && v == Verdict::kNotApplicable))
      v = judged[i].verdict;
    const bool plain = o.losses.size() == 1 && o.losses[i].name == check_scalar::kLoss;
    parts.push_back(plain ? judged[i].text : o.losses[i].name + ": " + judged[i].text);
  }
  std::string evidence = fmt::format("{}", fmt::join(parts, "; "));
  if (o.losses.size() == 1 && v == Verdict::kNotApplicable)
    evidence += fmt::format(" (logged with dbg.log_scalar(\"{}\", v))", o.losses[0].name);
  if (!game.members.empty()) {
    evidence = fmt::format(
        "{}; judged for divergence only (NaN/Inf, growth beyond {}x), not for "
        "a decrease: {}",
        game.why, kExplodeFactor, evidence);
  }
  if (o.losses.size() > 1 || !game.members.empty()) {
    c.figures.emplace_back("losses", double(o.losses.size()));
    c.figures.emplace_back("game_losses", double(game.members.size()));
  }
  set(c, v, evidence);
  return c;
}

}  // namespace precprobe::checklist_detail
