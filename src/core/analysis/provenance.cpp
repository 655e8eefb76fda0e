// Provenance (provenance.h): which earlier op of a group made each tensor an op reads.
#include "provenance.h"

#include <cstring>

namespace precprobe::analysis_detail {
namespace {

uint64_t stat_bits(double v) {
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

}  // namespace

uint64_t stats_digest(const TensorStats& t) {
  uint64_t h = static_cast<uint64_t>(t.numel);
  for (double v : {t.min, t.max, t.mean, t.norm}) h = (h ^ stat_bits(v)) * 0x100000001b3ULL;
  return h;
}

bool same_stats(const TensorStats& x, const TensorStats& y) {
  return x.dtype == y.dtype && x.shape == y.shape && x.numel == y.numel && x.nan == y.nan &&
         x.pinf == y.pinf && x.ninf == y.ninf && x.zero == y.zero && x.neg == y.neg &&
         x.pos == y.pos && stat_bits(x.min) == stat_bits(y.min) &&
         stat_bits(x.max) == stat_bits(y.max) && stat_bits(x.mean) == stat_bits(y.mean) &&
         stat_bits(x.norm) == stat_bits(y.norm) && (!x.hash || !y.hash || *x.hash == *y.hash);
}

Provenance::Provenance(const std::vector<OpRecord>& ops) : ops_(ops) {
  for (size_t k = 0; k < ops.size(); ++k) {
    if (ops[k].outputs_uninitialized()) continue;  // its values say nothing
    for (const Arg& o : ops[k].outputs) {
      if (o.is_tensor()) made_.emplace(stats_digest(*o.tensor), Made{k, &*o.tensor});
    }
  }
}

int64_t Provenance::producer(size_t op, size_t input) const {
  const std::vector<Arg>& in = ops_[op].inputs;
  if (input >= in.size() || !in[input].is_tensor()) return -1;
  const TensorStats& t = *in[input].tensor;
  int64_t best = -1;
  const auto [lo, hi] = made_.equal_range(stats_digest(t));
  for (auto it = lo; it != hi; ++it) {
    const auto k = static_cast<int64_t>(it->second.op);
    if (it->second.op < op && k > best && same_stats(*it->second.stats, t)) best = k;
  }
  return best;
}

}  // namespace precprobe::analysis_detail
