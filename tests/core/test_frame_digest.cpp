// Frame digests: the writer describes each frame of op records in a zstd skippable frame, and
// summary and overflow pass over the frames that hold nothing they look for. The house method:
// every result is computed twice, passing over frames and decoding every frame, and must be
// the same JSON; the digests themselves are recomputed from the frames they describe.
#include <zstd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/analysis_fixtures.h"
#include "core/temp_dir.h"
#include "frame_digest.h"
#include "frame_stream.h"
#include "precprobe/analysis.h"
#include "precprobe/reader.h"
#include "precprobe/writer.h"
#include "precprobe_catch.h"

using namespace precprobe;
using precprobe::test::kInf;
using precprobe::test::kNaN;
using precprobe::test::TempDir;
namespace fs = std::filesystem;

namespace {

struct Plan {
  int ranks = 1;
  int steps = 12;
  int ops_per_step = 9;
  size_t flush_every = 4096;  // records a frame (steps also end frames: flush())
  bool flush_each_step = true;
  bool digests = true;
  /// (rank, step, seq, where): 0 a NaN output, 1 an Inf input, 2 an aten::empty output
  /// holding garbage NaNs (not an overflow), 3 a NaN output of a nested op, 4 a divergence:
  /// a NaN output there, and NaN in and out of every later op of the rank.
  std::vector<std::array<int64_t, 4>> faults;
};

// A dump of `plan`: per step, ops nested two deep now and then, a parameter consumed (for
// module attribution), grads and a loss.
void write_dump(const fs::path& root, const Plan& plan) {
  for (int rank = 0; rank < plan.ranks; ++rank) {
    WriterOptions o;
    o.dir = (root / ("rank" + std::to_string(rank))).string();
    o.flush_every_records = plan.flush_every;
    o.flush_interval_ms = 3600 * 1000;
    o.frame_digests = plan.digests;
    DumpWriter w(o);
    w.write_meta(R"({"format_version":1,"rank":)" + std::to_string(rank) + R"(,"world_size":)" +
                 std::to_string(plan.ranks) + "}");
    for (int64_t step = 0; step < plan.steps; ++step) {
      for (int64_t seq = 0; seq < plan.ops_per_step; ++seq) {
        test::OpSpec s;
        s.op = seq % 3 == 0 ? "aten::linear" : (seq % 3 == 1 ? "aten::relu" : "aten::add");
        s.seq = seq;
        s.call = seq / 3;
        s.depth = seq % 4 == 3 ? 1 : 0;
        Arg in = test::targ({0.5 * static_cast<double>(seq), -1.0, 2.0});
        if (seq % 3 == 0) in.tensor->param = "fc" + std::to_string(seq % 2) + ".weight";
        s.in = {in, test::varg("1")};
        s.out = {test::targ({1.0, static_cast<double>(step), -3.0})};
        for (const auto& f : plan.faults) {
          if (f[3] == 4 && f[0] == rank && std::make_pair(step, seq) > std::make_pair(f[1], f[2])) {
            s.in = {test::targ({kNaN, 1.0})};
            s.out = {test::targ({kNaN, -kInf})};
          }
          if (f[0] != rank || f[1] != step || f[2] != seq) continue;
          if (f[3] == 4) s.out = {test::targ({1.0, kNaN})};
          if (f[3] == 0 || f[3] == 3) s.out = {test::targ({1.0, kNaN})};
          if (f[3] == 1) s.in = {test::targ({kInf, 1.0})};
          if (f[3] == 2) {
            s.op = "aten::empty";
            s.in = {test::varg("[3]")};
            s.out = {test::targ({kNaN, kNaN, 0.0})};
          }
          if (f[3] == 3) s.depth = 2;
        }
        w.submit(test::make_op(step, rank, s));
      }
      GradRecord g;
      g.step = step;
      g.param = "fc0.weight";
      w.submit(std::move(g));
      ScalarRecord loss;
      loss.step = step;
      loss.name = "loss";
      loss.value = 1.0 / static_cast<double>(step + 1);
      w.submit(std::move(loss));
      if (plan.flush_each_step) w.end_step(step);
    }
  }
}

nlohmann::json summary_json(const fs::path& dir, bool digests, bool by_module = false) {
  DumpReader r(dir.string());
  ReadOptions read;
  read.digests = digests;
  nlohmann::json j = summarize_dump(r, read, by_module).to_json();
  for (auto& st : j["streams"]) st.erase("frames_passed");
  return j;
}

nlohmann::json overflow_json(const fs::path& dir, bool digests) {
  DumpReader r(dir.string());
  ReadOptions read;
  read.digests = digests;
  return find_overflow(r, read).to_json();
}

uint64_t frames_passed(const fs::path& dir) {
  DumpReader r(dir.string());
  ReadOptions read;
  summarize_dump(r, read);
  uint64_t n = 0;
  for (const StreamStatus& s : r.statuses()) n += s.frames_passed;
  return n;
}

// Every decoded record of `path` as zstd's own streaming decoder (zstdcat) gives it.
std::string zstdcat(const std::string& path) {
  const std::string bytes = test::read_bytes(path);
  ZSTD_DCtx* d = ZSTD_createDCtx();
  std::string out;
  std::vector<char> buf(1 << 16);
  ZSTD_inBuffer in{bytes.data(), bytes.size(), 0};
  while (in.pos < in.size) {
    ZSTD_outBuffer o{buf.data(), buf.size(), 0};
    const size_t ret = ZSTD_decompressStream(d, &o, &in);
    REQUIRE_FALSE(ZSTD_isError(ret));
    out.append(buf.data(), o.pos);
  }
  ZSTD_freeDCtx(d);
  return out;
}

}  // namespace

