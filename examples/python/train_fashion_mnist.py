#!/usr/bin/env python3
"""The Python twin of examples/train_fashion_mnist.cpp: the same CNN, the same batches in the
same order, the same optimizer and hyper-parameters, recorded by precprobe's debugger into a
dump that `precprobe compare` sets beside the C++ example's.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/train_fashion_mnist.py \\
        --steps 30 --save-state init.safetensors --dump py_dump
    build/bin/train_fashion_mnist --steps 30 --load-state init.safetensors --dump cpp_dump
    build/bin/precprobe compare py_dump cpp_dump --first

Same starting point: --save-state writes the initial weights (after --load-state) with
precprobe.save_state; the C++ example's --load-state reads them (or the other way round).
Same batches: both read Debian's dataset-fashion-mnist idx files the same way
(examples/fashion_mnist.h: pixels / 255, then (x - 0.2860) / 0.3530), and both draw each
epoch's order with randperm from LibTorch's CPU generator after seed_all(seed, True) and
the model's construction (the same draws on both sides: the modules are built in the same
order with the same shapes, and Python and C++ share one libtorch_cpu).

--device cuda (both programs) trains on the GPU: the batches are drawn on the CPU as above
and copied to the device (scripts/gpu-check.sh's twin stage compares the two on CUDA).
"""

import argparse
import gzip
import os
import struct
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

import precprobe

MEAN, STD = 0.2860, 0.3530


