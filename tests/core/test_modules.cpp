// Module attribution (src/core/analysis/modules.h; docs/cli.md, "Modules") on the op
// sequences of real training steps, every op's module written out by hand from where the
// program ran it: a GPT-style block (ops between a block's children, and its closing residual,
// belong to the block), a GAN step (the noise draw and the loss outside every module, the
// generator's last tanh in G), an LSTM language model with clip_grad_norm_ after the backward
// and SGD (what reads gradients "(after backward)"), the optimizers' work on a parameter's
// state in that parameter's module, "(optimizer)" after their last update. The
// streaming use (the live op watchpoints) gives the same modules as the batch one, and the
// commands that name a module (summary, overflow, watch, compare) name these.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "analysis/modules.h"
#include "core/analysis_fixtures.h"
#include "core/module_fixtures.h"
#include "precprobe/analysis.h"
#include "precprobe/op_watch.h"
#include "precprobe/reader.h"
#include "precprobe_catch.h"

using namespace precprobe;
using namespace precprobe::test;
using namespace precprobe::test::modules;
using analysis_detail::attribute_modules;
using analysis_detail::common_module;
using analysis_detail::ModuleAttributor;
using analysis_detail::ModuleOrder;

namespace {

// A GPT-style language model, one block shown whole (pre-LayerNorm; hand-written causal
// attention in the block's own forward between its children qkv and proj, with masked_fill, as
// tests/transformers' tfm_gpt; an MLP module with GELU), then the final LayerNorm, the head
// and the loss; its
// backward (autograd nodes by sn); clip_grad_norm_; AdamW (decoupled weight decay first:
// p.mul_ in place), and zero_grad at the end.
std::vector<Op> gpt_step() {
  return {
      fwd("aten::embedding", "tok_emb", 0, "tok_emb.weight"),
      fwd("aten::embedding", "pos_emb", 1, "pos_emb.weight"),
      fwd("aten::add", "(root)", 2),  // tok + pos, in the model's own forward
      fwd("aten::layer_norm", "b0.ln1", 3, "b0.ln1.weight"),
      fwd("aten::linear", "b0.qkv", 4, "b0.qkv.weight"),
      fwd("aten::split", "b0", 5),  // q, k, v: the block's own attention
      fwd("aten::matmul", "b0", 6), fwd("aten::masked_fill", "b0", 7),
      fwd("aten::softmax", "b0", 8), fwd("aten::matmul", "b0", 9),
      fwd("aten::linear", "b0.proj", 10, "b0.proj.weight"),
      fwd("aten::add", "b0", 11),  // the residual between the block's children
      fwd("aten::layer_norm", "b0.ln2", 12, "b0.ln2.weight"),
      fwd("aten::linear", "b0.mlp.fc1", 13, "b0.mlp.fc1.weight"), fwd("aten::gelu", "b0.mlp", 14),
      fwd("aten::linear", "b0.mlp.fc2", 15, "b0.mlp.fc2.weight"),
      // The block's closing residual: after the last read of b0's subtree (b0.mlp.fc2),
      // before the next module: in b0, the child of their common ancestor that holds fc2.
      fwd("aten::add", "b0", 16), fwd("aten::layer_norm", "ln_f", 17, "ln_f.weight"),
      fwd("aten::linear", "head", 18, "head.weight"),
      fwd("aten::cross_entropy_loss", "(top level)", 19),  // the loss: outside the model
      bwd("aten::_log_softmax_backward_data", 19, "(top level)"),
      bwd("aten::mm", 18, "head", "head.weight"),
      bwd("aten::native_layer_norm_backward", 17, "ln_f", "ln_f.weight"),
      bwd("aten::add", 16, "b0"), bwd("aten::mm", 15, "b0.mlp.fc2", "b0.mlp.fc2.weight"),
      bwd("aten::gelu_backward", 14, "b0.mlp"),
      bwd("aten::mm", 13, "b0.mlp.fc1", "b0.mlp.fc1.weight"),
      bwd("aten::_softmax_backward_data", 8, "b0"), bwd("aten::masked_fill", 7, "b0"),
      // The engine's own (no node of the step, no parameter): with the backward op before it,
      // not with the backward's last parameter (b0.mlp.fc1's).
      bwd("aten::add", -1, "b0"), bwd("aten::mm", 4, "b0.qkv", "b0.qkv.weight"),
      bwd("torch::autograd::AccumulateGrad", -1, "b0.qkv"),
      bwd("aten::embedding_dense_backward", 0, "tok_emb", "tok_emb.weight"),
      // clip_grad_norm_: the gradients' norms, the clip coefficient, the gradients scaled.
      fwd("aten::linalg_vector_norm", "(after backward)"), fwd("aten::stack", "(after backward)"),
      fwd("aten::linalg_vector_norm", "(after backward)"), fwd("aten::clamp", "(after backward)"),
      fwd("aten::mul_", "(after backward)"),
      // AdamW (under NoGradGuard): p.mul_(1 - lr * wd) updates a parameter: the optimizer has
      // started; its work on a parameter's state belongs to that parameter.
      opt("aten::mul_", "tok_emb", "tok_emb.weight"),
      opt("aten::mul_", "tok_emb"),  // exp_avg.mul_(beta1)
      opt("aten::add_", "tok_emb"),  // .add_(grad, 1 - beta1)
      opt("aten::addcmul_", "tok_emb"), opt("aten::sqrt", "tok_emb"),
      opt("aten::add_", "tok_emb"),  // denom.add_(eps)
      opt("aten::addcdiv_", "tok_emb", "tok_emb.weight"), opt("aten::mul_", "head", "head.weight"),
      opt("aten::mul_", "head"), opt("aten::addcdiv_", "head", "head.weight"),
      opt("aten::zero_", "(optimizer)"),  // zero_grad after the step: no parameter after it
  };
}

// pytorch/examples' DCGAN as examples/train_gan.cpp runs it, one start() for both models
// (parameters "G.*", "D.*"): D on real data, its backward; the noise drawn after it, G (its
// last tanh after G.out, before D's first parameter: G's), D on
// G's output; D's Adam; G's turn; G's Adam.
std::vector<Op> gan_step() {
  return {
      fwd("aten::zero_", "(top level)"),  // D->zero_grad(): before any parameter
      fwd("aten::linear", "D.0", 0, "D.0.weight"),
      fwd("aten::leaky_relu", "D", 1),  // inside D's Sequential
      fwd("aten::linear", "D.2", 2, "D.2.weight"), fwd("aten::sigmoid", "(top level)", 3),
      fwd("aten::binary_cross_entropy", "(top level)", 4),
      bwd("aten::binary_cross_entropy_backward", 4, "(top level)"),
      bwd("aten::sigmoid_backward", 3, "(top level)"), bwd("aten::mm", 2, "D.2", "D.2.weight"),
      bwd("aten::leaky_relu_backward", 1, "D"), bwd("aten::mm", 0, "D.0", "D.0.weight"),
      // torch::randn: after a backward, before G's first parameter: outside every module.
      fwd("aten::randn", "(top level)"), fwd("aten::linear", "G.fc", 10, "G.fc.weight"),
      fwd("aten::relu", "G", 11), fwd("aten::linear", "G.out", 12, "G.out.weight"),
      fwd("aten::tanh", "G", 13),  // G's last op, before D's first
      fwd("aten::detach", "G"), fwd("aten::linear", "D.0", 14, "D.0.weight"),
      fwd("aten::leaky_relu", "D", 15), fwd("aten::linear", "D.2", 16, "D.2.weight"),
      fwd("aten::binary_cross_entropy_with_logits", "(top level)", 17),
      bwd("aten::mm", 16, "D.2", "D.2.weight"), bwd("aten::leaky_relu_backward", 15, "D"),
      // d_opt.step(): Adam's state of D.0, then D.0's update; D.2's.
      opt("aten::mul_", "D.0"), opt("aten::addcmul_", "D.0"),
      opt("aten::addcdiv_", "D.0", "D.0.weight"), opt("aten::mul_", "D.2"),
      opt("aten::addcdiv_", "D.2", "D.2.weight"),
      // generator->zero_grad(), then D on G's output with grad mode on: a forward pass again.
      fwd("aten::zero_", "(top level)"), fwd("aten::linear", "D.0", 20, "D.0.weight"),
      fwd("aten::leaky_relu", "D", 21), fwd("aten::linear", "D.2", 22, "D.2.weight"),
      fwd("aten::binary_cross_entropy_with_logits", "(top level)", 23),
      bwd("aten::mm", 22, "D.2", "D.2.weight"), bwd("aten::tanh_backward", 13, "G"),
      bwd("aten::mm", 10, "G.fc", "G.fc.weight"), opt("aten::mul_", "G.fc"),
      opt("aten::addcdiv_", "G.fc", "G.fc.weight"), opt("aten::sqrt", "G.out"),
      opt("aten::addcdiv_", "G.out", "G.out.weight"),
      opt("aten::sqrt", "(optimizer)"),  // no parameter after it
  };
}

// An LSTM language model: embedding, the embedding's dropout module, aten::lstm (its cell's
// ops nested in it, a data loader's op on another thread meanwhile), the decoder, the loss;
// the backward; clip_grad_norm_; SGD (p.add_(grad, -lr) under NoGradGuard).
std::vector<Op> lstm_step() {
  Op sigmoid = fwd("aten::sigmoid", "lstm");
  sigmoid.depth = 1;  // nested in aten::lstm: the module the lstm is in
  Op nested_mm = fwd("aten::mm", "lstm", -1, "lstm.weight_hh_l0");
  nested_mm.depth = 1;
  Op loader = fwd("aten::div", "(top level)");
  loader.background = true;
  loader.thread = 1;
  return {
      fwd("aten::embedding", "emb", 0, "emb.weight"),
      fwd("aten::dropout", "drop", 1),
      fwd("aten::lstm", "lstm", 2, "lstm.weight_ih_l0"),
      nested_mm,
      loader,
      sigmoid,
      fwd("aten::view", "(root)", 3),  // the model's reshape between lstm and decoder
      fwd("aten::linear", "decoder", 4, "decoder.weight"),
      fwd("aten::log_softmax", "(top level)", 5),
      fwd("aten::nll_loss", "(top level)", 6),
      bwd("aten::nll_loss_backward", 6, "(top level)"),
      bwd("aten::_log_softmax_backward_data", 5, "(top level)"),
      bwd("aten::mm", 4, "decoder", "decoder.weight"),
      bwd("aten::_thnn_fused_lstm_cell_backward", 2, "lstm", "lstm.weight_ih_l0"),
      bwd("aten::native_dropout_backward", 1, "drop"),
      bwd("aten::embedding_dense_backward", 0, "emb", "emb.weight"),
      fwd("aten::norm", "(after backward)"),
      fwd("aten::stack", "(after backward)"),
      fwd("aten::norm", "(after backward)"),
      fwd("aten::add", "(after backward)"),
      fwd("aten::div", "(after backward)"),
      fwd("aten::clamp", "(after backward)"),
      fwd("aten::mul_", "(after backward)"),
      fwd("aten::mul_", "(after backward)"),
      opt("aten::add_", "emb", "emb.weight"),
      opt("aten::add_", "lstm", "lstm.weight_ih_l0"),
      opt("aten::add_", "decoder", "decoder.weight"),
  };
}

ModuleOrder lstm_order() {
  ModuleOrder o;
  o.entries = {{"emb", false}, {"drop", true}, {"lstm", false}, {"decoder", false}};
  return o;
}

// Named tensors for the analyses: each op's output of `value`.
DumpData dump_of(const std::vector<Op>& ops, int64_t steps) {
  DumpData d;
  for (int64_t s = 0; s < steps; ++s)
    for (OpRecord& r : records(ops, s)) d.ops.push_back(std::move(r));
  return d;
}

size_t index_of(const std::vector<Op>& ops, const std::string& op, const std::string& want) {
  for (size_t k = 0; k < ops.size(); ++k)
    if (ops[k].op == op && ops[k].want == want) return k;
  FAIL("no op " << op << " in " << want);
  return 0;
}

}  // namespace

