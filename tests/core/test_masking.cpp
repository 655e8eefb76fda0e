// Masks are not overflows (analysis/masking.h): a causal Transformer's masked_fill(mask, -inf)
// and the ops that carry the -inf on raise nothing in overflow, summary, check, the op
// watchpoints or a written dump read back; a fully masked row's NaN is named at the softmax
// that makes it, with the mask; a -inf with no mask writer before it, log(0) and a real
// overflow are judged as before. Counts in the comments are worked out by hand.
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analysis/masking.h"
#include "core/analysis_fixtures.h"
#include "core/masking_fixtures.h"
#include "core/temp_dir.h"
#include "precprobe/analysis.h"
#include "precprobe/checklist.h"
#include "precprobe/op_watch.h"
#include "precprobe/reader.h"
#include "precprobe/writer.h"
#include "precprobe_catch.h"

using namespace precprobe;
using namespace precprobe::test;
using analysis_detail::MaskRole;

namespace {

// One step of a causal attention layer over scores [2, 8, 8] (16 rows of 8; the causal mask
// hides 28 keys per head: 56 -inf), then the output projection and the loss. From
// `masked_from` on, padding hides every key of `rows` more rows: they are -inf throughout,
// and the softmax makes NaN of them.
void attention_step(DumpData& d, int64_t step, int64_t masked_from = -1, int64_t rows = 2) {
  const bool full = masked_from >= 0 && step >= masked_from;
  const int64_t ninf = 56 + (full ? rows : 0);  // a fully masked row: its one unmasked key too
  const int64_t nan = full ? rows * 8 : 0;
  const Arg soft = tens({2, 8, 8}, 0, nan);
  add_step(
      d, step, 0,
      {{"aten::linear",
        0,
        {tens({2, 8, 4}), tens({12, 4}, 0, 0, 0, "b0.qkv.weight")},
        {tens({2, 8, 12})}},
       {"aten::matmul", 1, {tens({2, 8, 4}), tens({2, 4, 8})}, {tens({2, 8, 8})}},
       {"aten::masked_fill", 2, {tens({2, 8, 8}), mask_arg(), kMinusInf}, {tens({2, 8, 8}, ninf)}},
       {"aten::add",
        3,
        {tens({2, 8, 8}, ninf), tens({2, 8, 8}, 0, 0, 0, "", false)},
        {tens({2, 8, 8}, ninf)}},
       {"aten::softmax", 4, {tens({2, 8, 8}, ninf), varg("-1"), varg("null")}, {soft}},
       {"aten::matmul", 5, {soft, tens({2, 8, 4})}, {tens({2, 8, 4}, 0, full ? 16 : 0)}},
       {"aten::linear",
        6,
        {tens({2, 8, 4}, 0, full ? 16 : 0), tens({4, 4}, 0, 0, 0, "b0.proj.weight")},
        {tens({2, 8, 4}, 0, full ? 64 : 0)}},
       {"aten::mse_loss",
        7,
        {tens({2, 8, 4}, 0, full ? 64 : 0), tens({2, 8, 4})},
        {tens({}, 0, full ? 1 : 0)}}});
}

DumpData attention_run(int64_t steps, int64_t masked_from = -1) {
  DumpData d;
  for (int64_t s = 0; s < steps; ++s) attention_step(d, s, masked_from);
  return d;
}

std::vector<OpWatchHit> watch(const DumpData& d) {
  OpWatcher w;
  std::vector<OpWatchHit> hits;
  for (const OpRecord& r : d.ops) w.observe(r, hits);
  return hits;
}

// Writes `d`'s op records (and `events`) as a dump of one rank; frames of 5 records, so a
// step spans frames.
void write(const std::filesystem::path& root, const DumpData& d,
           const std::vector<ScalarRecord>& events = {},
           std::optional<OpWatchOptions> live = std::nullopt) {
  WriterOptions o;
  o.dir = (root / "rank0").string();
  o.flush_every_records = 5;
  o.flush_interval_ms = 3600 * 1000;
  o.watch = std::move(live);
  DumpWriter w(o);
  w.write_meta(R"({"format_version":1,"rank":0,"world_size":1})");
  int64_t step = d.ops.empty() ? 0 : d.ops.front().step;
  for (const OpRecord& r : d.ops) {
    if (r.step != step) w.end_step(step);
    step = r.step;
    w.submit(OpRecord(r));
  }
  for (const ScalarRecord& e : events) w.submit(ScalarRecord(e));
  w.end_step(step);
}

nlohmann::json overflow_json(const std::filesystem::path& dir, bool digests) {
  DumpReader r(dir.string());
  ReadOptions read;
  read.digests = digests;
  return find_overflow(r, read).to_json();
}

nlohmann::json summary_json(const std::filesystem::path& dir, bool digests) {
  DumpReader r(dir.string());
  ReadOptions read;
  read.digests = digests;
  nlohmann::json j = summarize_dump(r, read).to_json();
  for (auto& st : j["streams"]) st.erase("frames_passed");
  return j;
}

}  // namespace

