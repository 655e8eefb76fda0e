// compare reads two dumps side by side and judges each (step, rank) group as soon as both
// runs' records of it are read (src/core/analysis/compare_read.cpp). The house method: every
// result is computed again with both runs held in memory (digests off) and must be the same
// JSON, over runs built to reach every part of compare: noise, divergences, ops of one run
// only, steps of one run only, background ops, loss scales, ranks, program constants, frames
// across steps, truncated streams. And memory holds the groups in flight, not the runs.
#include <zstd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "analysis/compare_group.h"
#include "core/analysis_fixtures.h"
#include "core/compare_check.h"
#include "core/temp_dir.h"
#include "frame_digest.h"
#include "precprobe/analysis.h"
#include "precprobe/reader.h"
#include "precprobe_catch.h"

using namespace precprobe;  // NOLINT(google-build-using-namespace): test file
using precprobe::test::TempDir;
namespace fs = std::filesystem;

namespace {

struct RunPlan {
  int ranks = 1;
  int steps = 30;
  int ops = 8;
  double noise = 0;           // relative difference of every output (B's run)
  int64_t diverge_step = -1;  // from this step on, an op's output differs by 1 %
  bool extra_op = false;      // an op of this run only, in every third step
  int64_t missing_from = -1;  // steps from here on are not in this run
  bool background = false;    // data-loader ops now and then
  double eps = 1e-5;          // a constant of the program (an argument of every step)
  bool lr_varies = false;     // a number that changes from step to step
  double loss_scale = 0;      // a GradScaler's scale (0: none)
  uint64_t seed = 1;
};

DumpData make_run(const RunPlan& p) {
  DumpData d;
  std::mt19937_64 rng(p.seed);
  std::uniform_real_distribution<double> u(0.5, 2.0);
  for (int rank = 0; rank < p.ranks; ++rank) {
    for (int64_t step = 0; step < p.steps; ++step) {
      if (p.missing_from >= 0 && step >= p.missing_from) break;
      std::vector<test::OpSpec> ops;
      int64_t seq = 0;
      for (int k = 0; k < p.ops; ++k) {
        test::OpSpec s;
        s.op = k % 4 == 0   ? "aten::addmm"
               : k % 4 == 1 ? "aten::relu"
               : k % 4 == 2 ? "aten::mul"
                            : "aten::native_layer_norm";
        s.seq = seq++;
        s.call = k / 4;
        s.depth = k % 5 == 4 ? 1 : 0;
        s.dir = k >= p.ops / 2 ? Direction::kBackward : Direction::kForward;
        const double x = 1.0 + 0.1 * static_cast<double>(k + step % 7);
        double f = 1 + p.noise;
        if (p.diverge_step >= 0 && step >= p.diverge_step && k == 2) f *= 1.01;
        Arg in = test::targ({x, -x / 2, 2 * x});
        if (k % 4 == 0) in.tensor->param = "fc" + std::to_string(k / 4) + ".weight";
        s.in = {in};
        if (k % 4 == 3) s.in.push_back(test::varg(std::to_string(p.eps)));
        if (k % 4 == 2 && p.lr_varies) s.in.push_back(test::varg(std::to_string(0.01 * u(rng))));
        s.out = {test::scaled(test::targ({x * 1.5, -x, 3 * x}), f)};
        if (s.dir == Direction::kBackward && p.loss_scale > 0)
          s.out = {test::scaled(s.out[0], p.loss_scale)};
        ops.push_back(s);
        if (p.extra_op && step % 3 == 1 && k == 3) {
          test::OpSpec e;
          e.op = "aten::clone";
          e.seq = seq++;
          e.in = {test::targ({x})};
          e.out = {test::targ({x})};
          ops.push_back(e);
        }
        if (p.background && (step + k) % 5 == 0) {
          test::OpSpec b;
          b.op = "aten::div";
          b.seq = seq++;
          b.thread = 3;
          b.in = {test::targ({x})};
          b.out = {test::targ({x / 255})};
          ops.push_back(b);
        }
      }
      test::add_step(d, step, rank, ops);
      if (p.loss_scale > 0) {
        ScalerRecord sr;
        sr.step = step;
        sr.rank = rank;
        sr.scale_before = sr.scale_after = p.loss_scale;
        d.scaler.push_back(sr);
      }
    }
  }
  for (OpRecord& r : d.ops) r.background = r.thread == 3;
  return d;
}

std::vector<CompareOptions> every_mode(int ranks) {
  std::vector<CompareOptions> modes(5);
  modes[1].first = true;
  modes[2].exact = true;
  modes[3].by_module = true;
  modes[3].first = true;
  modes[4].step = 7;
  for (const CompareOptions& m : std::vector<CompareOptions>(modes)) {
    for (KeepOps keep : {KeepOps::kWarned, KeepOps::kDivergent}) {  // as the CLI runs them
      CompareOptions k = m;
      k.keep_ops = keep;
      modes.push_back(k);
    }
  }
  if (ranks > 1) {
    modes.emplace_back().rank = 1;
    modes.emplace_back().ranks = std::make_pair(0, 1);
  }
  return modes;
}

nlohmann::json compare_json(const fs::path& a, const fs::path& b, const CompareOptions& opt,
                            bool digests) {
  DumpReader ra(a.string()), rb(b.string());
  ra.set_digests(digests);
  rb.set_digests(digests);
  CompareResult r = compare_dumps(ra, rb, opt);
  r.path_a = r.path_b = "";
  return r.to_json();
}

}  // namespace