TEST_CASE("modules: the common ancestor of two module paths", "[modules]") {
  CHECK(common_module("b0.attn.qkv", "b0.attn.proj") == "b0.attn");
  CHECK(common_module("b0.mlp.fc1", "b0.mlp.fc2") == "b0.mlp");
  CHECK(common_module("b0.q", "b0.qkv") == "b0");  // whole components, not characters
  CHECK(common_module("b0", "b0.attn.qkv") == "b0");
  CHECK(common_module("b0.attn.qkv", "b0") == "b0");
  CHECK(common_module("fc1", "fc2") == "(root)");
  CHECK(common_module("b0.mlp.fc2", "b1.ln1") == "(root)");
  CHECK(common_module("G.out", "D.0") == "(root)");
  CHECK(common_module("(root)", "b0.ln1") == "(root)");
  CHECK(common_module("b0.ln1", "(root)") == "(root)");
  CHECK(common_module("lstm", "lstm") == "lstm");
  using analysis_detail::module_between;
  CHECK(module_between("b0.qkv", "b0.proj") == "b0");  // the block's own attention
  CHECK(module_between("b0.mlp.fc1", "b0.mlp.fc2") == "b0.mlp");
  CHECK(module_between("b0.mlp.fc2", "b1.ln1") == "b0");  // b0's closing residual
  CHECK(module_between("b0.proj", "b0.ln2") == "b0");
  CHECK(module_between("b0.attn.proj", "b0.ln2") == "b0.attn");           // (the rule's blind spot)
  CHECK(module_between("layer1.0.bn2", "layer1.1.conv1") == "layer1.0");  // a ResNet block
  CHECK(module_between("G.out", "D.0") == "G");
  CHECK(module_between("fc1", "fc2") == "(root)");
  CHECK(module_between("pos_emb", "b0.ln1") == "(root)");
  CHECK(module_between("(root)", "b0.ln1") == "(root)");
  CHECK(module_between("b0.fc2", "(root)") == "b0");
  CHECK(module_between("lstm", "lstm") == "lstm");
  CHECK(module_between("b0", "b0.fc1") == "b0");
  CHECK(analysis_detail::outside_modules("(top level)"));
  CHECK(analysis_detail::outside_modules("(after backward)"));
  CHECK(analysis_detail::outside_modules("(optimizer)"));
  CHECK_FALSE(analysis_detail::outside_modules("(root)"));
  CHECK_FALSE(analysis_detail::outside_modules("b0"));
}