TEST_CASE("each frame of op records follows its digest, which zstd passes over", "[frame_digest]") {
  TempDir dir("digest_frames");
  Plan plan;
  plan.flush_every = 5;  // steps of 9 ops span frames
  plan.faults = {{0, 3, 4, 0}};
  write_dump(dir.path(), plan);
  const std::string ops = (dir.path() / "rank0" / "ops.jsonl.zst").string();

  // What zstd reads is exactly the records, and the same text a dump without digests holds.
  TempDir plain("digest_plain");
  Plan old = plan;
  old.digests = false;
  write_dump(plain.path(), old);
  const std::string text = zstdcat(ops);
  CHECK(text == zstdcat((plain.path() / "rank0" / "ops.jsonl.zst").string()));
  CHECK(std::count(text.begin(), text.end(), '\n') == plan.steps * plan.ops_per_step);

  // Walk the file: a digest, then the frame it describes, which it describes exactly.
  const std::string bytes = test::read_bytes(ops);
  size_t at = 0, digests = 0, nonfinite_frames = 0;
  while (at < bytes.size()) {
    uint32_t magic = 0;
    std::memcpy(&magic, bytes.data() + at, 4);
    REQUIRE(magic == digest_detail::kDigestMagic);
    const size_t digest_size = ZSTD_findFrameCompressedSize(bytes.data() + at, bytes.size() - at);
    REQUIRE_FALSE(ZSTD_isError(digest_size));
    FrameDigest d;
    uint64_t size = 0;
    REQUIRE(digest_detail::parse(
        std::string_view(bytes).substr(at + digest_detail::kSkippableHeader,
                                       digest_size - digest_detail::kSkippableHeader),
        d, size));
    at += digest_size;
    const size_t frame = ZSTD_findFrameCompressedSize(bytes.data() + at, bytes.size() - at);
    REQUIRE(frame == size);
    std::string content(ZSTD_getFrameContentSize(bytes.data() + at, frame), '\0');
    REQUIRE(ZSTD_decompress(content.data(), content.size(), bytes.data() + at, frame) ==
            content.size());
    FrameDigest again;
    for_each_line(content, [&](std::string_view line) {
      OpRecord r;
      std::string error;
      REQUIRE(parse_record(line, r, &error));
      digest_detail::add(again, r);
      return true;
    });
    CHECK(d.records == again.records);
    CHECK(d.steps == again.steps);
    CHECK(d.nonfinite_ops == again.nonfinite_ops);
    CHECK(d.background == again.background);
    CHECK(d.content == digest_detail::content_hash(content));  // the bytes' XXH3-64
    nonfinite_frames += d.nonfinite() ? 1 : 0;
    at += frame;
    ++digests;
  }
  CHECK(digests >= static_cast<size_t>(plan.steps));  // a step ends a frame, 5 records too
  CHECK(nonfinite_frames == 1);
}

