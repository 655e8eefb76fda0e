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
// - A Sequential's forward only calls its children in order (meta.json's "module_types" says
//   which modules are Sequentials, and each module's children): the ops between P and N that
//   its children owning no parameter ran are theirs. A child whose forward is one ATen call
//   (an activation, Flatten, a pooling: ModuleOrder::one_op) ran one op: the first after P
//   when it follows P's child (D.3's sigmoid after D.2, before the loss), the last before N
//   when it precedes N's (a leading Flatten). Between P's and N's children of the same
//   Sequential, the one child left once those are counted ran every other op there (the
//   leaky_relu between D.0 and D.2 is D.1's).
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
//   (LibTorch's clip_grad_norm_, which runs with grad mode on; PyTorch 2.x's runs without
//   it, and is taken for the optimizer's work on its first parameter unless the program
//   tells the optimizer's ops, as the Python door does: below); "(optimizer)" for the ops
//   that read no parameter once the optimizer has started and precede no parameter's update
//   (zero_grad after opt.step()). Where the program tells which ops ran in an optimizer's
//   step (OpRecord::optimizer: the Python door hooks optimizer.step()), the ops waiting when
//   the first of them comes are not its work: "(after backward)" (PyTorch 2.x's
//   clip_grad_norm_, with grad mode off). A parameter-reading op after the optimizer with grad mode
//   on starts a forward pass again (a GAN's second model). An op on a background thread (a
//   data loader's) is "(top level)".
// - A backward op belongs where the forward op that made its autograd node was placed (the
//   same "sn"); one without such a node, to the module of the parameter it reads, else where
//   the op it ran in is, else where the backward op before it is (the engine's own:
//   AccumulateGrad after the node that made the gradient; "(top level)" for the first).
//
// - A record the probe placed while the program ran (OpRecord::module: overflow_check's) is
//   in that module.
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
#include "precprobe/module_placement.h"
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
/// directly and its dropout modules, in named_modules() order (registration order); and its
/// "module_types": every module's type, which places the ops of a Sequential's parameterless
/// children (gap()).
struct ModuleOrder {
  struct Entry {
    std::string path;  ///< as consumed_module() names it ("(root)" for the top module)
    bool dropout = false;
  };
  std::vector<Entry> entries;
  /// Each module's type name without namespace or "Impl" ("Sequential", "LeakyReLU"), by path.
  std::unordered_map<std::string, std::string> types;
  /// Each module's children in registration order, by the parent's path.
  std::unordered_map<std::string, std::vector<std::string>> children;

  /// From meta.json's "modules" and "module_types"; each part empty when absent or not an
  /// array of [path, kind] / [path, type] pairs.
  static ModuleOrder of(const RunMeta& meta);
  bool empty() const noexcept { return entries.empty() && types.empty(); }
  /// The `k`-th dropout module (0-based) registered after the module `anchor` ("" : from the
  /// start) and before the next module owning parameters; nullopt when there is none.
  std::optional<std::string> dropout_after(const std::string& anchor, int64_t k) const;

  /// The modules whose forward ran between a read of module `p` and the next read of module
  /// `n` of one forward pass (nullopt: the pass starts, or ends) because a Sequential ran
  /// them: a Sequential's forward only calls its children in order, so its children after
  /// p's (where n is outside it) ran after p, those before n's (where p is outside it) ran
  /// before n, and those between p's and n's ran between them. `front`: the children that
  /// ran first after p, in order; `back`: those that ran last before n, in order. Where p's
  /// and n's are children of the same Sequential, `between`: `front` holds the children
  /// between them, which ran every op between (`back` is empty).
  struct Gap {
    std::vector<std::string> front, back;
    bool between = false;
  };
  Gap gap(const std::optional<std::string>& p, const std::optional<std::string>& n) const;
  /// Whether the module at `path` is of a type whose forward is one ATen call (an
  /// activation: ReLU, LeakyReLU, GELU, Sigmoid, Tanh, Softmax, ...; Flatten; a pooling).
  bool one_op(const std::string& path) const;
  /// Whether the module at `path` is a dropout (its type name holds "Dropout").
  bool dropout(const std::string& path) const;
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

/// What the module attribution needs of one op of a step (precprobe/module_placement.h).
using precprobe::ModuleOp;

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
  /// Drops it, as take() without the copy; ready() must be true.
  void skip();
  /// Ops added and not yet taken.
  size_t waiting() const noexcept { return queue_.size(); }

 private:
  // kPass: in a forward pass (or before one); kBackwardDone: after a backward op, before the
  // optimizer; kOptimizerRan: once an optimizer op ran.
  enum class Phase : uint8_t { kPass, kBackwardDone, kOptimizerRan };
  int32_t placed(const std::string& module);  // a group of ops whose module is known
  int32_t open();                             // the group of the ops waiting to be placed
  void resolve(std::string_view module);      // places the waiting ops
  // Places the waiting ops of a forward pass between reads of `p` and `n` (ModuleOrder::gap):
  // those a Sequential's children ran in them, the others in `module`.
  void resolve_gap(const std::optional<std::string>& p, const std::optional<std::string>& n,
                   std::string_view module);
  std::string_view outside() const noexcept;  // where the phase puts ops outside modules
  void reset_step();

  const ModuleOrder* order_;
  // Ops are placed in groups: each op waiting for the next event has one (with the ops it
  // ran nested), which resolve() places at once. A group's module, nullopt while it waits.
  std::vector<std::optional<std::string>> groups_;
  std::deque<int32_t> queue_;    // the group of each op added and not yet taken
  std::vector<int32_t> open_;    // the waiting groups, in order
  bool open_no_grad_ = false;    // every waiting op ran with grad mode off
  bool open_optimizer_ = false;  // every waiting op ran in an optimizer's step, as told
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
/// The module of ops[at] alone; nullopt when no op of the step reads a named parameter nor
/// was placed by the probe (no model given to start()).
std::optional<std::string> module_at(const std::vector<ModuleOp>& ops, size_t at,
                                     const ModuleOrder* order = nullptr);

}  // namespace precprobe::analysis_detail