TEST_CASE("masking: who writes a mask, who carries it", "[masking]") {
  using analysis_detail::is_minus_inf_value;
  CHECK(is_minus_inf_value("\"-inf\""));
  CHECK(is_minus_inf_value("-Infinity"));
  CHECK(is_minus_inf_value("-1e999"));
  CHECK_FALSE(is_minus_inf_value("\"inf\""));
  CHECK_FALSE(is_minus_inf_value("-1e9"));  // HF's finfo.min style: finite, no mask
  CHECK_FALSE(is_minus_inf_value("\"nan\""));
  CHECK_FALSE(is_minus_inf_value(""));

  const OpRecord fill =
      make_op(0, 0, {"aten::masked_fill", 2, {tens({8}), mask_arg(), kMinusInf}, {tens({8}, 3)}});
  CHECK(analysis_detail::writes_mask(fill));
  OpRecord finite_value = fill;  // masked_fill(mask, -1e9): no -inf out, nothing to say
  finite_value.inputs[2] = varg("-1000000000.0");
  CHECK_FALSE(analysis_detail::writes_mask(finite_value));
  OpRecord extends = fill;  // a key padding mask filled into a causal one: 1 -inf in, 3 out
  extends.inputs[0] = tens({8}, 1);
  CHECK(analysis_detail::writes_mask(extends));
  OpRecord adds_none = fill;  // every masked position was -inf already: it carries the mask
  adds_none.inputs[0] = tens({8}, 3);
  CHECK_FALSE(analysis_detail::writes_mask(adds_none));
  OpRecord bad_in = fill;  // a NaN in the scores: an earlier op's, not the mask's
  bad_in.inputs[0] = tens({8}, 0, 1);
  CHECK_FALSE(analysis_detail::writes_mask(bad_in));
  OpRecord nan_out = fill;
  nan_out.outputs[0] = tens({8}, 3, 1);
  CHECK_FALSE(analysis_detail::writes_mask(nan_out));
  // Large negative fills (precision leaves them out): finfo(float32).min, -1e9, finfo(fp16).min.
  OpRecord hf = fill;
  hf.inputs[2] = varg("-3.4028234663852886e+38");
  CHECK(analysis_detail::mask_fill_value(hf) == -3.4028234663852886e+38);
  CHECK(analysis_detail::mask_fill_value(finite_value) == -1e9);
  hf.inputs[2] = varg("-65504.0");
  CHECK(analysis_detail::mask_fill_value(hf) == -65504.0);
  hf.inputs[2] = varg("-10000.0");  // fits float16: nothing to leave out
  CHECK_FALSE(analysis_detail::mask_fill_value(hf));
  hf.op = "aten::add";
  hf.inputs[2] = varg("-1000000000.0");
  CHECK_FALSE(analysis_detail::mask_fill_value(hf));  // not an op that fills
  OpRecord other_op = fill;                           // not an op that fills with a value
  other_op.op = "aten::clamp";
  CHECK_FALSE(analysis_detail::writes_mask(other_op));
  // fill_ overwrites self (here the garbage of an empty): self is not read.
  CHECK(analysis_detail::writes_mask(
      make_op(0, 0, {"aten::fill_", 0, {tens({4}, 0, 4), kMinusInf}, {tens({4}, 4)}})));
  CHECK(analysis_detail::writes_mask(
      make_op(0, 0, {"aten::full", 0, {varg("[4,4]"), kMinusInf}, {tens({4, 4}, 16)}})));

  // In seq order, whatever the file order: the add and the softmax carry the mask, the log
  // before the writer does not.
  DumpData d;
  add_step(d, 0, 0,
           {{"aten::add", 3, {tens({8}, 3), tens({8})}, {tens({8}, 3)}},
            {"aten::log", 1, {tens({8}, 1)}, {tens({8}, 1)}},
            {"aten::masked_fill", 2, {tens({8}), mask_arg(), kMinusInf}, {tens({8}, 3)}},
            {"aten::softmax", 4, {tens({8}, 3), varg("0"), varg("null")}, {tens({8})}},
            {"aten::sub", 5, {tens({8}, 8), tens({8}, 8)}, {tens({8}, 0, 8)}}});
  std::vector<std::optional<size_t>> writers;
  const std::vector<MaskRole> roles = analysis_detail::mask_roles(d.ops, &writers);
  CHECK(roles == std::vector<MaskRole>{MaskRole::kCarrier, MaskRole::kNone, MaskRole::kWriter,
                                       MaskRole::kCarrier, MaskRole::kBorn});
  CHECK(writers[0] == std::optional<size_t>(2));
  CHECK(writers[4] == std::optional<size_t>(2));
  CHECK_FALSE(writers[1]);
  // -inf - -inf: NaN born at the sub, not a softmax: said plainly.
  CHECK(analysis_detail::born_reason(d.ops[4]) ==
        "its inputs held 16 -inf of a mask and no NaN/+Inf; it made 8 NaN");
}