TEST_CASE("modules: a GPT-style block's ops, its backward, clipping and AdamW", "[modules]") {
  check_places(gpt_step());
}

TEST_CASE("modules: a GAN step's noise, two models, two optimizers", "[modules]") {
  check_places(gan_step());
}

TEST_CASE("modules: an LSTM LM with dropout, clip_grad_norm_ and SGD", "[modules]") {
  const ModuleOrder order = lstm_order();
  check_places(lstm_step(), &order);
  // Without meta.json's module order the dropout is an op like any other between emb and
  // lstm: the model's own forward.
  std::vector<Op> plain = lstm_step();
  plain[1].want = "(root)";
  plain[14].want = "(root)";  // its backward, where its forward op was placed
  check_places(plain);
}

TEST_CASE("modules: what ends a step's waiting ops", "[modules]") {
  // A forward that never reaches a second parameter: the ops after the first are outside
  // the model (the forward's last parameter was read), whatever ends the step.
  check_places({fwd("aten::linear", "fc1", -1, "fc1.weight"), fwd("aten::relu", "(top level)")});
  // The step ends after the backward: the forward ops after it are after the backward.
  check_places({fwd("aten::linear", "fc1", 0, "fc1.weight"), bwd("aten::mm", 0, "fc1"),
                fwd("aten::norm", "(after backward)")});
  // A step with no parameter at all (no model given to start()).
  check_places({fwd("aten::randn", "(top level)"), fwd("aten::mul", "(top level)")});
  // A step that begins with the optimizer (dbg.step() between backward and opt.step()): its
  // work on fc1's state, fc1's update.
  check_places({opt("aten::mul_", "fc1"), opt("aten::add_", "fc1", "fc1.weight"),
                opt("aten::mul_", "(optimizer)")});
  // Weight decay as Adam does it: grad.add(p, wd) reads the parameter, with grad mode off,
  // after the backward: the optimizer's, and the state work before it is fc1's.
  check_places({fwd("aten::linear", "fc1", 0, "fc1.weight"), bwd("aten::mm", 0, "fc1"),
                opt("aten::mul_", "fc1"),
                opt("aten::add", "fc1", "fc1.weight", /*self_param=*/false),
                opt("aten::mul_", "(optimizer)")});
  // Python's clip_grad_norm_ runs without grad mode, as the optimizer after it does: its ops
  // are taken for the optimizer's work on the first parameter (LibTorch's runs with grad mode
  // on: "(after backward)", as in the LSTM step).
  check_places({fwd("aten::linear", "fc1", 0, "fc1.weight"), bwd("aten::mm", 0, "fc1"),
                opt("aten::_foreach_norm", "fc1"), opt("aten::clamp", "fc1"),
                opt("aten::_foreach_mul_", "fc1"), opt("aten::lerp_", "fc1"),
                opt("aten::addcdiv_", "fc1", "fc1.weight")});
  // An evaluation pass under no_grad before any backward is a forward pass like any other.
  check_places({opt("aten::div", "(top level)"),
                opt("aten::linear", "b0.fc1", "b0.fc1.weight", /*self_param=*/false),
                opt("aten::relu", "b0"),
                opt("aten::linear", "b0.fc2", "b0.fc2.weight", /*self_param=*/false),
                opt("aten::argmax", "(top level)")});
  // An op nested in a parameter-reading op that reads none itself: the outer op's module.
  Op inner = fwd("aten::mm", "b0.fc1");
  inner.depth = 1;
  check_places({fwd("aten::layer_norm", "b0.ln", -1, "b0.ln.weight"),
                fwd("aten::linear", "b0.fc1", -1, "b0.fc1.weight"), inner, fwd("aten::relu", "b0"),
                fwd("aten::linear", "b0.fc2", -1, "b0.fc2.weight")});
}

