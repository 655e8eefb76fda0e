// A causal language model on LibTorch's own torch::nn::TransformerEncoder
// (tests/transformers/README.md): token and position embeddings, two encoder layers (2 heads,
// feed-forward 64, LibTorch's default dropout and ReLU), the head; AdamW and clip_grad_norm_.
// The attention masks are LibTorch's: the causal mask from
// TransformerImpl::generate_square_subsequent_mask (a -inf triangle) and the key padding mask,
// both made in forward.
//
// LibTorch's multi-head attention applies the key padding mask with a masked_fill dispatched
// on float and double only (AT_DISPATCH_FLOATING_TYPES in torch/nn/functional/activation.h):
// under bfloat16 autocast its scores are bfloat16 and it throws ("attn_output_weights.masked_fill"
// not implemented for 'BFloat16'), and it takes no 3-D mask either (it unsqueezes every mask to
// 4-D before adding it: "output with shape [16, 16, 16] doesn't match the broadcast shape
// [1, 16, 16, 16]"; LibTorch 1.13). So under --dtype bf16 the program passes the causal mask
// alone, built by hand as -inf above the diagonal (trailing padding needs no key mask under a
// causal one: no real token sees a later key, and the padded targets are ignored), and
// --fully-masked-from plants the bug such a hand-built mask has: triu's diagonal off by one
// (0 for 1), so that the first query of every sequence sees no key at all.
//
//   tfm_encoder [--steps 10] [--dtype fp32|bf16] [--dump DIR] [--config FILE]
//               [--fully-masked-from STEP] (flags: tfm_common.h)
#include <cstdio>

#include "tfm_common.h"

namespace {

using tfm::kDim;
using tfm::kHeads;

struct EncoderLmImpl : torch::nn::Module {
  explicit EncoderLmImpl(bool autocast_bf16)
      : embed(register_module("embed", torch::nn::Embedding(tfm::kVocab + 1, kDim))),
        pos(register_module("pos", torch::nn::Embedding(tfm::kSeq, kDim))),
        encoder(register_module(
            "encoder",
            torch::nn::TransformerEncoder(torch::nn::TransformerEncoderOptions(
                torch::nn::TransformerEncoderLayerOptions(kDim, kHeads).dim_feedforward(64), 2)))),
        head(register_module("head", torch::nn::Linear(kDim, tfm::kVocab))),
        bf16(autocast_bf16) {}

  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& pad) {
    const int64_t T = x.size(1);
    auto h = embed(x) + pos(torch::arange(T, x.options()));
    h = h.transpose(0, 1);  // LibTorch's encoder is sequence-first: [T, B, C]
    if (bf16) {
      auto causal = torch::full({T, T}, -INFINITY).triu(/*diagonal=*/off_by_one ? 0 : 1);
      h = encoder(h, causal);
    } else {
      auto causal = torch::nn::TransformerImpl::generate_square_subsequent_mask(T);  // [T, T]
      h = encoder(h, causal, pad);
    }
    return head(h.transpose(0, 1));
  }

  torch::nn::Embedding embed, pos;
  torch::nn::TransformerEncoder encoder;
  torch::nn::Linear head;
  bool bf16;
  bool off_by_one = false;  // bf16: the planted bug (--fully-masked-from)
};
TORCH_MODULE(EncoderLm);

}  // namespace

int main(int argc, char** argv) try {
  const tfm::Flags flags = tfm::parse_flags(argc, argv);
  torch::set_num_threads(flags.threads);
  precprobe::seed_all(flags.seed, /*deterministic=*/true);
  EncoderLm model(flags.bf16);
  return tfm::train("tfm_encoder", model, flags, [&](int64_t step) {
    model->off_by_one =
        flags.bf16 && flags.fully_masked_from >= 0 && step >= flags.fully_masked_from;
  });
} catch (const std::exception& e) {
  std::fprintf(stderr, "tfm_encoder: %s\n", e.what());
  return 1;
}
