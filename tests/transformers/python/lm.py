#!/usr/bin/env python3
"""Causal language models as PyTorch users write them (tests/transformers/README.md), on the
tokens of the C++ programs (tfm_common.h: each sequence counts up from a start by a stride,
modulo the vocabulary; even steps' batches are padded at the end, odd steps' are not):

- `mha`: nn.TransformerEncoder of two nn.TransformerEncoderLayer (nn.MultiheadAttention inside)
  given the causal mask of nn.Transformer.generate_square_subsequent_mask and a boolean
  key_padding_mask, made in forward;
- `hf`: two hand-written blocks b0, b1 (ln1, qkv, proj, ln2, fc1, GELU, fc2) with a
  Hugging-Face-style additive mask: torch.full(finfo(dtype).min).triu(1), padding filled
  with finfo(dtype).min, added to the scores, softmax in float32;
- `sdpa`: the same blocks with F.scaled_dot_product_attention, as Hugging Face's SDPA path
  calls it: is_causal=True for a batch without padding, else a boolean mask (causal and key
  padding). PyTorch 2.0 on; exits 3 on PyTorch 1.x.

AdamW, clip_grad_norm_; --dtype bf16 runs forward and loss under
torch.autocast("cpu", dtype=torch.bfloat16). --fully-masked-from S plants the classic padding
bug: from step S sequence 0 is all padding, so its key padding mask hides every key of each of
its query rows.

    PYTHONPATH=build/python /usr/bin/python3 tests/transformers/python/lm.py --attn mha \\
        --dump dump [--config config.json] [--dtype bf16] [--fully-masked-from 5]
"""

import argparse
import math
import sys

import torch
import torch.nn.functional as F
from torch import nn

import precprobe

VOCAB, PAD, SEQ, BATCH, DIM, HEADS, IGNORE = 16, 16, 16, 8, 32, 2, -100
M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def make_batch(step, seed, fully_masked_from):
    """tfm::make_batch of tfm_common.h: x, y (IGNORE where padded), pad (True = padding)."""
    x, y, pad = [], [], []
    for b in range(BATCH):
        r = splitmix64((seed * 1000003 + step * 64 + b) & M64)
        start, stride = r % VOCAB, 1 + (r >> 8) % 3
        n = SEQ - (b % 4 if step % 2 == 0 else 0)
        if b == 0 and 0 <= fully_masked_from <= step:
            n = 0
        x.append([(start + stride * t) % VOCAB if t < n else PAD for t in range(SEQ)])
        y.append([(start + stride * (t + 1)) % VOCAB if t < n else IGNORE for t in range(SEQ)])
        pad.append([t >= n for t in range(SEQ)])
    return torch.tensor(x), torch.tensor(y), torch.tensor(pad)


class EncoderLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB + 1, DIM)
        self.pos = nn.Embedding(SEQ, DIM)
        layer = nn.TransformerEncoderLayer(DIM, HEADS, dim_feedforward=64, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, x, pad):
        T = x.size(1)
        h = self.embed(x) + self.pos(torch.arange(T))
        causal = nn.Transformer.generate_square_subsequent_mask(T)
        h = self.encoder(h, mask=causal, src_key_padding_mask=pad)
        return self.head(h)


class Block(nn.Module):
    def __init__(self, sdpa):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.ln2 = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, 4 * DIM)
        self.fc2 = nn.Linear(4 * DIM, DIM)
        self.sdpa = sdpa

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            # Hugging Face's sdpa_attention_forward: no mask -> is_causal
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        else:
            att = q @ k.transpose(-2, -1) / math.sqrt(C // HEADS)
            att = att + mask
            att = F.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
            y = att @ v
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class BlocksLM(nn.Module):
    def __init__(self, sdpa):
        super().__init__()
        self.wte = nn.Embedding(VOCAB + 1, DIM)
        self.wpe = nn.Embedding(SEQ, DIM)
        self.b0 = Block(sdpa)
        self.b1 = Block(sdpa)
        self.ln_f = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)
        self.sdpa = sdpa

    def hf_mask(self, pad, dtype):
        """Hugging Face's 4-D additive causal mask: finfo(dtype).min where a query may not
        look, 0 elsewhere."""
        B, T = pad.shape
        min_dtype = torch.finfo(dtype).min
        causal = torch.full((T, T), min_dtype, dtype=dtype).triu(1)
        causal = causal[None, None, :, :].expand(B, 1, T, T).clone()
        return causal.masked_fill(pad[:, None, None, :], min_dtype)

    def sdpa_mask(self, pad):
        """None for a batch without padding (then is_causal); else True where a query may look."""
        if not pad.any():
            return None
        T = pad.size(1)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        return causal[None, None] & ~pad[:, None, None, :]

    def forward(self, x, pad):
        T = x.size(1)
        h = self.wte(x) + self.wpe(torch.arange(T))
        mask = self.sdpa_mask(pad) if self.sdpa else self.hf_mask(pad, h.dtype)
        h = self.b0(h, mask)
        h = self.b1(h, mask)
        return self.head(self.ln_f(h))


def main():
    p = argparse.ArgumentParser(description="causal Transformer LMs (tests/transformers)")
    p.add_argument("--attn", choices=["mha", "hf", "sdpa"], required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--dump", help="record with precprobe into this directory")
    p.add_argument("--config", help="msprobe config.json for the debugger")
    p.add_argument("--fully-masked-from", type=int, default=-1, metavar="STEP")
    args = p.parse_args()
    if args.attn == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        print(f"lm.py: torch {torch.__version__} has no F.scaled_dot_product_attention (2.0 on)",
              file=sys.stderr)
        sys.exit(3)

    torch.set_num_threads(args.threads)
    precprobe.seed_all(args.seed, True)
    model = EncoderLM() if args.attn == "mha" else BlocksLM(sdpa=args.attn == "sdpa")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    dbg = None
    if args.dump or args.config:
        options = {"dump_path": args.dump, "overwrite": True} if args.dump else {}
        dbg = precprobe.PrecisionDebugger(args.config, **options)
        on_anomaly = dbg.options.get("record") == "on_anomaly"
        dbg.start(model, opt if on_anomaly else None)
    else:
        on_anomaly = False

    model.train()
    for step in range(args.steps):
        x, y, pad = make_batch(step, args.seed, args.fully_masked_from)
        norms = []

        def train_step():
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
                logits = model(x, pad)
                loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), y.reshape(-1),
                                       ignore_index=IGNORE)
            loss.backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
            opt.step()
            return loss

        if on_anomaly:
            loss = dbg.run_step(train_step)
        else:
            loss = train_step()
            if dbg is not None:
                dbg.log_scalar("loss", loss.item())
                dbg.step()
        print(f"step {step} loss {loss.item():.6g} grad_norm {norms[-1]:.6g}", flush=True)

    if dbg is not None:
        dbg.stop()
        hits = dbg.watch_hits()
        print(f"live watch hits {len(hits)}")
        for h in hits:
            print(f"  step {h['step']} {h['watch']} {h['record']} {h['detail']}")
        c = dbg.counters()
        print(f"lm.py: {c['ops_recorded']} op records, {c['errors']} errors -> {dbg.dump_path}")


if __name__ == "__main__":
    main()
