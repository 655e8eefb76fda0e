// Module attribution beyond the parameters' own modules (docs/cli.md, "Modules"): the ops of a
// Sequential's children that own no parameter (meta.json's "module_types", as LibTorch and the
// Python door write them), the optimizer's steps a program tells (OpRecord::optimizer: PyTorch
// 2.x's clip_grad_norm_ under no_grad is not the optimizer's work), and the records the probe
// placed while it ran (OpRecord::module: overflow_check's). Every op's module is written out
// by hand from where the program ran it.
#include <string>
#include <utility>
#include <vector>

#include "analysis/modules.h"
#include "core/module_fixtures.h"
#include "precprobe/analysis.h"
#include "precprobe/dump_format.h"
#include "precprobe_catch.h"

using namespace precprobe;
using namespace precprobe::test::modules;

namespace {

// meta.json's "module_types" of `types` ([path, type] in named_modules() order).
ModuleOrder order_of(const std::vector<std::pair<std::string, std::string>>& types) {
  RunMeta meta;
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [path, type] : types) j.push_back({path, type});
  meta.other["module_types"] = j;
  return ModuleOrder::of(meta);
}

// tests/ports' GAN as LibTorch names its modules (start({{"G", G}, {"D", D}}, ...)): two
// Sequentials of Linear, LeakyReLU, Linear and a last activation.
ModuleOrder gan_order_libtorch() {
  return order_of({{"(root)", "precprobe::ModelSet"},
                   {"G", "torch::nn::SequentialImpl"},
                   {"G.0", "torch::nn::LinearImpl"},
                   {"G.1", "torch::nn::LeakyReLUImpl"},
                   {"G.2", "torch::nn::LinearImpl"},
                   {"G.3", "torch::nn::TanhImpl"},
                   {"D", "torch::nn::SequentialImpl"},
                   {"D.0", "torch::nn::LinearImpl"},
                   {"D.1", "torch::nn::LeakyReLUImpl"},
                   {"D.2", "torch::nn::LinearImpl"},
                   {"D.3", "torch::nn::SigmoidImpl"}});
}

// The same as the Python door names them (the class names).
ModuleOrder gan_order_python() {
  return order_of({{"(root)", "ModelSet"},
                   {"G", "Sequential"},
                   {"G.0", "Linear"},
                   {"G.1", "LeakyReLU"},
                   {"G.2", "Linear"},
                   {"G.3", "Tanh"},
                   {"D", "Sequential"},
                   {"D.0", "Linear"},
                   {"D.1", "LeakyReLU"},
                   {"D.2", "Linear"},
                   {"D.3", "Sigmoid"}});
}

// One step of tests/ports' GAN: D on real images, its loss and backward, the noise, G, D on
// G's output (not detached).
std::vector<Op> gan_step() {
  return {
      fwd("aten::linear", "D.0", 0, "D.0.weight"),
      fwd("aten::leaky_relu", "D.1", 1),  // between D.0 and D.2: D's one child there
      fwd("aten::linear", "D.2", 2, "D.2.weight"),
      fwd("aten::sigmoid", "D.3", 3),  // after D.2: D's last child, one call
      fwd("aten::binary_cross_entropy", "(top level)", 4),
      bwd("aten::binary_cross_entropy_backward", 4, "(top level)"),
      bwd("aten::sigmoid_backward", 3, "D.3"),
      bwd("aten::mm", 2, "D.2", "D.2.weight"),
      bwd("aten::leaky_relu_backward", 1, "D.1"),
      bwd("aten::mm", 0, "D.0", "D.0.weight"),
      fwd("aten::randn", "(top level)"),
      fwd("aten::linear", "G.0", 10, "G.0.weight"),
      fwd("aten::leaky_relu", "G.1", 11),
      fwd("aten::linear", "G.2", 12, "G.2.weight"),
      fwd("aten::tanh", "G.3", 13),  // before D.0: G's last child
      fwd("aten::linear", "D.0", 14, "D.0.weight"),
      fwd("aten::leaky_relu", "D.1", 15),
      fwd("aten::linear", "D.2", 16, "D.2.weight"),
      fwd("aten::sigmoid", "D.3", 17),
      fwd("aten::binary_cross_entropy", "(top level)", 18),
  };
}

Op nested(Op o, int32_t depth) {
  o.depth = depth;
  return o;
}

Op marked(Op o) {
  o.optimizer = true;
  return o;
}

