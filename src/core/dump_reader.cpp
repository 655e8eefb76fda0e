// DumpReader: finds the rank directories, checks meta.json's format version, and decodes
// the streams frame by frame into one reused record (see records_parse.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <type_traits>

#include "dump_files.h"
#include "frame_stream.h"
#include "op_cursor.h"
#include "precprobe/error.h"
#include "precprobe/reader.h"
#include "records_binary.h"

namespace fs = std::filesystem;

namespace precprobe {
namespace {

constexpr const char* kExpected =
    "expected a dump directory holding rank<R>/ directories, or one rank directory holding "
    "meta.json or *.jsonl.zst / ops.bin.zst streams";

bool is_rank_dir(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_regular_file(dir / kMetaFile, ec)) return true;
  for (StreamKind k : kAllStreams) {
    if (fs::is_regular_file(dir / stream_file_name(k), ec)) return true;
  }
  return fs::is_regular_file(dir / kBinaryOpsFile, ec);
}

// "rank12" -> 12; nullopt for other names.
std::optional<int> rank_from_name(const std::string& name) {
  if (name.size() < 5 || name.size() > 13 || name.compare(0, 4, "rank") != 0) return {};
  int r = 0;
  for (size_t i = 4; i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return {};
    r = r * 10 + (name[i] - '0');
    if (r > 100000000) return {};
  }
  return r;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read '{}'", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

RankInfo load_rank(const fs::path& dir, int fallback_rank, int fallback_world) {
  RankInfo info;
  info.dir = dir.string();
  info.rank = fallback_rank;
  info.world_size = fallback_world;
  fs::path meta_path = dir / kMetaFile;
  std::error_code ec;
  if (!fs::is_regular_file(meta_path, ec)) return info;  // killed before meta.json: still read
  info.meta_json = read_file(meta_path);
  const std::string file = meta_path.string();
  RunMeta meta = RunMeta::parse(info.meta_json, file);
  meta.check_readable(file);
  info.rank = meta.rank.value_or(fallback_rank);
  info.world_size = meta.world_size.value_or(fallback_world);
  info.meta = std::move(meta);
  return info;
}

bool selects_rank(const RecordFilter& f, int rank) {
  return f.ranks.empty() || std::find(f.ranks.begin(), f.ranks.end(), rank) != f.ranks.end();
}

bool selects_step(const RecordFilter& f, int64_t step) {
  return (!f.step_min || step >= *f.step_min) && (!f.step_max || step <= *f.step_max);
}

bool contains(const std::string& s, const std::string& part) {
  return part.empty() || s.find(part) != std::string::npos;
}

bool selects(const RecordFilter& f, const OpRecord& r) {
  if (!selects_step(f, r.step) || (f.dir && r.dir != *f.dir)) return false;
  if (f.name_contains.empty()) return true;
  // name() allocates: try the op name alone first.
  return contains(r.op, f.name_contains) || contains(r.name(), f.name_contains);
}
bool selects(const RecordFilter& f, const ScalerRecord& r) { return selects_step(f, r.step); }
bool selects(const RecordFilter& f, const GradRecord& r) {
  return selects_step(f, r.step) && contains(r.param, f.name_contains);
}
bool selects(const RecordFilter& f, const ScalarRecord& r) {
  return selects_step(f, r.step) && contains(r.name, f.name_contains);
}
bool selects(const RecordFilter& f, const AnomalyEvent& r) {
  return r.is_anomaly() && selects_step(f, r.step);
}
bool selects(const RecordFilter& f, const OpWatchHit& r) {
  return r.is_watch() && selects_step(f, r.step);
}

}  // namespace

DumpReader::DumpReader(const std::string& path) : path_(path) {
  fs::path root = fs::path(path).lexically_normal();
  if (!root.has_filename() && root.has_parent_path()) root = root.parent_path();  // "rank3/"
  std::error_code ec;
  if (!fs::exists(root, ec)) throw Error(fmt::format("'{}' does not exist; {}", path, kExpected));
  if (!fs::is_directory(root, ec)) {
    throw Error(fmt::format("'{}' is not a directory; {}", path, kExpected));
  }
  if (is_rank_dir(root)) {
    int rank = rank_from_name(root.filename().string()).value_or(0);
    ranks_.push_back(load_rank(root, rank, 1));
    return;
  }
  std::vector<std::pair<int, fs::path>> dirs;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    auto rank = rank_from_name(it->path().filename().string());
    if (rank && it->is_directory(ec) && is_rank_dir(it->path())) dirs.emplace_back(*rank, *it);
  }
  if (ec) throw Error(fmt::format("cannot list '{}': {}", path, ec.message()));
  if (dirs.empty()) throw Error(fmt::format("'{}' is not a precprobe dump; {}", path, kExpected));
  std::sort(dirs.begin(), dirs.end());
  for (const auto& [rank, dir] : dirs) {
    ranks_.push_back(load_rank(dir, rank, static_cast<int>(dirs.size())));
  }
}

