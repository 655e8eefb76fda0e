#!/usr/bin/env python3
"""precprobe::GradScaler against torch.amp.GradScaler("cuda"), step by step.

Runs tests/cuda/grad_scaler_sequence.cpp's fixed sequence (see its header: a "fed" mode
that sets scaled gradients with +-Inf, NaN, huge finite and denormal values directly, and an
"autocast" mode training a Linear under fp16 autocast) through PyTorch's own GradScaler in
this Python, runs the C++ program, and compares every step: found-inf, skipped, the scale
after update(), the growth tracker (exactly), and the parameters' float32 bits (reported
separately: the decisions are what must agree; parameters follow from them and the same
kernels).

    python3 tests/cuda/grad_scaler_compare.py --cpp build/bin/grad_scaler_sequence \
        [--steps 1000] [--csv-dir DIR]

Exit status: 0 all equal, 1 a difference, 2 no GPU or the C++ program failed.
"""
import argparse
import math
import os
import struct
import subprocess
import sys

DECADES = [1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0]
HEADER = "mode,step,found_inf,skipped,scale,growth_tracker,params"


def fed_gradient(i, g, n):
    v = []
    for k in range(n):
        x = math.sin(0.37 * i + k + 3 * g) * DECADES[i % 7]
        if g == 0 and k == 1 and i % 89 == 5:
            x = math.inf
        if g == 1 and k == 2 and i % 101 == 17:
            x = -math.inf
        if g == 0 and k == 0 and i % 113 == 31:
            x = math.nan
        if g == 1 and k == 0 and i % 71 == 3:
            x = 3e38
        if g == 1 and k == 1 and i % 61 == 7:
            x = 1e-42
        if g == 0 and k == 2 and 500 <= i < 540:
            x = math.inf
        v.append(x)
    return v


def batch(i):
    v = []
    for r in range(8):
        for c in range(16):
            x = math.sin(0.1 * (r * 16 + c) + i)
            if i % 59 == 29:
                x *= 1e4
            v.append(x)
    if i % 97 == 13:
        v[0] = math.inf
    if i % 131 == 7:
        v[1 * 16 + 1] = math.nan
    return v


def param_bits(torch, params):
    out = []
    for p in params:
        for bits in p.detach().cpu().contiguous().view(torch.int32).reshape(-1).tolist():
            out.append("%08x" % (bits & 0xFFFFFFFF))
    return ":".join(out)


def new_scaler(torch):
    return torch.amp.GradScaler("cuda", init_scale=65536.0, growth_factor=2.0,
                                backoff_factor=0.5, growth_interval=20)


def found_inf(scaler, opt):
    return int(sum(v.item() for v in scaler._found_inf_per_device(opt).values()) > 0)


def row(torch, mode, step, found, scaler, params):
    return "%s,%d,%d,%d,%r,%d,%s" % (mode, step, found, found, scaler.get_scale(),
                                     scaler._get_growth_tracker(), param_bits(torch, params))


def run_python(torch, steps):
    rows = [HEADER]
    dev = "cuda"
    # fed
    params = [torch.zeros(3, device=dev, requires_grad=True),
              torch.zeros(3, device=dev, requires_grad=True)]
    opt = torch.optim.SGD([{"params": [params[0]]}, {"params": [params[1]]}], lr=0.1,
                          foreach=False)
    scaler = new_scaler(torch)
    one = torch.ones((), device=dev)
    for i in range(steps):
        scaler.scale(one)
        for g in range(2):
            params[g].grad = torch.tensor(fed_gradient(i, g, 3), dtype=torch.float32, device=dev)
        scaler.step(opt)
        found = found_inf(scaler, opt)
        scaler.update()
        rows.append(row(torch, "fed", i, found, scaler, params))
    # autocast
    lin = torch.nn.Linear(16, 16)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([((k % 7) - 3) * 0.01 for k in range(256)],
                                      dtype=torch.float32).reshape(16, 16))
        lin.bias.zero_()
    lin.to(dev)
    opt = torch.optim.SGD([{"params": [lin.weight]}, {"params": [lin.bias]}], lr=1e-3,
                          foreach=False)
    scaler = new_scaler(torch)
    for i in range(steps):
        opt.zero_grad()
        x = torch.tensor(batch(i), dtype=torch.float32).reshape(8, 16).to(dev)
        with torch.autocast("cuda", dtype=torch.float16):
            out = lin(x)
            loss = out.to(torch.float32).pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        found = found_inf(scaler, opt)
        scaler.update()
        rows.append(row(torch, "autocast", i, found, scaler, [lin.weight, lin.bias]))
    return rows