TEST_CASE("masking: fully masked rows of a softmax, dim as given", "[masking]") {
  // Input [2, 3, 4]: dim 1 (or -2) has rows of 3, 8 of them; 2 fully masked = 6 NaN.
  for (const char* dim : {"1", "-2"}) {
    const OpRecord r = make_op(0, 0,
                               {"aten::_softmax",
                                0,
                                {tens({2, 3, 4}, 7), varg(dim), varg("false")},
                                {tens({2, 3, 4}, 0, 6)}});
    CHECK(analysis_detail::born_reason(r) ==
          "every element of 2 of its 8 rows was -inf: fully masked rows");
  }
  // A NaN count that is not whole rows is not said to be.
  const OpRecord odd = make_op(0, 0,
                               {"aten::softmax",
                                0,
                                {tens({2, 3, 4}, 7), varg("-1"), varg("null")},
                                {tens({2, 3, 4}, 0, 6)}});
  CHECK(analysis_detail::born_reason(odd) ==
        "its inputs held 7 -inf of a mask and no NaN/+Inf; it made 6 NaN");
}

TEST_CASE("masking: a healthy causal attention raises nothing", "[masking]") {
  const DumpData d = attention_run(30);
  const OverflowResult o = find_overflow(d);
  CHECK_FALSE(o.found);
  CHECK_FALSE(o.any_nonfinite);
  REQUIRE(o.ranks.size() == 1);
  CHECK(o.ranks[0].steps_affected == 0);
  CHECK(o.ranks[0].nonfinite_ops == 0);
  CHECK_FALSE(o.ranks[0].first_nonfinite_input);
  CHECK(o.masking.writers == 30);
  CHECK(o.masking.carriers == 60);  // the add and the softmax of each step
  CHECK(o.masking.steps == 30);
  CHECK(o.masking.op == "aten::masked_fill");
  CHECK(o.masking.name == "aten::masked_fill.0.forward");
  CHECK(o.masking.step == 0);
  CHECK(o.masking.seq == 2);
  CHECK(o.masking.elements == 56);
  CHECK(o.masking.module == std::optional<std::string>("b0"));  // the block's own forward
  CHECK(o.masking.describe() ==
        "56 elements set to -inf by aten::masked_fill in b0 (step 0), masks in 30 steps; not "
        "counted as overflow");
  const nlohmann::json j = o.to_json();
  CHECK(j["found"] == false);
  CHECK(j["any_nonfinite"] == false);
  CHECK(j["reason"].is_null());
  CHECK(j["masked_by"].is_null());
  CHECK(j["masking"]["writers"] == 30);
  CHECK(j["masking"]["elements"] == 56);
  CHECK(j["masking"]["text"] == o.masking.describe());

  const SummaryResult s = summarize_dump(d);
  CHECK(s.op_records == 240);
  CHECK(s.nonfinite_op_records == 0);
  CHECK(s.nonfinite_ops.empty());
  CHECK_FALSE(s.first_nonfinite_step);
  CHECK(s.masking.writers == 30);
  CHECK(s.masking.carriers == 60);
  CHECK(s.masking.module == o.masking.module);
  CHECK(s.masking.describe() == o.masking.describe());
  CHECK(s.to_json()["masking"]["steps"] == 30);

  CHECK(watch(d).empty());  // no tensor_overflow at the masked_fill, the add or the softmax

  const ChecklistResult c = run_checklist(d);
  const CheckItem* item = c.find("mp.overflow");
  REQUIRE(item != nullptr);
  CHECK(item->verdict == Verdict::kOk);
  CHECK(item->evidence ==
        "240 op records of steps 0..29, all finite apart from masking: " + o.masking.describe());
  const CheckItem* w = c.find("num.op_watch");
  REQUIRE(w != nullptr);
  CHECK(w->verdict == Verdict::kOk);
  CHECK(w->figure("hits") == 0.0);
}

