// Framed zstd streams: round trips, truncation at every byte, corruption, zstd bombs.
#include <zstd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/temp_dir.h"
#include "frame_stream.h"
#include "precprobe_catch.h"

using namespace precprobe;
using precprobe::test::read_bytes;
using precprobe::test::TempDir;
using precprobe::test::write_bytes;

namespace {

std::vector<std::string> three_frames() {
  std::vector<std::string> frames;
  for (int f = 0; f < 3; ++f) {
    std::string text;
    for (int i = 0; i < 20 + 10 * f; ++i) {
      text += "{\"frame\":" + std::to_string(f) + ",\"line\":" + std::to_string(i) + "}\n";
    }
    frames.push_back(text);
  }
  return frames;
}

// Writes the frames and returns the file offset at which each frame ends.
std::vector<size_t> write_frames(const std::string& path, const std::vector<std::string>& frames) {
  FrameWriter w;
  std::string error;
  REQUIRE(w.open(path, 3, &error));
  std::vector<size_t> ends;
  for (const std::string& f : frames) {
    // Appended in two pieces: a frame is whatever was buffered since the last end_frame().
    w.append(std::string_view(f).substr(0, f.size() / 2));
    w.buffer().append(f, f.size() / 2, std::string::npos);
    REQUIRE(w.end_frame(&error));
    ends.push_back(w.bytes_out());
  }
  REQUIRE(w.end_frame(&error));  // nothing buffered: no empty frame
  REQUIRE(w.close(&error));
  CHECK(w.frames() == frames.size());
  return ends;
}

struct ReadBack {
  std::vector<std::string> frames;
  bool truncated = false;
  uint64_t truncated_bytes = 0;
  std::string message;
};

ReadBack read_back(const std::string& path) {
  FrameReader r;
  std::string error;
  REQUIRE(r.open(path, &error));
  ReadBack out;
  std::string content;
  while (r.next(content)) out.frames.push_back(content);
  CHECK_FALSE(r.next(content));  // stays at the end
  CHECK(r.frames() == out.frames.size());
  out.truncated = r.truncated();
  out.truncated_bytes = r.truncated_bytes();
  out.message = r.message();
  return out;
}

}  // namespace

TEST_CASE("frames round-trip and the file is plain zstd", "[frame_stream]") {
  TempDir dir("frames");
  auto frames = three_frames();
  std::string path = dir / "s.jsonl.zst";
  auto ends = write_frames(path, frames);
  CHECK(ends.back() == read_bytes(path).size());

  ReadBack back = read_back(path);
  CHECK(back.frames == frames);
  CHECK_FALSE(back.truncated);
  CHECK(back.message.empty());

  // zstdcat (from the zstd package) concatenates the frames.
  std::string out = dir / "cat.txt";
  REQUIRE(std::system(("zstdcat '" + path + "' > '" + out + "'").c_str()) == 0);
  CHECK(read_bytes(out) == frames[0] + frames[1] + frames[2]);

  std::vector<std::string> lines;
  for_each_line(frames[0], [&](std::string_view l) {
    lines.emplace_back(l);
    return true;
  });
  REQUIRE(lines.size() == 20);
  CHECK(lines[3] == "{\"frame\":0,\"line\":3}");
  lines.clear();
  CHECK(for_each_line("a\n\nb", [&](std::string_view l) {
    lines.emplace_back(l);
    return true;
  }));
  CHECK(lines == std::vector<std::string>{"a", "b"});
}

TEST_CASE("a file cut at every byte offset yields exactly its complete frames", "[frame_stream]") {
  TempDir dir("cut");
  auto frames = three_frames();
  std::string full_path = dir / "full.zst";
  auto ends = write_frames(full_path, frames);
  std::string bytes = read_bytes(full_path);
  std::string path = dir / "cut.zst";
  for (size_t n = 0; n <= bytes.size(); ++n) {
    write_bytes(path, bytes.substr(0, n));
    size_t complete = 0;
    while (complete < ends.size() && ends[complete] <= n) ++complete;
    size_t boundary = complete == 0 ? 0 : ends[complete - 1];
    INFO("cut at " << n << " of " << bytes.size());
    ReadBack back = read_back(path);
    REQUIRE(back.frames.size() == complete);
    for (size_t i = 0; i < complete; ++i) CHECK(back.frames[i] == frames[i]);
    CHECK(back.truncated == (n != boundary));
    CHECK(back.truncated_bytes == (n - boundary));
    if (back.truncated) CHECK(back.message.find("incomplete frame") != std::string::npos);
  }
}

