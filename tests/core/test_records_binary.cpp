// Binary op records (ops.bin.zst, src/core/records_binary.h). The house method: the same
// records through the binary codec and through JSON Lines must read back the same, record
// by record (their JSON encodings equal) and command by command (summary, overflow,
// compare, export), on samples with every special value and on the golden dumps.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <sstream>

#include "core/record_samples.h"
#include "core/temp_dir.h"
#include "op_cursor.h"
#include "precprobe/analysis.h"
#include "precprobe/reader.h"
#include "precprobe/writer.h"
#include "precprobe_catch.h"
#include "records_binary.h"

namespace fs = std::filesystem;
using namespace precprobe;

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr double kQuietNaN = std::numeric_limits<double>::quiet_NaN();

std::string json_line(const OpRecord& r) {
  std::string s;
  append_json(r, s);
  return s;
}

// What the JSON Lines reader reads back of `r`.
OpRecord via_json(const OpRecord& r) {
  OpRecord back;
  std::string error;
  REQUIRE(parse_record(json_line(r), back, &error));
  return back;
}

// Every record of one binary frame.
std::vector<OpRecord> decode_all(const std::string& frame, int* bad = nullptr,
                                 std::string* end_error = nullptr) {
  BinaryOpDecoder d;
  std::string error;
  REQUIRE(d.open(frame, &error));
  std::vector<OpRecord> out;
  OpRecord r;
  for (;;) {
    error.clear();
    auto next = d.next(r, &error);
    if (next == BinaryOpDecoder::Next::kEnd) break;
    if (next == BinaryOpDecoder::Next::kBad) {
      if (bad != nullptr) ++*bad;
      continue;
    }
    out.push_back(r);
  }
  if (end_error != nullptr) *end_error = error;
  return out;
}

Arg value(std::string v) { return Arg{std::nullopt, std::move(v)}; }

// Records with every optional field and special value the JSON text treats apart.
std::vector<OpRecord> special_records() {
  std::mt19937_64 rng(7);
  std::vector<OpRecord> rs;
  for (int i = 0; i < 12; ++i) rs.push_back(test::sample_op(rng, i / 4, i));
  OpRecord r = test::sample_op(rng, 3, 40);
  r.overload = "Tensor";
  r.scope = "encoder/layer.0";
  r.node = "AddmmBackward0";
  r.dir = Direction::kBackward;
  r.grad = false;
  r.background = true;
  r.optimizer = true;
  r.module = "encoder.layer.0";
  r.thread = 4000000000u;
  r.depth = -3;
  r.seqnr = -1;
  r.step = -7;
  r.call = int64_t{1} << 40;
  TensorStats& t = *r.inputs[0].tensor;
  t.min = -kInfinity;
  t.max = kQuietNaN;
  t.mean = 1e300;  // beyond float32: kept as a double
  t.norm = -0.0;   // the sign of zero survives
  t.hash = 0x0123456789abcdefULL;
  t.list_index = 2;
  t.hist = {{-1, 3}, {0, 7}, {9, 1}};
  t.has_range = true;
  t.range = {{-149, 1}, {-3, 40}, {127, 2}};
  TensorStats& w = *r.inputs[1].tensor;
  w.min = w.max = w.mean = w.norm = kQuietNaN;  // no finite element: undefined statistics
  w.nan = w.numel;
  w.neg = w.pos = w.zero = 0;
  w.mean = 1e-50;  // underflows to float32 zero
  w.norm = kInfinity;
  w.has_range = true;  // recorded, empty
  w.device = "cuda:0";
  w.dtype = "BFloat16";
  w.shape = {};
  r.inputs.push_back(value(""));          // empty: null
  r.inputs.push_back(value("  2.5 "));    // blanks around JSON
  r.inputs.push_back(value("not json"));  // kept as a JSON string
  r.inputs.push_back(value("\"inf\""));   // a non-finite double, named
  r.inputs.push_back(value("[1.0,\"-inf\"]"));
  r.inputs.push_back(value("{\"a\":[1,2],\"b\":null}"));
  r.inputs.push_back(value("not json"));  // the same value again: its table entry
  r.outputs.clear();
  rs.push_back(r);
  OpRecord empty;
  empty.op = "aten::empty";
  rs.push_back(empty);
  OpRecord grad_on = rs[0];
  grad_on.grad = true;  // written as absent, read as unknown, both ways
  rs.push_back(grad_on);
  return rs;
}

}  // namespace