def data_dir():
    return os.environ.get("FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"


def read_images(path):
    with gzip.open(path, "rb") as f:
        b = f.read()
    magic, n, rows, cols = struct.unpack(">IIII", b[:16])
    if magic != 2051 or len(b) != 16 + n * rows * cols:
        raise ValueError(f"{path}: not an idx3 file of its declared size")
    t = torch.frombuffer(bytearray(b), dtype=torch.uint8, offset=16)
    return t.reshape(n, 1, rows, cols).to(torch.float32).div_(255.0)


def read_labels(path):
    with gzip.open(path, "rb") as f:
        b = f.read()
    magic, n = struct.unpack(">II", b[:8])
    if magic != 2049 or len(b) != 8 + n:
        raise ValueError(f"{path}: not an idx1 file of its declared size")
    return torch.frombuffer(bytearray(b), dtype=torch.uint8, offset=8).to(torch.int64)


def load(split):
    d = data_dir()
    images = read_images(f"{d}/{split}-images-idx3-ubyte.gz")
    labels = read_labels(f"{d}/{split}-labels-idx1-ubyte.gz")
    return (images - MEAN) / STD, labels


class Net(nn.Module):
    """conv(1->16) -> BN -> ReLU -> pool, conv(16->32) -> BN -> ReLU -> pool, dropout,
    linear(1568->10): the C++ example's NetImpl, its modules registered in the same order."""

    def __init__(self, bn_eps=1e-5, dropout=0.25, fc_bias=True, act_scale=None):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16, eps=bn_eps)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32, eps=bn_eps)
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(32 * 7 * 7, 10, bias=fc_bias)
        self.act_scale = act_scale  # conv1's output times this (the C++ example's --act-scale)

    def forward(self, x):
        x = self.conv1(x)
        if self.act_scale is not None:
            x = x * self.act_scale
        x = F.max_pool2d(F.relu(self.bn1(x)), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(self.drop(x.flatten(1)))


def evaluate(net, images, labels, device):
    with torch.no_grad():
        net.eval()
        correct = 0
        for i in range(0, images.shape[0], 1000):
            x, y = images[i:i + 1000].to(device), labels[i:i + 1000].to(device)
            correct += int((net(x).argmax(1) == y).sum())
        net.train()
    return correct / images.shape[0]


def checked_evaluation(net, images, labels, dbg, observe, device):
    """The C++ example's short evaluation while recording: two batches of 500 in eval mode."""
    with torch.no_grad():
        net.eval()
        for i in range(0, 1000, 500):
            x, y = images[i:i + 500], labels[i:i + 500]
            if device.type != "cpu":  # on the CPU no copy, and no aten::to in the records
                x, y = x.to(device), y.to(device)
            if observe:
                dbg.observe_batch(x, y)
            net(x)
        net.train()


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="stop after N steps (0: whole epochs)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--dump", default="precprobe_dump")
    p.add_argument("--config", default="")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--no-debugger", action="store_true")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--no-observe-batch", action="store_true")
    p.add_argument("--no-mkldnn", action="store_true")
    p.add_argument("--load-state", default="", help="start from these weights")
    p.add_argument("--save-state", default="", help="write the initial weights first")
    # The C++ example's model options (its --act-scale, --bn-eps, --dropout, --no-fc-bias).
    p.add_argument("--act-scale", type=float, default=None)
    p.add_argument("--bn-eps", type=float, default=1e-5)
    p.add_argument("--dropout", type=float, default=0.25)
    p.add_argument("--no-fc-bias", action="store_true")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (the C++ example's)")
    return p.parse_args(argv)


def main(argv=None):
    a = parse(argv)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    if a.no_mkldnn:
        torch.backends.mkldnn.enabled = False
    print(precprobe.seed_all(a.seed, True).summary())
    train_x, train_y = load("train")
    test_x, test_y = load("t10k")
    print(f"fashion-mnist: {train_x.shape[0]} train, {test_x.shape[0]} test images")

    net = Net(a.bn_eps, a.dropout, not a.no_fc_bias, a.act_scale)
    if a.load_state:
        precprobe.load_state(net, a.load_state)
    if a.save_state:
        precprobe.save_state(net, a.save_state)
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {a.device}: PyTorch sees no CUDA device")
    net.to(device)
    # As the C++ example: batches and dropout draw from the generator seeded after the model.
    torch.manual_seed(a.seed)
    opt = torch.optim.Adam(net.parameters(), lr=a.lr)

    options = {"dump_path": a.dump}
    if a.overwrite:
        options["overwrite"] = True
    dbg = None
    if not a.no_debugger:
        dbg = precprobe.PrecisionDebugger(a.config or None, **options)
        dbg.start(net)
    # The C++ example's GradScaler is disabled unless --bf16: scale/unscale_/update do nothing.
    if hasattr(torch.amp, "GradScaler"):  # PyTorch 2.3+
        scaler = torch.amp.GradScaler("cpu", enabled=False)
    else:
        scaler = torch.cuda.amp.GradScaler(enabled=False)

    n = train_x.shape[0]
    step = 0
    t0 = time.monotonic()
    for epoch in range(a.epochs):
        order = torch.randperm(n, dtype=torch.int64)
        for i in range(0, n - a.batch_size + 1, a.batch_size):
            if a.steps > 0 and step >= a.steps:
                break
            idx = order[i:i + a.batch_size]
            x = train_x.index_select(0, idx)
            y = train_y.index_select(0, idx)
            if device.type != "cpu":  # the same batch, drawn on the CPU, then on the device
                x, y = x.to(device), y.to(device)
            if dbg and not a.no_observe_batch:
                dbg.observe_batch(x, y, epoch)
            logits = net(x)
            loss = F.cross_entropy(logits.to(torch.float32), y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(net.parameters(), 5.0)
            scaler.step(opt)
            scaler.update()
            value = loss.item()
            if dbg:
                dbg.log_scalar("loss", value)
                dbg.step()
            if a.log_every > 0 and step % a.log_every == 0:
                print(f"epoch {epoch} step {step:5d}  loss {value:.4f}", flush=True)
            step += 1
    secs = time.monotonic() - t0
    if dbg:
        checked_evaluation(net, test_x, test_y, dbg, not a.no_observe_batch, device)
        dbg.stop()
    acc = evaluate(net, test_x, test_y, device)
    print(f"trained {step} steps in {secs:.1f} s; test accuracy {100 * acc:.2f}%")
    if dbg:
        c = dbg.counters()
        print(f"precprobe: {c['ops_recorded']} op records, {c['records_dropped']} dropped, "
              f"{c['errors']} errors -> {a.dump}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (precprobe.Error, OSError, ValueError) as e:
        print(f"train_fashion_mnist.py: {e}", file=sys.stderr)
        sys.exit(1)