TEST_CASE("compare streamed side by side equals compare in memory", "[compare][differential]") {
  struct Pair {
    RunPlan a, b;
    size_t frame_a = 3, frame_b = 3;
  };
  std::vector<Pair> pairs;
  {
    Pair p;  // noise only
    p.b.noise = 1e-7;
    pairs.push_back(p);
  }
  {
    Pair p;  // a divergence from step 12, frames across steps of different sizes
    p.b.diverge_step = 12;
    p.b.noise = 1e-7;
    p.frame_a = 7;
    p.frame_b = 50;
    pairs.push_back(p);
  }
  {
    Pair p;  // ops of one run only, steps of one run only, background ops
    p.b.extra_op = true;
    p.b.missing_from = 25;
    p.a.background = p.b.background = true;
    p.frame_a = 1;
    p.frame_b = 4096;
    pairs.push_back(p);
  }
  {
    Pair p;  // two ranks, a loss scale in A, a varying number
    p.a.ranks = p.b.ranks = 2;
    p.a.loss_scale = 1024;
    p.a.lr_varies = p.b.lr_varies = true;
    p.b.seed = 2;
    p.frame_a = 5;
    pairs.push_back(p);
  }
  {
    Pair p;  // a port whose constant differs in every step: each verdict waits for the end
    p.b.eps = 1e-6;
    p.b.noise = 1e-7;
    pairs.push_back(p);
  }
  {
    Pair p;  // a constant that differs, in a run of one step
    p.a.steps = p.b.steps = 1;
    p.b.eps = 1e-6;
    pairs.push_back(p);
  }
  for (size_t i = 0; i < pairs.size(); ++i) {
    CAPTURE(i);
    TempDir dir("compare_stream");
    test::write_dump_data(dir.path() / "a", make_run(pairs[i].a), pairs[i].frame_a);
    test::write_dump_data(dir.path() / "b", make_run(pairs[i].b), pairs[i].frame_b);
    for (const CompareOptions& opt : every_mode(pairs[i].a.ranks)) {
      CAPTURE(opt.first, opt.exact, opt.by_module, static_cast<int>(opt.keep_ops),
              opt.step.value_or(-1), opt.rank.value_or(-1), opt.ranks.has_value());
      const uint64_t streamed = analysis_detail::compare_streamed();
      const nlohmann::json s = compare_json(dir.path() / "a", dir.path() / "b", opt, true);
      CHECK(analysis_detail::compare_streamed() == streamed + 1);
      const nlohmann::json m = compare_json(dir.path() / "a", dir.path() / "b", opt, false);
      CHECK(analysis_detail::compare_streamed() == streamed + 1);
      CAPTURE(nlohmann::json::diff(s, m).dump());
      CHECK(s == m);
      // Judged by the reading thread alone, and by three threads in all (the default is
      // one a core): the same JSON.
      for (unsigned threads : {1u, 3u}) {
        CAPTURE(threads);
        CompareOptions t = opt;
        t.threads = threads;
        const nlohmann::json st = compare_json(dir.path() / "a", dir.path() / "b", t, true);
        CHECK(analysis_detail::compare_streamed() == streamed + (threads == 1 ? 2 : 3));
        CAPTURE(nlohmann::json::diff(st, m).dump());
        CHECK(st == m);
      }
      if (opt.keep_ops == KeepOps::kAll && !opt.step && !opt.rank && !opt.ranks) {
        // Not two empty results: what each plan planted is found.
        CHECK(s["matched"].get<int64_t>() > (pairs[i].a.steps > 1 ? 100 : 7));
        if (i == 1) CHECK(s["divergent_ops"].get<int64_t>() > 0);
        if (i == 2) CHECK(s["unmatched_count"].get<int64_t>() > 0);
        if (i == 2) CHECK(s["background_a"].get<int64_t>() > 0);
      }
      if (opt.first && !opt.step && !opt.rank && !opt.ranks) {
        if (i == 1) CHECK(s["step"] == 12);
        if (i == 4) CHECK(s["found"] == true);
      }
    }
  }
}

