// Analyses over in-memory records: overflow origin, compare alignment, --first, --exact,
// summary, histories, export. Expected values are computed by hand in the comments.
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "analysis_fixtures.h"
#include "core/compare_check.h"
#include "precprobe_catch.h"

using namespace precprobe;
using namespace precprobe::test;

// ------------------------------------------------------------------ overflow

TEST_CASE("overflow: the first op turning finite inputs non-finite", "[analysis][overflow]") {
  DumpData d;
  add_step(d, 0, 0, {{"aten::mul", 0, {targ({1, 2})}, {targ({2, 4})}}});
  add_step(d, 1, 0,
           {{"aten::mul", 0, {targ({1, 2})}, {targ({2, 4})}},
            {"aten::exp", 1, {targ({2, 400})}, {targ({7.4, kInf})}},
            {"aten::sum", 2, {targ({7.4, kInf})}, {targ({kInf})}},
            {"aten::div", 3, {targ({kInf}), targ({2})}, {targ({kInf})}}});
  add_step(d, 2, 0, {{"aten::add", 0, {targ({kNaN})}, {targ({kNaN})}}});
  const OverflowResult r = find_overflow(d);
  REQUIRE(r.found);
  CHECK(r.origin.name == "aten::exp.0.forward");
  CHECK(r.origin.step == 1);
  CHECK(r.origin.seq == 1);
  REQUIRE(r.ranks.size() == 1);
  CHECK(r.ranks[0].later_nonfinite_ops == 3);  // sum, div in step 1; add in step 2
  CHECK(r.ranks[0].first_steps_affected == std::vector<int64_t>{1, 2});
  CHECK_FALSE(r.ranks[0].nonfinite_before_origin);
  const auto j = r.to_json();
  CHECK(j["found"] == true);
  CHECK(j["name"] == "aten::exp.0.forward");
  CHECK(j["op"] == "aten::exp");
  CHECK(j["direction"] == "forward");
  CHECK(j["step"] == 1);
  CHECK(j["rank"] == 0);
}

TEST_CASE("overflow: an op that only propagates is never the origin", "[analysis][overflow]") {
  DumpData d;
  // The NaN is already in the data: every op has a non-finite input.
  add_step(d, 0, 0,
           {{"aten::mul", 0, {targ({kNaN, 1})}, {targ({kNaN, 2})}},
            {"aten::relu", 1, {targ({kNaN, 2})}, {targ({kNaN, 2})}}});
  OverflowResult r = find_overflow(d);
  CHECK_FALSE(r.found);
  CHECK(r.any_nonfinite);
  REQUIRE(r.ranks[0].first_nonfinite_input);
  CHECK(r.ranks[0].first_nonfinite_input->name == "aten::mul.0.forward");
  CHECK(r.to_json()["found"] == false);
  // A genuine origin later in the step is reported, flagged as preceded by non-finite input.
  add_step(d, 0, 0, {{"aten::log", 2, {targ({0.0, 1})}, {targ({-kInf, 0})}}});
  r = find_overflow(d);
  REQUIRE(r.found);
  CHECK(r.origin.op == "aten::log");
  CHECK(r.ranks[0].nonfinite_before_origin);
}

