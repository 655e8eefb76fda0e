// What the reliability tests share: the training child (precprobe_reliability_child) run
// with its stdout on a pipe, a dump read back with its per-step op counts, and the counts of
// an undisturbed run that a disturbed one must match step by step.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/temp_dir.h"
#include "precprobe/reader.h"
#include "precprobe_catch.h"
#include "support/child_process.h"

namespace precprobe::test::reliability {

/// The training child with these arguments.
class Child : public OutputChild {
 public:
  explicit Child(const std::vector<std::string>& args, const ChildSetup& setup = {})
      : OutputChild(PRECPROBE_RELIABILITY_CHILD, args, setup) {}
};

struct Dump {
  std::map<int64_t, int64_t> ops_per_step;
  std::vector<precprobe::OpRecord> ops;
  std::vector<precprobe::StreamStatus> statuses;
  nlohmann::json meta;
};

inline Dump read_dump(const std::string& dir) {
  Dump d;
  precprobe::DumpReader reader(dir);
  d.ops = reader.ops();
  reader.grads();
  reader.scalars();
  reader.scaler();
  for (const auto& r : d.ops) d.ops_per_step[r.step]++;
  d.statuses = reader.statuses();
  REQUIRE(reader.ranks().size() == 1);
  d.meta = nlohmann::json::parse(reader.ranks()[0].meta_json);
  for (const auto& s : d.statuses) {
    INFO(s.path << ": " << s.message);
    CHECK(s.bad_lines == 0);  // every record of every complete frame parses
    if (s.truncated) CHECK(s.truncated_bytes > 0);
  }
  return d;
}

inline bool any_truncated(const Dump& d) {
  for (const auto& s : d.statuses)
    if (s.truncated) return true;
  return false;
}

// Records per step of an undisturbed run (the model and data are deterministic).
inline const std::map<int64_t, int64_t>& clean_counts() {
  static std::map<int64_t, int64_t> counts = [] {
    TempDir dir("rel_clean");
    Child c({"train", dir / "dump", "12"});
    c.drain();
    const int st = c.wait();
    REQUIRE(WIFEXITED(st));
    REQUIRE(WEXITSTATUS(st) == 0);
    Dump d = read_dump(dir / "dump");
    CHECK_FALSE(any_truncated(d));
    CHECK(d.meta.value("state", "") == "stopped");
    REQUIRE(d.ops_per_step.size() == 12);
    return d.ops_per_step;
  }();
  return counts;
}

// Every step up to `last` has exactly the clean run's number of records.
inline void check_steps_complete(const Dump& d, int64_t last) {
  const auto& clean = clean_counts();
  for (int64_t s = 0; s <= last; ++s) {
    INFO("step " << s);
    REQUIRE(clean.count(s));
    CHECK(d.ops_per_step.count(s));
    if (d.ops_per_step.count(s)) CHECK(d.ops_per_step.at(s) == clean.at(s));
  }
}

}  // namespace precprobe::test::reliability
