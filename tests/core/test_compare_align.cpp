// compare when the runs ran different ops: ops pair by content (op, direction, shapes,
// parameter), never by position, and the places where the sequences differ are reported.
// Dumps are written with the real DumpWriter (support/op_dump.h) and read back.
#include <chrono>
#include <random>
#include <set>

#include "analysis/align.h"
#include "core/temp_dir.h"
#include "precprobe/analysis.h"
#include "precprobe/reader.h"
#include "precprobe_catch.h"
#include "support/op_dump.h"

using namespace precprobe;        // NOLINT(google-build-using-namespace): test file
using namespace precprobe::test;  // NOLINT(google-build-using-namespace): test helpers

namespace {

CompareResult compare_written(const std::map<int64_t, std::vector<OpLine>>& a,
                              const std::map<int64_t, std::vector<OpLine>>& b,
                              const CompareOptions& opt) {
  TempDir dir("compare_align");
  write_op_dump(dir / "a", a);
  write_op_dump(dir / "b", b);
  DumpReader ra(dir / "a"), rb(dir / "b");
  return compare_dumps(ra, rb, opt);
}

const OpCompare* paired_with_a_seq(const CompareResult& r, int64_t seq) {
  for (const OpCompare& o : r.ops) {
    if (o.seq_a == seq) return &o;
  }
  return nullptr;
}

}  // namespace

// The case: both runs hold the same ops, once each, in another order (run A copies
// conv2.weight's gradient and takes bn1.weight's over; run B the other way round). Paired by
// name (the k-th aten::detach of A with the k-th of B), conv2.weight's [64, 64, 3, 3]
// gradient was compared with bn1.weight's [64] one ("shape differs").
TEST_CASE("compare pairs the weight gradient with the weight gradient when the ops differ",
          "[compare][align]") {
  CompareOptions opt;
  opt.exact = true;
  const CompareResult r = compare_written({{0, block_backward({"conv2.weight"})}},
                                          {{0, block_backward({"bn1.weight"})}}, opt);
  // Every paired op is the same computation: same shapes, the same values.
  for (const OpCompare& o : r.ops) {
    INFO(o.name << " (A seq " << o.seq_a << ") paired with " << o.name_b << " (B seq " << o.seq_b
                << ")");
    CHECK(o.op == o.name_b.substr(0, o.op.size()));
    for (const ArgCompare& a : o.args) {
      CHECK(a.shape_n == a.shape_b);
      CHECK(a.note.empty());
      CHECK(a.exact);
    }
  }
  CHECK_FALSE(r.first);  // no paired op differs
  CHECK_FALSE(r.identical);
  CHECK(r.differs());  // the sequence difference is a difference
  REQUIRE(r.ops.size() == 9);
  // The weight gradients' ops: conv1's convolution_backward and its AccumulateGrad.
  const OpCompare* conv1 = paired_with_a_seq(r, 10);
  REQUIRE(conv1);
  CHECK(conv1->name == "aten::convolution_backward.1.backward");
  CHECK(conv1->seq_b == 10);
  const OpCompare* conv1_grad = paired_with_a_seq(r, 11);
  REQUIRE(conv1_grad);
  CHECK(conv1_grad->seq_b == 11);
  CHECK(conv1_grad->args[0].shape_n == kWeight);
  // bn1's backward sits one op earlier in B (one op instead of two before it).
  const OpCompare* bn1 = paired_with_a_seq(r, 7);
  REQUIRE(bn1);
  CHECK(bn1->name == "aten::native_batch_norm_backward.1.backward");
  CHECK(bn1->seq_b == 6);
  // The ops of one run only, at their places.
  using U = std::tuple<std::string, int64_t, std::string>;
  std::vector<U> unmatched;
  for (const UnmatchedOp& u : r.unmatched) unmatched.emplace_back(u.side, u.seq, u.name);
  CHECK(unmatched == std::vector<U>{{"a", 5, "aten::new_empty_strided.0.backward"},
                                    {"a", 6, "aten::copy_.0.backward"},
                                    {"b", 5, "aten::detach.2.backward"},
                                    {"a", 8, "aten::detach.2.backward"},
                                    {"b", 7, "aten::new_empty_strided.0.backward"},
                                    {"b", 8, "aten::copy_.0.backward"}});
  // ... and the places where the sequences differ, the first one first.
  CHECK(r.groups_compared == 1);
  CHECK(r.aligned_by_lcs == 1);
  CHECK(r.aligned_approximately == 0);
  REQUIRE(r.sequence_diffs.size() == 2);
  const SequenceDiff& p0 = r.sequence_diffs[0];
  CHECK(std::tie(p0.step, p0.rank, p0.seq_a, p0.seq_b, p0.count_a, p0.count_b) ==
        std::make_tuple(int64_t{0}, 0, int64_t{5}, int64_t{5}, int64_t{2}, int64_t{1}));
  CHECK(p0.names_a ==
        std::vector<std::string>{"aten::new_empty_strided.0.backward", "aten::copy_.0.backward"});
  CHECK(p0.names_b == std::vector<std::string>{"aten::detach.2.backward"});
  const SequenceDiff& p1 = r.sequence_diffs[1];
  CHECK(std::tie(p1.seq_a, p1.seq_b, p1.count_a, p1.count_b) ==
        std::make_tuple(int64_t{8}, int64_t{7}, int64_t{1}, int64_t{2}));
  REQUIRE(r.first_sequence_diff);
  CHECK(r.first_sequence_diff->seq_a == 5);
  const nlohmann::json j = r.to_json();
  CHECK(j["sequence_differs"] == true);
  CHECK(j["groups_compared"] == 1);
  CHECK(j["sequence_diffs"].size() == 2);
  CHECK(j["first_sequence_diff"] == nlohmann::json{{"step", 0},
                                                   {"rank", 0},
                                                   {"seq_a", 5},
                                                   {"seq_b", 5},
                                                   {"count_a", 2},
                                                   {"count_b", 1},
                                                   {"names_a", p0.names_a},
                                                   {"names_b", p0.names_b}});
  CHECK(j["identical"] == false);
  CHECK(j["found"] == false);  // no paired op differs: `first` and its keys are null
  CHECK(j["name"].is_null());
  CHECK(j["first_unmatched"]["seq"] == 5);
}