TEST_CASE("overflow: nested ops blame the innermost producer", "[analysis][overflow]") {
  // Records are written when ops end: inner ops first in file order, larger seq.
  DumpData d;
  add_step(d, 0, 0,
           {{"aten::t", 11, {targ({1, 2})}, {targ({1, 2})}, 0, 1},
            {"aten::addmm", 12, {targ({1, 2})}, {targ({kInf, 2})}, 0, 1},
            {"aten::linear", 10, {targ({1, 2})}, {targ({kInf, 2})}, 0, 0},
            {"aten::relu", 13, {targ({kInf, 2})}, {targ({kInf, 2})}, 0, 0}});
  OverflowResult r = find_overflow(d);
  REQUIRE(r.found);
  CHECK(r.origin.op == "aten::addmm");
  CHECK(r.ranks[0].later_nonfinite_ops == 2);  // linear (ends after addmm) and relu

  // The same calls written in seq order (as the probe writes them): same answer.
  DumpData seq_order;
  add_step(seq_order, 0, 0,
           {{"aten::linear", 10, {targ({1, 2})}, {targ({kInf, 2})}, 0, 0},
            {"aten::t", 11, {targ({1, 2})}, {targ({1, 2})}, 0, 1},
            {"aten::addmm", 12, {targ({1, 2})}, {targ({kInf, 2})}, 0, 1},
            {"aten::relu", 13, {targ({kInf, 2})}, {targ({kInf, 2})}, 0, 0}});
  r = find_overflow(seq_order);
  REQUIRE(r.found);
  CHECK(r.origin.op == "aten::addmm");
  CHECK(r.ranks[0].later_nonfinite_ops == 2);

  // A candidate that starts after the outer op has returned is not nested in it.
  DumpData siblings;
  add_step(siblings, 0, 0,
           {{"aten::linear", 0, {targ({1})}, {targ({kInf})}, 0, 0},
            {"aten::t", 1, {targ({1})}, {targ({1})}, 0, 1},
            {"aten::add", 2, {targ({1})}, {targ({1})}, 0, 0},
            {"aten::exp", 3, {targ({1})}, {targ({kInf})}, 0, 1}});
  r = find_overflow(siblings);
  CHECK(r.origin.op == "aten::linear");

  // Inner ops all finite: the outer op itself produced the value.
  DumpData d2;
  add_step(d2, 0, 0,
           {{"aten::t", 11, {targ({1, 2})}, {targ({1, 2})}, 0, 1},
            {"aten::linear", 10, {targ({1, 2})}, {targ({kInf, 2})}, 0, 0}});
  r = find_overflow(d2);
  REQUIRE(r.found);
  CHECK(r.origin.op == "aten::linear");

  // Two levels: the depth-2 candidate inside the depth-1 candidate wins.
  DumpData d3;
  add_step(d3, 0, 0,
           {{"aten::exp", 12, {targ({1})}, {targ({kInf})}, 0, 2},
            {"aten::softmax", 11, {targ({1})}, {targ({kNaN})}, 0, 1},
            {"aten::attn", 10, {targ({1})}, {targ({kNaN})}, 0, 0}});
  r = find_overflow(d3);
  CHECK(r.origin.op == "aten::exp");

  // A candidate on another thread is not nested, whatever its seq.
  DumpData d4;
  OpSpec other{"aten::mm", 11, {targ({1})}, {targ({kInf})}, 0, 1};
  other.thread = 1;
  add_step(d4, 0, 0, {other, {"aten::linear", 10, {targ({1})}, {targ({kInf})}, 0, 0}});
  r = find_overflow(d4);
  CHECK(r.origin.op == "aten::linear");
}

TEST_CASE("overflow: backward ops and several ranks", "[analysis][overflow]") {
  DumpData d;
  add_step(d, 3, 0, {{"aten::exp", 5, {targ({1})}, {targ({kInf})}}});
  OpSpec bwd{"aten::mul", 40, {targ({1}), targ({3e38})}, {targ({kInf})}};
  bwd.dir = Direction::kBackward;
  add_step(d, 2, 1, {{"aten::mul", 0, {targ({1})}, {targ({1})}}, bwd});
  const OverflowResult r = find_overflow(d);
  REQUIRE(r.found);
  CHECK(r.origin.rank == 1);  // step 2 comes before step 3
  CHECK(r.origin.name == "aten::mul.0.backward");
  CHECK(r.origin.direction == "backward");
  REQUIRE(r.ranks.size() == 2);
  CHECK(r.ranks[0].origin.op == "aten::exp");
}

// ------------------------------------------------------------------ alignment