TEST_CASE("masking: a fully masked row is named at its softmax, with the mask", "[masking]") {
  const DumpData d = attention_run(30, 10);
  const OverflowResult o = find_overflow(d);
  REQUIRE(o.found);
  CHECK(o.any_nonfinite);
  CHECK(o.origin.name == "aten::softmax.0.forward");
  CHECK(o.origin.step == 10);
  CHECK(o.origin.seq == 4);
  CHECK(o.origin_module == std::optional<std::string>("b0"));  // between qkv and proj
  CHECK(o.reason == std::optional<std::string>(
                        "every element of 2 of its 16 rows was -inf: fully masked rows"));
  REQUIRE(o.masked_by);
  CHECK(o.masked_by->op == "aten::masked_fill");
  CHECK(o.masked_by->name == "aten::masked_fill.0.forward");
  CHECK(o.masked_by->step == 10);
  CHECK(o.masked_by->seq == 2);
  CHECK(o.masked_by->module == std::optional<std::string>("b0"));
  const RankOverflow& r = o.ranks.at(0);
  CHECK(r.steps_affected == 20);  // 10..29
  CHECK(r.first_steps_affected == std::vector<int64_t>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19});
  CHECK(r.later_nonfinite_ops == 3 + 19 * 4);  // matmul, linear, loss; then the softmax too
  CHECK(r.nonfinite_ops == 20 * 4);
  CHECK_FALSE(r.nonfinite_before_origin);
  CHECK(r.first_nonfinite_input->op == "aten::matmul");  // the softmax's NaN, read
  CHECK(r.first_nonfinite_input->seq == 5);
  CHECK(r.first_nonfinite_input->step == 10);
  CHECK(o.masking.writers == 30);
  CHECK(o.masking.carriers == 10 * 2 + 20);  // the softmax carries it until step 10
  const nlohmann::json j = o.to_json();
  CHECK(j["reason"] == "every element of 2 of its 16 rows was -inf: fully masked rows");
  CHECK(j["masked_by"]["name"] == "aten::masked_fill.0.forward");
  CHECK(j["masked_by"]["seq"] == 2);
  CHECK(j["masked_by"]["module"] == "b0");
  CHECK(j["ranks"][0]["reason"] == j["reason"]);

  const SummaryResult s = summarize_dump(d);
  CHECK(s.nonfinite_op_records == 80);
  CHECK(s.first_nonfinite_step == std::optional<int64_t>(10));
  REQUIRE(s.nonfinite_ops.size() == 4);
  CHECK(s.masking.writers == 30);

  const ChecklistResult c = run_checklist(d);
  const CheckItem* item = c.find("mp.overflow");
  REQUIRE(item != nullptr);
  CHECK(item->verdict == Verdict::kProblem);
  CHECK(item->evidence ==
        "first NaN/Inf produced by aten::softmax.0.forward in module b0 (rank 0, step 10, "
        "seq 4): every element of 2 of its 16 rows was -inf: fully masked rows (masked by "
        "aten::masked_fill.0.forward, seq 2, module b0)");

  // The watchpoints fire first at the softmax of step 10, not at a mask before.
  const std::vector<OpWatchHit> hits = watch(d);
  REQUIRE_FALSE(hits.empty());
  CHECK(hits[0].watch == "tensor_overflow");
  CHECK(hits[0].record == "aten::softmax.0.forward");
  CHECK(hits[0].step == 10);
  CHECK(hits[0].module == "b0");
  for (const OpWatchHit& h : hits) CHECK(h.step >= 10);
}