TEST_CASE("a digest round-trips and a malformed one is refused", "[frame_digest]") {
  FrameDigest d;
  d.records = 7;
  d.steps = {{-1, 2, 0, 1}, {4, 5, 2, 3}};
  d.nonfinite_ops = {{"aten::\"odd\" name", 1}, {"aten::exp", 1}};
  d.background = 3;
  d.content = 0x0123456789abcdefu;
  const std::string frame = digest_detail::encode(d, 1234);
  const std::string payload = frame.substr(digest_detail::kSkippableHeader);
  FrameDigest back;
  uint64_t size = 0;
  REQUIRE(digest_detail::parse(payload, back, size));
  CHECK(size == 1234);
  CHECK(back.records == 7);
  CHECK(back.steps == d.steps);
  CHECK(back.nonfinite_ops == d.nonfinite_ops);
  CHECK(back.background == 3);
  CHECK(back.content == d.content);
  CHECK(back.nonfinite());
  // Every prefix, counts that contradict each other, a later version: refused.
  for (size_t n = 0; n < payload.size(); ++n) {
    CHECK_FALSE(digest_detail::parse(payload.substr(0, n), back, size));
  }
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string p = payload;
    REQUIRE(p.find(from) != std::string::npos);
    p.replace(p.find(from), from.size(), to);
    return p;
  };
  CHECK_FALSE(digest_detail::parse(edited("\"records\":7", "\"records\":8"), back, size));
  CHECK_FALSE(digest_detail::parse(edited("[4,5,2,3]", "[4,5,4,3]"), back, size));
  CHECK_FALSE(digest_detail::parse(edited("[4,5,2,3]", "[4,5,2,6]"), back, size));
  CHECK_FALSE(digest_detail::parse(edited("\"aten::exp\",1", "\"aten::exp\",2"), back, size));
  CHECK_FALSE(digest_detail::parse(edited("digest\":1", "digest\":2"), back, size));
  CHECK_FALSE(digest_detail::parse(edited("\"size\":1234", "\"size\":0"), back, size));
  CHECK(digest_detail::parse(edited("[4,5,2,3]", "[4,5,2,3] "), back, size));  // blanks: fine
  CHECK_FALSE(digest_detail::parse(edited("\"background\":3", "\"background\":8"), back, size));
  CHECK_FALSE(digest_detail::parse(edited("\"background\":3", "\"background\":-1"), back, size));
  CHECK_FALSE(digest_detail::parse(edited("0123456789abcdef", "0123456789abcdeg"), back, size));
  // A digest written before background and content: taken, without a hash.
  const std::string older = payload.substr(0, payload.find(",\"background\"")) + "}";
  REQUIRE(digest_detail::parse(older, back, size));
  CHECK(back.background == 0);
  CHECK_FALSE(back.content.has_value());
  // Keys a later writer adds are passed over.
  const std::string later = payload.substr(0, payload.size() - 1) + ",\"later\":[1,{\"x\":\"y\"}]}";
  REQUIRE(digest_detail::parse(later, back, size));
  CHECK(back.content == d.content);
  CHECK_FALSE(
      digest_detail::parse(payload.substr(0, payload.size() - 1) + ",\"later\":}", back, size));
}