std::string DumpReader::stream_path(const std::string& rank_dir, StreamKind kind) {
  if (kind == StreamKind::kOps) {
    // The binary op records where the writer wrote them (WriterOptions::ops_encoding).
    std::error_code ec;
    fs::path binary = fs::path(rank_dir) / kBinaryOpsFile;
    if (fs::exists(binary, ec)) return binary.string();
  }
  return (fs::path(rank_dir) / stream_file_name(kind)).string();
}

namespace {

// Whether `f` selects every record of the ranks it selects.
bool selects_all_of_rank(const RecordFilter& f) {
  return !f.step_min && !f.step_max && f.name_contains.empty() && !f.dir;
}

using PassFn = std::function<bool(int, const FrameDigest&)>;

// Whether the filter's steps select none of the frame's records.
bool outside_steps(const RecordFilter& f, const FrameDigest& d) {
  for (const FrameDigest::Step& s : d.steps) {
    if (selects_step(f, s.step)) return false;
  }
  return true;
}

// One stream of one rank, read a frame at a time (read_stream reads it whole; OpCursor a
// frame per call). With `digests`, frames of op records that have a digest are passed over
// when the filter's steps select none of their records or `pass` (may be null) says so
// (DumpReader::for_each_op). Not movable: the gate refers to it.
template <class R>
class StreamCursor {
 public:
  StreamCursor(const RankInfo& rank, StreamKind kind, const RecordFilter& filter, bool digests,
               const PassFn* pass)
      : rank_(rank), filter_(filter), pass_(pass) {
    status_.path = DumpReader::stream_path(rank.dir, kind);
    std::error_code ec;
    if (!fs::exists(status_.path, ec)) {
      done_ = true;
      return;
    }
    status_.present = true;
    grad_recorded_ = rank.meta && rank.meta->ops_grad_mode.value_or(false);
    if (!reader_.open(status_.path, &status_.message)) {
      status_.truncated = true;
      done_ = true;
      return;
    }
    by_steps_ = filter.step_min || filter.step_max;
    by_pass_ = pass != nullptr && *pass && selects_all_of_rank(filter);
    if (digests && std::is_same_v<R, OpRecord> && (by_steps_ || by_pass_)) {
      // A frame passed over counts its records here, as decoded ones do in next().
      gate_ = [this](const FrameDigest& d) {
        if (!(by_steps_ && outside_steps(filter_, d)) && !(by_pass_ && (*pass_)(rank_.rank, d)))
          return false;
        status_.records += d.records;
        ++status_.frames_passed;
        return true;
      };
    }
  }
  StreamCursor(const StreamCursor&) = delete;
  StreamCursor& operator=(const StreamCursor&) = delete;

  /// Reads the next frame, giving its selected records to fn; false at the end of the stream
  /// (status() then final). *go_on is set false when fn asked to stop.
  template <class Fn>
  bool next(Fn& fn, bool* go_on) {
    if (done_) return false;
    bool passed = false;
    if (!reader_.next(content_, gate_ ? &gate_ : nullptr, &passed)) {
      finish();
      return false;
    }
    if (passed) return true;
    auto take = [&]() {
      ++status_.records;
      record_.rank = rank_.rank;
      if constexpr (std::is_same_v<R, OpRecord>) {
        // An absent "grad" on a forward op means on where the writer records the mode,
        // unknown elsewhere (backward ops carry none: they run in the engine's mode).
        if (!record_.grad && grad_recorded_ && record_.dir == Direction::kForward)
          record_.grad = true;
      }
      return !selects(filter_, record_) || fn(record_);
    };
    if constexpr (std::is_same_v<R, OpRecord>) {
      if (is_binary_ops_frame(content_)) {
        *go_on = read_binary(take);
        return true;
      }
    }
    *go_on = for_each_line(content_, [&](std::string_view line) {
      if (!parse_record(line, record_, &error_)) {
        bad_record("bad line");
        return true;
      }
      return take();
    });
    return true;
  }