TEST_CASE("a corrupt byte stops the stream at its frame, earlier frames are intact",
          "[frame_stream]") {
  TempDir dir("corrupt");
  auto frames = three_frames();
  std::string full_path = dir / "full.zst";
  auto ends = write_frames(full_path, frames);
  std::string bytes = read_bytes(full_path);
  std::string path = dir / "bad.zst";
  size_t stopped_in_second = 0;
  for (size_t at = ends[0]; at < ends[1]; ++at) {
    for (unsigned char mask : {0x01, 0x80, 0xff}) {
      std::string bad = bytes;
      bad[at] = static_cast<char>(bad[at] ^ mask);
      write_bytes(path, bad);
      INFO("byte " << at << " mask " << int(mask));
      ReadBack back = read_back(path);
      // Never a garbled frame: whatever comes back is a prefix of what was written.
      REQUIRE(back.frames.size() >= 1);
      for (size_t i = 0; i < back.frames.size(); ++i) CHECK(back.frames[i] == frames[i]);
      if (back.frames.size() < frames.size()) {
        CHECK(back.truncated);
        CHECK(back.truncated_bytes > 0);
        CHECK_FALSE(back.message.empty());
      }
      if (back.frames.size() == 1) ++stopped_in_second;
    }
  }
  // The checksum catches content corruption: nearly every flip stops at frame 2.
  CHECK(stopped_in_second >= (ends[1] - ends[0]) * 3 - 12);

  write_bytes(path, "");
  ReadBack empty = read_back(path);
  CHECK(empty.frames.empty());
  CHECK_FALSE(empty.truncated);

  write_bytes(path, std::string(100, 'x'));
  ReadBack junk = read_back(path);
  CHECK(junk.frames.empty());
  CHECK(junk.truncated);
  CHECK(junk.truncated_bytes == 100);

  FrameReader missing;
  std::string error;
  CHECK_FALSE(missing.open(dir / "nope.zst", &error));
  CHECK(error.find("nope.zst") != std::string::npos);
}

namespace {

// Streams `total` zero bytes into one frame, optionally declaring the size up front.
std::string zero_frame(size_t total, bool declare_size) {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 1);
  if (declare_size) ZSTD_CCtx_setPledgedSrcSize(c, total);
  std::string zeros(1 << 20, '\0');
  std::string out;
  std::vector<char> buf(ZSTD_CStreamOutSize());
  size_t left = total;
  for (;;) {
    size_t chunk = std::min(left, zeros.size());
    left -= chunk;
    ZSTD_inBuffer in{zeros.data(), chunk, 0};
    ZSTD_EndDirective mode = left == 0 ? ZSTD_e_end : ZSTD_e_continue;
    size_t rem;
    do {
      ZSTD_outBuffer o{buf.data(), buf.size(), 0};
      rem = ZSTD_compressStream2(c, &o, &in, mode);
      REQUIRE_FALSE(ZSTD_isError(rem));
      out.append(buf.data(), o.pos);
    } while (mode == ZSTD_e_end ? rem != 0 : in.pos < in.size);
    if (left == 0) break;
  }
  ZSTD_freeCCtx(c);
  return out;
}

}  // namespace

TEST_CASE("frames without a declared size are read, oversized frames are refused",
          "[frame_stream]") {
  TempDir dir("bomb");
  std::string path = dir / "s.zst";
  std::string small = zero_frame(3 << 20, false);
  REQUIRE(ZSTD_getFrameContentSize(small.data(), small.size()) == ZSTD_CONTENTSIZE_UNKNOWN);
  write_bytes(path, small + small);
  ReadBack ok = read_back(path);
  REQUIRE(ok.frames.size() == 2);
  CHECK(ok.frames[1] == std::string(3 << 20, '\0'));
  CHECK_FALSE(ok.truncated);

  const size_t too_big = FrameReader::kMaxFrameContent + (1 << 20);
  for (bool declared : {true, false}) {
    INFO("declared size: " << declared);
    write_bytes(path, small + zero_frame(too_big, declared));
    ReadBack bomb = read_back(path);
    CHECK(bomb.frames.size() == 1);
    CHECK(bomb.truncated);
    CHECK(bomb.message.find("larger than 256 MiB") != std::string::npos);
  }
}