TEST_CASE("compare never pairs ops on different parameters", "[compare][align]") {
  // The optimizer updates two weights of one shape in another order: same ops, same
  // shapes, once each; by name the first aten::add_ of A (conv1.weight) met the first of B
  // (conv2.weight).
  auto update = [](const std::string& param, double tag) {
    return fwd("aten::add_", {tensor(kWeight, tag, param), tensor(kWeight, tag + 1)},
               {tensor(kWeight, tag + 2, param)});
  };
  const OpLine c1 = update("conv1.weight", 10), c2 = update("conv2.weight", 20);
  const CompareResult r = compare_written({{0, {c1, c2}}}, {{0, {c2, c1}}}, {});
  REQUIRE(r.ops.size() == 1);
  CHECK(r.ops[0].seq_a != r.ops[0].seq_b);  // the same parameter's update, wherever it ran
  CHECK(r.ops[0].exact);
  CHECK(r.unmatched.size() == 2);
  CHECK(r.sequence_diffs.size() == 2);
  CHECK(r.differs());

  // Where one run names no parameter (a bf16 run multiplies by a cast copy of the weight),
  // the shapes decide: the ops pair.
  auto linear = [](const std::string& param) {
    return fwd("aten::mm", {tensor({4, 8}, 1), tensor({8, 3}, 2, param)}, {tensor({4, 3}, 3)});
  };
  const CompareResult cast = compare_written({{0, {linear("fc.weight")}}}, {{0, {linear("")}}}, {});
  CHECK(cast.ops.size() == 1);
  CHECK(cast.unmatched.empty());
  CHECK(cast.aligned_by_lcs == 0);
}

