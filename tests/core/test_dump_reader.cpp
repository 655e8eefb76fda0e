// DumpReader: rank discovery, meta.json checks, filters, bad lines and truncated streams.
#include <filesystem>
#include <map>
#include <optional>

#include "core/temp_dir.h"
#include "frame_stream.h"
#include "precprobe/dump_format.h"
#include "precprobe/error.h"
#include "precprobe/reader.h"
#include "precprobe/writer.h"
#include "precprobe_catch.h"

using namespace precprobe;
using precprobe::test::TempDir;
namespace fs = std::filesystem;

namespace {

const char* const kOps[] = {"aten::addmm", "aten::relu", "aten::mse_loss"};

// Rank r writes steps 0..4; per step 3 forward ops and (r + 1) backward relu calls.
void write_rank(const std::string& dir, int rank, int world, bool meta = true) {
  WriterOptions o;
  o.dir = dir;
  DumpWriter w(o);
  if (meta) {
    w.write_meta(R"({"format_version":1,"rank":)" + std::to_string(rank) + R"(,"world_size":)" +
                 std::to_string(world) + "}");
  }
  for (int step = 0; step < 5; ++step) {
    int64_t seq = 0;
    for (const char* name : kOps) {
      OpRecord r;
      r.step = step;
      r.seq = seq++;
      r.op = name;
      w.submit(std::move(r));
    }
    for (int c = 0; c <= rank; ++c) {
      OpRecord r;
      r.step = step;
      r.seq = seq++;
      r.op = "aten::relu";
      r.call = c;
      r.dir = Direction::kBackward;
      w.submit(std::move(r));
    }
    GradRecord g;
    g.step = step;
    g.param = step % 2 ? "fc.weight" : "fc.bias";
    w.submit(std::move(g));
    ScalarRecord s;
    s.step = step;
    s.name = "loss";
    s.value = 1.0 / (step + 1);
    w.submit(std::move(s));
    ScalerRecord sc;
    sc.step = step;
    w.submit(std::move(sc));
  }
}

std::string error_of(const std::string& path) {
  try {
    DumpReader r(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("rank directories are found, ordered and tagged", "[dump_reader]") {
  TempDir dir("ranks");
  write_rank(dir / "rank0", 0, 4);
  write_rank(dir / "rank3", 3, 4);
  write_rank(dir / "rank1", 1, 4);
  fs::create_directories(dir / "rank2");  // empty: not a rank directory
  fs::create_directories(dir / "other");  // ignored
  test::write_bytes(dir / "rank9", "x");  // a file, ignored

  DumpReader reader(dir.path().string());
  REQUIRE(reader.ranks().size() == 3);
  CHECK(reader.ranks()[0].rank == 0);
  CHECK(reader.ranks()[1].rank == 1);
  CHECK(reader.ranks()[2].rank == 3);
  CHECK(reader.ranks()[2].world_size == 4);
  CHECK(reader.ranks()[2].dir == dir / "rank3");
  CHECK(reader.ranks()[1].meta_json.find("\"rank\":1") != std::string::npos);

  std::map<int, size_t> per_rank;
  reader.for_each_op({}, [&](const OpRecord& r) {
    ++per_rank[r.rank];
    return true;
  });
  CHECK(per_rank == std::map<int, size_t>{{0, 5 * 4}, {1, 5 * 5}, {3, 5 * 7}});
  CHECK(reader.statuses().size() == 3);
  for (const StreamStatus& s : reader.statuses()) {
    CHECK(s.present);
    CHECK_FALSE(s.truncated);
    CHECK(s.frames >= 1);
  }
  reader.ops();  // reading again replaces the statuses instead of adding
  CHECK(reader.statuses().size() == 3);
  CHECK(reader.grads().size() == 15);
  CHECK(reader.scalars().size() == 15);
  CHECK(reader.scaler().size() == 15);
  CHECK(reader.statuses().size() == 12);

  DumpReader one(dir / "rank3/");
  REQUIRE(one.ranks().size() == 1);
  CHECK(one.ranks()[0].rank == 3);
  auto ops = one.ops();
  REQUIRE(ops.size() == 35);
  CHECK(ops[0].rank == 3);
  CHECK(ops[0].name() == "aten::addmm.0.forward");
}

TEST_CASE("without meta.json the rank comes from the directory name", "[dump_reader]") {
  TempDir dir("nometa");
  write_rank(dir / "rank5", 5, 1, false);
  DumpReader reader(dir.path().string());
  REQUIRE(reader.ranks().size() == 1);
  CHECK(reader.ranks()[0].rank == 5);
  CHECK(reader.ranks()[0].meta_json.empty());
  auto ops = reader.ops();
  REQUIRE_FALSE(ops.empty());
  CHECK(ops[0].rank == 5);
  DumpReader direct(dir / "rank5/");  // trailing slash: the name still gives the rank
  REQUIRE(direct.ranks().size() == 1);
  CHECK(direct.ranks()[0].rank == 5);
}

TEST_CASE("filters select by step, rank, name and direction", "[dump_reader]") {
  TempDir dir("filters");
  for (int r = 0; r < 3; ++r) write_rank(dir / ("rank" + std::to_string(r)), r, 3);
  DumpReader reader(dir.path().string());
  auto count = [&](const RecordFilter& f) { return reader.ops(f).size(); };
  RecordFilter f;
  CHECK(count(f) == 5 * (4 + 5 + 6));
  f.step_min = 1;
  f.step_max = 2;
  CHECK(count(f) == 2 * (4 + 5 + 6));
  for (const OpRecord& r : reader.ops(f)) CHECK((r.step >= 1 && r.step <= 2));
  f = {};
  f.ranks = {2, 0};
  CHECK(count(f) == 5 * (4 + 6));
  f = {};
  f.dir = Direction::kBackward;
  CHECK(count(f) == 5 * (1 + 2 + 3));
  f = {};
  f.name_contains = "addmm";
  CHECK(count(f) == 5 * 3);
  f.name_contains = "relu.1.backward";  // matches the full name, not only the op
  CHECK(count(f) == 5 * 2);
  f.name_contains = "relu.0.forward";
  CHECK(count(f) == 5 * 3);
  f.step_max = 0;
  f.ranks = {1};
  CHECK(count(f) == 1);

  RecordFilter g;
  g.name_contains = "weight";
  CHECK(reader.grads(g).size() == 3 * 2);
  g.name_contains = "loss";
  g.step_min = 4;
  auto losses = reader.scalars(g);
  REQUIRE(losses.size() == 3);
  CHECK(losses[0].value == Approx(0.2));
  RecordFilter s;
  s.step_min = 3;
  CHECK(reader.scaler(s).size() == 3 * 2);

  size_t seen = 0;
  reader.for_each_op({}, [&](const OpRecord&) { return ++seen < 7; });
  CHECK(seen == 7);
}

TEST_CASE("format version and not-a-dump errors say what was expected", "[dump_reader]") {
  TempDir dir("errors");
  write_rank(dir / "d/rank0", 0, 1);
  test::write_bytes(dir / "d/rank0/meta.json", R"({"format_version":4,"rank":0})");
  std::string msg = error_of(dir / "d");
  CHECK(msg.find(dir / "d/rank0/meta.json") != std::string::npos);
  CHECK(msg.find("format_version 4") != std::string::npos);
  CHECK(msg.find("reads format_version 1 to 3") != std::string::npos);
  test::write_bytes(dir / "d/rank0/meta.json", R"({"format_version":0,"rank":0})");
  CHECK(error_of(dir / "d").find("format_version 0 is not supported") != std::string::npos);
  for (int version : {1, 2}) {  // both read
    test::write_bytes(dir / "d/rank0/meta.json",
                      R"({"format_version":)" + std::to_string(version) + R"(,"rank":0})");
    DumpReader reader(dir / "d");
    CHECK(reader.ops().size() == 20);  // 5 steps of 3 forward ops and 1 backward relu
  }

  test::write_bytes(dir / "d/rank0/meta.json", R"({"rank":0})");
  CHECK(error_of(dir / "d").find("no \"format_version\"") != std::string::npos);
  test::write_bytes(dir / "d/rank0/meta.json", R"({"format_version":"1"})");
  CHECK(error_of(dir / "d").find("not supported") != std::string::npos);
  test::write_bytes(dir / "d/rank0/meta.json", "{oops");
  CHECK(error_of(dir / "d").find("not a JSON object") != std::string::npos);
  test::write_bytes(dir / "d/rank0/meta.json", R"({"format_version":1,"rank":"zero"})");
  CHECK(error_of(dir / "d").find("\"rank\" must be an integer") != std::string::npos);

  fs::create_directories(dir / "empty");
  fs::create_directories(dir / "plain");
  test::write_bytes(dir / "plain/notes.txt", "hello");
  for (const std::string& p :
       {dir / "empty", dir / "plain", dir / "missing", dir / "plain/notes.txt"}) {
    std::string m = error_of(p);
    INFO(m);
    CHECK(m.find(p) != std::string::npos);
    CHECK(m.find("expected a dump directory") != std::string::npos);
  }
}

TEST_CASE("bad lines are skipped and counted, a truncated tail is reported", "[dump_reader]") {
  TempDir dir("bad");
  std::string rank_dir = dir / "rank0";
  fs::create_directories(rank_dir);
  std::string path = DumpReader::stream_path(rank_dir, StreamKind::kOps);
  CHECK(path == rank_dir + "/ops.jsonl.zst");
  std::string frame1 = R"({"step":0,"op":"a"})"
                       "\n"
                       R"({"step":0,"op":)"
                       "\n"
                       R"({"step":1,"op":"b"})"
                       "\n";
  std::string frame2 = R"({"step":2,"op":"c"})"
                       "\n";
  {
    FrameWriter w;
    std::string error;
    REQUIRE(w.open(path, 1, &error));
    w.append(frame1);
    REQUIRE(w.end_frame(&error));
    w.append(frame2);
    REQUIRE(w.close(&error));
  }
  DumpReader reader(rank_dir);
  auto ops = reader.ops();
  REQUIRE(ops.size() == 3);
  CHECK(ops[2].op == "c");
  REQUIRE(reader.statuses().size() == 1);
  StreamStatus s = reader.statuses()[0];
  CHECK(s.records == 3);
  CHECK(s.bad_lines == 1);
  CHECK(s.frames == 2);
  CHECK_FALSE(s.truncated);
  CHECK(s.message.find("bad line") != std::string::npos);

  auto size = fs::file_size(path);
  fs::resize_file(path, size - 3);
  reader.ops();
  s = reader.statuses()[0];
  CHECK(s.records == 2);
  CHECK(s.frames == 1);
  CHECK(s.truncated);
  CHECK(s.truncated_bytes > 0);
  CHECK(s.message.find("incomplete frame") != std::string::npos);

  // Streams that were never written are absent, not errors.
  CHECK(reader.grads().empty());
  StreamStatus g = reader.statuses().back();
  CHECK_FALSE(g.present);
  CHECK_FALSE(g.truncated);
  CHECK(g.path == rank_dir + "/grads.jsonl.zst");
}

TEST_CASE("an absent grad mode reads as on only where meta.json says the ops carry it",
          "[dump_reader]") {
  TempDir tmp("reader_grad");
  for (bool marked : {true, false}) {
    const std::string dir = (tmp.path() / (marked ? "new" : "old") / "rank0").string();
    {
      WriterOptions o;
      o.dir = dir;
      DumpWriter w(o);
      RunMeta meta;
      meta.format_version = 2;
      if (marked) meta.ops_grad_mode = true;
      w.write_meta(meta);
      for (int i = 0; i < 3; ++i) {
        OpRecord r;
        r.seq = i;
        r.op = "aten::dropout";
        if (i == 1) r.grad = false;                // an evaluation pass
        if (i == 2) r.dir = Direction::kBackward;  // backward ops carry none
        w.submit(std::move(r));
      }
    }
    DumpReader reader((tmp.path() / (marked ? "new" : "old")).string());
    CHECK(reader.ranks().front().meta->ops_grad_mode ==
          (marked ? std::optional<bool>(true) : std::nullopt));
    const std::vector<OpRecord> ops = reader.ops();
    REQUIRE(ops.size() == 3);
    INFO("meta.json marked: " << marked);
    CHECK(ops[0].grad == (marked ? std::optional<bool>(true) : std::nullopt));
    CHECK(ops[1].grad == false);
    CHECK_FALSE(ops[2].grad.has_value());
  }
}