TEST_CASE("align_sequences: inserted and deleted names stay unmatched", "[analysis][compare]") {
  using P = std::vector<std::pair<int64_t, int64_t>>;
  CHECK(align_sequences({"a", "b", "c"}, {"a", "b", "c"}) == P{{0, 0}, {1, 1}, {2, 2}});
  CHECK(align_sequences({"m", "r", "m", "r"}, {"m", "r", "r", "m", "r"}) ==
        P{{0, 0}, {1, 1}, {-1, 2}, {2, 3}, {3, 4}});
  CHECK(align_sequences({"x", "a", "y", "b"}, {"x", "y", "b"}) ==
        P{{0, 0}, {1, -1}, {2, 1}, {3, 2}});
  // Middle replaced: LCS keeps "c" and leaves a/b unmatched on each side.
  CHECK(align_sequences({"s", "a", "c", "e"}, {"s", "b", "c", "e"}) ==
        P{{0, 0}, {1, -1}, {-1, 1}, {2, 2}, {3, 3}});
  CHECK(align_sequences({"s", "a", "b", "e"}, {"s", "b", "x", "e"}) ==
        P{{0, 0}, {1, -1}, {2, 1}, {-1, 2}, {3, 3}});
  // Past the work bound the rest is left unpaired: still in order, never a pair of unequal
  // names.
  CHECK(align_sequences({"s", "a", "b", "e"}, {"s", "b", "x", "e"}, 1) ==
        P{{0, 0}, {1, -1}, {2, -1}, {-1, 1}, {-1, 2}, {3, 3}});
}

namespace {

// A three-op chain: mm -> relu -> sum, with the mm output scaled by `f` in one run and
// the change carried through the later ops (as it would be).
DumpData chain(double f, double noise = 1) {
  DumpData d;
  const Arg x = targ({1, 2, 3}), w = targ({0.5, -1, 2}), y = targ({0.5, -2, 6});
  const Arg z = targ({0.5, 0, 6}), s = targ({6.5});
  add_step(d, 0, 0,
           {{"aten::mm", 0, {x, w}, {scaled(y, f * noise)}},
            {"aten::relu", 1, {scaled(y, f * noise)}, {scaled(z, f * noise * noise)}},
            {"aten::sum", 2, {scaled(z, f * noise * noise)}, {scaled(s, f)}}});
  return d;
}

}  // namespace

TEST_CASE("compare --first blames the op whose inputs match", "[analysis][compare]") {
  CompareOptions opt;
  opt.first = true;
  const CompareResult r = test::compare_checked(chain(1.01), chain(1.0), opt);
  REQUIRE(r.found);
  REQUIRE(r.first);
  CHECK(r.first->name == "aten::mm.0.forward");
  CHECK(r.first->input_error == Approx(0.0).margin(0));
  // max 6.06 vs 6: 0.06 / 6.06 (relative to the larger magnitude).
  CHECK(r.first->output_error == Approx(0.06 / 6.06));
  CHECK(r.differs());
  const auto j = r.to_json();
  CHECK(j["found"] == true);
  CHECK(j["name"] == "aten::mm.0.forward");
  CHECK(j["op"] == "aten::mm");
  CHECK(j["direction"] == "forward");
  // relu and sum only inherit the error: their score is ~0.
  for (const OpCompare& o : r.ops) {
    if (o.op != "aten::mm") CHECK(std::fabs(o.score) < 1e-12);
  }
}

TEST_CASE("compare --first ignores float noise", "[analysis][compare]") {
  CompareOptions opt;
  opt.first = true;
  const CompareResult r = test::compare_checked(chain(1.0, 1 + 3e-7), chain(1.0), opt);
  CHECK_FALSE(r.found);
  CHECK_FALSE(r.differs());
  CHECK_FALSE(r.identical);  // but the values are not bitwise equal
}