TEST_CASE("summary and overflow passing over frames equal them decoding every frame",
          "[frame_digest][differential]") {
  std::vector<Plan> plans;
  Plan clean;
  plans.push_back(clean);  // no NaN/Inf at all: every frame passed over
  Plan one = clean;
  one.faults = {{0, 5, 4, 0}};
  plans.push_back(one);
  Plan split = one;  // frames of 4 records: the faulty step spans three frames
  split.flush_every = 4;
  plans.push_back(split);
  Plan unflushed = split;  // no end_step(): frames end by count only, across steps
  unflushed.flush_each_step = false;
  plans.push_back(unflushed);
  Plan ranks;  // two ranks, faults at different steps, an Inf input before, nested origins
  ranks.ranks = 2;
  ranks.flush_every = 7;
  ranks.faults = {{0, 2, 7, 1}, {0, 6, 2, 3}, {0, 6, 5, 0}, {1, 9, 1, 0}, {1, 10, 3, 3}};
  plans.push_back(ranks);
  Plan garbage = clean;  // an aten::empty output's garbage only: no overflow, frame decoded
  garbage.faults = {{0, 4, 1, 2}};
  plans.push_back(garbage);
  Plan diverged;  // a divergence: every later step holds NaNs, most are never decoded
  diverged.ranks = 2;
  diverged.steps = 30;
  diverged.faults = {{0, 4, 5, 4}, {1, 11, 0, 4}, {1, 2, 3, 0}};
  plans.push_back(diverged);
  Plan late = diverged;  // bad inputs long before the origin: more steps decoded
  late.flush_every = 6;
  late.faults = {{0, 1, 5, 1}, {0, 3, 5, 1},  {0, 5, 5, 1}, {0, 7, 5, 1},
                 {0, 9, 5, 1}, {0, 11, 5, 1}, {0, 20, 2, 4}};
  plans.push_back(late);
  Plan old = ranks;  // a dump written before digests
  old.digests = false;
  plans.push_back(old);
  // Random fault patterns over small frames.
  std::mt19937 rng(20261128);
  for (int k = 0; k < 12; ++k) {
    Plan p;
    p.ranks = 1 + static_cast<int>(rng() % 3);
    p.steps = 6 + static_cast<int>(rng() % 10);
    p.flush_every = 1 + rng() % 12;
    p.flush_each_step = rng() % 2 == 0;
    const int n = static_cast<int>(rng() % 4);
    for (int f = 0; f < n; ++f) {
      p.faults.push_back(
          {static_cast<int64_t>(rng() % p.ranks), static_cast<int64_t>(rng() % p.steps),
           static_cast<int64_t>(rng() % p.ops_per_step), static_cast<int64_t>(rng() % 5)});
    }
    plans.push_back(p);
  }
  for (size_t i = 0; i < plans.size(); ++i) {
    CAPTURE(i);
    TempDir dir("digest_diff");
    write_dump(dir.path(), plans[i]);
    CHECK(summary_json(dir.path(), true) == summary_json(dir.path(), false));
    CHECK(summary_json(dir.path(), true, true) == summary_json(dir.path(), false, true));
    CHECK(overflow_json(dir.path(), true) == overflow_json(dir.path(), false));
    // The frames were passed over where they could be (else this test shows nothing).
    const uint64_t passed = frames_passed(dir.path());
    if (!plans[i].digests) {
      CHECK(passed == 0);
    } else if (plans[i].faults.empty()) {
      DumpReader r(dir.path().string());
      summarize_dump(r);
      for (const StreamStatus& s : r.statuses()) {
        if (s.path.find("ops.jsonl") != std::string::npos) CHECK(s.frames_passed == s.frames);
      }
    } else {
      CHECK(passed > 0);
    }
  }
  // After a divergence, overflow decodes the first steps with NaNs and counts the rest from
  // the digests: most frames are passed over.
  {
    TempDir dir("digest_diverged");
    write_dump(dir.path(), diverged);
    DumpReader r(dir.path().string());
    const OverflowResult o = find_overflow(r);
    CHECK(o.found);
    uint64_t frames = 0, passed = 0;
    for (const StreamStatus& s : r.statuses()) {
      if (s.path.find("ops.jsonl") == std::string::npos) continue;
      frames += s.frames;
      passed += s.frames_passed;
    }
    CHECK(frames == 60);
    CHECK(passed > frames * 3 / 4);
  }
  // The overflow found is the planted one (the comparison above is not of two empty results).
  TempDir dir("digest_found");
  write_dump(dir.path(), plans[1]);
  const nlohmann::json o = overflow_json(dir.path(), true);
  CHECK(o["step"] == 5);
  CHECK(o["seq"] == 4);
}

TEST_CASE("a truncated stream reads the same with and without digests", "[frame_digest]") {
  TempDir dir("digest_cut");
  Plan p;
  p.flush_every = 4;
  p.faults = {{0, 7, 3, 0}};
  write_dump(dir.path(), p);
  const std::string ops = (dir.path() / "rank0" / "ops.jsonl.zst").string();
  const std::string bytes = test::read_bytes(ops);
  for (size_t cut : {bytes.size() / 3, bytes.size() / 2, bytes.size() - 3}) {
    CAPTURE(cut);
    test::write_bytes(ops, bytes.substr(0, cut));
    const nlohmann::json a = summary_json(dir.path(), true), b = summary_json(dir.path(), false);
    CHECK(a == b);
    CHECK(a["truncated"] == true);
    CHECK(overflow_json(dir.path(), true) == overflow_json(dir.path(), false));
  }
}