TEST_CASE("compare keeps the ops asked for, and counts the same", "[compare]") {
  RunPlan a;
  RunPlan b = a;
  b.diverge_step = 20;  // steps before match (not kept), from 20 on one op diverges
  b.extra_op = true;
  TempDir dir("compare_keep");
  test::write_dump_data(dir.path() / "a", make_run(a), 7);
  test::write_dump_data(dir.path() / "b", make_run(b), 7);
  for (bool first : {false, true}) {
    CompareOptions all;
    all.first = first;
    DumpReader ra((dir.path() / "a").string()), rb((dir.path() / "b").string());
    const CompareResult r_all = compare_dumps(ra, rb, all);
    for (KeepOps keep : {KeepOps::kWarned, KeepOps::kDivergent}) {
      CAPTURE(first, static_cast<int>(keep));
      CompareOptions o = all;
      o.keep_ops = keep;
      DumpReader sa((dir.path() / "a").string()), sb((dir.path() / "b").string());
      CompareResult r = compare_dumps(sa, sb, o);
      std::vector<nlohmann::json> expected, kept;
      for (const OpCompare& oc : r_all.ops) {
        if (oc.classification == "divergent" || (keep == KeepOps::kWarned && oc.warning))
          expected.push_back(oc.to_json());
      }
      for (const OpCompare& oc : r.ops) kept.push_back(oc.to_json());
      CHECK(kept == expected);
      CHECK_FALSE(kept.empty());
      CHECK(kept.size() < r_all.ops.size());
      CHECK(r.matched == static_cast<int64_t>(r_all.ops.size()));
      // Everything but the ops kept (and "ops" of the statistics JSON) is the same.
      nlohmann::json x = r.to_json(), y = r_all.to_json();
      x.erase("ops");
      y.erase("ops");
      CHECK(x == y);
    }
  }
}

TEST_CASE("compare streamed holds the groups in flight, not the runs", "[compare]") {
  RunPlan a;
  a.steps = 200;
  RunPlan b = a;
  b.noise = 1e-7;
  TempDir dir("compare_peak");
  test::write_dump_data(dir.path() / "a", make_run(a), 5);
  test::write_dump_data(dir.path() / "b", make_run(b), 11);
  CompareOptions first;
  first.first = true;
  first.keep_ops = KeepOps::kDivergent;
  first.threads = 1;
  const nlohmann::json s = compare_json(dir.path() / "a", dir.path() / "b", first, true);
  CHECK(s["matched"] == 200 * 8);
  CHECK(analysis_detail::compare_streamed_peak() <= 6);
  CHECK(s["divergent"].empty());
  // Judging threads hold the groups they judge, those waiting for them and the results
  // waiting for an earlier group's: a few more, whatever the scheduler does.
  for (unsigned threads : {2u, 4u}) {
    CAPTURE(threads);
    first.threads = threads;
    CHECK(compare_json(dir.path() / "a", dir.path() / "b", first, true) == s);
    CHECK(analysis_detail::compare_streamed_peak() <= 10 + 8 * threads);
  }
  // A constant that differs in every step: every verdict waits for the whole run (the
  // answer depends on every step), so the groups stay; the result is the same.
  b.eps = 1e-6;
  TempDir dir2("compare_peak_constant");
  test::write_dump_data(dir2.path() / "a", make_run(a), 5);
  test::write_dump_data(dir2.path() / "b", make_run(b), 11);
  const nlohmann::json c = compare_json(dir2.path() / "a", dir2.path() / "b", first, true);
  CHECK(analysis_detail::compare_streamed_peak() >= 190);
  CHECK(c == compare_json(dir2.path() / "a", dir2.path() / "b", first, false));
  CHECK(c["found"] == true);
  CHECK(c["divergent"].size() == 2 * 200);  // both layer norms of every step
}