TEST_CASE("compare --first prefers the nested op that diverged", "[analysis][compare]") {
  // aten::linear (depth 0, seq 0) runs aten::addmm (depth 1, seq 1); both outputs are 1 %
  // off with equal inputs. The inner record comes first in the file (ops end inside out).
  auto run = [](double f) {
    DumpData d;
    const Arg x = targ({1, 2}), y = targ({3, 4});
    add_step(d, 0, 0,
             {{"aten::addmm", 1, {x}, {scaled(y, f)}, 0, 1},
              {"aten::linear", 0, {x}, {scaled(y, f)}, 0, 0}});
    return d;
  };
  CompareOptions opt;
  opt.first = true;
  const CompareResult r = test::compare_checked(run(1.01), run(1.0), opt);
  REQUIRE(r.found);
  CHECK(r.first->op == "aten::addmm");
  // Seq order in the file (the probe's order) gives the same answer.
  DumpData a = run(1.01), b = run(1.0);
  std::swap(a.ops[0], a.ops[1]);
  std::swap(b.ops[0], b.ops[1]);
  CHECK(test::compare_checked(a, b, opt).first->op == "aten::addmm");
  opt.first = false;
  opt.exact = true;
  CHECK(test::compare_checked(run(1.01), run(1.0), opt).first->op == "aten::addmm");
}

TEST_CASE("compare aligns around an inserted op", "[analysis][compare]") {
  DumpData a, b;
  const Arg x = targ({1, -2}), y = targ({1, 0});
  add_step(a, 0, 0,
           {{"aten::mm", 0, {x}, {x}, 0},
            {"aten::relu", 1, {x}, {y}, 0},
            {"aten::mm", 2, {y}, {y}, 1},
            {"aten::relu", 3, {y}, {y}, 1}});
  add_step(b, 0, 0,
           {{"aten::mm", 0, {x}, {x}, 0},
            {"aten::relu", 1, {x}, {y}, 0},
            {"aten::relu", 2, {y}, {y}, 1},  // extra in b
            {"aten::mm", 3, {y}, {y}, 1},
            {"aten::relu", 4, {y}, {y}, 2}});
  CompareResult r = test::compare_checked(a, b);
  CHECK(r.aligned_by_lcs == 1);
  REQUIRE(r.unmatched.size() == 1);
  CHECK(r.unmatched[0].side == "b");
  CHECK(r.unmatched[0].name == "aten::relu.1.forward");
  REQUIRE(r.ops.size() == 4);
  CHECK(r.ops[3].name == "aten::relu.1.forward");
  CHECK(r.ops[3].name_b == "aten::relu.2.forward");
  CHECK(r.warnings == 0);
  CHECK(r.differs());  // an unmatched op is a difference
  // The other way round it is an op missing from b... i.e. only in a.
  r = test::compare_checked(b, a);
  REQUIRE(r.unmatched.size() == 1);
  CHECK(r.unmatched[0].side == "a");
  REQUIRE(r.first_unmatched);
  CHECK(r.first_unmatched->seq == 2);
}

TEST_CASE("compare: statistics warnings and step/rank groups", "[analysis][compare]") {
  DumpData a, b;
  add_step(a, 0, 0, {{"aten::add", 0, {targ({1, 2})}, {targ({1, 10})}}});
  add_step(b, 0, 0, {{"aten::add", 0, {targ({1, 2})}, {targ({1, 4})}}});
  add_step(a, 1, 0, {{"aten::add", 0, {targ({1})}, {targ({1})}}});
  CompareResult r = test::compare_checked(a, b);
  CHECK(r.warnings == 1);
  CHECK(r.only_a == std::vector<std::pair<int64_t, int>>{{1, 0}});
  CHECK(r.differs());
  const auto j = r.to_json();
  CHECK(j["mode"] == "statistics");
  CHECK(j["ops"][0]["args"][1]["max"]["rel_pct"] == Approx(150));
  CompareOptions only0;
  only0.step = 1;
  r = test::compare_checked(a, b, only0);
  CHECK(r.ops.empty());
  CHECK(r.only_a.size() == 1);
}