  /// Ends the reading (also when stopped early): the frames read and the truncation.
  void finish() {
    if (done_) return;
    done_ = true;
    status_.frames = reader_.frames();
    if (reader_.truncated()) {
      status_.truncated = true;
      status_.truncated_bytes = reader_.truncated_bytes();
      status_.message =
          status_.message.empty() ? reader_.message() : reader_.message() + "; " + status_.message;
    }
  }
  StreamStatus& status() noexcept { return status_; }

 private:
  void bad_record(const char* what) {
    if (status_.bad_lines++ == 0) {
      status_.message =
          fmt::format("{}: frame {}: {}: {}", status_.path, reader_.frames(), what, error_);
    }
  }
  // The records of a binary frame (records_binary.h); false when `take` asked to stop.
  template <class Take>
  bool read_binary(Take& take) {
    if (!decoder_.open(content_, &error_)) {
      bad_record("bad frame");
      return true;
    }
    for (;;) {
      error_.clear();
      switch (decoder_.next(record_, &error_)) {
        case BinaryOpDecoder::Next::kRecord:
          if (!take()) return false;
          break;
        case BinaryOpDecoder::Next::kBad:
          bad_record("bad record");
          break;
        case BinaryOpDecoder::Next::kEnd:
          if (!error_.empty()) bad_record("bad frame");
          return true;
      }
    }
  }

  const RankInfo& rank_;
  const RecordFilter& filter_;
  const PassFn* pass_;
  StreamStatus status_;
  FrameReader reader_;
  std::function<bool(const FrameDigest&)> gate_;
  std::string content_, error_;
  R record_;
  BinaryOpDecoder decoder_;  // read_binary's, its string table kept from frame to frame
  bool grad_recorded_ = false, by_steps_ = false, by_pass_ = false, done_ = false;
};

// Reads one stream of one rank; returns false when fn asked to stop.
template <class R, class Fn>
bool read_stream(const RankInfo& rank, StreamKind kind, const RecordFilter& filter, Fn& fn,
                 StreamStatus& status, bool digests, const PassFn* pass = nullptr) {
  StreamCursor<R> cursor(rank, kind, filter, digests, pass);
  bool go_on = true;
  while (go_on && cursor.next(fn, &go_on)) {
  }
  cursor.finish();
  status = std::move(cursor.status());
  return go_on;
}

// Keeps the latest status of each stream.
void keep_status(std::vector<StreamStatus>& statuses, StreamStatus status) {
  auto same = std::find_if(statuses.begin(), statuses.end(),
                           [&](const StreamStatus& s) { return s.path == status.path; });
  if (same != statuses.end()) {
    *same = std::move(status);
  } else {
    statuses.push_back(std::move(status));
  }
}

template <class R, class Fn>
void read_all(const std::vector<RankInfo>& ranks, std::vector<StreamStatus>& statuses,
              StreamKind kind, const RecordFilter& filter, Fn& fn, bool digests,
              const PassFn* pass = nullptr) {
  for (const RankInfo& rank : ranks) {
    if (!selects_rank(filter, rank.rank)) continue;
    StreamStatus status;
    bool go_on = read_stream<R>(rank, kind, filter, fn, status, digests, pass);
    keep_status(statuses, std::move(status));
    if (!go_on) return;
  }
}

}  // namespace

struct OpCursor::Impl {
  DumpReader& reader;
  const RecordFilter& filter;
  PassFn pass;
  size_t next_rank = 0;
  std::unique_ptr<StreamCursor<OpRecord>> stream;
  std::vector<OpRecord> recycled;  // recycle()'s, decoded into again
};

OpCursor::OpCursor(DumpReader& reader, const RecordFilter& filter, PassFn pass)
    : impl_(new Impl{reader, filter, std::move(pass), 0, nullptr, {}}) {}

OpCursor::~OpCursor() {
  if (impl_->stream) {  // left before its end: the status says what was read
    impl_->stream->finish();
    keep_status(impl_->reader.statuses_, std::move(impl_->stream->status()));
  }
}

