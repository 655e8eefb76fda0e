// The dump format in one place: its version, the file names of a rank directory, the names
// of the events the probe writes for the analyses, how a stream file is recognised, and
// RunMeta, the typed meta.json. The probe writes through these names and the core reads
// through them, so a field added to meta.json is added here and in run_meta.cpp only.
// docs/dump-format.md describes the same format for people and other tools.
//
// Torch-free. Plain values and pure functions: any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "precprobe/writer.h"

namespace precprobe {

/// Dump format version, written to meta.json. Version 2 writes every number as a JSON
/// number or null (non-finite values named by "<key>_nonfinite" fields); version 1 wrote
/// them as the strings "nan", "inf", "-inf". Version 3 is version 2 with the op records in
/// ops.bin.zst (binary, OpsEncoding::kBinary): a precprobe older than that file refuses the
/// dump instead of finding no op records in it. kDumpFormatVersion is the newest version
/// this reader reads; a writer writes dump_format_version() of its encoding.
inline constexpr int kDumpFormatVersion = 3;
/// The version a dump whose op records are encoded so is written with: 2 for JSON Lines (every
/// precprobe since 0.2 reads it), 3 for binary.
constexpr int dump_format_version(OpsEncoding encoding) noexcept {
  return encoding == OpsEncoding::kBinary ? 3 : 2;
}
/// The oldest version the reader still reads; it refuses versions outside
/// [kOldestDumpFormatVersion, kDumpFormatVersion].
inline constexpr int kOldestDumpFormatVersion = 1;

// ---- files of a rank directory ----

inline constexpr StreamKind kAllStreams[] = {StreamKind::kOps, StreamKind::kScaler,
                                             StreamKind::kGrads, StreamKind::kEvents};
inline constexpr std::string_view kMetaFile = "meta.json";
inline constexpr std::string_view kMetaTempFile = "meta.json.tmp";
/// Written by the fatal-signal handler itself (async-signal-safe) when the program crashes:
/// a CrashRecord. Its presence means the run crashed, whatever meta.json says.
inline constexpr std::string_view kCrashFile = "crash.json";

/// "ops.jsonl.zst", "scaler.jsonl.zst", "grads.jsonl.zst", "events.jsonl.zst".
std::string_view stream_file_name(StreamKind kind) noexcept;
/// The file of binary op records (WriterOptions::ops_encoding); stream_file_name(kOps) is
/// the JSON Lines one.
inline constexpr std::string_view kBinaryOpsFile = "ops.bin.zst";

/// Whether the first bytes of a stream file start a zstd frame (or a skippable frame), i.e.
/// whether the file can be a precprobe stream at all. Needs 4 bytes.
bool starts_with_zstd_frame(const unsigned char* bytes, size_t n) noexcept;

// ---- events (ScalarRecords of events.jsonl.zst) the analyses read ----

namespace check_scalar {
// One observed batch: "begin" first (value: epoch, -1 unknown), then the others.
inline constexpr std::string_view kBatchBegin = "check/batch/begin";
inline constexpr std::string_view kTraining = "check/batch/training";  ///< model mode 0/1
inline constexpr std::string_view kGradEnabled = "check/batch/grad";   ///< grad mode 0/1
/// BatchNorm/Dropout modules in training mode (-1: model unknown).
inline constexpr std::string_view kStatModulesTraining = "check/batch/stat_modules_training";
inline constexpr std::string_view kInputsNumel = "check/batch/inputs_numel";
inline constexpr std::string_view kInputsNan = "check/batch/inputs_nan";
inline constexpr std::string_view kInputsInf = "check/batch/inputs_inf";
inline constexpr std::string_view kChannelMean = "check/batch/mean/";  ///< + channel index
inline constexpr std::string_view kChannelStd = "check/batch/std/";    ///< + channel index
inline constexpr std::string_view kTargetsNumel = "check/batch/targets_numel";
inline constexpr std::string_view kIgnored = "check/batch/ignored";       ///< == ignore index
inline constexpr std::string_view kLabelCount = "check/batch/label/";     ///< + label value
inline constexpr std::string_view kLabelHash = "check/batch/label_hash";  ///< low 48 bits
inline constexpr std::string_view kDistinctLabels = "check/batch/distinct";
// Written once by start(model).
inline constexpr std::string_view kInitParams = "check/init/params";         ///< weights checked
inline constexpr std::string_view kInitZero = "check/init/zero/";            ///< + parameter name
inline constexpr std::string_view kInitIdentical = "check/init/identical/";  ///< + name
inline constexpr std::string_view kHashHi = "check/model/hash_hi";           ///< module_hash >> 32
inline constexpr std::string_view kHashLo = "check/model/hash_lo";  ///< module_hash & 2^32-1
inline constexpr std::string_view kExpectedHashHi = "check/model/expected_hash_hi";
inline constexpr std::string_view kExpectedHashLo = "check/model/expected_hash_lo";
// lr_range_test and the training learning rate.
inline constexpr std::string_view kLrRangeLo = "check/lr_range/lo";
inline constexpr std::string_view kLrRangeHi = "check/lr_range/hi";
inline constexpr std::string_view kLrRangeLr = "check/lr_range/lr";      ///< step: test step
inline constexpr std::string_view kLrRangeLoss = "check/lr_range/loss";  ///< step: test step
// Written by the debugger: parameters named at start(model), and, per step, each op of user
// code that read a parameter gradient between GradScaler::scale() and unscale_() (value: the
// scale).
inline constexpr std::string_view kParamsNamed = "check/params_named";
/// The number of optimizers the debugger was started with (value; the largest counts): a run
/// of several (a GAN's generator and discriminator) plays a game whose losses need not
/// decrease, which hp.loss_trend takes into account.
inline constexpr std::string_view kOptimizers = "check/optimizers";
inline constexpr std::string_view kScaledGradRead = "check/scaled_grad_read/";  ///< + op

// Written by the debugger's periodic replica check ("replica_check_every").
inline constexpr std::string_view kReplicaTensors = "replicas/tensors";
inline constexpr std::string_view kReplicaMismatched = "replicas/mismatched";  ///< count
inline constexpr std::string_view kReplicaStructureDiffers = "replicas/structure_differs";
inline constexpr std::string_view kReplicaDiffersPrefix = "replicas/differs/";  ///< + name
inline constexpr std::string_view kLr = "lr";      ///< logged by the user
inline constexpr std::string_view kLoss = "loss";  ///< logged by the user
}  // namespace check_scalar

/// The event line the writer appends after every record of a step is on disk
/// (DumpWriter::end_step): `{"step":N,"name":"step_end","value":N}`. The last one on disk says
/// which steps are complete (RunState::complete_through); reserved, not a user scalar.
inline constexpr std::string_view kStepEndEventName = "step_end";

/// Whether an events line is the debugger's own rather than a scalar the user logged: the
/// checklist's "check/...", the replica checks' "replicas/...", "anomaly", "watch" and
/// "step_end".
bool is_debugger_event(std::string_view name) noexcept;

/// Whether a logged scalar is a loss: its name contains "loss" in any case ("loss", "d_loss",
/// "Reconstruction Loss"); the checklist's own "check/..." scalars, the replica checks'
/// "replicas/..." and the "anomaly" event are not.
bool is_loss_scalar(std::string_view name) noexcept;

// ---- meta.json and crash.json ----

/// A fatal signal the debugger caught: crash.json, written by the signal handler itself, and
/// meta.json's "crash" once the flush after it completed (docs/dump-format.md).
struct CrashRecord {
  int signal = 0;           ///< "signal": 11
  std::string signal_name;  ///< "signal_name": "SIGSEGV"
  /// "code": siginfo's si_code; <= 0 when a process sent it (kill, raise, abort), > 0 when
  /// the kernel raised it for a faulting instruction.
  int code = 0;
  std::optional<std::string>
      address;                  ///< "address": faulting address, "0x0" (SIGSEGV, SIGBUS, ...)
  std::optional<int64_t> step;  ///< "step": the debugger's step
  /// "op": the innermost op the crashing thread was running ("aten::mul",
  /// "MulBackward0"), "" when it ran none that was observed.
  std::string op;
  std::optional<int64_t> thread;  ///< "thr": the thread index of its op records; absent: none
  int64_t tid = 0;                ///< "tid": the kernel's thread id
  std::string thread_name;        ///< "thread_name" (pthread name)
  std::optional<int64_t> time;    ///< "time": Unix time, seconds

