// A GPT-style causal language model as LibTorch users write one (tests/transformers/README.md):
// token and position embeddings (wte, wpe), two blocks b0, b1 of pre-norm attention with the
// attention written out by hand (ln1, a qkv Linear, the scores masked with
// masked_fill(mask, -inf), softmax, proj) and an MLP (ln2, fc1, GELU, fc2), ln_f and the head;
// AdamW and clip_grad_norm_. The mask is causal plus a key padding mask, built in forward.
//
//   tfm_gpt [--steps 10] [--dtype fp32|bf16] [--dump DIR] [--config FILE]
//           [--fully-masked-from STEP] (flags: tfm_common.h)
#include <cmath>
#include <cstdio>

#include "tfm_common.h"

namespace {

using tfm::kDim;
using tfm::kHeads;

struct BlockImpl : torch::nn::Module {
  BlockImpl()
      : ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})))),
        qkv(register_module("qkv", torch::nn::Linear(kDim, 3 * kDim))),
        proj(register_module("proj", torch::nn::Linear(kDim, kDim))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})))),
        fc1(register_module("fc1", torch::nn::Linear(kDim, 4 * kDim))),
        fc2(register_module("fc2", torch::nn::Linear(4 * kDim, kDim))) {}

  // x [B, T, C]; mask [B, 1, T, T], true where a query may not see a key.
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& mask) {
    const int64_t B = x.size(0), T = x.size(1), hd = kDim / kHeads;
    auto parts = qkv(ln1(x)).split(kDim, /*dim=*/-1);
    auto heads = [&](const torch::Tensor& t) { return t.view({B, T, kHeads, hd}).transpose(1, 2); };
    auto q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
    auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
    att = att.masked_fill(mask, -INFINITY);
    att = torch::softmax(att, /*dim=*/-1);
    auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, kDim});
    x = x + proj(y);
    return x + fc2(torch::gelu(fc1(ln2(x))));
  }

  torch::nn::LayerNorm ln1;
  torch::nn::Linear qkv, proj;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  GptImpl()
      : wte(register_module("wte", torch::nn::Embedding(tfm::kVocab + 1, kDim))),
        wpe(register_module("wpe", torch::nn::Embedding(tfm::kSeq, kDim))),
        b0(register_module("b0", Block())),
        b1(register_module("b1", Block())),
        ln_f(register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})))),
        head(register_module("head", torch::nn::Linear(kDim, tfm::kVocab))) {}

  // x [B, T] tokens; pad [B, T] true where padding. Returns logits [B, T, kVocab].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& pad) {
    const int64_t B = x.size(0), T = x.size(1);
    auto h = wte(x) + wpe(torch::arange(T, x.options()));
    auto causal = torch::ones({T, T}, torch::kBool).triu(/*diagonal=*/1);
    auto mask = causal.view({1, 1, T, T}).logical_or(pad.view({B, 1, 1, T}));
    h = b0(h, mask);
    h = b1(h, mask);
    return head(ln_f(h));
  }

  torch::nn::Embedding wte, wpe;
  Block b0, b1;
  torch::nn::LayerNorm ln_f;
  torch::nn::Linear head;
};
TORCH_MODULE(Gpt);

}  // namespace

int main(int argc, char** argv) try {
  const tfm::Flags flags = tfm::parse_flags(argc, argv);
  torch::set_num_threads(flags.threads);
  precprobe::seed_all(flags.seed, /*deterministic=*/true);
  Gpt model;
  return tfm::train("tfm_gpt", model, flags);
} catch (const std::exception& e) {
  std::fprintf(stderr, "tfm_gpt: %s\n", e.what());
  return 1;
}