TEST_CASE("binary op records read back as their JSON Lines do", "[records_binary]") {
  const std::vector<OpRecord> rs = special_records();
  BinaryOpEncoder enc;
  std::string frame;
  for (const OpRecord& r : rs) enc.append(r, frame);
  const std::vector<OpRecord> back = decode_all(frame);
  REQUIRE(back.size() == rs.size());
  for (size_t i = 0; i < rs.size(); ++i) {
    INFO("record " << i << ": " << json_line(rs[i]));
    const OpRecord j = via_json(rs[i]);
    CHECK(test::diff(j, back[i]).empty());
    CHECK(json_line(j) == json_line(back[i]));
    CHECK(back[i].grad == j.grad);
  }
  // The special record, field by field against what was meant (not only against JSON).
  const OpRecord& s = back[12];
  CHECK(s.thread == 4000000000u);
  CHECK(s.depth == -3);
  CHECK(s.call == int64_t{1} << 40);
  CHECK(std::isinf(s.inputs[0].tensor->min));
  CHECK(std::isnan(s.inputs[0].tensor->max));
  CHECK(s.inputs[0].tensor->mean == 1e300);
  CHECK(std::signbit(s.inputs[0].tensor->norm));
  CHECK(s.inputs[1].tensor->mean == 0.0);
  CHECK(s.inputs[1].tensor->has_range);
  CHECK(s.inputs[1].tensor->range.empty());
  CHECK(s.inputs[3].value == "null");
  CHECK(s.inputs[4].value == "2.5");
  CHECK(s.inputs[5].value == "\"not json\"");
  CHECK(s.inputs[6].value == "\"inf\"");
  CHECK(s.inputs[7].value == "[1.0,\"-inf\"]");
  CHECK(s.inputs[9].value == "\"not json\"");
}

TEST_CASE("a frame is self-contained and the same records give the same bytes",
          "[records_binary]") {
  const std::vector<OpRecord> rs = special_records();
  BinaryOpEncoder enc;
  std::string a, b;
  for (const OpRecord& r : rs) enc.append(r, a);
  for (const OpRecord& r : rs) enc.append(r, b);  // a new frame: its own string table
  CHECK(a == b);
  CHECK(is_binary_ops_frame(a));
  CHECK_FALSE(is_binary_ops_frame(json_line(rs[0])));
  // Smaller than the JSON text (the point of the layout).
  std::string text;
  for (const OpRecord& r : rs) append_json(r, text);
  CHECK(a.size() * 2 < text.size());
}

TEST_CASE("every golden dump's op records survive the binary codec", "[records_binary]") {
  size_t total = 0;
  for (const auto& entry : fs::directory_iterator(PRECPROBE_TEST_DATA_DIR "/cli")) {
    const std::string name = entry.path().filename().string();
    if (name == "corrupt_meta" || name == "future_version") continue;
    DumpReader reader(entry.path().string());
    std::vector<OpRecord> rs = reader.ops();
    INFO(name);
    REQUIRE_FALSE(rs.empty());
    BinaryOpEncoder enc;
    std::string frame;
    for (const OpRecord& r : rs) enc.append(r, frame);
    const std::vector<OpRecord> back = decode_all(frame);
    REQUIRE(back.size() == rs.size());
    for (size_t i = 0; i < rs.size(); ++i) {
      if (json_line(back[i]) != json_line(via_json(rs[i]))) FAIL(json_line(rs[i]));
    }
    total += rs.size();
  }
  CHECK(total > 100);
}