TEST_CASE("compare --exact: bitwise identity", "[analysis][compare]") {
  CompareOptions opt;
  opt.exact = true;
  CompareResult r = test::compare_checked(chain(1.0), chain(1.0), opt);
  CHECK(r.identical);
  CHECK_FALSE(r.differs());
  CHECK(r.to_json()["identical"] == true);

  // One ulp in one mean: not identical, and that op is named.
  DumpData b = chain(1.0);
  double& mean = b.ops[1].outputs[0].tensor->mean;
  mean = std::nextafter(mean, 10.0);
  r = test::compare_checked(chain(1.0), b, opt);
  CHECK_FALSE(r.identical);
  REQUIRE(r.first);
  CHECK(r.first->name == "aten::relu.0.forward");
  CHECK(r.differs());
  const auto j = r.to_json();
  CHECK(j["identical"] == false);
  CHECK(j["name"] == "aten::relu.0.forward");

  // With hashes the hashes decide.
  DumpData ha = chain(1.0), hb = chain(1.0);
  for (DumpData* d : {&ha, &hb}) {
    for (OpRecord& o : d->ops) {
      for (Arg& x : o.outputs) x.tensor->hash = 42;
      for (Arg& x : o.inputs) x.tensor->hash = 42;
    }
  }
  hb.ops[2].outputs[0].tensor->hash = 43;
  r = test::compare_checked(ha, hb, opt);
  CHECK_FALSE(r.identical);
  CHECK(r.first->op == "aten::sum");
}

TEST_CASE("compare: a differing constant argument is blamed", "[analysis][compare]") {
  DumpData a, b;
  add_step(a, 0, 0, {{"aten::mul", 0, {targ({1, 2}), varg("0.5")}, {targ({0.5, 1})}}});
  add_step(b, 0, 0, {{"aten::mul", 0, {targ({1, 2}), varg("0.25")}, {targ({0.25, 0.5})}}});
  CompareOptions opt;
  opt.first = true;
  const CompareResult r = test::compare_checked(a, b, opt);
  REQUIRE(r.found);
  CHECK(r.first->op == "aten::mul");
}

// ------------------------------------------------------------------ summary and histories

TEST_CASE("summary counts records, non-finite ops, scaler and watchpoints", "[analysis]") {
  DumpData d;
  d.ranks.push_back(RankInfo{
      0, 1, "dump/rank0", R"({"format_version":1,"writer":{"records_dropped":3}})", std::nullopt});
  add_step(d, 0, 0, {{"aten::exp", 0, {targ({1})}, {targ({kInf})}}, {"aten::add", 1, {}, {}}});
  add_step(d, 1, 0, {{"aten::exp", 0, {targ({1})}, {targ({kInf})}}});
  ScalerRecord s0;
  s0.step = 0;
  s0.scale_before = 65536;
  s0.scale_after = 32768;
  s0.found_inf = s0.skipped = true;
  s0.event = "backoff";
  ScalerRecord s1;
  s1.step = 1;
  s1.scale_before = s1.scale_after = 32768;
  d.scaler = {s0, s1};
  GradRecord g;
  g.param = "fc.weight";
  g.step = 1;
  g.watch = {"norm>10"};
  d.grads = {g};
  const SummaryResult s = summarize_dump(d);
  CHECK(s.op_records == 3);
  CHECK(s.records_per_step == std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {1, 1}});
  REQUIRE(s.nonfinite_ops.size() == 1);
  CHECK(s.nonfinite_ops[0].name == "aten::exp");
  CHECK(s.nonfinite_ops[0].count == 2);
  CHECK(s.scaler.skipped == 1);
  CHECK(s.scaler.backoffs == 1);
  CHECK(*s.scaler.final_scale == Approx(32768));
  CHECK(*s.scaler.first_skip_step == 0);
  REQUIRE(s.watch_hits.size() == 1);
  CHECK(s.watch_hits[0].first_step == 1);
  CHECK(s.dropped == 3);
  const auto j = s.to_json();
  CHECK(j["meta"]["format_version"] == 1);
  CHECK(j["step_max"] == 1);
}

