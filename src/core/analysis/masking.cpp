// Masking: which op records wrote a mask's -inf, carried it on, or turned it into NaN
// (masking.h), and MaskingSummary / MaskedBy, what the analyses say of them.
#include "masking.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <tuple>

#include "precprobe/mask_ops.h"

namespace precprobe {
namespace analysis_detail {
namespace {

// NaN, +Inf and -Inf of a list of arguments, `from` on.
struct Counts {
  int64_t nan = 0, pinf = 0, ninf = 0;
  bool other_than_ninf() const noexcept { return nan + pinf > 0; }
};

Counts counts(const std::vector<Arg>& args, size_t from = 0) {
  Counts c;
  for (size_t i = from; i < args.size(); ++i) {
    if (!args[i].tensor) continue;
    c.nan += args[i].tensor->nan;
    c.pinf += args[i].tensor->pinf;
    c.ninf += args[i].tensor->ninf;
  }
  return c;
}

// Ops whose `self` gives only a shape and dtype (or is overwritten whole): its values are not
// read, so a writer's inputs are judged without it.
size_t first_read_input(const OpRecord& r) noexcept {
  return overwrites_self(r) || r.op == "aten::full_like" || r.op == "aten::new_full" ? 1 : 0;
}

Counts input_counts(const OpRecord& r) { return counts(r.inputs, overwrites_self(r) ? 1 : 0); }

Counts output_counts(const OpRecord& r) {
  return r.outputs_uninitialized() ? Counts{} : counts(r.outputs);
}

bool is_softmax(std::string_view op) noexcept {
  return op == "aten::softmax" || op == "aten::_softmax" || op == "aten::log_softmax" ||
         op == "aten::_log_softmax" || op == "aten::_safe_softmax";
}

// The first non-tensor argument that is a JSON integer: a softmax's dim.
std::optional<int64_t> dim_argument(const OpRecord& r) {
  for (const Arg& a : r.inputs) {
    if (a.tensor || a.value.empty()) continue;
    char* end = nullptr;
    const long long v = std::strtoll(a.value.c_str(), &end, 10);
    if (end != a.value.c_str() && *end == '\0') return static_cast<int64_t>(v);
  }
  return std::nullopt;
}

// "every element of K of its R rows was -inf: fully masked rows", when the record says so.
std::optional<std::string> fully_masked_rows(const OpRecord& r) {
  if (!is_softmax(r.op) || r.inputs.empty() || !r.inputs[0].tensor) return std::nullopt;
  const TensorStats& in = *r.inputs[0].tensor;
  const std::optional<int64_t> dim = dim_argument(r);
  if (!dim || in.numel <= 0) return std::nullopt;
  const auto rank = static_cast<int64_t>(in.shape.size());
  int64_t length = 1;  // a 0-dim tensor is one row of one element
  if (rank > 0) {
    const int64_t d = *dim < 0 ? *dim + rank : *dim;
    if (d < 0 || d >= rank) return std::nullopt;
    length = in.shape[static_cast<size_t>(d)];
  }
  const int64_t nan = output_counts(r).nan;
  if (length <= 0 || nan == 0 || nan % length != 0 || in.numel % length != 0) return std::nullopt;
  const int64_t rows = nan / length;
  if (in.ninf < nan) return std::nullopt;  // the NaN rows cannot all be -inf
  return fmt::format("every element of {} of its {} rows was -inf: fully masked rows", rows,
                     in.numel / length);
}

}  // namespace

bool overwrites_self(const OpRecord& r) noexcept {
  return r.op == "aten::fill_" || r.op == "aten::zero_" || r.op == "aten::copy_" ||
         r.op == "aten::normal_" || r.op == "aten::uniform_";
}

bool may_write_mask(std::string_view op) noexcept {
  static constexpr std::string_view kOps[] = {
      "aten::masked_fill",    "aten::masked_fill_", "aten::where",       "aten::full",
      "aten::full_like",      "aten::new_full",     "aten::fill",        "aten::fill_",
      "aten::scalar_tensor",  "aten::index_fill",   "aten::index_fill_", "aten::pad",
      "aten::constant_pad_nd"};
  return std::find(std::begin(kOps), std::end(kOps), op) != std::end(kOps);
}

bool is_minus_inf_value(std::string_view json) noexcept {
  if (json.size() >= 2 && json.front() == '"' && json.back() == '"')
    json = json.substr(1, json.size() - 2);
  std::string lower;
  for (char c : json) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "-inf" || lower == "-infinity") return true;
  if (lower.empty() || lower.size() > 64) return false;
  char* end = nullptr;
  const double v = std::strtod(lower.c_str(), &end);
  return end == lower.c_str() + lower.size() && std::isinf(v) && v < 0;
}

bool writes_mask(const OpRecord& r) noexcept {
  if (!may_write_mask(r.op)) return false;
  const bool minus_inf = std::any_of(r.inputs.begin(), r.inputs.end(), [](const Arg& a) {
    return !a.tensor && is_minus_inf_value(a.value);
  });
  if (!minus_inf) return false;
  // From inputs with no NaN/+Inf, more -inf out than in: a new mask, or one extended (a key
  // padding mask filled into a causal one).
  const Counts in = counts(r.inputs, first_read_input(r));
  if (in.other_than_ninf()) return false;
  const Counts out = output_counts(r);
  return out.ninf > in.ninf && !out.other_than_ninf();
}

std::optional<double> mask_fill_value(const OpRecord& r) {
  if (!may_write_mask(r.op)) return std::nullopt;
  for (const Arg& a : r.inputs) {
    if (a.tensor || a.value.empty()) continue;
    char* end = nullptr;
    const double v = std::strtod(a.value.c_str(), &end);
    if (end == a.value.c_str() + a.value.size() && std::isfinite(v) && v <= -65504.0) return v;
  }
  return std::nullopt;
}

bool may_take_mask(std::string_view op) noexcept {
  return op == "aten::add" || op == "aten::add_" || op == "aten::baddbmm" || op == "aten::baddbmm_";
}

bool may_hold_mask(const std::vector<std::pair<std::string, int64_t>>& nonfinite_ops) noexcept {
  bool all = !nonfinite_ops.empty();
  for (const auto& [op, n] : nonfinite_ops) {
    if (may_write_mask(op)) return true;
    all = all && may_take_mask(op);
  }
  return all;
}

bool given_additive_mask(const OpRecord& r) noexcept {
  if (!may_take_mask(r.op)) return false;
  // Every -inf it was given is in tensors of only 0 and -inf: a mask, whatever made it (data
  // with a -inf holds other values).
  int64_t in_masks = 0, all = 0;
  for (const Arg& a : r.inputs) {
    if (!a.tensor) continue;
    const TensorStats& t = *a.tensor;
    if (t.nan + t.pinf > 0) return false;
    all += t.ninf;
    if (t.ninf > 0 && t.zero + t.ninf == t.numel) in_masks += t.ninf;
  }
  return all > 0 && in_masks == all;
}

MaskRole MaskTracker::observe(const OpRecord& r, size_t index) {
  writer_ = nullptr;
  Step& s = ranks_[r.rank];
  if (s.step != r.step) {
    s.step = r.step;
    s.writers.clear();
  }
  if (writes_mask(r)) {
    s.writers.push_back({r.op, r.seq, output_counts(r).ninf, index, false});
    return MaskRole::kWriter;
  }
  const Counts in = input_counts(r);
  if (in.ninf == 0 || in.other_than_ninf()) return MaskRole::kNone;
  for (const MaskWrite& w : s.writers) {
    if (w.seq < r.seq && (writer_ == nullptr || w.seq > writer_->seq)) writer_ = &w;
  }
  const bool nan_out = output_counts(r).other_than_ninf();
  if (writer_ == nullptr && (is_attention_op(r.op) || given_additive_mask(r))) {
    // A -inf given to an attention op with no writer before it: its attn_mask, made inside
    // another op or before recording; or an additive mask of 0 and -inf made before recording,
    // given to an add. Where the mask enters the records: a writer, given.
    if (nan_out) return MaskRole::kBorn;
    s.writers.push_back({r.op, r.seq, in.ninf, index, true});
    return MaskRole::kWriter;
  }
  if (writer_ == nullptr) return MaskRole::kNone;
  return nan_out ? MaskRole::kBorn : MaskRole::kCarrier;
}

std::vector<MaskRole> mask_roles(const std::vector<OpRecord>& g,
                                 std::vector<std::optional<size_t>>* writers) {
  std::vector<size_t> order(g.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return g[a].seq < g[b].seq; });
  std::vector<MaskRole> roles(g.size(), MaskRole::kNone);
  if (writers) writers->assign(g.size(), std::nullopt);
  MaskTracker t;
  for (size_t i : order) {
    roles[i] = t.observe(g[i], i);
    if (writers && t.writer()) (*writers)[i] = t.writer()->index;
  }
  return roles;
}

