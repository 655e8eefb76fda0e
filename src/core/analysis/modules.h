// Module attribution of ops (compare --by module, summary --by module). LibTorch modules have
// no forward hooks, so an op is placed by the parameters it reads: an op consuming a parameter
// ("blocks.2.fc.weight") belongs to that parameter's module ("blocks.2.fc"); the ops after it
// in the same step, until the next such op, inherit it. A dropout reads no parameter: it is
// placed by the model's module order that the debugger writes to meta.json ("modules").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "precprobe/dump_format.h"
#include "precprobe/reader.h"
#include "precprobe/records.h"

namespace precprobe::analysis_detail {

/// meta.json's "modules" (docs/dump-format.md): the model's modules that own parameters
/// directly and its dropout modules, in named_modules() order (registration order).
struct ModuleOrder {
  struct Entry {
    std::string path;  ///< as consumed_module() names it ("(root)" for the top module)
    bool dropout = false;
  };
  std::vector<Entry> entries;

  /// From meta.json's "modules"; empty when absent or not an array of [path, kind] pairs.
  static ModuleOrder of(const RunMeta& meta);
  /// The `k`-th dropout module (0-based) registered after the module `anchor` ("" : from the
  /// start) and before the next module owning parameters; nullopt when there is none.
  std::optional<std::string> dropout_after(const std::string& anchor, int64_t k) const;
};

/// Each rank's ModuleOrder, from its meta.json.
std::map<int, ModuleOrder> module_orders(const std::vector<RankInfo>& ranks);
/// orders[rank], or nullptr.
const ModuleOrder* order_of(const std::map<int, ModuleOrder>& orders, int rank);

/// Whether `op` is one of ATen's dropouts (aten::dropout, feature_dropout, alpha_dropout,
/// feature_alpha_dropout, their in-place forms, native_dropout).
bool is_dropout_op(std::string_view op) noexcept;

/// The module of the first parameter among `r`'s inputs ("(root)" for a parameter of the
/// top-level module), or nothing when it reads no parameter.
std::optional<std::string> consumed_module(const OpRecord& r);

/// What the module attribution needs of one op of a step.
struct ModuleOp {
  std::optional<std::string> consumed;  ///< consumed_module() of the record
  Direction dir = Direction::kForward;
  int64_t sn = -1;       ///< OpRecord::seqnr: links a forward op to its autograd node
  bool dropout = false;  ///< is_dropout_op() of the record's op
  int32_t depth = 0;     ///< OpRecord::depth
};

/// The ModuleOp of a record.
ModuleOp module_op(const OpRecord& r);

/// Where a backward op belongs.
enum class BackwardRule {
  /// To the module of the forward op that made its autograd node (the same "sn"), else the
  /// forward rule within the backward ("" before any): `precision` and `overflow`.
  kByNode,
  /// The forward rule goes on through the backward: the ops after an op reading a parameter
  /// inherit its module, whatever their direction: `summary` and `compare --by module`.
  kInherit,
};

/// attribute_modules() one op at a time, for a stream of one step's ops in seq order (a new
/// step: a new attributor).
class ModuleAttributor {
 public:
  explicit ModuleAttributor(const ModuleOrder* order = nullptr,
                            BackwardRule rule = BackwardRule::kByNode)
      : order_(order), rule_(rule) {}
  /// The module of the next op.
  std::string next(const ModuleOp& p);

 private:
  const ModuleOrder* order_;
  BackwardRule rule_;
  std::unordered_map<int64_t, std::string> node_module_;  // sn -> module of its forward op
  std::string forward_, backward_;                        // kInherit: `forward_` for both
  std::string anchor_;    // the module of the last parameter the forward read
  int64_t dropouts_ = 0;  // dropout ops since then
  bool has_last_forward_ = false, last_forward_dropout_ = false;
  int32_t last_forward_depth_ = 0;
};

/// The module of each op of one step of one rank, `ops` in seq order: a forward op reading a
/// parameter belongs to its module and the forward ops after it inherit it; a backward op as
/// `rule` says. "" before any. With `order`, a forward dropout op that reads no parameter
/// belongs to the dropout module registered after the current module (the k-th dropout op
/// since that module to its k-th such dropout module; a dropout op nested in another is the
/// outer one's), and the forward ops after it inherit it.
std::vector<std::string> attribute_modules(const std::vector<ModuleOp>& ops,
                                           const ModuleOrder* order = nullptr,
                                           BackwardRule rule = BackwardRule::kByNode);

}  // namespace precprobe::analysis_detail
