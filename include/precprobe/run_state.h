// How the run of each rank ended (docs/dump-format.md, "Did the run stop?"): stopped, signalled,
// crashed or not stopped, and through which step its dump is complete. Every analysis result
// carries one (`run` in its JSON), so that nothing is read as a whole run that was not. Torch-
// free; run_state() is pure apart from reading (any thread, each with its own DumpReader).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "precprobe/dump_format.h"

namespace precprobe {

class DumpReader;
struct DumpData;

/// How one rank's run ended, from meta.json's "state", crash.json and the "step_end" events
/// (docs/dump-format.md, "Did the run stop?").
struct RankRunState {
  int rank = 0;
  /// "stopped" (stop() wrote meta.json), "signalled" (SIGTERM/SIGINT, flushed before it
  /// went on), "crashed" (a fatal signal: crash.json or meta.json "crashed"), "not_stopped"
  /// (meta.json still says "running" and no crash record: killed with SIGKILL, power lost,
  /// or still running), "unknown" (no state: not written by the debugger).
  std::string state = "unknown";
  std::optional<int> signal;         ///< "signalled" or "crashed"
  std::optional<CrashRecord> crash;  ///< crash.json (else meta.json's "crash")
  /// meta.json says "crashed": the flush after the crash completed (else only crash.json
  /// was written, by the signal handler, and the step_end events tell what is complete).
  bool crash_flushed = false;
  /// The writer marks step ends (meta.json "step_end_events"); older dumps do not.
  bool step_end_events = false;
  /// The last step whose "step_end" event is on disk: every record of it and of the steps
  /// before was written. nullopt: none.
  std::optional<int64_t> complete_through;
  /// Did not stop: "crashed" or "not_stopped".
  bool incomplete() const noexcept { return state == "crashed" || state == "not_stopped"; }
};

struct RunState {
  std::vector<RankRunState> ranks;

  /// No rank is incomplete: every rank stopped, was signalled and flushed, or has no state.
  bool stopped() const noexcept;
  bool crashed() const noexcept;
  /// The smallest complete_through of the incomplete ranks (nullopt: none known, or all
  /// stopped).
  std::optional<int64_t> complete_through() const;
  /// For people, "" when stopped: "the run did not stop — crashed or still running;
  /// complete through step 2", "the run crashed: SIGSEGV at step 3 in aten::mul (thread
  /// 0); complete through step 2" (per rank, "rank 1: ...", when ranks differ).
  std::string describe() const;
  /// {"stopped", "crashed", "complete_through", "text", "ranks": [...]}.
  nlohmann::json to_json() const;
};

/// How the run of every rank ended: meta.json, crash.json and a pass over the events.
RunState run_state(DumpReader& reader);
/// The same from records in memory (crash.json is read when a rank's `dir` names one).
RunState run_state(const DumpData& data);

}  // namespace precprobe
