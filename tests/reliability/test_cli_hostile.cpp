// Every `precprobe` command on hostile inputs: empty and foreign directories, a meta.json
// that is empty, an array or of a future format version, a PNG renamed ops.jsonl.zst, a
// stream that is a directory. Each must exit 2 with a message naming the offending path —
// no crash, no exit 0. A cut stream tail is the one readable case: the commands read the
// complete frames and `summary` reports the truncation.
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/temp_dir.h"
#include "precprobe_catch.h"
#include "support/cli_run.h"

namespace fs = std::filesystem;
using precprobe::test::TempDir;

namespace {

const std::string kClean = std::string(PRECPROBE_TEST_DATA_DIR) + "/cli/clean";

using Run = precprobe::test::CliRun;  // status -1 when killed by a signal (a crash)

// stdout and stderr together.
Run run(const std::string& args) { return precprobe::test::run_cli(args, /*merge_stderr=*/true); }

// A copy of the clean golden dump under `root/name`.
std::string clean_copy(const TempDir& root, const std::string& name) {
  const std::string dir = root / name;
  fs::copy(kClean, dir, fs::copy_options::recursive);
  return dir;
}

// The commands, each given the dump as `D` (compare gets the clean dump as its baseline).
const std::vector<std::string> kCommands = {"summary D",
                                            "overflow D",
                                            "grads D",
                                            "scale D",
                                            "export D --format csv",
                                            "export D --format jsonl",
                                            "compare CLEAN D",
                                            "compare D CLEAN",
                                            "report D -o /dev/null",
                                            "report CLEAN --compare D -o /dev/null"};

std::string with_dump(std::string cmd, const std::string& dump) {
  auto put = [&](const std::string& key, const std::string& v) {
    size_t at = cmd.find(key);
    if (at != std::string::npos) cmd.replace(at, key.size(), "'" + v + "'");
  };
  put("CLEAN", kClean);
  put("D", dump);
  return cmd;
}

// Runs every command on `dump` and requires exit 2 with `needle` in the message.
void require_input_error(const std::string& dump, const std::string& needle) {
  for (const std::string& c : kCommands) {
    const std::string cmd = with_dump(c, dump);
    Run r = run(cmd);
    INFO(cmd << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK(r.out.find(needle) != std::string::npos);
    CHECK(r.out.find("error") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("hostile dumps: every command exits 2 naming the file", "[cli][hostile]") {
  TempDir root("hostile");

  SECTION("an empty directory") {
    const std::string d = root / "empty";
    fs::create_directories(d);
    require_input_error(d, d);
  }
  SECTION("a directory that is not a dump") {
    const std::string d = root / "photos";
    fs::create_directories(d);
    precprobe::test::write_bytes(d + "/readme.txt", "holiday pictures\n");
    require_input_error(d, d);
  }
  SECTION("a regular file given as the dump") {
    const std::string f = root / "file.txt";
    precprobe::test::write_bytes(f, "not a dump\n");
    require_input_error(f, f);
  }
  SECTION("meta.json is an array") {
    const std::string d = clean_copy(root, "array_meta");
    precprobe::test::write_bytes(d + "/rank0/meta.json", "[1, 2, 3]\n");
    require_input_error(d, d + "/rank0/meta.json");
  }
  SECTION("meta.json is empty") {
    const std::string d = clean_copy(root, "empty_meta");
    precprobe::test::write_bytes(d + "/rank0/meta.json", "");
    require_input_error(d, d + "/rank0/meta.json");
  }
  SECTION("meta.json is binary garbage") {
    const std::string d = clean_copy(root, "garbage_meta");
    precprobe::test::write_bytes(d + "/rank0/meta.json", std::string("\x00\xff\x10{{", 5));
    require_input_error(d, d + "/rank0/meta.json");
  }
  SECTION("a format version from the future") {
    const std::string d = clean_copy(root, "future");
    precprobe::test::write_bytes(d + "/rank0/meta.json",
                                 R"({"format_version":999,"rank":0,"world_size":1})");
    Run r = run("summary '" + d + "'");
    INFO(r.out);
    CHECK(r.status == 2);
    CHECK(r.out.find("999") != std::string::npos);
    require_input_error(d, d);
  }
  SECTION("a PNG renamed ops.jsonl.zst") {
    const std::string d = clean_copy(root, "png");
    static const char kPng[] = "\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\0\x10\0\0\0\x10\x08\x06\0\0\0";
    const std::string png(kPng, sizeof(kPng) - 1);  // the header holds NULs: no strlen
    precprobe::test::write_bytes(d + "/rank0/ops.jsonl.zst", png);
    require_input_error(d, d + "/rank0/ops.jsonl.zst");
  }
  SECTION("a JSON Lines text file that was never compressed") {
    const std::string d = clean_copy(root, "plain");
    precprobe::test::write_bytes(d + "/rank0/grads.jsonl.zst", "{\"step\":0}\n");
    require_input_error(d, d + "/rank0/grads.jsonl.zst");
  }
  SECTION("a stream that is a directory") {
    const std::string d = clean_copy(root, "dir_stream");
    fs::remove(d + "/rank0/ops.jsonl.zst");
    fs::create_directories(d + "/rank0/ops.jsonl.zst");
    require_input_error(d, d + "/rank0/ops.jsonl.zst");
  }
}

TEST_CASE("hostile dumps: a cut tail is readable and reported", "[cli][hostile]") {
  TempDir root("hostile_tail");
  const std::string d = clean_copy(root, "cut");
  const std::string ops = d + "/rank0/ops.jsonl.zst";
  std::string bytes = precprobe::test::read_bytes(ops);
  REQUIRE(bytes.size() > 16);
  precprobe::test::write_bytes(ops, bytes.substr(0, bytes.size() - 7));

  Run s = run("summary '" + d + "'");
  INFO(s.out);
  CHECK(s.status == 0);
  CHECK(s.out.find("truncated") != std::string::npos);
  for (const std::string& c : kCommands) {
    const std::string cmd = with_dump(c, d);
    Run r = run(cmd);
    INFO(cmd << "\n" << r.out);
    CHECK(r.status >= 0);  // exited, not killed by a signal
    CHECK(r.status != 2);  // the complete frames are read
  }
  // Zero bytes: killed before the first frame; an empty, readable stream.
  precprobe::test::write_bytes(ops, "");
  Run e = run("summary '" + d + "'");
  INFO(e.out);
  CHECK(e.status == 0);
  CHECK(e.out.find("ops 0") != std::string::npos);
}

// Outputs that are not regular files are written in place, never replaced by a rename:
// as root, a temporary file renamed over /dev/null turns the machine's /dev/null into a
// regular file (apt's signature checks then fail).
TEST_CASE("outputs that are devices or FIFOs stay what they are", "[cli][hostile]") {
  struct stat st {};
  const std::string clean = "'" + kClean + "'";
  for (const std::string& cmd : {"report " + clean + " -o /dev/null",
                                 "report " + clean + " --compare " + clean + " -o /dev/null",
                                 "export " + clean + " --format csv -o /dev/null",
                                 "export " + clean + " --format jsonl -o /dev/null"}) {
    Run r = run(cmd);
    INFO(cmd << "\n" << r.out);
    CHECK(r.status == 0);
    REQUIRE(::stat("/dev/null", &st) == 0);
    CHECK(S_ISCHR(st.st_mode));
  }
  CHECK_FALSE(fs::exists("/dev/null.tmp"));

  TempDir root("fifo");
  const std::string fifo = root / "report.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string received;
  std::thread reader([&] {
    std::FILE* f = std::fopen(fifo.c_str(), "rb");
    if (f == nullptr) return;
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) received.append(buf, n);
    std::fclose(f);
  });
  Run r = run("report " + clean + " -o '" + fifo + "'");
  reader.join();
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(received.rfind("<!DOCTYPE html>", 0) == 0);
  REQUIRE(::stat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
}
