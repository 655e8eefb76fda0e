// Masks that enter the records other than by a fill from finite inputs (analysis/masking.h):
// a key padding mask filled into a causal one (torch::nn::MultiheadAttention's order), and the
// -inf an attention op is given as its attn_mask with no recorded writer (PyTorch 2.x's SDPA
// makes it inside the op). Counts in the comments are worked out by hand.
#include <string>
#include <vector>

#include "analysis/masking.h"
#include "core/analysis_fixtures.h"
#include "core/masking_fixtures.h"
#include "precprobe/analysis.h"
#include "precprobe_catch.h"

using namespace precprobe;
using namespace precprobe::test;
using analysis_detail::MaskRole;

TEST_CASE("masking: a key padding mask filled into a causal one raises nothing", "[masking]") {
  // torch::nn::MultiheadAttention's order: the causal mask made with full(-inf) and added to
  // the scores, then the key padding filled in with masked_fill: its input already holds the
  // causal -inf, and it adds 40 more. From step 2 padding hides every key of 2 rows: NaN.
  DumpData d;
  for (int64_t step = 0; step < 4; ++step) {
    const bool full = step >= 2;
    const int64_t padded = 56 + (full ? 42 : 40), nan = full ? 16 : 0;
    add_step(
        d, step, 0,
        {{"aten::full", 0, {varg("[8,8]"), kMinusInf}, {tens({8, 8}, 64)}},
         {"aten::triu", 1, {tens({8, 8}, 64), varg("1")}, {tens({8, 8}, 28)}},
         {"aten::linear",
          2,
          {tens({2, 8, 4}), tens({12, 4}, 0, 0, 0, "attn.in_proj_weight")},
          {tens({2, 8, 12})}},
         {"aten::add_", 3, {tens({2, 8, 8}), tens({8, 8}, 28), varg("1")}, {tens({2, 8, 8}, 56)}},
         {"aten::masked_fill",
          4,
          {tens({2, 8, 8}, 56), mask_arg(), kMinusInf},
          {tens({2, 8, 8}, padded)}},
         {"aten::softmax",
          5,
          {tens({2, 8, 8}, padded), varg("-1"), varg("null")},
          {tens({2, 8, 8}, 0, nan)}}});
  }
  const std::vector<MaskRole> roles =
      analysis_detail::mask_roles(std::vector<OpRecord>(d.ops.begin(), d.ops.begin() + 6));
  CHECK(roles == std::vector<MaskRole>{MaskRole::kWriter, MaskRole::kCarrier, MaskRole::kNone,
                                       MaskRole::kCarrier, MaskRole::kWriter, MaskRole::kCarrier});
  const OverflowResult o = find_overflow(d);
  REQUIRE(o.found);
  CHECK(o.origin.step == 2);
  CHECK(o.origin.op == "aten::softmax");
  REQUIRE(o.masked_by);
  CHECK(o.masked_by->op == "aten::masked_fill");  // the fill that left no key, not the causal
  REQUIRE(o.ranks.size() == 1);
  CHECK_FALSE(o.ranks[0].nonfinite_before_origin);  // steps 0-1 raise nothing
  CHECK(o.masking.writers == 8);
  DumpData first_two;
  first_two.ops.assign(d.ops.begin(), d.ops.begin() + 12);
  const OverflowResult healthy = find_overflow(first_two);
  CHECK_FALSE(healthy.found);
  CHECK_FALSE(healthy.any_nonfinite);
}

TEST_CASE("masking: a -inf an attention op is given is its attn_mask", "[masking]") {
  // PyTorch 2.x's SDPA on CPU: the bool mask becomes -inf inside the forward op (not
  // recorded at level L1); its backward kernel is given that float mask. A float mask built
  // before recording and given to SDPA is the same. No writer before it, yet a mask.
  DumpData d;
  for (int64_t step = 0; step < 3; ++step) {
    const bool nan = step == 2;  // a fully masked row, on a version whose SDPA makes NaN of it
    add_step(d, step, 0,
             {{"aten::scaled_dot_product_attention",
               0,
               {tens({2, 2, 8, 4}), tens({2, 2, 8, 4}), tens({2, 2, 8, 4}), tens({2, 1, 8, 8}, 56)},
               {tens({2, 2, 8, 4}, 0, nan ? 8 : 0)}},
              {"aten::_scaled_dot_product_flash_attention_for_cpu_backward",
               1,
               {tens({2, 2, 8, 4}), tens({2, 1, 8, 8}, 56)},
               {tens({2, 2, 8, 4})}}});
  }
  std::vector<OpRecord> first(d.ops.begin(), d.ops.begin() + 2);
  CHECK(analysis_detail::mask_roles(first) ==
        std::vector<MaskRole>{MaskRole::kWriter, MaskRole::kCarrier});
  const OverflowResult o = find_overflow(d);
  REQUIRE(o.found);
  CHECK(o.origin.step == 2);
  CHECK(o.origin.op == "aten::scaled_dot_product_attention");
  CHECK_FALSE(o.masked_by);  // nothing recorded wrote it
  REQUIRE(o.reason);
  CHECK(*o.reason == "its inputs held 56 -inf of a mask and no NaN/+Inf; it made 8 NaN");
  CHECK(o.masking.describe() ==
        "56 elements of -inf given as a mask to aten::scaled_dot_product_attention (step 0), "
        "masks in 3 steps; not counted as overflow");
  DumpData healthy;
  healthy.ops.assign(d.ops.begin(), d.ops.begin() + 4);
  const OverflowResult h = find_overflow(healthy);
  CHECK_FALSE(h.found);
  CHECK_FALSE(h.any_nonfinite);
  // Any other op given a -inf nothing recorded wrote still alarms (data, a buffer).
  DumpData other;
  add_step(other, 0, 0, {{"aten::add", 0, {tens({8}), tens({8}, 2)}, {tens({8}, 2)}}});
  CHECK(find_overflow(other).any_nonfinite);
}

