// The learning-rate range test (precprobe/lr_range.h).
#include "precprobe/lr_range.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "precprobe/dump_format.h"
#include "precprobe/error.h"
#include "precprobe/writer.h"

namespace precprobe {
namespace {

void validate(const LrRangeOptions& o) {
  if (!(o.lr_min > 0) || !(o.lr_max > o.lr_min))
    throw Error(fmt::format("lr_range_test: need 0 < lr_min < lr_max, got lr_min {} lr_max {}",
                            o.lr_min, o.lr_max));
  if (o.steps < 5) throw Error(fmt::format("lr_range_test: steps {} < 5", o.steps));
  if (!(o.smoothing >= 0 && o.smoothing < 1))
    throw Error(fmt::format("lr_range_test: smoothing {} not in [0, 1)", o.smoothing));
  if (!(o.stop_factor > 1))
    throw Error(fmt::format("lr_range_test: stop_factor {} must be > 1", o.stop_factor));
  if (!(o.steep_fraction > 0 && o.steep_fraction <= 1))
    throw Error(fmt::format("lr_range_test: steep_fraction {} not in (0, 1]", o.steep_fraction));
}

// Slope of the smoothed loss per decade of learning rate, central differences.
std::vector<double> slopes(const LrRangeResult& r) {
  const size_t n = r.smoothed.size();
  std::vector<double> s(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const size_t a = i == 0 ? 0 : i - 1, b = std::min(n - 1, i + 1);
    if (a == b) continue;
    s[i] = (r.smoothed[b] - r.smoothed[a]) / (std::log10(r.lrs[b]) - std::log10(r.lrs[a]));
  }
  return s;
}

void find_range(LrRangeResult& r, double steep_fraction) {
  if (r.smoothed.size() < 3) return;
  const std::vector<double> s = slopes(r);
  const size_t best = static_cast<size_t>(std::min_element(s.begin(), s.end()) - s.begin());
  // A fall within rounding of a flat curve is no fall.
  double scale = 0;
  for (double v : r.smoothed) scale = std::max(scale, std::fabs(v));
  if (!(s[best] < -1e-9 * scale)) return;
  const double limit = steep_fraction * s[best];
  size_t lo = best, hi = best;
  while (lo > 0 && s[lo - 1] <= limit) --lo;
  while (hi + 1 < s.size() && s[hi + 1] <= limit) ++hi;
  r.found = true;
  r.lr_steepest = r.lrs[best];
  r.lr_lo = r.lrs[lo];
  r.lr_hi = r.lrs[hi];
}

void write(DumpWriter& w, const LrRangeResult& r) {
  auto submit = [&w](int64_t step, std::string_view name, double v) {
    ScalarRecord rec;
    rec.step = step;
    rec.name = std::string(name);
    rec.value = v;
    w.submit(std::move(rec));
  };
  for (size_t i = 0; i < r.lrs.size(); ++i) {
    submit(static_cast<int64_t>(i), check_scalar::kLrRangeLr, r.lrs[i]);
    submit(static_cast<int64_t>(i), check_scalar::kLrRangeLoss, r.losses[i]);
  }
  if (r.found) {
    submit(0, check_scalar::kLrRangeLo, r.lr_lo);
    submit(0, check_scalar::kLrRangeHi, r.lr_hi);
  }
}

}  // namespace

LrRangeResult lr_range_test(const std::function<double(double lr)>& train_step,
                            const LrRangeOptions& options, DumpWriter* writer) {
  validate(options);
  LrRangeResult r;
  const double ratio = options.lr_max / options.lr_min;
  double avg = 0, best = INFINITY;
  for (int64_t i = 0; i < options.steps; ++i) {
    const double lr =
        options.lr_min * std::pow(ratio, static_cast<double>(i) / double(options.steps - 1));
    const double loss = train_step(lr);
    r.lrs.push_back(lr);
    r.losses.push_back(loss);
    avg = options.smoothing * avg + (1 - options.smoothing) * loss;
    const double smooth = avg / (1 - std::pow(options.smoothing, double(i + 1)));
    r.smoothed.push_back(smooth);
    if (!std::isfinite(smooth) || (i > 0 && smooth > options.stop_factor * best)) {
      r.diverged = true;
      break;
    }
    best = std::min(best, smooth);
  }
  // The diverging tail is kept in the curve but not searched for the range.
  LrRangeResult search = r;
  if (r.diverged) {
    search.lrs.pop_back();
    search.smoothed.pop_back();
  }
  find_range(search, options.steep_fraction);
  r.found = search.found;
  r.lr_lo = search.lr_lo;
  r.lr_hi = search.lr_hi;
  r.lr_steepest = search.lr_steepest;
  if (writer != nullptr) write(*writer, r);
  return r;
}

}  // namespace precprobe
