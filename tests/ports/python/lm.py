#!/usr/bin/env python3
"""Character-level LSTM language model (as pytorch/examples' word_language_model): the
corpus batchified into columns, windows of `bptt` characters in order, the hidden state
carried from window to window (detached), gradients clipped with clip_grad_norm_; SGD.

The PyTorch original of the `lm` port pair (tests/ports/README.md). The corpus is a plain
ASCII text file (tests/ports/data/lm.txt by default).

    PYTHONPATH=build/python /usr/bin/python3 tests/ports/python/lm.py \\
        --save-state init.safetensors --dump py_dump
"""

import argparse
import os

import torch
import torch.nn as nn

import precprobe

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "lm.txt")


class Dictionary:
    def __init__(self):
        self.char2idx = {}
        self.idx2char = []

    def add_char(self, c):
        if c not in self.char2idx:
            self.idx2char.append(c)
            self.char2idx[c] = len(self.idx2char) - 1
        return self.char2idx[c]

    def __len__(self):
        return len(self.idx2char)


class Corpus:
    """The text's characters as token ids, numbered in order of first appearance."""

    def __init__(self, path):
        self.dictionary = Dictionary()
        with open(path, "r", encoding="ascii", newline="") as f:  # the bytes as they are
            text = f.read()
        ids = [self.dictionary.add_char(c) for c in text]
        self.train = torch.tensor(ids, dtype=torch.int64)


class RNNModel(nn.Module):
    """Embedding -> LSTM -> Linear decoder over the vocabulary."""

    def __init__(self, ntoken, ninp, nhid, nlayers):
        super().__init__()
        self.ntoken = ntoken
        self.nhid = nhid
        self.nlayers = nlayers
        self.encoder = nn.Embedding(ntoken, ninp)
        self.lstm = nn.LSTM(ninp, nhid, nlayers)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, input, hidden):
        emb = self.encoder(input)
        output, hidden = self.lstm(emb, hidden)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return decoded, hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))


def batchify(data, bsz):
    # Work out how cleanly we can divide the dataset into bsz parts, trim off the remainder,
    # and lay the parts out as columns: [len // bsz, bsz].
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def main():
    parser = argparse.ArgumentParser(description="character LSTM language model (port pair: lm)")
    parser.add_argument("--data", default=CORPUS, help="the corpus: an ASCII text file")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lr", type=float, default=20.0)
    parser.add_argument("--clip", type=float, default=0.5, help="gradient clipping")
    parser.add_argument("--bptt", type=int, default=20, help="sequence length")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--dump", help="record with precprobe into this directory")
    parser.add_argument("--config", help="msprobe config.json for the debugger")
    parser.add_argument("--save-state", help="write the initial weights here")
    parser.add_argument("--load-state", help="start from these weights")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    print(precprobe.seed_all(args.seed, True).summary())

    corpus = Corpus(args.data)
    train_data = batchify(corpus.train, args.batch_size)
    ntokens = len(corpus.dictionary)

    model = RNNModel(ntokens, 32, 64, 1)
    if args.load_state:
        precprobe.load_state(model, args.load_state)
    if args.save_state:
        precprobe.save_state(model, args.save_state)
    torch.manual_seed(args.seed)

    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    dbg = None
    if args.dump:
        dbg = precprobe.PrecisionDebugger(args.config or None, dump_path=args.dump, overwrite=True)
        dbg.start(model)

    model.train()
    hidden = model.init_hidden(args.batch_size)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        data, targets = get_batch(train_data, i, args.bptt)
        # Starting each batch, we detach the hidden state from how it was previously produced.
        # If we didn't, the model would try backpropagating all the way to start of the dataset.
        hidden = repackage_hidden(hidden)
        optimizer.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()

        # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()

        if dbg is not None:
            dbg.step()
        print(f"step {batch} loss {loss.item():.6f}")
        if batch + 1 >= args.steps:
            break

    if dbg is not None:
        dbg.stop()
        c = dbg.counters()
        print(f"precprobe: {c['ops_recorded']} op records, {c['records_dropped']} dropped, "
              f"{c['errors']} errors -> {args.dump}")


if __name__ == "__main__":
    main()