namespace {

// Ten forward ops of distinct shapes and values: a chain of linear layers.
std::vector<OpLine> chain_ops() {
  std::vector<OpLine> ops;
  for (int64_t k = 0; k < 10; ++k) {
    ops.push_back(fwd(k % 2 ? "aten::relu" : "aten::mm", {tensor({4, k + 1}, 100.0 + k)},
                      {tensor({4, k + 2}, 101.0 + k)}));
  }
  return ops;
}

OpLine extra_op() { return fwd("aten::mul", {tensor({4, 6}, 7)}, {tensor({4, 6}, 8)}); }

// Every op of A except `skip` pairs with its counterpart (the same tag, so exact).
void check_pairs_in_order(const CompareResult& r, int64_t step, size_t expected,
                          int64_t seq_b_shift_from, int64_t shift) {
  size_t in_step = 0;
  for (const OpCompare& o : r.ops) {
    if (o.step != step) continue;
    ++in_step;
    INFO("A seq " << o.seq_a << " paired with B seq " << o.seq_b);
    CHECK(o.exact);
    CHECK(o.seq_b == o.seq_a + (o.seq_a >= seq_b_shift_from ? shift : 0));
  }
  CHECK(in_step == expected);
}

}  // namespace

TEST_CASE("compare: an op inserted, deleted or replaced in the middle of a step",
          "[compare][align]") {
  const std::vector<OpLine> base = chain_ops();
  CompareOptions exact;
  exact.exact = true;

  SECTION("inserted in B") {
    std::vector<OpLine> b = base;
    b.insert(b.begin() + 5, extra_op());
    const CompareResult r = compare_written({{0, base}, {1, base}}, {{0, base}, {1, b}}, exact);
    check_pairs_in_order(r, 1, 10, 5, 1);
    REQUIRE(r.sequence_diffs.size() == 1);
    const SequenceDiff& d = r.sequence_diffs[0];
    CHECK(std::tie(d.step, d.seq_a, d.seq_b, d.count_a, d.count_b) ==
          std::make_tuple(int64_t{1}, int64_t{5}, int64_t{5}, int64_t{0}, int64_t{1}));
    CHECK(d.names_b == std::vector<std::string>{"aten::mul.0.forward"});
    CHECK(r.aligned_by_lcs == 1);  // step 1 only; step 0 paired in order
    CHECK_FALSE(r.first);
    CHECK_FALSE(r.identical);
    CHECK(r.differs());
  }
  SECTION("missing in B") {
    std::vector<OpLine> b = base;
    b.erase(b.begin() + 5);
    const CompareResult r = compare_written({{1, base}}, {{1, b}}, exact);
    check_pairs_in_order(r, 1, 9, 6, -1);
    REQUIRE(r.sequence_diffs.size() == 1);
    const SequenceDiff& d = r.sequence_diffs[0];
    CHECK(std::tie(d.step, d.seq_a, d.seq_b, d.count_a, d.count_b) ==
          std::make_tuple(int64_t{1}, int64_t{5}, int64_t{5}, int64_t{1}, int64_t{0}));
    CHECK(d.names_a == std::vector<std::string>{"aten::relu.2.forward"});
    CHECK(r.differs());
  }
  SECTION("replaced in B") {
    std::vector<OpLine> b = base;
    b[5] = extra_op();
    const CompareResult r = compare_written({{1, base}}, {{1, b}}, exact);
    check_pairs_in_order(r, 1, 9, 0, 0);
    REQUIRE(r.sequence_diffs.size() == 1);
    const SequenceDiff& d = r.sequence_diffs[0];
    CHECK(std::tie(d.seq_a, d.seq_b, d.count_a, d.count_b) ==
          std::make_tuple(int64_t{5}, int64_t{5}, int64_t{1}, int64_t{1}));
    CHECK(d.names_a == std::vector<std::string>{"aten::relu.2.forward"});
    CHECK(d.names_b == std::vector<std::string>{"aten::mul.0.forward"});
  }
  SECTION("appended at the end of A") {
    std::vector<OpLine> a = base;
    a.push_back(extra_op());
    const CompareResult r = compare_written({{1, a}}, {{1, base}}, exact);
    REQUIRE(r.sequence_diffs.size() == 1);
    const SequenceDiff& d = r.sequence_diffs[0];
    CHECK(std::tie(d.seq_a, d.seq_b, d.count_a, d.count_b) ==
          std::make_tuple(int64_t{10}, int64_t{10}, int64_t{1}, int64_t{0}));
  }
}

