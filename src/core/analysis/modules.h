// Module attribution of ops: every command that names a module (summary, overflow, watch and
// the live op watchpoints, check, precision, compare --by module, the report). LibTorch's C++
// modules have no forward hooks, so an op is placed from the records alone, by the
// parameters the ops read; the Python door records the same format and is placed by the same
// rule, so that a Python original and its C++ port name the same modules.
//
// The rule, for the ops of one step of one rank in seq order (docs/cli.md, "Modules"):
// - A forward op that reads a parameter ("blocks.2.fc.weight") belongs to that parameter's
//   module ("blocks.2.fc"); "(root)" for a parameter registered on the top module.
// - A forward op that reads none, between two parameter-reading ops P and N of the same
//   forward pass, belongs to the module whose forward was running: the child of their
//   longest common ancestor L (paths split on '.') that holds P when P lies deeper in it,
//   else L itself. So the masked_fill between b0.qkv and b0.proj is b0's, the gelu between
//   b0.mlp.fc1 and b0.mlp.fc2 b0.mlp's, the closing residual add between b0.mlp.fc2 and
//   b1.ln1 b0's, a GAN generator's last tanh between G.out and D.0 G's; the relu between a
//   plain MLP's fc1 and fc2 is the top module's own, "(root)". Where a module's forward ends
//   is not in the records: an op after a nested child's last read (the residual add after
//   b0.attn.proj, before b0.ln2) is placed in that child (b0.attn), not in b0.
// - A dropout op, which reads no parameter, belongs to the dropout module meta.json's module
//   order registers after the current module (the k-th dropout op since that module to its
//   k-th such dropout module) and counts as P or N for the ops around it.
// - An op nested in another (depth, thread: nesting.h) belongs where the op it ran in does,
//   unless it reads a parameter itself.
// - An optimizer op is a forward op that reads a parameter and updates one in place (its op
//   name ends in '_' and its first tensor input is a parameter: p.addcdiv_,
//   _foreach_mul_(params)) or, after a backward op, reads one with grad mode off (a weight
//   decay's grad.add(p)); it keeps its parameter's module, and so do the ops with grad mode
//   off that ran just before it and read no parameter (an optimizer's work on that
//   parameter's state: Adam's moments, SGD's momentum buffer).
// - Outside every module: "(top level)" before the first parameter read of a forward pass
//   and after its last one (the data, a GAN's noise draw, the loss); "(after backward)" for
//   the other forward ops after a backward op of the step and before the optimizer
//   (LibTorch's clip_grad_norm_, which runs with grad mode on; Python's runs without it and
//   is taken for the optimizer's work on its first parameter); "(optimizer)" for the ops
//   that read no parameter once the optimizer has started and precede no parameter's update
//   (zero_grad after opt.step()). A parameter-reading op after the optimizer with grad mode
//   on starts a forward pass again (a GAN's second model). An op on a background thread (a
//   data loader's) is "(top level)".
// - A backward op belongs where the forward op that made its autograd node was placed (the
//   same "sn"); one without such a node, to the module of the parameter it reads, else where
//   the op it ran in is, else where the backward op before it is (the engine's own:
//   AccumulateGrad after the node that made the gradient; "(top level)" for the first).
//
// A forward op that reads no parameter is placed only once the next event arrives (the next
// parameter read, a backward op, the step's end): ModuleAttributor hands out the modules of
// the ops added in their order, each once it is known, so a streaming reader (the live op
// watchpoints) holds what it knows of the waiting ops until then.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "precprobe/dump_format.h"
#include "precprobe/reader.h"
#include "precprobe/records.h"

