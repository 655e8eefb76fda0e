// compare_dumps computed four ways, which must agree (the house method): the runs written
// by the real DumpWriter and read back side by side (streamed group by group,
// compare_read.cpp), read back with digests off (both held in memory), the records read
// back compared as DumpData, and the DumpData compared on a thread that judged nothing
// before (compare_group judges into storage its thread keeps from group to group).
// The compare tests call test::compare_checked on DumpData: every case they check is checked
// on the streamed path too.
#pragma once

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "analysis/compare_group.h"
#include "core/temp_dir.h"
#include "precprobe/analysis.h"
#include "precprobe/reader.h"
#include "precprobe/writer.h"
#include "precprobe_catch.h"

namespace precprobe::test {

/// Writes `d` as a dump with the real DumpWriter, a frame every `records_a_frame` records
/// (frames across steps, steps across frames), one rank directory per rank of its records;
/// with `end_steps`, each step also ends a frame, as the debugger does.
inline void write_dump_data(const std::filesystem::path& root, const DumpData& d,
                            size_t records_a_frame = 3, bool digests = true,
                            bool end_steps = false) {
  std::set<int> ranks;
  for (const OpRecord& r : d.ops) ranks.insert(r.rank);
  for (const ScalerRecord& r : d.scaler) ranks.insert(r.rank);
  for (const RankInfo& r : d.ranks) ranks.insert(r.rank);
  if (ranks.empty()) ranks.insert(0);
  for (int rank : ranks) {
    WriterOptions o;
    o.dir = (root / ("rank" + std::to_string(rank))).string();
    o.flush_every_records = records_a_frame;
    o.flush_interval_ms = 3600 * 1000;
    o.frame_digests = digests;
    DumpWriter w(o);
    std::string meta;
    for (const RankInfo& r : d.ranks)
      if (r.rank == rank) meta = r.meta_json;
    if (meta.empty())
      meta = R"({"format_version":1,"rank":)" + std::to_string(rank) + R"(,"world_size":)" +
             std::to_string(ranks.size()) + "}";
    w.write_meta(meta);
    std::optional<int64_t> step;
    for (const OpRecord& r : d.ops) {
      if (r.rank != rank) continue;
      if (end_steps && step && *step != r.step) w.end_step(*step);
      step = r.step;
      OpRecord copy = r;
      REQUIRE(w.submit(std::move(copy)));
    }
    for (const ScalerRecord& r : d.scaler) {
      if (r.rank != rank) continue;
      ScalerRecord copy = r;
      REQUIRE(w.submit(std::move(copy)));
    }
    w.close();
  }
}

/// compare_dumps of DumpData, checked against the same runs written and read back: streamed
/// side by side, and with digests off. Returns the in-memory result.
inline CompareResult compare_checked(const DumpData& a, const DumpData& b,
                                     const CompareOptions& opt = {}) {
  CompareResult mem = precprobe::compare_dumps(a, b, opt);
  auto json_of = [](CompareResult r) {
    r.path_a = r.path_b = "";
    return r.to_json();
  };
  // This thread judged every case before this one into the storage it keeps; a new thread
  // judges into none. Kept comparisons are moved out of that storage, so the storage reused
  // is that of the comparisons a result leaves out: the divergent ones only are kept here.
  for (KeepOps keep : {opt.keep_ops, KeepOps::kDivergent}) {
    CompareOptions o = opt;
    o.keep_ops = keep;
    const CompareResult on_this = precprobe::compare_dumps(a, b, o);
    CompareResult fresh;
    std::thread([&] { fresh = precprobe::compare_dumps(a, b, o); }).join();
    const nlohmann::json j_this = json_of(on_this), j_fresh = json_of(fresh);
    CAPTURE(nlohmann::json::diff(j_fresh, j_this).dump());
    CHECK(j_fresh == j_this);
  }
  TempDir dir("compare_check");
  write_dump_data(dir.path() / "a", a);
  write_dump_data(dir.path() / "b", b);
  const uint64_t streamed_before = analysis_detail::compare_streamed();
  DumpReader sa((dir.path() / "a").string()), sb((dir.path() / "b").string());
  const nlohmann::json streamed = json_of(precprobe::compare_dumps(sa, sb, opt));
  CHECK(analysis_detail::compare_streamed() == streamed_before + 1);
  DumpReader la((dir.path() / "a").string()), lb((dir.path() / "b").string());
  la.set_digests(false);
  lb.set_digests(false);
  const nlohmann::json loaded = json_of(precprobe::compare_dumps(la, lb, opt));
  CAPTURE(nlohmann::json::diff(streamed, loaded).dump());
  CHECK(streamed == loaded);
  // The records as written and read back (statistics are stored as float32, so not the
  // fixture's float64 values) compared in memory: the same result again.
  DumpData ra, rb;
  for (auto [reader, data] : {std::pair{&la, &ra}, std::pair{&lb, &rb}}) {
    data->ranks = reader->ranks();
    data->ops = reader->ops();
    data->scaler = reader->scaler();
  }
  const nlohmann::json in_memory = json_of(precprobe::compare_dumps(ra, rb, opt));
  CAPTURE(nlohmann::json::diff(in_memory, loaded).dump());
  CHECK(in_memory == loaded);
  return mem;
}

}  // namespace precprobe::test