TEST_CASE("modules: a streaming reader gets each module once the next event places it",
          "[modules]") {
  const std::vector<OpRecord> r = records(gpt_step());
  ModuleAttributor a;
  auto add = [&](size_t k) { a.add(analysis_detail::module_op(r[k])); };
  for (size_t k = 0; k < 5; ++k) add(k);  // tok_emb, pos_emb, add, ln1, qkv
  // The add waited for ln1's parameter; everything up to qkv is placed.
  std::vector<std::string> got;
  while (a.ready()) got.push_back(a.take());
  CHECK(got == std::vector<std::string>{"tok_emb", "pos_emb", "(root)", "b0.ln1", "b0.qkv"});
  for (size_t k = 5; k < 10; ++k) add(k);  // split .. matmul: waiting for the next parameter
  CHECK_FALSE(a.ready());
  CHECK(a.waiting() == 5);
  add(10);  // proj's weight: the five are in b0
  got.clear();
  while (a.ready()) got.push_back(a.take());
  CHECK(got == std::vector<std::string>{"b0", "b0", "b0", "b0", "b0", "b0.proj"});
  add(19);  // the loss: waits; the step's end says it was after the forward's last parameter
  CHECK_FALSE(a.ready());
  a.end_step();
  REQUIRE(a.ready());
  CHECK(a.take() == "(top level)");
  CHECK_FALSE(a.ready());
  // A new step starts afresh: its first op waits for a parameter again.
  add(2);
  CHECK_FALSE(a.ready());
  add(3);
  got.clear();
  while (a.ready()) got.push_back(a.take());
  CHECK(got == std::vector<std::string>{"(top level)", "b0.ln1"});
}

