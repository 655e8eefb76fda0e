// RunMeta (meta.json) to and from JSON, the stream file names and the zstd sniff
// (include/precprobe/dump_format.h).
#include <fmt/format.h>
#include <zstd.h>

#include <cctype>

#include "precprobe/dump_format.h"
#include "precprobe/error.h"
#include "precprobe/reader.h"
#include "precprobe/records.h"

namespace precprobe {
namespace {

using nlohmann::json;

// Moves key out of `rest` into `out` when it has the type T reads; leaves it there otherwise
// (a foreign value is kept as written).
template <typename T>
void take(json& rest, const char* key, std::optional<T>& out) {
  auto it = rest.find(key);
  if (it == rest.end()) return;
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return;
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    if (!it->is_number_unsigned()) return;
  } else {
    if (!it->is_number_integer()) return;
  }
  out = it->get<T>();
  rest.erase(it);
}

void take(json& rest, const char* key, json& out) {
  auto it = rest.find(key);
  if (it == rest.end()) return;
  out = std::move(*it);
  rest.erase(it);
}

// An integer key the reader relies on, left in `other` because it is not an integer: a
// corrupt file.
void require_integer(const json& other, const char* key, const std::string& file) {
  auto it = other.find(key);
  if (it != other.end())
    throw Error(fmt::format("{}: \"{}\" must be an integer, found {}", file, key, it->dump()));
}

std::optional<WriterCounters> writer_counters(const json& w) {
  if (!w.is_object() || w.size() != 6) return std::nullopt;
  WriterCounters c;
  for (auto [key, field] :
       {std::pair{"records_written", &c.records_written},
        std::pair{"records_dropped", &c.records_dropped},
        std::pair{"bytes_uncompressed", &c.bytes_uncompressed},
        std::pair{"bytes_compressed", &c.bytes_compressed}, std::pair{"frames", &c.frames}}) {
    auto it = w.find(key);
    if (it == w.end() || !it->is_number_unsigned()) return std::nullopt;
    *field = it->get<uint64_t>();
  }
  auto failed = w.find("failed");
  if (failed == w.end() || !failed->is_boolean()) return std::nullopt;
  c.failed = failed->get<bool>();
  return c;
}

template <typename T>
void put(json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

void put(json& j, const char* key, const json& v) {
  if (!v.is_null()) j[key] = v;
}

}  // namespace

std::string_view stream_file_name(StreamKind kind) noexcept {
  switch (kind) {
    case StreamKind::kOps:
      return "ops.jsonl.zst";
    case StreamKind::kScaler:
      return "scaler.jsonl.zst";
    case StreamKind::kGrads:
      return "grads.jsonl.zst";
    case StreamKind::kEvents:
      return "events.jsonl.zst";
  }
  return "unknown.jsonl.zst";
}

bool is_debugger_event(std::string_view name) noexcept {
  const auto starts = [&](std::string_view p) { return name.substr(0, p.size()) == p; };
  return starts("check/") || starts("replicas/") || name == kAnomalyEventName ||
         name == kStepEndEventName || name == kWatchEventName;
}

bool is_loss_scalar(std::string_view name) noexcept {
  if (is_debugger_event(name)) return false;
  constexpr std::string_view kWord = "loss";
  for (size_t i = 0; i + kWord.size() <= name.size(); ++i) {
    size_t k = 0;
    while (k < kWord.size() && std::tolower(static_cast<unsigned char>(name[i + k])) == kWord[k])
      ++k;
    if (k == kWord.size()) return true;
  }
  return false;
}

bool starts_with_zstd_frame(const unsigned char* bytes, size_t n) noexcept {
  if (n < 4) return false;
  const uint32_t m = static_cast<uint32_t>(bytes[0]) | static_cast<uint32_t>(bytes[1]) << 8 |
                     static_cast<uint32_t>(bytes[2]) << 16 | static_cast<uint32_t>(bytes[3]) << 24;
  return m == ZSTD_MAGICNUMBER || (m & ZSTD_MAGIC_SKIPPABLE_MASK) == ZSTD_MAGIC_SKIPPABLE_START;
}

nlohmann::json to_json(const WriterCounters& c) {
  return json{{"records_written", c.records_written},
              {"records_dropped", c.records_dropped},
              {"bytes_uncompressed", c.bytes_uncompressed},
              {"bytes_compressed", c.bytes_compressed},
              {"frames", c.frames},
              {"failed", c.failed}};
}

nlohmann::json CrashRecord::to_json() const {
  json j{{"signal", signal}, {"signal_name", signal_name}, {"code", code}};
  put(j, "address", address);
  put(j, "step", step);
  j["op"] = op;
  put(j, "thr", thread);
  j["tid"] = tid;
  j["thread_name"] = thread_name;
  put(j, "time", time);
  return j;
}

std::optional<CrashRecord> CrashRecord::parse(const nlohmann::json& j) {
  if (!j.is_object()) return std::nullopt;
  auto sig = j.find("signal");
  if (sig == j.end() || !sig->is_number_integer()) return std::nullopt;
  CrashRecord c;
  c.signal = sig->get<int>();
  const auto str = [&](const char* key, std::string& out) {
    auto it = j.find(key);
    if (it != j.end() && it->is_string()) out = it->get<std::string>();
  };
  const auto int64 = [&](const char* key) -> std::optional<int64_t> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<int64_t>();
  };
  str("signal_name", c.signal_name);
  str("op", c.op);
  str("thread_name", c.thread_name);
  if (auto it = j.find("address"); it != j.end() && it->is_string())
    c.address = it->get<std::string>();
  c.code = static_cast<int>(int64("code").value_or(0));
  c.step = int64("step");
  c.thread = int64("thr");
  c.tid = int64("tid").value_or(0);
  c.time = int64("time");
  return c;
}