TEST_CASE("summary refuses a corrupt meta.json", "[analysis]") {
  DumpData d;
  d.ranks.push_back(RankInfo{0, 1, "dump/rank0", "{not json", std::nullopt});
  CHECK_THROWS_AS(summarize_dump(d), Error);
}

TEST_CASE("scale history merges parameter groups", "[analysis]") {
  DumpData d;
  for (int group = 0; group < 2; ++group) {
    ScalerRecord r;
    r.step = 4;
    r.group = group;
    r.scale_before = 1024;
    r.scale_after = 512;
    r.found_inf = group == 1;
    r.skipped = true;
    d.scaler.push_back(r);
  }
  const ScaleHistory h = scale_history(d);
  REQUIRE(h.entries.size() == 1);
  CHECK(h.entries[0].found_inf);
  const auto j = h.to_json();
  REQUIRE(j.is_array());
  CHECK(j[0]["step"] == 4);
  CHECK(j[0]["scale"] == 1024.0);
  CHECK(j[0]["found_inf"] == true);
  CHECK(j[0]["skipped"] == true);
}

TEST_CASE("grad history filters parameters and lists watchpoint hits", "[analysis]") {
  DumpData d;
  for (int step = 0; step < 3; ++step) {
    for (const char* p : {"fc1.weight", "fc2.weight"}) {
      GradRecord g;
      g.step = step;
      g.param = p;
      g.grad_norm = step + 1;
      if (step == 2 && std::string(p) == "fc2.weight") {
        g.grad_nan = 1;
        g.watch = {"nonfinite"};
      }
      d.grads.push_back(g);
    }
  }
  const GradHistory h = grad_history(d, "fc2");
  REQUIRE(h.params.size() == 1);
  CHECK(h.params[0].records.size() == 3);
  CHECK(h.params[0].nonfinite_steps == 1);
  CHECK(h.params[0].max_grad_norm == Approx(3));
  REQUIRE(h.hits.size() == 1);
  CHECK(h.hits[0] == std::make_pair(int64_t{2}, std::string("fc2.weight: nonfinite")));
}

TEST_CASE("export writes one row per argument, CSV quoted", "[analysis][export]") {
  DumpData d;
  OpSpec s{"aten::add", 0, {targ({1, 2}), varg("\"a,b\"")}, {targ({kNaN, 1})}};
  add_step(d, 0, 0, {s});
  d.ops[0].scope = "model/fc";
  d.ops[0].seqnr = 7;
  d.ops[0].optimizer = true;
  d.ops[0].module = "b0.attn";
  std::ostringstream csv;
  CHECK(export_table(d, StreamKind::kOps, ExportFormat::kCsv, csv) == 3);
  std::istringstream lines(csv.str());
  std::string header, row1, row2, row3;
  std::getline(lines, header);
  std::getline(lines, row1);
  std::getline(lines, row2);
  std::getline(lines, row3);
  CHECK(header.rfind("step,rank,seq,name,op,overload,call,dir,depth,thread,scope,node,io,index",
                     0) == 0);
  CHECK(header.size() > 25);
  CHECK(header.substr(header.size() - 25) == ",value,grad,sn,bg,opt,mod");
  CHECK(row1.size() > 22);
  CHECK(row1.substr(row1.size() - 22) == ",,7,false,true,b0.attn");  // value, grad: empty
  CHECK(row1.find("\"[2]\"") == std::string::npos);  // a one-element shape needs no quotes
  CHECK(row1.find(",[2],") != std::string::npos);
  CHECK(row2.find("\"\"\"a,b\"\"\"") != std::string::npos);  // "a,b" as JSON, then quoted
  CHECK(row3.find(",output,0,") != std::string::npos);
  std::ostringstream jsonl;
  CHECK(export_table(d, StreamKind::kOps, ExportFormat::kJsonl, jsonl) == 3);
  std::istringstream jl(jsonl.str());
  std::string line;
  std::getline(jl, line);
  const auto j = nlohmann::json::parse(line);
  CHECK(j["op"] == "aten::add");
  CHECK(j["io"] == "input");
  CHECK(j["scope"] == "model/fc");
  CHECK(j["max"] == 2.0);
  CHECK(j["sn"] == 7);
  CHECK(j["bg"] == false);
  CHECK(j["opt"] == true);
  CHECK(j["mod"] == "b0.attn");
  CHECK(j["grad"].is_null());
}

