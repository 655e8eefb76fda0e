// Times what `precprobe summary`, `overflow` and `compare` do with a dump, in this process:
// open the dump, read every stream, analyse, make the result's JSON. Prints op
// records per second of CPU time and of wall time per run, and a digest of the result's JSON
// text so that two builds can be shown to give the same answer.
//
//   read_commands summary|overflow|compare DIR [DIR_B] [--repeat N] [--no-digests] [--step S]
//                 [--threads T]
//
// --no-digests decodes every frame (ReadOptions::digests off): the results' digests must be
// the same as with them. --step S: compare that step only (compare --step). --threads T:
// compare's judging threads, the reading one included (CompareOptions::threads; 0, the
// default, one a core, as `precprobe compare` runs).
//
// summary and overflow are single-threaded, and so is compare with --threads 1 (pin it with
// taskset to measure one core); CPU time is the process's, over every thread. Records
// counted are the op records read (for compare: both dumps').
#include <precprobe/core.h>
#include <sys/resource.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>

using namespace precprobe;

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// FNV-1a of the result's JSON text.
uint64_t digest(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

uint64_t op_records(DumpReader& r) {
  uint64_t n = 0;
  for (const std::string_view ops : {stream_file_name(StreamKind::kOps), kBinaryOpsFile}) {
    for (const StreamStatus& s : r.statuses()) {
      if (s.path.size() >= ops.size() &&
          s.path.compare(s.path.size() - ops.size(), ops.size(), ops) == 0)
        n += s.records;
    }
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: read_commands summary|overflow|compare DIR [DIR_B] [--repeat N] "
                 "[--no-digests] [--step S] [--threads T]\n");
    return 2;
  }
  const std::string cmd = argv[1];
  const std::string a = argv[2];
  std::string b;
  int repeat = 3;
  ReadOptions read;
  std::optional<int64_t> step;
  unsigned threads = 0;
  for (int i = 3; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--repeat" && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
    } else if (arg == "--no-digests") {
      read.digests = false;
    } else if (arg == "--step" && i + 1 < argc) {
      step = std::atoll(argv[++i]);
    } else if (arg == "--threads" && i + 1 < argc) {
      threads = static_cast<unsigned>(std::atoi(argv[++i]));
    } else {
      b = arg;
    }
  }
  if (cmd == "compare" && b.empty()) {
    std::fprintf(stderr, "read_commands: compare needs two dumps\n");
    return 2;
  }
  for (int run = 0; run < repeat; ++run) {
    const double c0 = cpu_seconds();
    const auto w0 = std::chrono::steady_clock::now();
    uint64_t n = 0;
    std::string text;
    DumpReader ra(a);
    if (cmd == "summary") {
      nlohmann::json j = summarize_dump(ra, read).to_json();
      for (auto& st : j["streams"]) st.erase("frames_passed");  // the one field that differs
      text = j.dump();
      n = op_records(ra);
    } else if (cmd == "overflow") {
      text = find_overflow(ra, read).to_json().dump();
      n = op_records(ra);
    } else if (cmd == "compare") {
      DumpReader rb(b);
      ra.set_digests(read.digests);
      rb.set_digests(read.digests);
      CompareOptions o;
      o.first = true;
      o.keep_ops = KeepOps::kDivergent;  // as `precprobe compare --first` runs it
      o.step = step;
      o.threads = threads;
      text = compare_dumps(ra, rb, o).to_json().dump();
      n = op_records(ra) + op_records(rb);
    } else {
      std::fprintf(stderr, "read_commands: unknown command %s\n", cmd.c_str());
      return 2;
    }
    const double cpu = cpu_seconds() - c0;
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf(
        "%s run %d: %llu op records, cpu %.3f s (%.3f M records/s), wall %.3f s "
        "(%.3f M/s), peak RSS %.0f MB, result %zu B digest %016llx\n",
        cmd.c_str(), run, static_cast<unsigned long long>(n), cpu, n / cpu / 1e6, wall,
        n / wall / 1e6, static_cast<double>(usage.ru_maxrss) / 1024, text.size(),
        static_cast<unsigned long long>(digest(text)));
    std::fflush(stdout);
  }
  return 0;
}
