// run_state: did each rank's run stop, crash, or neither (killed, still running), and which
// steps are complete. Rules: docs/dump-format.md, "Did the run stop?".
#include "run_state.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in <fmt/format.h> before fmt 11)

#include <algorithm>
#include <fstream>
#include <iterator>

#include "precprobe/dump_format.h"
#include "source.h"

namespace precprobe {
namespace analysis_detail {
namespace {

// crash.json of a rank directory: nullopt when absent; a CrashRecord with signal 0 when it
// exists but does not parse (the handler was cut off while writing it).
std::optional<CrashRecord> read_crash_file(const std::string& dir) {
  if (dir.empty()) return std::nullopt;
  std::ifstream in(dir + "/" + std::string(kCrashFile), std::ios::binary);
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (auto c = CrashRecord::parse(j)) return c;
  return CrashRecord{};
}

RankRunState rank_state(const RankInfo& info, std::optional<int64_t> last_end) {
  RankRunState r;
  r.rank = info.rank;
  RunMeta meta;
  try {
    meta = info.run_meta();
  } catch (const Error&) {  // a hand-made RankInfo with bad text: no state
  }
  r.step_end_events = meta.step_end_events.value_or(false);
  r.complete_through = last_end;
  std::optional<CrashRecord> crash_file = read_crash_file(info.dir);
  const std::string state = meta.state.value_or("");
  if (crash_file || state == "crashed") {
    r.state = "crashed";
    r.crash_flushed = state == "crashed";
    if (crash_file && crash_file->signal != 0) {
      r.crash = std::move(crash_file);
    } else if (meta.crash) {
      r.crash = meta.crash;
    }
    if (r.crash) {
      r.signal = r.crash->signal;
    } else if (meta.signal) {
      r.signal = meta.signal;
    }
  } else if (state == "stopped") {
    r.state = "stopped";
  } else if (state == "signalled") {
    r.state = "signalled";
    r.signal = meta.signal;
  } else if (state == "running") {
    r.state = "not_stopped";
  }
  return r;
}

// "complete through step 2", "no step complete", or why it is unknown.
std::string completeness(const RankRunState& r) {
  if (!r.step_end_events)
    return "which steps are complete is unknown (written by an older precprobe)";
  if (!r.complete_through) return "no step complete";
  return fmt::format("complete through step {}", *r.complete_through);
}

std::string rank_text(const RankRunState& r) {
  std::string head =
      r.state == "crashed"
          ? "the run crashed" + (r.crash ? ": " + r.crash->describe() : std::string())
          : std::string("the run did not stop \u2014 crashed or still running");
  return head + "; " + completeness(r);
}

}  // namespace

RunState RunStateBuilder::finish(const std::vector<RankInfo>& ranks) const {
  RunState s;
  for (const RankInfo& info : ranks) {
    auto it = last_end_.find(info.rank);
    s.ranks.push_back(
        rank_state(info, it == last_end_.end() ? std::nullopt : std::optional(it->second)));
  }
  return s;
}

}  // namespace analysis_detail

bool RunState::stopped() const noexcept {
  return std::none_of(ranks.begin(), ranks.end(),
                      [](const RankRunState& r) { return r.incomplete(); });
}

bool RunState::crashed() const noexcept {
  return std::any_of(ranks.begin(), ranks.end(),
                     [](const RankRunState& r) { return r.state == "crashed"; });
}

std::optional<int64_t> RunState::complete_through() const {
  std::optional<int64_t> lowest;
  bool any = false;
  for (const RankRunState& r : ranks) {
    if (!r.incomplete()) continue;
    if (!r.complete_through) return std::nullopt;
    lowest = any ? std::min(*lowest, *r.complete_through) : *r.complete_through;
    any = true;
  }
  return lowest;
}

std::string RunState::describe() const {
  std::vector<std::string> texts;
  std::vector<int> which;
  for (const RankRunState& r : ranks) {
    if (!r.incomplete()) continue;
    texts.push_back(analysis_detail::rank_text(r));
    which.push_back(r.rank);
  }
  if (texts.empty()) return "";
  const bool same = std::all_of(texts.begin(), texts.end(),
                                [&](const std::string& t) { return t == texts.front(); });
  if (ranks.size() == 1) return texts.front();
  if (same) {
    return fmt::format("{} (rank{} {})", texts.front(), which.size() > 1 ? "s" : "",
                       fmt::join(which, ", "));
  }
  std::string out;
  for (size_t i = 0; i < texts.size(); ++i)
    out += fmt::format("{}rank {}: {}", i ? "; " : "", which[i], texts[i]);
  return out;
}

nlohmann::json RunState::to_json() const {
  nlohmann::json rs = nlohmann::json::array();
  for (const RankRunState& r : ranks) {
    rs.push_back({{"rank", r.rank},
                  {"state", r.state},
                  {"signal", r.signal ? nlohmann::json(*r.signal) : nlohmann::json()},
                  {"crash", r.crash ? r.crash->to_json() : nlohmann::json()},
                  {"crash_flushed", r.crash_flushed},
                  {"step_end_events", r.step_end_events},
                  {"complete_through",
                   r.complete_through ? nlohmann::json(*r.complete_through) : nlohmann::json()}});
  }
  const auto through = complete_through();
  return {{"stopped", stopped()},
          {"crashed", crashed()},
          {"complete_through", through ? nlohmann::json(*through) : nlohmann::json()},
          {"text", describe()},
          {"ranks", std::move(rs)}};
}

RunState run_state(DumpReader& reader) {
  analysis_detail::RunStateBuilder b;
  reader.for_each_scalar({}, [&](const ScalarRecord& r) {
    b.add(r);
    return true;
  });
  return b.finish(reader.ranks());
}

RunState run_state(const DumpData& data) {
  analysis_detail::RunStateBuilder b;
  for (const ScalarRecord& r : data.scalars) b.add(r);
  return b.finish(data.ranks);
}

}  // namespace precprobe