TEST_CASE("compare passes over the steps whose frames are the same bytes in both runs",
          "[compare][differential]") {
  struct Case {
    RunPlan a, b;
    bool passes;  // some steps are passed over
  };
  std::vector<Case> cases;
  {
    Case c;  // the same until step 17 (a nondeterministic op there), background ops
    c.a.steps = c.b.steps = 40;
    c.a.background = c.b.background = true;
    c.b.diverge_step = 17;
    c.passes = true;
    cases.push_back(c);
  }
  {
    Case c;  // the same runs, two ranks
    c.a.ranks = c.b.ranks = 2;
    c.passes = true;
    cases.push_back(c);
  }
  {
    Case c;  // a constant that differs from step 9 on: a verdict asks whether it is a
             // constant of the run, which the steps passed over would tell: read again whole
    c.b.eps = 1e-6;
    c.b.noise = 1e-7;  // outputs that differ: the rounding model judges the op
    c.passes = false;
    cases.push_back(c);
  }
  {
    Case c;  // the same records, but A scaled its loss: compared unscaled, never passed over
    c.a.loss_scale = 1;
    c.b.loss_scale = 1;
    c.passes = true;
    cases.push_back(c);
  }
  {
    Case c;  // a number that changes at step 9 in both runs, and differs between them by
             // rounding from there: data, not a constant, which only the steps before (the
             // same in both runs) show
    c.b.noise = 1e-7;
    c.passes = false;
    cases.push_back(c);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(i);
    TempDir dir("compare_identical");
    DumpData da = make_run(cases[i].a), db = make_run(cases[i].b);
    if (i == 2 || i == 4) {  // the runs differ from step 9 on only
      for (size_t k = 0; k < db.ops.size(); ++k)
        if (db.ops[k].step < 9) db.ops[k] = da.ops[k];
    }
    if (i == 4) {
      for (DumpData* d : {&da, &db}) {
        for (OpRecord& r : d->ops)
          if (r.step >= 9 && r.op == "aten::native_layer_norm")
            r.inputs[1].value = d == &da ? "2e-05" : "2.0000001e-05";
      }
    }
    test::write_dump_data(dir.path() / "a", da, 4096, true, /*end_steps=*/true);
    test::write_dump_data(dir.path() / "b", db, 4096, true, /*end_steps=*/true);
    for (const CompareOptions& opt : every_mode(cases[i].a.ranks)) {
      CAPTURE(opt.first, opt.exact, opt.by_module, static_cast<int>(opt.keep_ops),
              opt.step.value_or(-1), opt.rank.value_or(-1), opt.ranks.has_value());
      DumpReader ra((dir.path() / "a").string()), rb((dir.path() / "b").string());
      CompareResult r = compare_dumps(ra, rb, opt);
      uint64_t passed = 0;
      for (const DumpReader* reader : {&ra, &rb})
        for (const StreamStatus& s : reader->statuses()) passed += s.frames_passed;
      // (compare --step passes over the frames of other steps anyway.)
      const bool may_pass = opt.keep_ops != KeepOps::kAll && !opt.by_module;
      if (!opt.step) CHECK((passed > 0) == (may_pass && cases[i].passes));
      r.path_a = r.path_b = "";
      const nlohmann::json s = r.to_json();
      const nlohmann::json m = compare_json(dir.path() / "a", dir.path() / "b", opt, false);
      CAPTURE(nlohmann::json::diff(s, m).dump());
      CHECK(s == m);
      if (i == 0 && opt.first && !opt.step && !opt.rank && !opt.ranks) CHECK(s["step"] == 17);
      if (i == 0 && !opt.step) CHECK(s["background_a"].get<int64_t>() > 10);
      if (i == 2 && opt.first && !opt.step) CHECK(s["step"] == 9);
      if (i == 4 && opt.first) CHECK(s["found"] == false);
    }
  }
}