TEST_CASE("masking: a -inf with no mask writer before it alarms as before", "[masking]") {
  // Step 0 masks; step 1 gets a -inf from its data, and the masked_fill after it is no
  // excuse: the add is the first op with a non-finite input, no op made it.
  DumpData d;
  attention_step(d, 0);
  add_step(d, 1, 0,
           {{"aten::add", 0, {tens({8}, 2), tens({8})}, {tens({8}, 2)}},
            {"aten::masked_fill", 1, {tens({8}), mask_arg(), kMinusInf}, {tens({8}, 3)}}});
  const OverflowResult o = find_overflow(d);
  CHECK_FALSE(o.found);
  CHECK(o.any_nonfinite);
  REQUIRE(o.ranks[0].first_nonfinite_input);
  CHECK(o.ranks[0].first_nonfinite_input->name == "aten::add.0.forward");
  CHECK(o.ranks[0].first_nonfinite_input->step == 1);
  CHECK(o.ranks[0].nonfinite_ops == 1);
  CHECK(o.ranks[0].steps_affected == 1);
  CHECK(o.masking.writers == 2);
  const SummaryResult s = summarize_dump(d);
  CHECK(s.nonfinite_op_records == 1);
  CHECK(s.first_nonfinite_step == std::optional<int64_t>(1));
  const ChecklistResult c = run_checklist(d);
  const CheckItem* item = c.find("mp.overflow");
  REQUIRE(item != nullptr);
  CHECK(item->verdict == Verdict::kProblem);
  CHECK(item->evidence == "NaN/Inf in op inputs, not produced by a recorded op");

  // The same step without any mask in the run: the same answer, as before masks were known.
  DumpData plain;
  add_step(plain, 1, 0, {{"aten::add", 0, {tens({8}, 2), tens({8})}, {tens({8}, 2)}}});
  const OverflowResult p = find_overflow(plain);
  CHECK_FALSE(p.found);
  CHECK(p.any_nonfinite);
  CHECK(p.ranks[0].first_nonfinite_input->name == "aten::add.0.forward");
  CHECK_FALSE(p.masking.any());
  CHECK(p.to_json()["masking"].is_null());
}