bool OpCursor::next(std::vector<OpRecord>& out) {
  Impl& m = *impl_;
  // The cursor's own record: taken, and a recycled one (its storage) parsed into next.
  auto keep = [&out, &m](OpRecord& r) {
    out.push_back(std::move(r));
    if (!m.recycled.empty()) {
      r = std::move(m.recycled.back());
      m.recycled.pop_back();
    }
    return true;
  };
  for (;;) {
    if (!m.stream) {
      const std::vector<RankInfo>& ranks = m.reader.ranks_;
      while (m.next_rank < ranks.size() && !selects_rank(m.filter, ranks[m.next_rank].rank))
        ++m.next_rank;
      if (m.next_rank == ranks.size()) return false;
      m.stream = std::make_unique<StreamCursor<OpRecord>>(ranks[m.next_rank++], StreamKind::kOps,
                                                          m.filter, m.reader.digests_, &m.pass);
    }
    bool go_on = true;
    if (m.stream->next(keep, &go_on)) return true;
    keep_status(m.reader.statuses_, std::move(m.stream->status()));
    m.stream.reset();
  }
}

void OpCursor::recycle(std::vector<OpRecord>& spent) {
  std::vector<OpRecord>& kept = impl_->recycled;
  for (OpRecord& r : spent) {
    if (kept.size() == kMaxRecycled) break;
    kept.push_back(std::move(r));
  }
  spent.clear();
}

void DumpReader::for_each_op(const RecordFilter& filter,
                             const std::function<bool(const OpRecord&)>& fn) {
  read_all<OpRecord>(ranks_, statuses_, StreamKind::kOps, filter, fn, digests_);
}
void DumpReader::for_each_op(const RecordFilter& filter,
                             const std::function<bool(int rank, const FrameDigest&)>& pass,
                             const std::function<bool(const OpRecord&)>& fn) {
  read_all<OpRecord>(ranks_, statuses_, StreamKind::kOps, filter, fn, digests_, &pass);
}
void DumpReader::for_each_scaler(const RecordFilter& filter,
                                 const std::function<bool(const ScalerRecord&)>& fn) {
  read_all<ScalerRecord>(ranks_, statuses_, StreamKind::kScaler, filter, fn, digests_);
}
void DumpReader::for_each_grad(const RecordFilter& filter,
                               const std::function<bool(const GradRecord&)>& fn) {
  read_all<GradRecord>(ranks_, statuses_, StreamKind::kGrads, filter, fn, digests_);
}
void DumpReader::for_each_scalar(const RecordFilter& filter,
                                 const std::function<bool(const ScalarRecord&)>& fn) {
  read_all<ScalarRecord>(ranks_, statuses_, StreamKind::kEvents, filter, fn, digests_);
}

void DumpReader::for_each_anomaly(const RecordFilter& filter,
                                  const std::function<bool(const AnomalyEvent&)>& fn) {
  read_all<AnomalyEvent>(ranks_, statuses_, StreamKind::kEvents, filter, fn, digests_);
}

void DumpReader::for_each_watch(const RecordFilter& filter,
                                const std::function<bool(const OpWatchHit&)>& fn) {
  read_all<OpWatchHit>(ranks_, statuses_, StreamKind::kEvents, filter, fn, digests_);
}

std::vector<OpWatchHit> DumpReader::watch_hits(const RecordFilter& filter) {
  std::vector<OpWatchHit> v;
  for_each_watch(filter, [&](const OpWatchHit& r) {
    v.push_back(r);
    return true;
  });
  return v;
}

std::vector<OpRecord> DumpReader::ops(const RecordFilter& filter) {
  std::vector<OpRecord> v;
  for_each_op(filter, [&](const OpRecord& r) {
    v.push_back(r);
    return true;
  });
  return v;
}
std::vector<ScalerRecord> DumpReader::scaler(const RecordFilter& filter) {
  std::vector<ScalerRecord> v;
  for_each_scaler(filter, [&](const ScalerRecord& r) {
    v.push_back(r);
    return true;
  });
  return v;
}
std::vector<GradRecord> DumpReader::grads(const RecordFilter& filter) {
  std::vector<GradRecord> v;
  for_each_grad(filter, [&](const GradRecord& r) {
    v.push_back(r);
    return true;
  });
  return v;
}
std::vector<ScalarRecord> DumpReader::scalars(const RecordFilter& filter) {
  std::vector<ScalarRecord> v;
  for_each_scalar(filter, [&](const ScalarRecord& r) {
    v.push_back(r);
    return true;
  });
  return v;
}

std::vector<AnomalyEvent> DumpReader::anomalies(const RecordFilter& filter) {
  std::vector<AnomalyEvent> v;
  for_each_anomaly(filter, [&](const AnomalyEvent& r) {
    v.push_back(r);
    return true;
  });
  return v;
}

}  // namespace precprobe
