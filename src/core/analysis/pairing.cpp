// pair_ops: the content key of an op and the three ways one group's ops are paired
// (pairing.h). Why this key:
// - op and direction: what was computed; the reshape family (aten::view, _reshape_alias,
//   reshape, _unsafe_view, flatten) counts as one op, since LibTorch 1.13 reshapes through
//   aten::_reshape_alias and 2.x through aten::view.
// - the shape of every tensor input and output: ops of one kind differ by their operands
//   (AccumulateGrad's aten::detach of a [64, 64, 3, 3] weight gradient and of a [64] one);
//   a reduction's output shape alone says little (every aten::sum to a scalar is []).
// - the parameter a tensor is, compared only where both runs name one: two conv weights of
//   one shape are told apart, while a bf16 run's cast copy of a weight (no name) still pairs
//   with the fp32 run's weight.
// - in-place and out-of-place forms as one op (add_ and add), and a 0-d input as a number
//   (Python wraps the numbers it passes to a Tensor overload as 0-d tensors).
// Not in the key: dtypes and devices (a bf16 or GPU port runs the same ops on other dtypes
// and devices, and is compared as such), scalar arguments (a different constant is a finding
// of the comparison, not another op), call indices and seq (positions are what shifts).
#include "pairing.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace precprobe::analysis_detail {
namespace {

// (ordinal among the op's tensor arguments, parameter name id), by ordinal.
using Params = std::vector<std::pair<uint32_t, uint32_t>>;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Constants {
  std::vector<double> numbers;
  uint32_t rest = 0;  // everything else, interned
};

class OpKeys {
 public:
  OpKeys(const std::vector<OpRecord>& a, const std::vector<OpRecord>& b) {
    add(a, key_a_, params_a_);
    add(b, key_b_, params_b_);
  }

  /// Reads the constants each op passes, for constants_apart: only where the sequences are
  /// aligned by content, the one pairing that can choose between ops of one key.
  void read_constants(const std::vector<OpRecord>& a, const std::vector<OpRecord>& b) {
    add_constants(a, consts_a_);
    add_constants(b, consts_b_);
  }

  /// A[i] and B[j] may pair.
  bool same(size_t i, size_t j) const {
    return key_a_[i] == key_b_[j] && params_agree(params_a_[i], params_b_[j]);
  }

  /// How far apart the constants A[i] and B[j] pass are (a 0-d input counts as the number it
  /// is): the sum of the numbers' relative differences, 0 for the same constants, infinite
  /// where anything but a number differs.
  double constants_apart(size_t i, size_t j) const {
    const Constants& x = consts_a_[i];
    const Constants& y = consts_b_[j];
    if (x.rest != y.rest || x.numbers.size() != y.numbers.size()) return kInf;
    double d = 0;
    for (size_t k = 0; k < x.numbers.size(); ++k) {
      const double u = x.numbers[k], v = y.numbers[k];
      const double mag = std::max(std::fabs(u), std::fabs(v));
      if (mag > 0 && std::fabs(u - v) > 1e-6 * mag) d += std::fabs(u - v) / mag;
    }
    return d;
  }

 private:
  static bool params_agree(const Params& x, const Params& y) {
    size_t p = 0, q = 0;
    while (p < x.size() && q < y.size()) {
      if (x[p].first < y[q].first) {
        ++p;
      } else if (y[q].first < x[p].first) {
        ++q;
      } else if (x[p++].second != y[q++].second) {
        return false;
      }
    }
    return true;
  }