namespace precprobe::analysis_detail {

/// The top module: a parameter registered on it, and the ops of its own forward.
inline constexpr std::string_view kRootModule = "(root)";
/// Outside every module, in the forward: the data, a noise draw, the loss.
inline constexpr std::string_view kTopLevel = "(top level)";
/// The forward ops between the backward and the optimizer (gradient clipping).
inline constexpr std::string_view kAfterBackward = "(after backward)";
/// The optimizer's ops that read no parameter (its state's arithmetic).
inline constexpr std::string_view kOptimizer = "(optimizer)";

/// Whether `module` is one of the places outside every module: "(top level)",
/// "(after backward)", "(optimizer)".
bool outside_modules(std::string_view module) noexcept;

/// The longest common ancestor of two module paths ("b0.attn.qkv" and "b0.attn.proj":
/// "b0.attn"), "(root)" when they have none below the top module (or one is "(root)").
std::string common_module(std::string_view a, std::string_view b);

/// Where an op between a read of module `p` and the next read of module `n` of one forward
/// pass ran: the child of their common ancestor that holds `p` ("b0.fc2", "b1.ln1": "b0", the
/// block's closing residual), or the common ancestor itself when `p` is that child ("b0.qkv",
/// "b0.proj": "b0").
std::string module_between(std::string_view p, std::string_view n);

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

/// Whether `r` updates a parameter in place: its op name ends in '_' and its first tensor
/// input (a list's first element) is a parameter.
bool updates_parameter(const OpRecord& r) noexcept;

/// What the module attribution needs of one op of a step.
struct ModuleOp {
  std::optional<std::string> consumed;  ///< consumed_module() of the record
  Direction dir = Direction::kForward;
  int64_t sn = -1;             ///< OpRecord::seqnr: links a forward op to its autograd node
  bool dropout = false;        ///< is_dropout_op() of the record's op
  int32_t depth = 0;           ///< OpRecord::depth
  uint32_t thread = 0;         ///< OpRecord::thread
  std::optional<bool> grad;    ///< OpRecord::grad (nullopt: unknown)
  bool updates_param = false;  ///< updates_parameter() of the record
  bool background = false;     ///< OpRecord::background
};

/// The ModuleOp of a record.
ModuleOp module_op(const OpRecord& r);

/// The rule above, one op at a time, for a stream of one step's ops in seq order (a new
/// step: a new attributor, or end_step()).
///
///     ModuleAttributor a(order);
///     for (const OpRecord& r : step_ops) {
///       a.add(module_op(r));
///       while (a.ready()) use(a.take());  // the modules of the ops added, in order
///     }
///     a.end_step();
///     while (a.ready()) use(a.take());
class ModuleAttributor {
 public:
  explicit ModuleAttributor(const ModuleOrder* order = nullptr) : order_(order) {}
  /// The next op of the step.
  void add(const ModuleOp& p);
  /// The step has no more ops: the ops still waiting are placed, and the attributor starts
  /// a new step.
  void end_step();
  /// Whether the module of the earliest op added and not yet taken is known.
  bool ready() const noexcept {
    return !queue_.empty() && groups_[static_cast<size_t>(queue_.front())].has_value();
  }
  /// That module; ready() must be true.
  std::string take();
  /// Ops added and not yet taken.
  size_t waiting() const noexcept { return queue_.size(); }

 private:
  // kPass: in a forward pass (or before one); kBackwardDone: after a backward op, before the
  // optimizer; kOptimizerRan: once an optimizer op ran.
  enum class Phase : uint8_t { kPass, kBackwardDone, kOptimizerRan };
  int32_t placed(const std::string& module);  // a group of ops whose module is known
  int32_t open();                             // the group of the ops waiting to be placed
  void resolve(std::string_view module);      // places the waiting ops
  std::string_view outside() const noexcept;  // where the phase puts ops outside modules
  void reset_step();

  const ModuleOrder* order_;
  // Ops are placed in groups: those waiting for the next event share one, which resolve()
  // places at once. A group's module, nullopt while it waits.
  std::vector<std::optional<std::string>> groups_;
  std::deque<int32_t> queue_;  // the group of each op added and not yet taken
  int32_t open_ = -1;          // the waiting group, or -1
  bool open_no_grad_ = false;  // every op of the waiting group ran with grad mode off
  std::unordered_map<int64_t, int32_t> node_group_;  // sn -> the group of its forward op
  // Per thread, the ops whose nested calls may still come: (depth, group).
  std::unordered_map<uint32_t, std::vector<std::pair<int32_t, int32_t>>> calls_;
  Phase phase_ = Phase::kPass;
  std::optional<std::string> pass_anchor_;  // the last placed module of this forward pass
  std::string anchor_;                      // the module of the last parameter the forward read
  int64_t dropouts_ = 0;                    // dropout ops since then
  int32_t last_backward_ = -1;              // the group of the step's last backward op
};

/// The module of each op of one step of one rank, `ops` in seq order (the rule above).
std::vector<std::string> attribute_modules(const std::vector<ModuleOp>& ops,
                                           const ModuleOrder* order = nullptr);

}  // namespace precprobe::analysis_detail