std::string CrashRecord::describe() const {
  std::string s = signal_name.empty() ? fmt::format("signal {}", signal) : signal_name;
  if (step) s += fmt::format(" at step {}", *step);
  s += op.empty() ? std::string(" outside any observed op") : " in " + op;
  if (thread) {
    s += fmt::format(" (thread {})", *thread);
  } else if (!thread_name.empty()) {
    s += " (thread \"" + thread_name + "\")";
  }
  return s;
}

uint64_t RunMeta::records_dropped() const noexcept {
  if (writer) return writer->records_dropped;
  auto w = other.find("writer");
  if (w == other.end() || !w->is_object()) return 0;
  for (const char* key : {"records_dropped", "dropped"}) {
    auto d = w->find(key);
    if (d != w->end() && d->is_number_unsigned()) return d->get<uint64_t>();
    if (d != w->end() && d->is_number_integer()) return static_cast<uint64_t>(d->get<int64_t>());
  }
  return 0;
}

nlohmann::json RunMeta::to_json() const {
  json j = other.is_object() ? other : json::object();
  put(j, "format_version", format_version);
  put(j, "producer", producer);
  put(j, "precprobe_version", precprobe_version);
  put(j, "torch_version", torch_version);
  put(j, "rank", rank);
  put(j, "world_size", world_size);
  put(j, "rank_source", rank_source);
  put(j, "task", task);
  put(j, "level", level);
  put(j, "config", config);
  put(j, "seed_report", seed_report);
  put(j, "host", host);
  put(j, "pid", pid);
  put(j, "device", device);
  put(j, "start_time", start_time);
  put(j, "stop_time", stop_time);
  put(j, "state", state);
  put(j, "signal", signal);
  put(j, "step", step);
  put(j, "counters", counters);
  if (writer) j["writer"] = precprobe::to_json(*writer);
  put(j, "dropped", dropped);
  put(j, "ops_grad_mode", ops_grad_mode);
  put(j, "step_end_events", step_end_events);
  if (crash) j["crash"] = crash->to_json();
  return j;
}

RunMeta RunMeta::parse(const nlohmann::json& j, const std::string& file) {
  if (!j.is_object()) throw Error(fmt::format("{}: not a JSON object", file));
  RunMeta m;
  json rest = j;
  take(rest, "format_version", m.format_version);
  take(rest, "producer", m.producer);
  take(rest, "precprobe_version", m.precprobe_version);
  take(rest, "torch_version", m.torch_version);
  take(rest, "rank", m.rank);
  take(rest, "world_size", m.world_size);
  take(rest, "rank_source", m.rank_source);
  take(rest, "task", m.task);
  take(rest, "level", m.level);
  take(rest, "config", m.config);
  take(rest, "seed_report", m.seed_report);
  take(rest, "host", m.host);
  take(rest, "pid", m.pid);
  take(rest, "device", m.device);
  take(rest, "start_time", m.start_time);
  take(rest, "stop_time", m.stop_time);
  take(rest, "state", m.state);
  take(rest, "signal", m.signal);
  take(rest, "step", m.step);
  take(rest, "counters", m.counters);
  take(rest, "dropped", m.dropped);
  take(rest, "ops_grad_mode", m.ops_grad_mode);
  take(rest, "step_end_events", m.step_end_events);
  if (auto c = rest.find("crash"); c != rest.end()) {
    m.crash = CrashRecord::parse(*c);
    if (m.crash) rest.erase(c);
  }
  if (auto w = rest.find("writer"); w != rest.end()) {
    m.writer = writer_counters(*w);
    if (m.writer) rest.erase(w);
  }
  m.other = std::move(rest);
  return m;
}

RunMeta RunMeta::parse(const std::string& text, const std::string& file) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw Error(fmt::format("{}: not a JSON object", file));
  return parse(j, file);
}

RunMeta RankInfo::run_meta() const {
  if (meta) return *meta;
  if (meta_json.empty()) return RunMeta{};
  return RunMeta::parse(meta_json, dir + "/" + std::string(kMetaFile));
}

void RunMeta::check_readable(const std::string& file) const {
  const std::string supported = fmt::format(
      "this precprobe reads format_version {} to {}; a newer precprobe reads newer dumps",
      kOldestDumpFormatVersion, kDumpFormatVersion);
  if (auto v = other.find("format_version"); v != other.end()) {
    throw Error(
        fmt::format("{}: format_version {} is not supported ({})", file, v->dump(), supported));
  }
  if (!format_version) throw Error(fmt::format("{}: no \"format_version\" ({})", file, supported));
  if (*format_version < kOldestDumpFormatVersion || *format_version > kDumpFormatVersion) {
    throw Error(fmt::format("{}: format_version {} is not supported ({})", file, *format_version,
                            supported));
  }
  require_integer(other, "rank", file);
  require_integer(other, "world_size", file);
}

}  // namespace precprobe
