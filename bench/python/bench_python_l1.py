#!/usr/bin/env python3
"""What L1 costs in Python, beside the C++ example's step and a hook-based dumper.

The training step of examples/python/train_fashion_mnist.py (its Net, Adam, clip_grad_norm_
at 5, observe_batch, log_scalar, step) in three variants, interleaved in rounds in one
process: no debugger ("none"), precprobe.PrecisionDebugger at its defaults (statistics, L1),
and hook_dumper.HookDumper (msprobe's mechanism: forward and full backward hooks on every
module, min/max/mean/norm by torch ops read to floats, a JSON file per step). Batches of 64
from 4096 standard-normal images drawn after torch.manual_seed(0), as
bench/probe/bench_fashion_step.cpp draws them for the same step in C++, which this script
runs first (--cpp) so that both sides are measured in the same minutes. Every variant runs
with tune_malloc's malloc settings (the debugger sets them at start; one process cannot hold
both).

    PYTHONPATH=build/python taskset -c 1 /usr/bin/python3 bench/python/bench_python_l1.py \\
        --cpp build/bin/bench_fashion_step --steps 50 --rounds 5

`--model mlp [--h 256]`: bench_debugger's reference MLP instead (input 256
-> Linear(256, h) -> 4 x [Linear(h, h) -> LayerNorm -> GELU -> Dropout(0.1), residual add] ->
Linear(h, 10)), cross-entropy, AdamW, one batch of 128 standard-normal rows, the loop as
bench_debugger's Trainer writes it (no observe_batch, no clipping; `.item()` of the loss);
--cpp then names bench_debugger, run with `--h H --threads free-core --only "L1 statistics
(async)"` for the C++ loop's ratio in the same minutes:

    PYTHONPATH=build/python taskset -c 1 /usr/bin/python3 bench/python/bench_python_l1.py \
        --model mlp --cpp build/bin/bench_debugger --steps 30 --rounds 5

Prints medians of the step time and of the process's CPU time per step (every thread: the
statistics worker included), and the ratios. Measure on a core as idle as the machine
allows (taskset).
"""

import argparse
import ctypes
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
sys.path.insert(0, HERE)

import precprobe  # noqa: E402
from hook_dumper import HookDumper  # noqa: E402
from train_fashion_mnist import Net  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self, h):
        super().__init__()
        self.fc = torch.nn.Linear(h, h)
        self.ln = torch.nn.LayerNorm(h)
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, x):
        return x + self.drop(F.gelu(self.ln(self.fc(x))))


class Mlp(torch.nn.Module):
    """bench/probe/bench_debugger.cpp's MlpImpl (its `in` is `inp` here: a keyword)."""

    def __init__(self, h):
        super().__init__()
        self.inp = torch.nn.Linear(256, h)
        self.blocks = torch.nn.ModuleList(Block(h) for _ in range(4))
        self.out = torch.nn.Linear(h, 10)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.out(x)


def tune_malloc():
    """tune_malloc's settings (src/probe/support/malloc_tuning.h) for every variant."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
    libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--cpp", default="",
                   help="bench_fashion_step (or, with --model mlp, bench_debugger), run first "
                        "with the same flags")
    p.add_argument("--model", default="fashion", choices=["fashion", "mlp"])
    p.add_argument("--h", type=int, default=256, help="the MLP's width (--model mlp)")
    a = p.parse_args()
    if a.cpp:
        cmd = [a.cpp, "--steps", str(a.steps), "--rounds", str(a.rounds), "--warmup",
               str(a.warmup)]
        if a.model == "mlp":
            cmd += ["--h", str(a.h), "--threads", "free-core", "--only", "L1 statistics (async)"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        out = r.stdout
        if a.model == "mlp":  # its two lines, not the floors' and counters' report
            out = "".join(l + "\n" for l in out.splitlines()
                          if l.lstrip().startswith(("no debugger", "L1 statistics (async)")))
        print(out, end="", flush=True)
    torch.set_num_threads(1)
    tune_malloc()
    torch.manual_seed(0)
    n = 4096
    if a.model == "mlp":
        net = Mlp(a.h)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
        mlp_x, mlp_y = torch.randn(128, 256), torch.randint(0, 10, (128,))
    else:
        images = torch.randn(n, 1, 28, 28)
        labels = torch.randint(0, 10, (n,), dtype=torch.int64)
        net = Net()
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    tmp = tempfile.mkdtemp(prefix="bench_python_l1_")
    cursor = 0

    def fashion_step(dbg):
        """examples/python/train_fashion_mnist.py's step; returns the loss's value."""
        nonlocal cursor
        idx = torch.arange(cursor, cursor + 64, dtype=torch.int64)
        cursor = (cursor + 64) % n
        x = images.index_select(0, idx)
        y = labels.index_select(0, idx)
        if dbg:
            dbg.observe_batch(x, y, 0)
        loss = F.cross_entropy(net(x).to(torch.float32), y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 5.0)
        opt.step()
        value = loss.item()
        if dbg:
            dbg.log_scalar("loss", value)
        return value

    def mlp_step(dbg):
        """bench_debugger's Trainer::step, and the loss read once."""
        opt.zero_grad()
        loss = F.cross_entropy(net(mlp_x), mlp_y)
        loss.backward()
        opt.step()
        return loss.item()

    one_step = mlp_step if a.model == "mlp" else fashion_step

    def run(dbg, hooks, count, out):
        for _ in range(count):
            c0, t0 = time.process_time(), time.perf_counter()
            value = one_step(dbg)
            if dbg:
                dbg.step()
            if hooks:
                hooks.records["loss"] = value
                hooks.end_step()
            if out is not None:
                out.append((1e3 * (time.perf_counter() - t0), 1e3 * (time.process_time() - c0)))

    names = ["none", "L1", "hooks"]
    samples = {v: [] for v in names}
    for _ in range(a.rounds):
        for v in names:
            dbg = hooks = None
            if v == "L1":
                dbg = precprobe.PrecisionDebugger(dump_path=os.path.join(tmp, "dump"),
                                                  overwrite=True)
                dbg.start(net)
            elif v == "hooks":
                hooks = HookDumper(net, os.path.join(tmp, "hooks"))
            run(dbg, hooks, a.warmup, None)
            run(dbg, hooks, a.steps, samples[v])
            if dbg:
                dbg.stop()
            if hooks:
                hooks.close()
    wall = {v: statistics.median(s[0] for s in samples[v]) for v in names}
    cpu = {v: statistics.median(s[1] for s in samples[v]) for v in names}
    for v in names:
        print(f"py  {v:5s} {wall[v]:7.2f} ms/step wall  {cpu[v]:7.2f} ms/step cpu  "
              f"({len(samples[v])} steps)")
    print(f"py  L1/none: wall {wall['L1'] / wall['none']:.3f}  cpu {cpu['L1'] / cpu['none']:.3f}")
    print(f"py  hooks/none: wall {wall['hooks'] / wall['none']:.3f}  "
          f"cpu {cpu['hooks'] / cpu['none']:.3f};  hooks/L1: wall "
          f"{wall['hooks'] / wall['L1']:.3f}  cpu {cpu['hooks'] / cpu['L1']:.3f}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