TEST_CASE("a bad record is passed over, a bad entry ends the frame, bytes never crash",
          "[records_binary]") {
  const std::vector<OpRecord> rs = special_records();
  BinaryOpEncoder enc;
  std::string frame;
  for (const OpRecord& r : rs) enc.append(r, frame);
  // Version byte of the future: refused with a message that says what to do.
  {
    std::string future = frame;
    future[4] = 2;
    BinaryOpDecoder d;
    std::string error;
    CHECK_FALSE(d.open(future, &error));
    CHECK(error.find("newer precprobe") != std::string::npos);
  }
  // A record whose body does not decode, between good ones: counted, passed over, the
  // records after it read. An entry cut short ends the frame with a message.
  {
    BinaryOpEncoder e1;
    std::string one;
    e1.append(rs[0], one);
    e1.append(rs[1], one);
    const size_t mark = one.size();
    e1.append(rs[0], one);  // its strings are in the table: a record entry alone
    const std::string bad_entry("\x02\x03\xff\xff\xff", 5);  // a number that never ends
    const std::string broken = one.substr(0, mark) + bad_entry + one.substr(mark);
    int bad = 0;
    std::string end_error;
    const std::vector<OpRecord> back = decode_all(broken, &bad, &end_error);
    CHECK(bad == 1);
    REQUIRE(back.size() == 3);
    CHECK(json_line(back[2]) == json_line(via_json(rs[0])));
    CHECK(end_error.empty());
    bad = 0;
    decode_all(one + std::string("\x02", 1), &bad, &end_error);  // a length that is missing
    CHECK(bad == 0);
    CHECK_FALSE(end_error.empty());
    decode_all(one + std::string("\x02\x7f\x00", 3), &bad, &end_error);  // longer than the frame
    CHECK(end_error.find("longer than the frame") != std::string::npos);
  }
  // Every prefix and every single-byte change: no crash, never more records than written.
  for (size_t n = 5; n <= frame.size(); n += 3) {
    const std::vector<OpRecord> back = decode_all(frame.substr(0, n));
    CHECK(back.size() <= rs.size());
  }
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000; ++i) {
    std::string mutated = frame;
    mutated[5 + rng() % (mutated.size() - 5)] = static_cast<char>(rng());
    int bad = 0;
    const std::vector<OpRecord> back = decode_all(mutated, &bad);
    CHECK(back.size() + static_cast<size_t>(bad) <= rs.size() + 1);
  }
}

namespace {

// The golden dump `src` written again by a DumpWriter with `encoding` (meta.json copied).
void rewrite(const fs::path& src, const fs::path& dst, OpsEncoding encoding) {
  DumpReader reader(src.string());
  for (const RankInfo& rank : reader.ranks()) {
    WriterOptions o;
    o.dir = (dst / ("rank" + std::to_string(rank.rank))).string();
    o.ops_encoding = encoding;
    o.flush_interval_ms = 3600 * 1000;
    DumpWriter w(o);
    if (!rank.meta_json.empty()) w.write_meta(rank.meta_json);
    RecordFilter f;
    f.ranks = {rank.rank};
    int64_t step = std::numeric_limits<int64_t>::min();
    reader.for_each_op(f, [&](const OpRecord& r) {
      if (r.step != step && step != std::numeric_limits<int64_t>::min()) w.end_step(step);
      step = r.step;
      OpRecord copy = r;
      w.submit(std::move(copy));
      return true;
    });
    for (const ScalarRecord& s : reader.scalars(f)) {
      ScalarRecord copy = s;
      w.submit(std::move(copy));
    }
    for (const GradRecord& g : reader.grads(f)) {
      GradRecord copy = g;
      w.submit(std::move(copy));
    }
    if (step != std::numeric_limits<int64_t>::min()) w.end_step(step);
    w.close();
  }
}

std::string export_ops(const fs::path& dir, ExportFormat format) {
  DumpReader r(dir.string());
  std::ostringstream out;
  export_table(r, StreamKind::kOps, format, out);
  return out.str();
}

}  // namespace