std::string born_reason(const OpRecord& r) {
  if (std::optional<std::string> rows = fully_masked_rows(r)) return *rows;
  const Counts in = input_counts(r), out = output_counts(r);
  std::string made;
  if (out.nan > 0) made = fmt::format("{} NaN", out.nan);
  if (out.pinf > 0) made += fmt::format("{}{} +Inf", made.empty() ? "" : ", ", out.pinf);
  return fmt::format("its inputs held {} -inf of a mask and no NaN/+Inf; it made {}", in.ninf,
                     made);
}

void MaskingCounter::add(const OpRecord& r, MaskRole role) {
  if (role == MaskRole::kCarrier) ++m_.carriers;
  if (role != MaskRole::kWriter) return;
  steps_.insert(r.step);
  const bool first =
      m_.writers++ == 0 || std::tie(r.step, r.seq, r.rank) < std::tie(m_.step, m_.seq, m_.rank);
  if (!first) return;
  m_.op = r.op;
  m_.name = r.name();
  m_.step = r.step;
  m_.seq = r.seq;
  m_.rank = r.rank;
  m_.given = !writes_mask(r);
  m_.elements = m_.given ? input_counts(r).ninf : output_counts(r).ninf;
}

void MaskingCounter::merge(const MaskingCounter& o) {
  if (o.m_.writers > 0 && (m_.writers == 0 || std::tie(o.m_.step, o.m_.seq, o.m_.rank) <
                                                  std::tie(m_.step, m_.seq, m_.rank))) {
    const int64_t writers = m_.writers, carriers = m_.carriers;
    m_ = o.m_;
    m_.writers = writers;
    m_.carriers = carriers;
  }
  m_.writers += o.m_.writers;
  m_.carriers += o.m_.carriers;
  steps_.insert(o.steps_.begin(), o.steps_.end());
}