  nlohmann::json to_json() const;
  /// From a JSON value; nullopt unless it is an object with an integer "signal".
  static std::optional<CrashRecord> parse(const nlohmann::json& j);
  /// "SIGSEGV at step 3 in aten::mul (thread 0)".
  std::string describe() const;
};

/// The writer's counters as meta.json stores them under "writer" (docs/dump-format.md).
nlohmann::json to_json(const WriterCounters& c);

/// meta.json of one rank directory. Every field is optional: the debugger writes them all,
/// a standalone GradScaler only the version and "producer", and a dump of an older version
/// may lack some. Keys this version does not know (or of a type it does not expect) are kept
/// in `other` as written, so reading and writing back loses nothing.
struct RunMeta {
  std::optional<int64_t> format_version;  ///< "format_version"
  std::optional<std::string> producer;    ///< "producer": who wrote the dump when not the debugger
  std::optional<std::string> precprobe_version, torch_version;
  std::optional<int> rank, world_size;
  std::optional<std::string> rank_source;  ///< "process_group" | "environment"
  std::optional<std::string> task, level;  ///< as config.json spells them
  nlohmann::json config;                   ///< the effective configuration; null: absent
  nlohmann::json seed_report;              ///< SeedReport as JSON; null: absent
  std::optional<std::string> host;
  std::optional<int64_t> pid;
  std::optional<std::string> device;
  std::optional<std::string> start_time, stop_time;  ///< UTC, "2024-01-31T12:00:00Z"
  /// "running" | "stopped" | "signalled" (SIGTERM/SIGINT, flushed) | "crashed" (a fatal
  /// signal; what was complete flushed, `crash` says where)
  std::optional<std::string> state;
  std::optional<int> signal;             ///< the signal, when "signalled" or "crashed"
  std::optional<int64_t> step;           ///< the debugger's step when written
  nlohmann::json counters;               ///< the debugger's counters; null: absent
  std::optional<WriterCounters> writer;  ///< "writer"
  std::optional<uint64_t> dropped;       ///< "dropped": records the writer dropped
  /// "ops_grad_mode": true when ops.jsonl.zst records each op's grad mode (OpRecord::grad,
  /// `"grad":false` when off, absent when on). Absent (older writers): the mode is unknown.
  std::optional<bool> ops_grad_mode;
  /// "step_end_events": true when the writer appends a "step_end" event at the end of each
  /// step (kStepEndEventName). Absent (older writers): which steps are complete is unknown.
  std::optional<bool> step_end_events;
  std::optional<CrashRecord> crash;                 ///< "crash", when "crashed"
  nlohmann::json other = nlohmann::json::object();  ///< keys not listed above

  /// The records the writer dropped: "writer" "records_dropped" (or "dropped", as older
  /// writers named it); 0 when there is no "writer" object.
  uint64_t records_dropped() const noexcept;

  /// meta.json as a JSON object (absent fields left out).
  nlohmann::json to_json() const;
  /// From a JSON value; throws precprobe::Error naming `file` when it is not an object.
  static RunMeta parse(const nlohmann::json& j, const std::string& file);
  /// From meta.json text; throws precprobe::Error naming `file` when it is not JSON.
  static RunMeta parse(const std::string& text, const std::string& file);
  /// What the reader needs: throws precprobe::Error naming `file` unless format_version is
  /// an integer in [kOldestDumpFormatVersion, kDumpFormatVersion] and "rank" and
  /// "world_size", where present, are integers.
  void check_readable(const std::string& file) const;
};

}  // namespace precprobe