TEST_CASE("modules: summary, overflow, watch and compare name the same modules", "[modules]") {
  const std::vector<Op> ops = gpt_step();
  DumpData d = dump_of(ops, 3);
  // Step 2: the masked_fill's output holds a NaN (its inputs finite): the origin, in b0.
  const size_t fill = index_of(ops, "aten::masked_fill", "b0");
  OpRecord& bad = d.ops[2 * ops.size() + fill];
  REQUIRE(bad.step == 2);
  bad.outputs[0].tensor->nan = 1;

  const OverflowResult o = find_overflow(d);
  REQUIRE(o.found);
  CHECK(o.origin.op == "aten::masked_fill");
  CHECK(o.origin_module == std::optional<std::string>("b0"));

  const SummaryResult s = summarize_dump(d, /*by_module=*/true);
  std::vector<std::string> names;
  int64_t ops_in_b0 = -1, nonfinite_in_b0 = -1;
  for (const ModuleSummary& m : s.modules) {
    names.push_back(m.module);
    if (m.module == "b0") {
      ops_in_b0 = m.ops;
      nonfinite_in_b0 = m.nonfinite_ops;
    }
  }
  // Each module once, in order of first appearance in step 0.
  CHECK(names == std::vector<std::string>{"tok_emb", "pos_emb", "(root)", "b0.ln1", "b0.qkv", "b0",
                                          "b0.proj", "b0.ln2", "b0.mlp.fc1", "b0.mlp", "b0.mlp.fc2",
                                          "ln_f", "head", "(top level)", "(after backward)",
                                          "(optimizer)"});
  // b0: split, matmul, masked_fill, softmax, matmul, the two residual adds, the backward of
  // softmax, masked_fill and the closing add, and the engine's add after them, per step.
  CHECK(ops_in_b0 == 3 * 11);
  CHECK(nonfinite_in_b0 == 1);

  // The live watchpoint evaluator: the NaN's hit is held until proj places the masked_fill.
  OpWatcher w;
  std::vector<OpWatchHit> hits;
  for (const OpRecord& r : d.ops) {
    const size_t before = hits.size();
    w.observe(r, hits);
    if (r.step == 2 && r.seq == int64_t(fill)) CHECK(hits.size() == before);  // not yet placed
  }
  w.end_step(hits);
  REQUIRE(hits.size() == 1);
  CHECK(hits[0].watch == "tensor_overflow");
  CHECK(hits[0].step == 2);
  CHECK(hits[0].record == "aten::masked_fill.0.forward");
  CHECK(hits[0].module == "b0");

  // compare --by module: a 1 % change of the gelu's output in A, from step 1 on.
  DumpData a = dump_of(ops, 2), b = dump_of(ops, 2);
  const size_t gelu = index_of(ops, "aten::gelu", "b0.mlp");
  *a.ops[ops.size() + gelu].outputs[0].tensor = stats_of({0.505, -0.2525});
  a.ops[ops.size() + gelu].outputs[0].tensor->requires_grad = true;
  CompareOptions co;
  co.by_module = true;
  const CompareResult c = compare_dumps(a, b, co);
  REQUIRE(c.first);
  CHECK(c.first->name == "aten::gelu.0.forward");
  CHECK(c.first->module == "b0.mlp");
  bool listed = false;
  for (const ModuleCompare& m : c.modules) {
    if (m.module != "b0.mlp") continue;
    listed = true;
    CHECK(m.divergent >= 1);
  }
  CHECK(listed);
}