  // An op's key as numbers: its family's id, its direction, then for its inputs and for its
  // outputs a marker and each tensor's rank and dimensions (the same ops share a key exactly
  // when their op families, directions and shapes are the same).
  void add(const std::vector<OpRecord>& ops, std::vector<uint32_t>& keys,
           std::vector<Params>& params) {
    keys.reserve(ops.size());
    params.resize(ops.size());
    for (size_t k = 0; k < ops.size(); ++k) {
      const OpRecord& r = ops[k];
      std::vector<int64_t>& key = key_;
      key.clear();
      key.push_back(family_id(op_family(r.op)));
      key.push_back(r.dir == Direction::kBackward ? 1 : 0);
      uint32_t ordinal = 0;
      for (const auto* args : {&r.inputs, &r.outputs}) {
        key.push_back(args == &r.inputs ? -1 : -2);
        for (const Arg& x : *args) {
          if (!x.is_tensor()) continue;
          // A 0-d input is a number wrapped as a tensor where Python passes one (x * 0.5 is
          // aten::mul.Tensor with a 0-d double in Python, aten::mul.Scalar in C++): it
          // leaves the key as a number does; compare_args compares its value.
          if (args == &r.inputs && is_wrapped_number(*x.tensor)) continue;
          const std::vector<int64_t>& shape = x.tensor->shape;
          key.push_back(static_cast<int64_t>(shape.size()));
          key.insert(key.end(), shape.begin(), shape.end());
          if (!x.tensor->param.empty()) params[k].emplace_back(ordinal, intern(x.tensor->param));
          ++ordinal;
        }
      }
      keys.push_back(
          key_ids_.try_emplace(key, static_cast<uint32_t>(key_ids_.size())).first->second);
    }
  }

  // The constants an op passes, in order: its non-tensor inputs and its 0-d inputs that are
  // no parameter (a number Python wrapped); the numbers apart, the rest as one text.
  void add_constants(const std::vector<OpRecord>& ops, std::vector<Constants>& out) {
    std::string text;
    out.reserve(ops.size());
    for (const OpRecord& r : ops) {
      Constants c;
      text.assign("|");
      for (const Arg& x : r.inputs) {
        if (x.is_tensor() && !is_wrapped_number(*x.tensor)) continue;
        const std::optional<double> v =
            x.is_tensor() ? wrapped_value(*x.tensor) : numeric_value(x.value);
        if (v && std::isfinite(*v)) {
          c.numbers.push_back(*v);
          text += '#';
        } else {
          text += x.value;
        }
        text += ',';
      }
      c.rest = intern(text);
      out.push_back(std::move(c));
    }
  }

  // In-place and out-of-place forms of an op are one computation (Python's Normalize runs
  // sub_ and div_ on a clone, LibTorch's sub and div): their inputs are read before the op and
  // their outputs after it, alike.
  static std::string_view op_family(const std::string& op) {
    if (is_reshape_op(op)) return "view";
    std::string_view f = op;
    if (f.size() > 2 && f.back() == '_' && f[f.size() - 2] != '_') f.remove_suffix(1);
    return f;
  }

  // Parameter names and the constants' texts (a text always starts with '|', a name never
  // does), each compared only with its own kind.
  uint32_t intern(const std::string& s) {
    return ids_.try_emplace(s, static_cast<uint32_t>(ids_.size())).first->second;  // no node if in
  }
  uint32_t family_id(std::string_view family) {
    auto it = family_ids_.find(family);
    if (it != family_ids_.end()) return it->second;
    const std::string& kept = families_.emplace_back(family);  // a view of it is the key
    return family_ids_.emplace(kept, static_cast<uint32_t>(family_ids_.size())).first->second;
  }
  struct KeyHash {
    size_t operator()(const std::vector<int64_t>& v) const noexcept {
      uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a over the numbers
      for (int64_t x : v) h = (h ^ static_cast<uint64_t>(x)) * 0x100000001b3ULL;
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };

  std::unordered_map<std::string, uint32_t> ids_;
  std::deque<std::string> families_;
  std::unordered_map<std::string_view, uint32_t> family_ids_;
  std::unordered_map<std::vector<int64_t>, uint32_t, KeyHash> key_ids_;
  std::vector<int64_t> key_;  // add()'s, reused
  std::vector<uint32_t> key_a_, key_b_;
  std::vector<Constants> consts_a_, consts_b_;
  std::vector<Params> params_a_, params_b_;
};

bool same_sequence(const OpKeys& keys, size_t n, size_t m) {
  if (n != m) return false;
  for (size_t i = 0; i < n; ++i) {
    if (!keys.same(i, i)) return false;
  }
  return true;
}

// Each thread of A ran the same ops, in the same order, as one thread of B (with two
// threads or more; one thread is same_sequence). Threads are matched by their sequences,
// not by index: a thread's index is the order in which it was first seen, which another
// interleaving may change. Then A[i] pairs with the op at its place in its B thread.
bool pair_by_thread(const OpKeys& keys, const std::vector<OpRecord>& a,
                    const std::vector<OpRecord>& b, AlignPairs& pairs) {
  std::map<uint32_t, std::vector<size_t>> ta, tb;
  for (size_t i = 0; i < a.size(); ++i) ta[a[i].thread].push_back(i);
  for (size_t j = 0; j < b.size(); ++j) tb[b[j].thread].push_back(j);
  if (ta.size() < 2 || ta.size() != tb.size()) return false;
  auto same_ops = [&keys](const std::vector<size_t>& x, const std::vector<size_t>& y) {
    if (x.size() != y.size()) return false;
    for (size_t k = 0; k < x.size(); ++k) {
      if (!keys.same(x[k], y[k])) return false;
    }
    return true;
  };
  std::map<uint32_t, const std::vector<size_t>*> partner;  // A's thread -> B's thread's ops
  std::vector<bool> used(tb.size(), false);
  for (const auto& [thread, ops] : ta) {
    size_t k = 0;
    for (auto it = tb.begin(); it != tb.end(); ++it, ++k) {
      if (used[k] || !same_ops(ops, it->second)) continue;
      used[k] = true;
      partner[thread] = &it->second;
      break;
    }
    if (!partner.count(thread)) return false;
  }
  std::map<uint32_t, size_t> next;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<size_t>& in_b = *partner[a[i].thread];
    pairs.emplace_back(i, static_cast<int64_t>(in_b[next[a[i].thread]++]));
  }
  return true;
}

// An alignment pairs any two ops of one key, whatever constants they pass; where the
// sequences differ around them, the op it chose may not be the one meant. Python 2.x's Adam
// runs exp_avg.lerp_(g, 1 - b1), exp_avg_sq.mul_(b2) where LibTorch's C++ runs
// exp_avg.mul_(b1).add_(g, 1 - b1), exp_avg_sq.mul_(b2): two longest alignments, one of
// which sets mul_(b2) against mul_(b1). A pair whose constants differ moves to the unpaired
// op of the same key whose constants are nearest its own (the same, or a port's wrong b2
// against the right one rather than against b1), in the gaps on either side of it: the pairs
// stay in order, and the op it leaves becomes unpaired. A constant that differs in every
// candidate (a port's wrong momentum) stays paired, and is the comparison's finding.
void prefer_same_constants(const OpKeys& keys, int64_t n, int64_t m, AlignPairs& pairs) {
  bool moved = false;
  for (size_t p = 0; p < pairs.size(); ++p) {
    const auto [i, j] = pairs[p];
    if (i < 0 || j < 0) continue;
    double best = keys.constants_apart(static_cast<size_t>(i), static_cast<size_t>(j));
    if (!(best > 0)) continue;
    size_t lo = p, hi = p + 1;  // the unpaired entries next to p: [lo, p) and (p, hi)
    while (lo > 0 && (pairs[lo - 1].first < 0 || pairs[lo - 1].second < 0)) --lo;
    while (hi < pairs.size() && (pairs[hi].first < 0 || pairs[hi].second < 0)) ++hi;
    size_t take = p;
    for (size_t q = lo; q < hi; ++q) {
      const auto [x, y] = pairs[q];
      if (q == p) continue;
      const bool b_only = x < 0 && keys.same(static_cast<size_t>(i), static_cast<size_t>(y));
      const bool a_only = y < 0 && keys.same(static_cast<size_t>(x), static_cast<size_t>(j));
      if (!b_only && !a_only) continue;
      const double d = b_only
                           ? keys.constants_apart(static_cast<size_t>(i), static_cast<size_t>(y))
                           : keys.constants_apart(static_cast<size_t>(x), static_cast<size_t>(j));
      if (d < best) {
        best = d;
        take = q;
      }
    }
    if (take == p) continue;
    if (pairs[take].first < 0) {
      pairs[p].second = pairs[take].second;  // A[i] with that B op; B[j] left unpaired
      pairs[take].second = j;
    } else {
      pairs[p].first = pairs[take].first;  // that A op with B[j]; A[i] left unpaired
      pairs[take].first = i;
    }
    moved = true;
  }
  if (!moved) return;
  // Back into the order add_sequence_diffs reads: A's order, each gap's A ops first.
  std::vector<int64_t> partner(static_cast<size_t>(n), -1);
  std::vector<bool> paired_b(static_cast<size_t>(m), false);
  for (const auto& [i, j] : pairs) {
    if (i < 0 || j < 0) continue;
    partner[static_cast<size_t>(i)] = j;
    paired_b[static_cast<size_t>(j)] = true;
  }
  pairs.clear();
  for (int64_t i = 0, j = 0; i < n || j < m;) {
    if (i < n && (partner[static_cast<size_t>(i)] < 0 || j == m)) {
      pairs.emplace_back(i++, -1);
    } else if (j < m && (!paired_b[static_cast<size_t>(j)] || i == n)) {
      pairs.emplace_back(-1, j++);
    } else {
      pairs.emplace_back(i++, j++);
    }
  }
}

}  // namespace