TEST_CASE("compare: equal op sequences pair in order, as before", "[compare][align]") {
  // One value differs: the pairing is the same with or without it, op for op.
  std::vector<OpLine> b = chain_ops();
  b[3].out[0] = tensor({4, 5}, 999);
  CompareOptions exact;
  exact.exact = true;
  const CompareResult r = compare_written({{0, chain_ops()}}, {{0, b}}, exact);
  CHECK(r.aligned_by_lcs == 0);
  CHECK(r.aligned_by_thread == 0);
  CHECK(r.sequence_diffs.empty());
  CHECK_FALSE(r.first_sequence_diff);
  CHECK(r.unmatched.empty());
  REQUIRE(r.ops.size() == 10);
  for (const OpCompare& o : r.ops) {
    CHECK(o.seq_a == o.seq_b);
    CHECK(o.name == o.name_b);  // what pairing by name gave
  }
  REQUIRE(r.first);
  CHECK(r.first->seq_a == 3);
  CHECK(r.to_json()["sequence_differs"] == false);
  CHECK(r.to_json()["first_sequence_diff"].is_null());
}

TEST_CASE("compare: threads interleaved differently pair per thread", "[compare][align]") {
  // Thread 0 runs mm, relu, mm; thread 1 runs two adds; their interleaving differs.
  auto on = [](OpLine l, uint32_t thread) {
    l.thread = thread;
    return l;
  };
  const OpLine m0 = on(fwd("aten::mm", {tensor({2, 2}, 1)}, {tensor({2, 2}, 2)}), 0);
  const OpLine r0 = on(fwd("aten::relu", {tensor({2, 2}, 2)}, {tensor({2, 2}, 3)}), 0);
  const OpLine m1 = on(fwd("aten::mm", {tensor({2, 2}, 3)}, {tensor({2, 2}, 4)}), 0);
  const OpLine s0 = on(fwd("aten::add", {tensor({3}, 5)}, {tensor({3}, 6)}), 1);
  const OpLine s1 = on(fwd("aten::add", {tensor({3}, 6)}, {tensor({3}, 7)}), 1);
  CompareOptions exact;
  exact.exact = true;
  const CompareResult r =
      compare_written({{0, {m0, s0, r0, s1, m1}}}, {{0, {m0, r0, s0, s1, m1}}}, exact);
  CHECK(r.aligned_by_thread == 1);
  CHECK(r.aligned_by_lcs == 0);
  CHECK(r.unmatched.empty());
  CHECK(r.ops.size() == 5);
  CHECK(r.identical);
  // A thread's index is the order in which it was first seen: B's adds ran on a thread
  // numbered 2. The threads are matched by what they ran.
  const CompareResult renumbered = compare_written(
      {{0, {m0, s0, r0, s1, m1}}}, {{0, {m0, r0, on(s0, 2), on(s1, 2), m1}}}, exact);
  CHECK(renumbered.aligned_by_thread == 1);
  CHECK(renumbered.identical);
  // Another thread ran another op: that is a difference of sequence, aligned by content.
  const OpLine s2 = on(fwd("aten::sub", {tensor({3}, 6)}, {tensor({3}, 7)}), 1);
  const CompareResult other =
      compare_written({{0, {m0, s0, r0, s1, m1}}}, {{0, {m0, r0, s0, s2, m1}}}, exact);
  CHECK(other.aligned_by_thread == 0);
  CHECK(other.aligned_by_lcs == 1);
  CHECK_FALSE(other.sequence_diffs.empty());
  for (const OpCompare& o : other.ops) CHECK(o.op == o.name_b.substr(0, o.op.size()));
}