// ------------------------------------------------------------------ randomized invariants

namespace {

// Random steps of random ops: values finite or not, each op nested or not.
DumpData random_dump(std::mt19937& rng, int steps, int ops_per_step) {
  const char* const names[] = {"aten::mm", "aten::relu", "aten::exp", "aten::add"};
  std::uniform_real_distribution<double> u(0, 1);
  DumpData d;
  for (int step = 0; step < steps; ++step) {
    std::vector<OpSpec> ops;
    std::map<std::string, int64_t> calls;
    for (int i = 0; i < ops_per_step; ++i) {
      const std::string name = names[rng() % 4];
      auto value = [&] { return u(rng) < 0.05 ? kInf : u(rng) * 4 - 2; };
      ops.push_back({name,
                     i,
                     {targ({value(), value()})},
                     {targ({value()})},
                     calls[name]++,
                     static_cast<int32_t>(rng() % 2)});
    }
    add_step(d, step, static_cast<int>(rng() % 2), ops);
  }
  return d;
}

}  // namespace

TEST_CASE("randomized: overflow origin is a candidate and nothing earlier is",
          "[analysis][overflow]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const DumpData d = random_dump(rng, 4, 12);
    const OverflowResult r = find_overflow(d);
    bool any_candidate = false;
    for (const OpRecord& o : d.ops)
      any_candidate = any_candidate || (o.outputs_non_finite() && !o.inputs_non_finite());
    REQUIRE(r.found == any_candidate);
    if (!r.found) continue;
    const OpRecord* origin = nullptr;
    for (const OpRecord& o : d.ops) {
      if (o.rank == r.origin.rank && o.step == r.origin.step && o.seq == r.origin.seq) origin = &o;
      // No candidate in an earlier step on any rank.
      if (o.outputs_non_finite() && !o.inputs_non_finite()) CHECK(o.step >= r.origin.step);
    }
    REQUIRE(origin != nullptr);
    CHECK(origin->outputs_non_finite());
    CHECK_FALSE(origin->inputs_non_finite());
  }
}

TEST_CASE("randomized: a dump equals itself; deleted ops are reported", "[analysis][compare]") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 100; ++trial) {
    const DumpData a = random_dump(rng, 3, 15);
    CompareOptions exact;
    exact.exact = true;
    const CompareResult same = test::compare_checked(a, a, exact);
    REQUIRE(same.identical);
    REQUIRE_FALSE(same.found);
    REQUIRE(same.ops.size() == a.ops.size());
    // Delete a few ops from b: exactly those are unmatched (on side a), the rest pair up.
    DumpData b = a;
    const size_t removed = 1 + rng() % 3;
    for (size_t k = 0; k < removed; ++k) b.ops.erase(b.ops.begin() + rng() % b.ops.size());
    const CompareResult r = test::compare_checked(a, b);
    CHECK(r.unmatched.size() == removed);
    CHECK(r.ops.size() == a.ops.size() - removed);
    for (const UnmatchedOp& u : r.unmatched) CHECK(u.side == "a");
  }
}