namespace {

// An additive mask of 0 and -inf (nn.Transformer.generate_square_subsequent_mask, a causal
// mask registered as a buffer): `ninf` -inf, the other elements 0, no gradient.
Arg additive_mask(std::vector<int64_t> shape, int64_t ninf) {
  Arg a = tens(std::move(shape), ninf, 0, 0, "", false);
  TensorStats& t = *a.tensor;
  t.zero = t.numel - ninf;
  t.pos = 0;
  t.min = t.max = t.mean = t.norm = 0;
  return a;
}

}  // namespace

TEST_CASE("masking: an additive mask made before recording, added to the scores", "[masking]") {
  // The causal mask made once before the loop (as PyTorch's Transformer tutorial makes it)
  // is added to the scores each step: no recorded op wrote it, yet its -inf is a mask. From
  // step 2 a key padding mask made the same way hides every key of one sequence: 8 rows NaN.
  DumpData d;
  for (int64_t step = 0; step < 3; ++step) {
    const bool full = step == 2;
    add_step(d, step, 0,
             {{"aten::linear",
               0,
               {tens({2, 8, 4}), tens({12, 4}, 0, 0, 0, "attn.in_proj_weight")},
               {tens({2, 8, 12})}},
              {"aten::add_",
               1,
               {tens({2, 8, 8}), additive_mask({8, 8}, 28), varg("1")},
               {tens({2, 8, 8}, 56)}},
              {"aten::add",
               2,
               {tens({2, 8, 8}, 56), additive_mask({2, 1, 8}, full ? 8 : 2), varg("1")},
               {tens({2, 8, 8}, full ? 56 + 36 : 56 + 14)}},
              {"aten::softmax",
               3,
               {tens({2, 8, 8}, full ? 56 + 36 : 56 + 14), varg("-1"), varg("null")},
               {tens({2, 8, 8}, 0, full ? 64 : 0)}},
              {"aten::linear",
               4,
               {tens({2, 8, 4}, 0, full ? 32 : 0), tens({4, 4}, 0, 0, 0, "attn.out_proj.weight")},
               {tens({2, 8, 4}, 0, full ? 32 : 0)}}});
  }
  const std::vector<MaskRole> roles =
      analysis_detail::mask_roles(std::vector<OpRecord>(d.ops.begin(), d.ops.begin() + 5));
  CHECK(roles == std::vector<MaskRole>{MaskRole::kNone, MaskRole::kWriter, MaskRole::kCarrier,
                                       MaskRole::kCarrier, MaskRole::kNone});
  const OverflowResult o = find_overflow(d);
  REQUIRE(o.found);
  CHECK(o.origin.step == 2);
  CHECK(o.origin.op == "aten::softmax");
  REQUIRE(o.reason);
  CHECK(*o.reason == "every element of 8 of its 16 rows was -inf: fully masked rows");
  REQUIRE(o.ranks.size() == 1);
  CHECK_FALSE(o.ranks[0].nonfinite_before_origin);  // steps 0-1 raise nothing
  CHECK(o.masking.given);
  CHECK(o.masking.describe() ==
        "28 elements of -inf given as a mask to aten::add_ in attn (step 0), masks in 3 steps; "
        "not counted as overflow");
  DumpData healthy;
  healthy.ops.assign(d.ops.begin(), d.ops.begin() + 10);
  CHECK_FALSE(find_overflow(healthy).any_nonfinite);
  CHECK(summarize_dump(healthy).nonfinite_op_records == 0);
  // A -inf among other values (data, a log of 0) is no mask: it still alarms.
  DumpData data;
  add_step(data, 0, 0, {{"aten::add", 0, {tens({8}), tens({8}, 2), varg("1")}, {tens({8}, 2)}}});
  CHECK(find_overflow(data).any_nonfinite);
}