TEST_CASE("compare of dumps without a (step, rank) in common compares nothing",
          "[compare][align]") {
  const CompareResult none = compare_written({}, {}, {});
  CHECK(none.groups_compared == 0);
  const CompareResult apart = compare_written({{0, chain_ops()}}, {{1, chain_ops()}}, {});
  CHECK(apart.groups_compared == 0);
  CHECK(apart.only_a.size() == 1);
  CHECK(apart.only_b.size() == 1);
  CHECK(apart.sequence_diffs.empty());  // a missing step is not a place in a step
}

// ------------------------------------------------------------------ alignment cost

namespace {

// Every pair holds equal elements, and both sides appear once each, in order.
void check_alignment(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b,
                     const analysis_detail::AlignPairs& pairs) {
  int64_t next_a = 0, next_b = 0;
  bool ok = true;
  for (const auto& [i, j] : pairs) {
    if (i >= 0) ok = ok && i == next_a++;
    if (j >= 0) ok = ok && j == next_b++;
    if (i >= 0 && j >= 0) ok = ok && a[static_cast<size_t>(i)] == b[static_cast<size_t>(j)];
  }
  CHECK(ok);
  CHECK(next_a == static_cast<int64_t>(a.size()));
  CHECK(next_b == static_cast<int64_t>(b.size()));
}

analysis_detail::Alignment timed_align(const std::vector<uint32_t>& a,
                                       const std::vector<uint32_t>& b, double& seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  analysis_detail::Alignment al =
      analysis_detail::align(a.size(), b.size(), [&](size_t i, size_t j) { return a[i] == b[j]; });
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return al;
}

}  // namespace

TEST_CASE("align: 100 000 ops, a few differences or none in common, in bounded time",
          "[compare][align]") {
  constexpr size_t kN = 100000;
  std::mt19937 rng(7);
  std::vector<uint32_t> a(kN);
  for (uint32_t& x : a) x = static_cast<uint32_t>(rng() % 50);  // few distinct ops, repeated
  double seconds = 0;

  SECTION("three inserted, two deleted") {
    std::vector<uint32_t> b = a;
    b.erase(b.begin() + 70000);
    b.erase(b.begin() + 20000);
    for (size_t at : {90000, 50000, 10}) b.insert(b.begin() + static_cast<int64_t>(at), 1000);
    const analysis_detail::Alignment al = timed_align(a, b, seconds);
    INFO("aligned in " << seconds << " s");
    check_alignment(a, b, al.pairs);
    CHECK_FALSE(al.approximate);
    size_t only_a = 0, only_b = 0;
    for (const auto& [i, j] : al.pairs) {
      only_a += j < 0 ? 1 : 0;
      only_b += i < 0 ? 1 : 0;
    }
    CHECK(only_a == 2);  // a minimal alignment: exactly the edits
    CHECK(only_b == 3);
    CHECK(seconds < 5);
  }
  SECTION("nothing in common") {
    std::vector<uint32_t> b(kN);
    for (uint32_t& x : b) x = 100 + static_cast<uint32_t>(rng() % 50);
    const analysis_detail::Alignment al = timed_align(a, b, seconds);
    INFO("aligned in " << seconds << " s");
    check_alignment(a, b, al.pairs);
    CHECK(al.pairs.size() == 2 * kN);
    CHECK(seconds < 10);  // quadratic would be 10^10 steps
  }
  SECTION("much in common, far apart") {
    std::vector<uint32_t> b(kN);
    for (uint32_t& x : b) x = static_cast<uint32_t>(rng() % 50);
    const analysis_detail::Alignment al = timed_align(a, b, seconds);
    INFO("aligned in " << seconds << " s");
    check_alignment(a, b, al.pairs);
    CHECK(al.approximate);  // the work bound cut the search
    CHECK(seconds < 10);
  }
}