MaskingSummary MaskingCounter::finish() const {
  MaskingSummary m = m_;
  m.steps = static_cast<int64_t>(steps_.size());
  return m;
}

}  // namespace analysis_detail

std::string MaskingSummary::describe() const {
  if (!any()) return {};
  const std::string in = module ? " in " + *module : std::string();
  std::string s =
      given ? fmt::format("{} elements of -inf given as a mask to {}{} (step {})", elements, op, in,
                          step)
            : fmt::format("{} elements set to -inf by {}{} (step {})", elements, op, in, step);
  if (steps > 1) s += fmt::format(", masks in {} steps", steps);
  return s + "; not counted as overflow";
}

nlohmann::json MaskingSummary::to_json() const {
  if (!any()) return nullptr;
  return {{"writers", writers},
          {"carriers", carriers},
          {"steps", steps},
          {"op", op},
          {"name", name},
          {"step", step},
          {"rank", rank},
          {"seq", seq},
          {"module", module ? nlohmann::json(*module) : nlohmann::json()},
          {"elements", elements},
          {"given", given},
          {"live_watch_hits", live_watch_hits},
          {"text", describe()}};
}

bool is_attention_op(std::string_view op) noexcept {
  static constexpr std::string_view kParts[] = {"scaled_dot_product", "multi_head_attention",
                                                "_flash_attention", "_efficient_attention",
                                                "_cudnn_attention"};
  for (std::string_view p : kParts)
    if (op.find(p) != std::string_view::npos) return true;
  return false;
}

MaskWatch::MaskWatch() : t_(std::make_unique<analysis_detail::MaskTracker>()) {}
MaskWatch::~MaskWatch() = default;

MaskWatch::Role MaskWatch::observe(const OpRecord& r) {
  switch (t_->observe(r, static_cast<size_t>(r.seq))) {
    case analysis_detail::MaskRole::kWriter:
      return Role::kWriter;
    case analysis_detail::MaskRole::kCarrier:
      return Role::kCarrier;
    case analysis_detail::MaskRole::kBorn:
      return Role::kBorn;
    case analysis_detail::MaskRole::kNone:
      break;
  }
  return Role::kNone;
}

int64_t MaskWatch::writer_seq() const noexcept {
  return t_->writer() ? static_cast<int64_t>(t_->writer()->index) : -1;
}

bool MaskWatch::may_write(std::string_view op) noexcept {
  return analysis_detail::may_write_mask(op);
}

bool MaskWatch::may_take_mask(std::string_view op) noexcept {
  return analysis_detail::may_take_mask(op);
}

nlohmann::json MaskedBy::to_json() const {
  return {{"op", op},     {"name", name}, {"step", step},
          {"rank", rank}, {"seq", seq},   {"module", module ? nlohmann::json(*module) : nullptr}};
}

}  // namespace precprobe