TEST_CASE("a dump written with binary op records answers every command as JSON Lines does",
          "[records_binary]") {
  for (const char* name : {"overflow", "clean", "range", "diverged_1pct"}) {
    INFO(name);
    test::TempDir dir(std::string("binary_") + name);
    const fs::path src = fs::path(PRECPROBE_TEST_DATA_DIR "/cli") / name;
    rewrite(src, dir.path() / "json", OpsEncoding::kJsonLines);
    rewrite(src, dir.path() / "bin", OpsEncoding::kBinary);
    REQUIRE(fs::exists(dir.path() / "bin/rank0/ops.bin.zst"));
    REQUIRE_FALSE(fs::exists(dir.path() / "bin/rank0/ops.jsonl.zst"));
    REQUIRE(fs::exists(dir.path() / "json/rank0/ops.jsonl.zst"));
    // The records.
    DumpReader rj((dir.path() / "json").string()), rb((dir.path() / "bin").string());
    const std::vector<OpRecord> a = rj.ops(), b = rb.ops();
    REQUIRE(a.size() == b.size());
    REQUIRE_FALSE(a.empty());
    for (size_t i = 0; i < a.size(); ++i) {
      if (json_line(a[i]) != json_line(b[i]) || a[i].rank != b[i].rank || a[i].grad != b[i].grad)
        FAIL(json_line(a[i]) << json_line(b[i]));
    }
    for (const StreamStatus& s : rb.statuses()) {
      CHECK(s.bad_lines == 0);
      CHECK_FALSE(s.truncated);
    }
    // The commands: overflow (digests on and off), summary's counts, compare, export.
    for (bool digests : {true, false}) {
      ReadOptions read;
      read.digests = digests;
      DumpReader oj((dir.path() / "json").string()), ob((dir.path() / "bin").string());
      CHECK(find_overflow(oj, read).to_json() == find_overflow(ob, read).to_json());
      DumpReader sj((dir.path() / "json").string()), sb((dir.path() / "bin").string());
      nlohmann::json js = summarize_dump(sj, read).to_json(),
                     bs = summarize_dump(sb, read).to_json();
      for (const char* k : {"streams", "path", "ranks"}) {  // file names and directories
        js.erase(k);
        bs.erase(k);
      }
      CHECK(js == bs);
    }
    for (bool exact : {false, true}) {
      CompareOptions co;
      co.exact = exact;
      DumpReader cj((dir.path() / "json").string()), cb((dir.path() / "bin").string());
      const CompareResult c = compare_dumps(cj, cb, co);
      CHECK_FALSE(c.differs());
      CHECK(c.ops_a == c.ops_b);
      CHECK(c.ops_a == static_cast<int64_t>(a.size()));
    }
    CHECK(export_ops(dir.path() / "json", ExportFormat::kJsonl) ==
          export_ops(dir.path() / "bin", ExportFormat::kJsonl));
    CHECK(export_ops(dir.path() / "json", ExportFormat::kCsv) ==
          export_ops(dir.path() / "bin", ExportFormat::kCsv));
  }
}

TEST_CASE("the fuzzer's seeds are frames that decode", "[records_binary]") {
  int files = 0;
  for (const auto& e :
       fs::directory_iterator(PRECPROBE_SOURCE_DIR "/tests/fuzz/corpus/records_binary")) {
    INFO(e.path());
    int bad = 0;
    std::string end_error;
    CHECK(decode_all(test::read_bytes(e.path().string()), &bad, &end_error).size() == 1);
    CHECK(bad == 0);
    CHECK(end_error.empty());
    ++files;
  }
  CHECK(files >= 2);
}