def f32(s):
    return struct.unpack("f", struct.pack("f", float(s)))[0]


def compare(py_rows, cpp_rows):
    """Returns (decision_mismatches, param_mismatches, compared) as lists of messages."""
    decisions, params = [], []
    if py_rows[0] != HEADER or cpp_rows[0] != HEADER:
        return ["header differs: %r vs %r" % (py_rows[0], cpp_rows[0])], [], 0
    if len(py_rows) != len(cpp_rows):
        decisions.append("row count differs: python %d, C++ %d" % (len(py_rows), len(cpp_rows)))
    n = 0
    for p, c in zip(py_rows[1:], cpp_rows[1:]):
        n += 1
        pm, ps, pf, pk, pscale, pt, pp = p.split(",")
        cm, cs, cf, ck, cscale, ct, cp = c.split(",")
        where = "%s step %s" % (pm, ps)
        if (pm, ps) != (cm, cs):
            decisions.append("%s: rows out of step (C++ %s %s)" % (where, cm, cs))
            continue
        if pf != cf or pk != ck:
            decisions.append("%s: found_inf/skipped python %s/%s, C++ %s/%s" % (where, pf, pk, cf, ck))
        if f32(pscale) != f32(cscale):
            decisions.append("%s: scale python %s, C++ %s" % (where, pscale, cscale))
        if pt != ct:
            decisions.append("%s: growth tracker python %s, C++ %s" % (where, pt, ct))
        if pp != cp:
            params.append("%s: parameter bits python %s, C++ %s" % (where, pp, cp))
    return decisions, params, n


def summary_of(rows):
    out = {}
    for r in rows[1:]:
        m, _, f, _, scale, _, _ = r.split(",")
        s = out.setdefault(m, {"steps": 0, "found_inf": 0, "scales": set()})
        s["steps"] += 1
        s["found_inf"] += int(f)
        s["scales"].add(f32(scale))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpp", required=True, help="the grad_scaler_sequence executable")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--csv-dir", help="write python.csv and cpp.csv here")
    args = ap.parse_args()

    import torch  # the image's PyTorch
    print("torch %s, CUDA %s, device %s" % (torch.__version__, torch.version.cuda,
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"))
    if not torch.cuda.is_available():
        print("grad_scaler_compare: no CUDA device")
        return 2
    proc = subprocess.run([args.cpp, "--steps", str(args.steps)], capture_output=True, text=True)
    if proc.returncode != 0:
        print("grad_scaler_compare: %s exited %d\n%s" % (args.cpp, proc.returncode, proc.stderr))
        return 2
    cpp_rows = proc.stdout.strip().splitlines()
    py_rows = run_python(torch, args.steps)
    if args.csv_dir:
        os.makedirs(args.csv_dir, exist_ok=True)
        for name, rows in (("python.csv", py_rows), ("cpp.csv", cpp_rows)):
            with open(os.path.join(args.csv_dir, name), "w") as f:
                f.write("\n".join(rows) + "\n")
    decisions, params, n = compare(py_rows, cpp_rows)
    for mode, s in summary_of(py_rows).items():
        print("python %-8s: %d steps, %d with found_inf, scales seen: %s" % (
            mode, s["steps"], s["found_inf"],
            ", ".join("%g" % x for x in sorted(s["scales"])[:6]) +
            (" ... %g" % max(s["scales"]) if len(s["scales"]) > 6 else "")))
    print("compared %d steps: %d decision differences (found_inf, skipped, scale, growth "
          "tracker), %d parameter-bit differences" % (n, len(decisions), len(params)))
    for m in decisions[:20]:
        print("  DECISION " + m)
    for m in params[:10]:
        print("  PARAMS " + m)
    if decisions:
        print("RESULT: differ")
        return 1
    print("RESULT: equal%s" % (" (decisions; parameter bits differ)" if params else ""))
    return 1 if params else 0


if __name__ == "__main__":
    sys.exit(main())