TEST_CASE("a digest that does not fit its frame is not used", "[frame_digest]") {
  TempDir dir("digest_bad");
  Plan p;
  p.steps = 3;
  write_dump(dir.path(), p);
  const std::string ops = (dir.path() / "rank0" / "ops.jsonl.zst").string();
  const std::string bytes = test::read_bytes(ops);
  const size_t first = ZSTD_findFrameCompressedSize(bytes.data(), bytes.size());
  const size_t frame = ZSTD_findFrameCompressedSize(bytes.data() + first, bytes.size() - first);
  const std::string data = bytes.substr(first, frame);
  FrameDigest lie;  // says 1 record and no NaN: must not stand for the frame
  lie.records = 1;
  lie.steps = {{0, 1}};
  std::string other(8, '\0');  // a skippable frame of another magic, 4 payload bytes
  const uint32_t magic = 0x184D2A50u, four = 4;
  std::memcpy(other.data(), &magic, 4);
  std::memcpy(other.data() + 4, &four, 4);
  other += "abcd";
  std::string garbled = digest_detail::encode(lie, frame);
  garbled[garbled.size() - 2] = 'x';
  const std::vector<std::string> files = {
      digest_detail::encode(lie, frame + 1) + data,      // the wrong size
      garbled + data,                                    // a payload that does not parse
      other + data,                                      // not a digest
      digest_detail::encode(lie, frame) + other + data,  // not right before its frame
      data + digest_detail::encode(lie, 999),            // a digest left without its frame
  };
  for (size_t i = 0; i < files.size(); ++i) {
    CAPTURE(i);
    test::write_bytes(ops, files[i]);
    DumpReader r(dir.path().string());
    const SummaryResult s = summarize_dump(r);
    CHECK(s.op_records == p.ops_per_step);
    CHECK_FALSE(s.truncated);
    for (const StreamStatus& st : r.statuses()) CHECK(st.frames_passed == 0);
  }
}

TEST_CASE("a step window passes over the frames outside it, with the same records",
          "[frame_digest][differential]") {
  Plan a;
  a.ranks = 2;
  a.steps = 20;
  a.flush_every = 5;  // frames across steps, steps across frames
  a.flush_each_step = false;
  a.faults = {{0, 6, 2, 4}, {1, 9, 4, 0}};
  Plan b = a;  // the second run of a compare: a fault elsewhere
  b.faults = {{0, 7, 1, 0}};
  TempDir da("window_a"), db("window_b");
  write_dump(da.path(), a);
  write_dump(db.path(), b);
  auto text_of = [](DumpReader& r, const RecordFilter& f, uint64_t* passed) {
    std::string text;
    r.for_each_op(f, [&](const OpRecord& op) {
      append_json(op, text);
      text += '\n';
      return true;
    });
    *passed = 0;
    for (const StreamStatus& s : r.statuses()) *passed += s.frames_passed;
    return text;
  };
  for (const auto& [lo, hi] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 0}, {3, 3}, {6, 7}, {5, 12}, {19, 19}, {19, 40}, {-5, -1}}) {
    CAPTURE(lo, hi);
    RecordFilter f;
    f.step_min = lo;
    f.step_max = hi;
    DumpReader on(da.path().string()), off(da.path().string());
    off.set_digests(false);
    uint64_t passed_on = 0, passed_off = 0;
    const std::string x = text_of(on, f, &passed_on), y = text_of(off, f, &passed_off);
    CHECK(x == y);
    CHECK(passed_off == 0);
    CHECK(passed_on > 0);
    for (size_t i = 0; i < on.statuses().size(); ++i) {
      CHECK(on.statuses()[i].records == off.statuses()[i].records);
      CHECK(on.statuses()[i].frames == off.statuses()[i].frames);
    }
    // compare --step and overflow of a window: the same answer either way.
    CompareOptions o;
    o.step = lo;
    DumpReader a_on(da.path().string()), b_on(db.path().string());
    DumpReader a_off(da.path().string()), b_off(db.path().string());
    a_off.set_digests(false);
    b_off.set_digests(false);
    CHECK(compare_dumps(a_on, b_on, o).to_json() == compare_dumps(a_off, b_off, o).to_json());
    ReadOptions window;
    window.filter = f;
    ReadOptions window_off = window;
    window_off.digests = false;
    DumpReader r_on(da.path().string()), r_off(da.path().string());
    CHECK(find_overflow(r_on, window).to_json() == find_overflow(r_off, window_off).to_json());
  }
}