TEST_CASE("masking: log(0) after a mask is still an origin", "[masking]") {
  DumpData d;
  add_step(d, 0, 0,
           {{"aten::masked_fill", 0, {tens({8}), mask_arg(), kMinusInf}, {tens({8}, 3)}},
            {"aten::log", 1, {targ({0.0, 1.0})}, {targ({-kInf, 0.0})}},
            {"aten::add", 2, {targ({-kInf, 0.0}), targ({1, 1})}, {targ({-kInf, 1.0})}}});
  const OverflowResult o = find_overflow(d);
  REQUIRE(o.found);
  CHECK(o.origin.name == "aten::log.0.forward");
  CHECK_FALSE(o.reason);
  CHECK_FALSE(o.masked_by);
  // Without a -inf constant a -inf from finite inputs is an origin, whatever the op's name.
  DumpData m;
  add_step(m, 0, 0,
           {{"aten::masked_fill",
             0,
             {tens({8}), mask_arg(), varg("-1000000000.0")},
             {targ({-kInf, 1})}}});
  const OverflowResult mo = find_overflow(m);
  REQUIRE(mo.found);
  CHECK(mo.origin.op == "aten::masked_fill");
  CHECK_FALSE(mo.masking.any());
}

TEST_CASE("masking: a real overflow before the fully masked row is found first", "[masking]") {
  // An earlier step: the exp of step 5 overflows (finite in, +Inf out).
  DumpData d = attention_run(30, 10);
  add_step(d, 5, 0, {{"aten::exp", 8, {targ({1.0, 100.0})}, {targ({2.7, kInf})}}});
  OverflowResult o = find_overflow(d);
  REQUIRE(o.found);
  CHECK(o.origin.name == "aten::exp.0.forward");
  CHECK(o.origin.step == 5);
  CHECK_FALSE(o.reason);
  CHECK_FALSE(o.masked_by);
  // The same step, before the softmax: a score that overflows to +Inf before masking.
  DumpData same;
  attention_step(same, 0, 0);
  for (OpRecord& r : same.ops) r.seq += r.seq >= 1 ? 1 : 0;  // seq 1 for the mul
  add_step(same, 0, 0, {{"aten::mul", 1, {targ({1e38, 2.0}), targ({10})}, {targ({kInf, 20})}}});
  o = find_overflow(same);
  REQUIRE(o.found);
  CHECK(o.origin.name == "aten::mul.0.forward");
  CHECK(o.origin.seq == 1);
  CHECK(o.ranks[0].later_nonfinite_ops == 4);  // the softmax and the three after it
  // After the softmax in its step: the softmax is first.
  DumpData after;
  attention_step(after, 0, 0);
  add_step(after, 0, 0, {{"aten::exp", 9, {targ({1.0, 100.0})}, {targ({2.7, kInf})}}});
  o = find_overflow(after);
  REQUIRE(o.found);
  CHECK(o.origin.op == "aten::softmax");
  CHECK(o.ranks[0].later_nonfinite_ops == 4);  // matmul, linear, loss, exp
}

