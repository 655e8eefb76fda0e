// NameMatcher (the "list" key's matching), IntSet (the "rank" and "step" sets) and the
// edit-distance suggestions of unknown keys, against brute-force references. The options
// parser itself: test_options.cpp.
#include <atomic>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "precprobe/error.h"
#include "precprobe/options.h"
#include "precprobe_catch.h"
#include "suggest.h"
#include "support/error_text.h"

using precprobe::Error;
using precprobe::IntSet;
using precprobe::NameMatcher;
using precprobe::test::error_of;

TEST_CASE("IntSet agrees with a brute-force set", "[intset]") {
  IntSet empty;
  CHECK(empty.contains(-5));
  CHECK(empty.contains(0));
  CHECK_FALSE(empty.max().has_value());
  CHECK(empty.to_json() == "[]");
  CHECK_THROWS_AS(empty.add(3, 2), Error);

  std::mt19937 rng(42);
  for (int trial = 0; trial < 50; ++trial) {
    IntSet set;
    std::set<int64_t> reference;
    const int n = 1 + static_cast<int>(rng() % 20);
    for (int i = 0; i < n; ++i) {
      const int64_t lo = rng() % 200;
      const int64_t hi = lo + static_cast<int64_t>(rng() % 10);
      set.add(lo, hi);
      for (int64_t v = lo; v <= hi; ++v) reference.insert(v);
    }
    for (int64_t v = -2; v < 215; ++v) {
      INFO("trial " << trial << " value " << v << " set " << set.to_json());
      CHECK(set.contains(v) == (reference.count(v) == 1));
    }
    CHECK(set.max() == std::optional<int64_t>(*reference.rbegin()));
    // Disjoint, sorted, not adjacent: the merged form is unique.
    for (size_t i = 1; i < set.ranges().size(); ++i) {
      CHECK(set.ranges()[i].first > set.ranges()[i - 1].second + 1);
    }
  }
}

TEST_CASE("NameMatcher: exact names, substrings and name-regex(...)", "[namematcher]") {
  NameMatcher all;
  CHECK(all.empty());
  CHECK(all.matches("anything"));
  CHECK(NameMatcher(std::vector<std::string>{}).matches("aten::mm.0.forward"));

  NameMatcher exact({"aten::addmm.0.forward"});
  CHECK_FALSE(exact.empty());
  CHECK(exact.matches("aten::addmm.0.forward"));
  CHECK_FALSE(exact.matches("aten::addmm.1.forward"));
  CHECK_FALSE(exact.matches("aten::addmm.10.forward"));
  CHECK_FALSE(exact.matches("aten::addmm.0.backward"));

  NameMatcher sub({"addmm", "Backward"});
  CHECK(sub.matches("aten::addmm.3.backward"));
  CHECK(sub.matches("AddmmBackward0.0.backward"));
  CHECK(sub.matches("MulBackward0.2.backward"));
  CHECK_FALSE(sub.matches("aten::mul.0.forward"));
  CHECK_FALSE(sub.matches("aten::ADDMM.0.forward"));  // case-sensitive

  NameMatcher re({"name-regex(^aten::(add|mul)\\.)"});
  CHECK(re.matches("aten::add.0.forward"));
  CHECK(re.matches("aten::mul.12.forward"));
  CHECK_FALSE(re.matches("aten::addmm.0.forward"));
  CHECK_FALSE(re.matches("aten::_foreach_add.0.forward"));
  // Searched, not anchored unless the pattern anchors.
  CHECK(NameMatcher({"name-regex(\\.[0-9]+\\.backward$)"}).matches("aten::mm.7.backward"));

  // "name-regex" without the parentheses is an ordinary substring.
  CHECK(NameMatcher({"name-regex"}).matches("my-name-regex-op"));

  NameMatcher moved = std::move(re);
  CHECK(moved.matches("aten::add.0.forward"));
}

TEST_CASE("NameMatcher rejects bad regex entries, naming them", "[namematcher]") {
  std::string m = error_of([] { NameMatcher({"addmm", "name-regex([a-)"}); });
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("'name-regex([a-)'"));
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("bad regular expression"));
  m = error_of([] { NameMatcher({"name-regex()"}); });
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("non-empty"));
  m = error_of([] { NameMatcher({"name-regex(" + std::string(1025, 'a') + ")"}); });
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("1025 characters; allowed: at most 1024"));
  CHECK(
      NameMatcher({"name-regex(" + std::string(1024, 'a') + ")"}).matches(std::string(1024, 'a')));
  m = error_of([] { NameMatcher({""}); });
  CHECK_THAT(m, Catch::Matchers::ContainsSubstring("empty string"));
}

TEST_CASE("NameMatcher is shared by threads without locks", "[namematcher]") {
  const NameMatcher matcher({"addmm", "name-regex(^aten::relu\\.)"});
  const std::vector<std::string> names = {"aten::addmm.0.forward", "aten::relu.1.forward",
                                          "aten::mm.0.forward", "AddmmBackward0.0.backward",
                                          "aten::relu_.0.forward"};
  // addmm, relu. match; mm, AddmmBackward0 (capital A), relu_ do not.
  std::atomic<int> hits{0};
  std::vector<std::thread> threads;
  constexpr int kThreads = 4;
  constexpr int kRounds = 2000;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      int local = 0;
      for (int r = 0; r < kRounds; ++r) {
        for (const std::string& n : names) local += matcher.matches(n) ? 1 : 0;
      }
      hits += local;
    });
  }
  for (auto& th : threads) th.join();
  CHECK(hits == kThreads * kRounds * 2);
}

TEST_CASE("edit distance and closest match", "[suggest]") {
  using precprobe::closest_match;
  using precprobe::edit_distance;
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("abc", "abc") == 0);
  CHECK(edit_distance("ab", "ba") == 1);   // one swap
  CHECK(edit_distance("ca", "abc") == 3);  // optimal string alignment, not full Damerau
  CHECK(edit_distance("dump_pth", "dump_path") == 1);
  const std::vector<std::string> keys = {"scope", "list", "data_mode", "summary_mode"};
  CHECK(closest_match("data_modes", keys) == "data_mode");
  CHECK(closest_match("lsit", keys) == "list");
  CHECK(closest_match("SCOPE", keys) == "scope");
  CHECK(closest_match("xyz", keys).empty());
  CHECK(closest_match("", keys).empty());
}

TEST_CASE("IntSet merges at the int64 limits without overflow", "[intset]") {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  IntSet s;
  s.add(kMax, kMax);
  s.add(kMin, kMin);
  s.add(kMin + 1, kMin + 1);  // touches kMin: merged
  s.add(kMax - 1, kMax - 1);  // touches kMax: merged
  CHECK(s.ranges() == std::vector<std::pair<int64_t, int64_t>>{{kMin, kMin + 1}, {kMax - 1, kMax}});
  CHECK(s.contains(kMax));
  CHECK(s.contains(kMin));
  CHECK_FALSE(s.contains(0));
  CHECK(s.max() == std::optional<int64_t>(kMax));
  s.add(kMin, kMax);
  CHECK(s.ranges().size() == 1);
}