Op placed(std::string op, std::string module) {
  Op o = fwd(std::move(op), module);
  o.placed = std::move(module);
  return o;
}

}  // namespace

TEST_CASE("modules: meta.json's module types, as LibTorch and the Python door name them",
          "[modules]") {
  const ModuleOrder cpp = gan_order_libtorch();
  const ModuleOrder py = gan_order_python();
  for (const ModuleOrder* o : {&cpp, &py}) {
    CHECK(o->types.at("D") == "Sequential");
    CHECK(o->types.at("D.1") == "LeakyReLU");
    CHECK(o->one_op("D.1"));
    CHECK(o->one_op("G.3"));
    CHECK_FALSE(o->one_op("D.0"));  // a Linear reads its parameters: placed by them
    CHECK(o->children.at("D") == std::vector<std::string>{"D.0", "D.1", "D.2", "D.3"});
    CHECK(o->children.at("(root)") == std::vector<std::string>{"G", "D"});
  }
  CHECK(order_of({{"net", "MyNetImpl"}}).types.at("net") == "MyNet");
  // Not [path, type] pairs: no types, and the parameters alone place the ops.
  RunMeta bad;
  bad.other["module_types"] = nlohmann::json::parse(R"([["D", "Sequential"], ["D.1"]])");
  bad.other["modules"] = nlohmann::json::parse(R"([["D.0", "params"]])");
  const ModuleOrder o = ModuleOrder::of(bad);
  CHECK(o.types.empty());
  CHECK(o.entries.size() == 1);
}

TEST_CASE("modules: a Sequential's parameterless children, the ports' GAN", "[modules]") {
  const ModuleOrder cpp = gan_order_libtorch();
  const ModuleOrder py = gan_order_python();
  check_places(gan_step(), &cpp);
  check_places(gan_step(), &py);
  // Python 1.x's GAN detaches G's output: the tanh is G.3's, the detach G's own.
  std::vector<Op> detached = {fwd("aten::linear", "G.2", 12, "G.2.weight"),
                              fwd("aten::tanh", "G.3", 13), fwd("aten::detach", "G"),
                              fwd("aten::linear", "D.0", 14, "D.0.weight")};
  check_places(detached, &py);
}

TEST_CASE("modules: a Sequential model's leading Flatten and the ops around it", "[modules]") {
  // The model is the Sequential: its children are "0", "1", ...; the data's normalisation
  // before it is outside every module.
  const ModuleOrder o = order_of({{"(root)", "torch::nn::SequentialImpl"},
                                  {"0", "torch::nn::FlattenImpl"},
                                  {"1", "torch::nn::LinearImpl"},
                                  {"2", "torch::nn::ReLUImpl"},
                                  {"3", "torch::nn::DropoutImpl"},
                                  {"4", "torch::nn::LinearImpl"}});
  check_places({fwd("aten::div", "(top level)"), fwd("aten::flatten", "0"),
                nested(fwd("aten::view", "0"), 1), fwd("aten::linear", "1", 2, "1.weight"),
                fwd("aten::relu", "2", 3),
                // The dropout reads no parameter; its module order places it (meta.json's
                // "modules"), not its type: here it is not listed, so it is the Sequential's.
                fwd("aten::dropout", "(root)", 4), fwd("aten::linear", "4", 5, "4.weight"),
                fwd("aten::cross_entropy_loss", "(top level)", 6)},
               &o);
}

TEST_CASE("modules: between two children of a Sequential, what each child ran", "[modules]") {
  // A Tanhshrink runs two calls (tanh, sub); the ReLUs around it one each: what is left
  // between them is the Tanhshrink's.
  const ModuleOrder o = order_of({{"(root)", "Sequential"},
                                  {"0", "Linear"},
                                  {"1", "ReLU"},
                                  {"2", "Tanhshrink"},
                                  {"3", "ReLU"},
                                  {"4", "Linear"}});
  check_places({fwd("aten::linear", "0", 0, "0.weight"), fwd("aten::relu", "1", 1),
                fwd("aten::tanh", "2", 2), fwd("aten::sub", "2", 3), fwd("aten::relu", "3", 4),
                fwd("aten::linear", "4", 5, "4.weight")},
               &o);
  // Two children of unknown calls between: where one ends is not known, the Sequential is
  // named.
  const ModuleOrder two = order_of({{"(root)", "Sequential"},
                                    {"0", "Linear"},
                                    {"1", "Tanhshrink"},
                                    {"2", "Softsign"},
                                    {"3", "Linear"}});
  check_places({fwd("aten::linear", "0", 0, "0.weight"), fwd("aten::tanh", "(root)", 1),
                fwd("aten::sub", "(root)", 2), fwd("aten::abs", "(root)", 3),
                fwd("aten::div", "(root)", 4), fwd("aten::linear", "3", 5, "3.weight")},
               &two);
  // Not a Sequential: its own forward may run ops between its children.
  const ModuleOrder block = order_of({{"(root)", "Net"},
                                      {"b0", "Block"},
                                      {"b0.qkv", "Linear"},
                                      {"b0.act", "GELU"},
                                      {"b0.proj", "Linear"}});
  check_places(
      {fwd("aten::linear", "b0.qkv", 0, "b0.qkv.weight"), fwd("aten::masked_fill", "b0", 1),
       fwd("aten::gelu", "b0", 2), fwd("aten::linear", "b0.proj", 3, "b0.proj.weight")},
      &block);
}