TEST_CASE("masking: a written dump reads the same with and without digests", "[masking]") {
  for (int64_t masked_from : {int64_t{-1}, int64_t{10}}) {
    CAPTURE(masked_from);
    TempDir dir("masking");
    DumpData d = attention_run(30, masked_from);
    // An older writer's live hits at the masked_fill of step 0 and the softmax of step 10 (a
    // carrier without the padding, an overflow with it).
    OpWatchHit at_mask;
    at_mask.step = 0;
    at_mask.name = std::string(kWatchEventName);
    at_mask.watch = "tensor_overflow";
    at_mask.record = "aten::masked_fill.0.forward";
    at_mask.op = "aten::masked_fill";
    at_mask.seq = 2;
    at_mask.value = 56;
    OpWatchHit real = at_mask;
    real.step = 10;
    real.record = "aten::softmax.0.forward";
    real.op = "aten::softmax";
    real.seq = 4;
    write(dir.path(), d, {to_scalar_record(at_mask), to_scalar_record(real)});
    const nlohmann::json o = overflow_json(dir.path(), true);
    CHECK(o == overflow_json(dir.path(), false));
    const nlohmann::json s = summary_json(dir.path(), true);
    CHECK(s == summary_json(dir.path(), false));
    CHECK(o["masking"]["writers"] == 30);
    CHECK(s["masking"]["writers"] == 30);
    if (masked_from < 0) {
      CHECK(s["masking"]["live_watch_hits"] == 2);
      CHECK(s["op_watch_hits"].empty());
      CHECK(o["found"] == false);
      CHECK(o["any_nonfinite"] == false);
      CHECK(s["nonfinite_op_records"] == 0);
      CHECK(s["first_nonfinite_step"].is_null());
    } else {
      CHECK(s["masking"]["live_watch_hits"] == 1);
      REQUIRE(s["op_watch_hits"].size() == 1);  // the softmax's stays
      CHECK(s["op_watch_hits"][0]["record"] == "aten::softmax.0.forward");
      CHECK(o["found"] == true);
      CHECK(o["step"] == 10);
      CHECK(o["name"] == "aten::softmax.0.forward");
      CHECK(o["steps_affected"] == 20);
      CHECK(o["later_nonfinite_ops"] == 79);
      CHECK(s["nonfinite_op_records"] == 80);
      CHECK(s["first_nonfinite_step"] == 10);
    }
  }
  // The live watchpoints of a new writer: no hit at a mask.
  TempDir dir("masking_live");
  write(dir.path(), attention_run(12), {}, OpWatchOptions{});
  DumpReader r(dir.path().string());
  CHECK(r.watch_hits().empty());
}

TEST_CASE("masking: digests decode masked steps and still find the first origin", "[masking]") {
  // Steps 0..3 mask; from step 6 the data holds NaN (no op makes it); an exp overflows at
  // step 15. Overflow decodes the masked steps at once and the others 1, 4, 16 at a time.
  DumpData d;
  for (int64_t s = 0; s < 4; ++s) attention_step(d, s);
  for (int64_t s = 4; s < 30; ++s) {
    const bool nan = s >= 6;
    add_step(d, s, 0,
             {{"aten::mul",
               0,
               {nan ? targ({kNaN, 1}) : targ({1, 1}), targ({2})},
               {nan ? targ({kNaN, 2}) : targ({2, 2})}},
              {"aten::exp",
               1,
               {targ({1.0, s == 15 ? 100.0 : 1.0})},
               {targ({2.7, s == 15 ? kInf : 2.7})}}});
  }
  TempDir dir("masking_gap");
  write(dir.path(), d);
  const nlohmann::json o = overflow_json(dir.path(), true);
  CHECK(o == overflow_json(dir.path(), false));
  CHECK(summary_json(dir.path(), true) == summary_json(dir.path(), false));
  CHECK(o["found"] == true);
  CHECK(o["name"] == "aten::exp.0.forward");
  CHECK(o["step"] == 15);
  CHECK(o["nonfinite_before_origin"] == true);
  CHECK(o["ranks"][0]["first_nonfinite_input"]["step"] == 6);
  CHECK(o["masking"]["writers"] == 4);
  CHECK(o["masking"]["steps"] == 4);
  CHECK(o["steps_affected"] == 15);  // 15..29
  // The same from memory.
  const OverflowResult m = find_overflow(d);
  CHECK(m.origin.step == 15);
  CHECK(m.ranks[0].first_nonfinite_input->step == 6);
}