TEST_CASE("compare of a dump without digests holds both runs, with the same result",
          "[compare][differential]") {
  RunPlan a;
  RunPlan b = a;
  b.diverge_step = 4;
  TempDir dir("compare_no_digests");
  const DumpData da = make_run(a), db = make_run(b);
  test::write_dump_data(dir.path() / "a", da, 5, /*digests=*/false);
  test::write_dump_data(dir.path() / "b", db, 5);
  test::write_dump_data(dir.path() / "b2", db, 9);
  CompareOptions first;
  first.first = true;
  const uint64_t streamed = analysis_detail::compare_streamed();
  const nlohmann::json old_a = compare_json(dir.path() / "a", dir.path() / "b", first, true);
  CHECK(analysis_detail::compare_streamed() == streamed);  // a frame without a digest
  // The same records with digests, read side by side: the same answer.
  const nlohmann::json new_a = compare_json(dir.path() / "b2", dir.path() / "b", first, true);
  CHECK(analysis_detail::compare_streamed() == streamed + 1);
  CHECK(old_a["step"] == 4);
  CHECK(old_a == compare_json(dir.path() / "a", dir.path() / "b", first, false));
  CHECK(new_a["found"] == false);  // b2 is b
}

TEST_CASE("compare reads both runs whole when a digest miscounts its steps",
          "[compare][differential]") {
  RunPlan a;
  a.steps = 10;
  RunPlan b = a;
  b.diverge_step = 6;
  TempDir dir("compare_lie");
  test::write_dump_data(dir.path() / "a", make_run(a), 16);  // frames of two steps
  test::write_dump_data(dir.path() / "b", make_run(b), 16);
  CompareOptions first;
  first.first = true;
  first.keep_ops = KeepOps::kDivergent;
  const nlohmann::json held = compare_json(dir.path() / "a", dir.path() / "b", first, false);
  // Rewrite A's first digest: one record of step 0 counted under step 1 (the totals agree,
  // so the digest is taken); then every reading that trusts it would judge step 1 early.
  const std::string ops = (dir.path() / "a" / "rank0" / "ops.jsonl.zst").string();
  const std::string bytes = test::read_bytes(ops);
  const size_t head = ZSTD_findFrameCompressedSize(bytes.data(), bytes.size());
  REQUIRE_FALSE(ZSTD_isError(head));
  FrameDigest d;
  uint64_t size = 0;
  REQUIRE(
      digest_detail::parse(std::string_view(bytes).substr(digest_detail::kSkippableHeader,
                                                          head - digest_detail::kSkippableHeader),
                           d, size));
  REQUIRE(d.steps.size() == 2);
  --d.steps[0].records;
  ++d.steps[1].records;
  test::write_bytes(ops, digest_detail::encode(d, size) + bytes.substr(head));
  const uint64_t streamed = analysis_detail::compare_streamed();
  const nlohmann::json s = compare_json(dir.path() / "a", dir.path() / "b", first, true);
  CHECK(analysis_detail::compare_streamed() == streamed);  // fell back to holding both
  CHECK(s == held);
  CHECK(s["step"] == 6);
}

TEST_CASE("compare of a truncated stream reads the same streamed and in memory",
          "[compare][differential]") {
  RunPlan a;
  a.steps = 12;
  RunPlan b = a;
  b.diverge_step = 9;
  TempDir dir("compare_cut");
  test::write_dump_data(dir.path() / "a", make_run(a), 4);
  test::write_dump_data(dir.path() / "b", make_run(b), 4);
  const std::string ops = (dir.path() / "b" / "rank0" / "ops.jsonl.zst").string();
  const std::string bytes = test::read_bytes(ops);
  for (size_t cut : {bytes.size() / 3, bytes.size() / 2, bytes.size() - 3}) {
    CAPTURE(cut);
    test::write_bytes(ops, bytes.substr(0, cut));
    for (const CompareOptions& opt : every_mode(1)) {
      const nlohmann::json s = compare_json(dir.path() / "a", dir.path() / "b", opt, true);
      const nlohmann::json m = compare_json(dir.path() / "a", dir.path() / "b", opt, false);
      CAPTURE(nlohmann::json::diff(s, m).dump());
      CHECK(s == m);
      if (cut < bytes.size() - 3) CHECK_FALSE(s["only_a"].empty());  // steps cut off B: A's only
    }
  }
}