// compare decodes the records of later frames into those of the groups it has judged
// (OpCursor::recycle): a record read into another's strings and vectors (more or fewer
// arguments, a hash, a histogram, a range, a parameter name where the other had none, and
// the reverse) must read as it does into a fresh one, in both encodings.
TEST_CASE("records decoded into recycled ones read as fresh ones", "[records_binary]") {
  std::vector<OpRecord> records = special_records();
  std::mt19937_64 rng(11);
  for (int i = 0; i < 40; ++i) records.push_back(test::sample_op(rng, 5 + i / 10, i));
  for (size_t i = 0; i < records.size(); ++i) records[i].seq = static_cast<int64_t>(i);
  for (OpsEncoding encoding : {OpsEncoding::kBinary, OpsEncoding::kJsonLines}) {
    INFO((encoding == OpsEncoding::kBinary ? "binary" : "JSON Lines"));
    test::TempDir dir("recycled");
    {
      WriterOptions o;
      o.dir = (dir.path() / "rank0").string();
      o.ops_encoding = encoding;
      o.flush_every_records = 3;
      o.flush_interval_ms = 3600 * 1000;
      DumpWriter w(o);
      w.write_meta(R"({"format_version":1,"rank":0,"world_size":1})");
      for (const OpRecord& r : records) {
        OpRecord copy = r;
        REQUIRE(w.submit(std::move(copy)));
      }
      w.close();
    }
    DumpReader fresh(dir.path().string());
    const std::vector<OpRecord> expected = fresh.ops();
    REQUIRE(expected.size() == records.size());
    DumpReader reader(dir.path().string());
    RecordFilter all;
    OpCursor cursor(reader, all);
    std::vector<OpRecord> frame, read;
    std::mt19937_64 order(3);
    int frames = 0;
    while (cursor.next(frame)) {
      read.insert(read.end(), frame.begin(), frame.end());
      std::shuffle(frame.begin(), frame.end(), order);  // storage of other records
      cursor.recycle(frame);
      CHECK(frame.empty());
      ++frames;
    }
    CHECK(frames >= static_cast<int>(records.size() / 3));
    REQUIRE(read.size() == expected.size());
    for (size_t i = 0; i < read.size(); ++i) {
      if (json_line(read[i]) != json_line(expected[i]) || read[i].rank != expected[i].rank ||
          read[i].grad != expected[i].grad)
        FAIL(i << ": " << json_line(read[i]) << " against " << json_line(expected[i]));
    }
  }
}

TEST_CASE("a value whose text is not the JSON text a writer gives it is a bad record",
          "[records_binary]") {
  // The writer stores each value as canonical_value() makes it: JSON text without surrounding
  // blanks. A frame with any other text (the fuzzer made "\t1") would read as a record that
  // does not read back as itself, through either codec: it is counted and passed over.
  OpRecord r;
  r.op = "aten::add";
  r.inputs.push_back(value("12345"));
  r.outputs.push_back(value("[1,2]"));
  BinaryOpEncoder enc;
  std::string frame;
  enc.append(r, frame);
  const std::string entry = std::string("\x01\x05", 2) + "12345";
  const size_t at = frame.find(entry);
  REQUIRE(at != std::string::npos);
  const std::vector<OpRecord> good = decode_all(frame);
  REQUIRE(good.size() == 1);
  CHECK(good[0].inputs[0].value == "12345");
  CHECK(json_line(good[0]) == json_line(via_json(r)));
  for (const std::string& text : {std::string("\t12345"), std::string("12345 "), std::string("x1"),
                                  std::string(""), std::string("\"open")}) {
    CAPTURE(text);
    std::string changed = frame;
    changed.replace(at, entry.size(),
                    std::string(1, '\x01') + static_cast<char>(text.size()) + text);
    int bad = 0;
    std::string end_error;
    CHECK(decode_all(changed, &bad, &end_error).empty());
    CHECK(bad == 1);
    CHECK(end_error.empty());
    BinaryOpDecoder d;
    std::string error;
    REQUIRE(d.open(changed, &error));
    OpRecord back;
    CHECK(d.next(back, &error) == BinaryOpDecoder::Next::kBad);
    CHECK(error.find("not JSON text without surrounding blanks") != std::string::npos);
  }
  // The same string as a name (an op, a dtype) is not a value: read as it is.
  OpRecord named = r;
  named.op = "\t12345";
  std::string frame2;
  BinaryOpEncoder enc2;
  enc2.append(named, frame2);
  const std::vector<OpRecord> back = decode_all(frame2);
  REQUIRE(back.size() == 1);
  CHECK(back[0].op == "\t12345");
}