TEST_CASE("modules: nested Sequentials end one after the other", "[modules]") {
  // head = Sequential(Sequential(Linear, ReLU), Tanh); the loss after it.
  const ModuleOrder o = order_of({{"(root)", "Net"},
                                  {"head", "Sequential"},
                                  {"head.0", "Sequential"},
                                  {"head.0.0", "Linear"},
                                  {"head.0.1", "ReLU"},
                                  {"head.1", "Tanh"}});
  check_places(
      {fwd("aten::linear", "head.0.0", 0, "head.0.0.weight"), fwd("aten::relu", "head.0.1", 1),
       fwd("aten::tanh", "head.1", 2), fwd("aten::mse_loss", "(top level)", 3),
       bwd("aten::mse_loss_backward", 3, "(top level)"), bwd("aten::tanh_backward", 2, "head.1")},
      &o);
}

TEST_CASE("modules: the optimizer's steps a program tells, PyTorch 2.x's clipping", "[modules]") {
  // PyTorch 2.x: clip_grad_norm_ runs with grad mode off (foreach ops on the gradients),
  // then Adam's foreach step, told by the Python door's optimizer step hooks.
  auto step = [](bool told) {
    auto adam = [&](Op o) { return told ? marked(std::move(o)) : o; };
    const std::string clip = told ? "(after backward)" : "fc1";
    return std::vector<Op>{
        fwd("aten::linear", "fc1", 0, "fc1.weight"),
        fwd("aten::relu", "(root)", 1),
        fwd("aten::linear", "fc2", 2, "fc2.weight"),
        fwd("aten::mse_loss", "(top level)", 3),
        bwd("aten::mse_loss_backward", 3, "(top level)"),
        bwd("aten::mm", 2, "fc2", "fc2.weight"),
        bwd("aten::threshold_backward", 1, "(root)"),
        bwd("aten::mm", 0, "fc1", "fc1.weight"),
        opt("aten::_foreach_norm", clip),
        opt("aten::stack", clip),
        opt("aten::linalg_vector_norm", clip),
        opt("aten::add", clip),
        opt("aten::reciprocal", clip),
        opt("aten::mul", clip),
        opt("aten::clamp", clip),
        opt("aten::_foreach_mul_", clip),
        adam(opt("aten::_foreach_add_", "fc1")),  // the state of every parameter: the first's
        adam(opt("aten::_foreach_lerp_", "fc1")),
        adam(opt("aten::_foreach_addcmul_", "fc1")),
        adam(opt("aten::_foreach_addcdiv_", "fc1", "fc1.weight")),
        fwd("aten::zero_", "(optimizer)"),  // zero_grad after the step
    };
  };
  check_places(step(true));
  // Untold (a C++ program that does not mark its optimizer): clipping without grad mode
  // reads as the optimizer's work on its first parameter, as docs/cli.md says.
  check_places(step(false));
}

TEST_CASE("modules: a record the probe placed keeps its module", "[modules]") {
  // overflow_check's dump: only the origin and its mask's writer, placed while the program ran.
  check_places({placed("aten::masked_fill", "b0"), placed("aten::_softmax", "b0.attn")});
  // Among records placed by the rule, it changes nothing around it.
  check_places({fwd("aten::linear", "b0.qkv", 0, "b0.qkv.weight"),
                placed("aten::_softmax", "b0.attn"), fwd("aten::masked_fill", "b0", 2),
                fwd("aten::linear", "b0.proj", 3, "b0.proj.weight")});
}