bool is_wrapped_number(const TensorStats& t) noexcept { return t.shape.empty() && t.param.empty(); }

std::optional<double> wrapped_value(const TensorStats& t) {
  if (!is_wrapped_number(t) || t.numel != 1 || !t.all_finite()) return std::nullopt;
  return t.zero == 1 ? 0.0 : t.max;
}

bool is_reshape_op(std::string_view op) noexcept {
  static constexpr std::string_view kReshapes[] = {
      "aten::view", "aten::_reshape_alias", "aten::reshape", "aten::_unsafe_view", "aten::flatten"};
  return std::find(std::begin(kReshapes), std::end(kReshapes), op) != std::end(kReshapes);
}

GroupPairing pair_ops(const std::vector<OpRecord>& a, const std::vector<OpRecord>& b,
                      size_t max_cost) {
  OpKeys keys(a, b);
  GroupPairing g;
  if (same_sequence(keys, a.size(), b.size())) {
    g.pairs.reserve(a.size());
    for (size_t i = 0; i < a.size(); ++i) g.pairs.emplace_back(i, i);
    return g;
  }
  if (pair_by_thread(keys, a, b, g.pairs)) {
    g.by = PairedBy::kThread;
    return g;
  }
  Alignment al = align(
      a.size(), b.size(), [&keys](size_t i, size_t j) { return keys.same(i, j); }, max_cost);
  g.by = PairedBy::kContent;
  g.pairs = std::move(al.pairs);
  keys.read_constants(a, b);
  prefer_same_constants(keys, static_cast<int64_t>(a.size()), static_cast<int64_t>(b.size()),
                        g.pairs);
  g.approximate = al.approximate;
  return g;
}

void add_sequence_diffs(const std::vector<OpRecord>& a, const std::vector<OpRecord>& b,
                        const AlignPairs& pairs, std::vector<SequenceDiff>& out) {
  std::optional<SequenceDiff> open;
  auto take = [](std::vector<std::string>& names, int64_t& count, const OpRecord& r) {
    if (names.size() < kSequenceDiffNames) names.push_back(r.name());
    ++count;
  };
  // Where a run with no op in the place stands: its next paired op, or one past its end.
  auto close = [&](int64_t next_a, int64_t next_b) {
    if (!open) return;
    if (open->count_a == 0) open->seq_a = next_a;
    if (open->count_b == 0) open->seq_b = next_b;
    out.push_back(std::move(*open));
    open.reset();
  };
  for (const auto& [i, j] : pairs) {
    if (i >= 0 && j >= 0) {
      close(a[static_cast<size_t>(i)].seq, b[static_cast<size_t>(j)].seq);
      continue;
    }
    const OpRecord& r = i >= 0 ? a[static_cast<size_t>(i)] : b[static_cast<size_t>(j)];
    if (!open) {
      open = SequenceDiff{};
      open->step = r.step;
      open->rank = r.rank;
    }
    if (i >= 0) {
      if (open->count_a == 0) open->seq_a = r.seq;
      take(open->names_a, open->count_a, r);
    } else {
      if (open->count_b == 0) open->seq_b = r.seq;
      take(open->names_b, open->count_b, r);
    }
  }
  close(a.empty() ? 0 : a.back().seq + 1, b.empty() ? 0 : b.back().seq + 1);
}

}  // namespace precprobe::analysis_detail