TEST_CASE("modules: the live watchpoints hold a hit until the step ends, as read back",
          "[modules]") {
  // A NaN in the loss: after the forward's last parameter, placed by the backward's first op,
  // or by the step's end when no backward op follows.
  std::vector<Op> ops = {
      fwd("aten::linear", "b0.fc1", 0, "b0.fc1.weight"), fwd("aten::relu", "b0", 1),
      fwd("aten::linear", "b0.fc2", 2, "b0.fc2.weight"), fwd("aten::mse_loss", "(top level)", 3)};
  DumpData d = dump_of(ops, 2);
  d.ops[7].outputs[0].tensor->nan = 1;  // step 1's loss
  OpWatcher w;
  std::vector<OpWatchHit> hits;
  for (const OpRecord& r : d.ops) w.observe(r, hits);
  CHECK(hits.empty());  // the loss waits: nothing after it
  w.end_step(hits);
  REQUIRE(hits.size() == 1);
  CHECK(hits[0].module == "(top level)");
  CHECK(hits[0].step == 1);
  // The next record of another step places it just as well.
  OpWatcher w2;
  hits.clear();
  for (const OpRecord& r : d.ops) w2.observe(r, hits);
  w2.observe(record(ops[0], 2, 0), hits);
  REQUIRE(hits.size() == 1);
  CHECK(hits[0].module == "(top level)");
}
