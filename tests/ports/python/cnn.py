#!/usr/bin/env python3
"""Fashion-MNIST CNN: conv-bn-relu-pool twice, dropout, two linear layers; SGD with momentum.

The PyTorch original of the `cnn` port pair (tests/ports/README.md).

    PYTHONPATH=build/python /usr/bin/python3 tests/ports/python/cnn.py --data ROOT \\
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
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = self.dropout(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return self.fc2(x)


def main():
    parser = argparse.ArgumentParser(description="Fashion-MNIST CNN (port pair: cnn)")
    parser.add_argument("--data", default="data", help="torchvision root (ROOT/FashionMNIST/raw)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.01)
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
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)

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
