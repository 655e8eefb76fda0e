// The loss scale in `compare`: see loss_scale.h.
#include "loss_scale.h"

#include <cmath>
#include <cstdio>

namespace precprobe::analysis_detail {

double loss_scale_of(const LossScales& scales, const std::pair<int64_t, int>& key) {
  auto it = scales.find(key);
  return it == scales.end() ? 1.0 : it->second;
}

OpRecord unscaled(const OpRecord& a, const OpRecord& b, double factor, ScaledArgs& scaled) {
  OpRecord r = a;
  auto fix = [&](std::vector<Arg>& xs, const std::vector<Arg>& ys, bool output) {
    for (size_t i = 0; i < xs.size() && i < ys.size(); ++i) {
      if (!xs[i].is_tensor() || !ys[i].is_tensor()) continue;
      TensorStats& t = *xs[i].tensor;
      const double ma = t.abs_max(), mb = ys[i].tensor->abs_max();
      if (!(ma > 0) || !(mb > 0) || !std::isfinite(ma) || !std::isfinite(mb)) continue;
      // Nearer the factor than 1, as ratios.
      if (!(std::fabs(std::log(ma / mb / factor)) < std::fabs(std::log(ma / mb)))) continue;
      t.min /= factor;
      t.max /= factor;
      t.mean /= factor;
      t.norm /= factor;
      t.hash.reset();
      scaled.emplace_back(output, i);
    }
  };
  fix(r.inputs, b.inputs, false);
  fix(r.outputs, b.outputs, true);
  return r;
}

void note_unscaled(const ScaledArgs& scaled, double factor, std::vector<ArgCompare>& args) {
  if (scaled.empty()) return;  // every op of a run without a loss scale
  char note[64];
  std::snprintf(note, sizeof note, "a / loss scale %g", factor);
  for (const auto& [output, index] : scaled) {
    for (ArgCompare& ac : args) {
      if ((ac.io == "output") == output && static_cast<size_t>(ac.index) == index)
        ac.note = ac.note.empty() ? note : ac.note + "; " + note;
    }
  }
}

}  // namespace precprobe::analysis_detail
