// Where each op ran, placed while a program runs: the rule every command that names a module
// uses (docs/cli.md, "Modules"; src/core/analysis/modules.h), for a probe that writes records
// of only some ops (the probe's "task": "overflow_check") and so places them itself, into
// OpRecord::module. Torch-free plain values.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "precprobe/records.h"

namespace precprobe {

struct RunMeta;  // dump_format.h

/// What the placement needs of one op of a step: the fields of its OpRecord that place it.
struct ModuleOp {
  std::optional<std::string> consumed;  ///< the module of the first parameter it reads
  Direction dir = Direction::kForward;
  int64_t sn = -1;             ///< OpRecord::seqnr: links a forward op to its autograd node
  bool dropout = false;        ///< one of ATen's dropouts
  int32_t depth = 0;           ///< OpRecord::depth
  uint32_t thread = 0;         ///< OpRecord::thread
  std::optional<bool> grad;    ///< OpRecord::grad (nullopt: unknown)
  bool updates_param = false;  ///< it updates the parameter it reads in place
  bool background = false;     ///< OpRecord::background
  bool optimizer = false;      ///< OpRecord::optimizer: in an optimizer's step, as told
  /// OpRecord::module: placed by the probe while the program ran; taken as is.
  std::optional<std::string> placed;

  /// Whether `op` is one of ATen's dropouts (aten::dropout, feature_dropout, alpha_dropout,
  /// feature_alpha_dropout, their in-place forms, native_dropout): `dropout`.
  static bool is_dropout(std::string_view op) noexcept;
};

/// The placement one op at a time, for one rank's ops of each step in seq order. An op that
/// reads no parameter is placed once a later op (the next parameter read, a backward op) or
/// the step's end tells where: hold what is known of it until ready().
///
///     ModulePlacer p;
///     p.set_modules(meta);  // meta.json's "modules" and "module_types"
///     p.add(op);            // each op of the step, in order
///     while (p.ready()) use(p.take());
///     p.end_step();
///     while (p.ready()) use(p.take());
///
/// Not thread-safe.
class ModulePlacer {
 public:
  ModulePlacer();
  ~ModulePlacer();
  ModulePlacer(const ModulePlacer&) = delete;
  ModulePlacer& operator=(const ModulePlacer&) = delete;

  /// The model's modules, from meta.json's "modules" and "module_types" (RunMeta::other).
  /// Call before the first add().
  void set_modules(const RunMeta& meta);
  void add(const ModuleOp& op);
  /// The step has no more ops: the ops still waiting are placed.
  void end_step();
  /// Whether the module of the earliest op added and not taken is known.
  bool ready() const noexcept;
  /// That module ("b0", "(top level)"); ready() must be true.
  std::string take();
  /// Drops it; ready() must be true.
  void skip();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace precprobe
