#!/usr/bin/env python3
"""Fashion-MNIST LSTM: the image's rows as a sequence, the last hidden state classified; Adam.

The PyTorch original of the `lstm` port pair (tests/ports/README.md).

    PYTHONPATH=build/python /usr/bin/python3 tests/ports/python/lstm.py --data ROOT \\
        --save-state init.safetensors --dump py_dump
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

import precprobe


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(input_size=28, hidden_size=64, num_layers=1, batch_first=True)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = x.squeeze(1)  # [B, 1, 28, 28] -> [B, 28, 28]: 28 rows of 28 pixels
        out, _ = self.lstm(x)
        return self.fc(out[:, -1, :])


def main():
    parser = argparse.ArgumentParser(description="Fashion-MNIST LSTM (port pair: lstm)")
    parser.add_argument("--data", default="data", help="torchvision root (ROOT/FashionMNIST/raw)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--dump", help="record with precprobe into this directory")
    parser.add_argument("--config", help="msprobe config.json for the debugger")
    parser.add_argument("--save-state", help="write the initial weights here")
    parser.add_argument("--load-state", help="start from these weights")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    print(precprobe.seed_all(args.seed, True).summary())

    model = Net()
    if args.load_state:
        precprobe.load_state(model, args.load_state)
    if args.save_state:
        precprobe.save_state(model, args.save_state)
    torch.manual_seed(args.seed)

    transform = transforms.Compose([
        transforms.ToTensor(),
        transforms.Normalize((0.2860,), (0.3530,)),
    ])
    train_set = datasets.FashionMNIST(args.data, train=True, download=False, transform=transform)
    g = torch.Generator()
    g.manual_seed(args.seed)
    train_loader = DataLoader(train_set, batch_size=64, shuffle=False, num_workers=0, generator=g)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    dbg = None
    if args.dump:
        dbg = precprobe.PrecisionDebugger(args.config or None, dump_path=args.dump, overwrite=True)
        dbg.start(model)

    model.train()
    correct = 0
    seen = 0
    for i, (data, target) in enumerate(train_loader):
        output = model(data)
        loss = F.cross_entropy(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        pred = output.argmax(dim=1)
        correct += pred.eq(target).sum().item()
        seen += target.size(0)
        if dbg is not None:
            dbg.step()
        print(f"step {i} loss {loss.item():.6f}")
        if i + 1 >= args.steps:
            break

    print(f"train accuracy {100.0 * correct / seen:.2f}% ({correct}/{seen})")
    if dbg is not None:
        dbg.stop()
        c = dbg.counters()
        print(f"precprobe: {c['ops_recorded']} op records, {c['records_dropped']} dropped, "
              f"{c['errors']} errors -> {args.dump}")


if __name__ == "__main__":
    main()
