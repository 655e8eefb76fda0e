// A writer killed with SIGKILL: a child process writes records with periodic flushes and
// is killed at several points; every record of every complete frame must read back
// intact, everything flushed before the kill must be there, and a partial tail must be
// reported as truncation.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <filesystem>
#include <random>

#include "core/record_samples.h"
#include "core/temp_dir.h"
#include "precprobe/reader.h"
#include "precprobe/writer.h"
#include "precprobe_catch.h"
#include "support/child_process.h"

using namespace precprobe;
using precprobe::test::TempDir;
namespace fs = std::filesystem;

namespace {

OpRecord expected_op(int64_t seq) {
  std::mt19937_64 rng(static_cast<uint64_t>(seq));
  return precprobe::test::sample_op(rng, seq / 1000, seq);
}

[[noreturn]] void child_main(const std::string& dir, int progress_fd) {
  WriterOptions o;
  o.dir = dir;
  o.flush_every_records = 64;  // frames also end between the flushes
  DumpWriter w(o);
  w.write_meta(R"({"format_version":1,"rank":0,"world_size":1})");
  for (int64_t seq = 0;; ++seq) {
    w.submit(expected_op(seq));
    if (seq % 100 == 99) {
      w.flush(true);
      int64_t done = seq + 1;
      if (::write(progress_fd, &done, sizeof done) != sizeof done) ::_exit(3);
    }
  }
}

// Starts the child, waits until it reports `target` flushed records, kills it.
int64_t run_and_kill(const std::string& dir, int64_t target) {
  precprobe::test::ProgressChild child([&dir](int fd) { child_main(dir, fd); });
  const int64_t flushed = child.wait_for(target, 0);
  const int status = child.kill();
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  return flushed;
}

// Reads the ops back, checking they are seq 0, 1, 2, ... and equal to what was written.
int64_t read_prefix(const std::string& dir, StreamStatus& status) {
  DumpReader reader(dir);
  int64_t n = 0;
  reader.for_each_op({}, [&](const OpRecord& r) {
    REQUIRE(r.seq == n);
    std::string d = precprobe::test::diff(expected_op(n), r);
    INFO("seq " << n << ": " << d);
    REQUIRE(d.empty());
    ++n;
    return true;
  });
  REQUIRE(reader.statuses().size() == 1);
  status = reader.statuses()[0];
  CHECK(status.bad_lines == 0);
  CHECK(static_cast<int64_t>(status.records) == n);
  return n;
}

}  // namespace

TEST_CASE("SIGKILL leaves every complete frame readable", "[kill]") {
  for (int64_t target : {100, 1500, 6000}) {
    TempDir dir("kill");
    std::string rank_dir = dir / "rank0";
    int64_t flushed = run_and_kill(rank_dir, target);
    INFO("target " << target << ", flushed " << flushed);
    REQUIRE(flushed >= target);

    StreamStatus status;
    int64_t n = read_prefix(rank_dir, status);
    CHECK(n >= flushed);
    if (status.truncated) CHECK(status.truncated_bytes > 0);

    // A partial frame appended after the kill (as a write cut short would leave).
    std::string path = DumpReader::stream_path(rank_dir, StreamKind::kOps);
    std::string bytes = test::read_bytes(path);
    size_t first = ZSTD_findFrameCompressedSize(bytes.data(), bytes.size());
    REQUIRE_FALSE(ZSTD_isError(first));
    uint64_t before = status.truncated ? status.truncated_bytes : 0;
    test::write_bytes(path, bytes + bytes.substr(0, first / 2));
    StreamStatus cut;
    CHECK(read_prefix(rank_dir, cut) == n);
    CHECK(cut.truncated);
    CHECK(cut.truncated_bytes == before + first / 2);

    // The last complete frame cut by one byte: only the frames before it remain.
    test::write_bytes(path, bytes.substr(0, bytes.size() - before - 1));
    StreamStatus shorter;
    int64_t m = read_prefix(rank_dir, shorter);
    CHECK(m < n);
    CHECK(m >= n - 64);
    CHECK(shorter.truncated);
  }
}
