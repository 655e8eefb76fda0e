#!/usr/bin/env python3
"""Every op PyTorch tests, under every task.

PyTorch's own OpInfo database (torch.testing._internal.common_methods_invocations.op_db,
shipped in Debian's python3-torch: 621 entries on bookworm's 1.13) is run through the
precprobe debugger. For each op, each dtype it supports on the CPU among float32, float64,
bfloat16, float16, int64, bool and complex64, and each sample PyTorch generates for it
(`--bounded`: the first one; `--full`: all of them), plus — for floating and complex samples
— a copy whose first tensor holds a NaN, a +Inf and a -Inf, the op runs once without the
debugger and once under each configuration of CONFIGS (statistics L1/L2 with asynchronous
and synchronous statistics, overflow_check, the tensor task, "record": "on_anomaly"). Checked:

- no crash: the ops run in worker processes (this file with --worker); a worker that dies
  (segfault, abort) or stops making progress is a failure naming the op, dtype, sample and
  configuration it was running, and a new worker goes on after that case;
- the op's outputs are bitwise the same with and without the debugger (shape, dtype,
  strides and bytes of every output tensor; other outputs with ==; an exception must be the
  same exception). Every call is preceded by torch.manual_seed(0), so random ops compare
  too. Not failures, counted apart: outputs that differ only in the sign or payload of a
  NaN (LAPACK's linalg.lstsq returns NaN inputs with either sign); a case whose two plain
  runs differ, or whose difference under the debugger is also found by 8 more plain runs or
  by plain runs on copies of the inputs moved elsewhere in memory (LAPACK's results depend
  on their alignment; the debugger's own allocations move the program's): skipped,
  "nondeterministic"; the outputs of the allocation ops (empty*: uninitialized memory by
  design, checked to be recorded as unwritten instead);
- every recorded statistic equals a float64 recomputation of the tensor it describes
  (Expected.of below; the definitions are those of docs/dump-format.md and
  src/probe/stats/stats.cpp): the records tied to tensors held here are the depth-0 forward
  records of the op's step when the op ran exactly one ATen op at depth 0 (a Python-level
  composite runs several, whose intermediates are not held: "not tied", counted, not
  checked). Within that record, a recorded tensor is tied to the held tensor of the same
  dtype and shape in the same position among those of that dtype and shape (a Python scalar
  that ATen wraps into a 0-d tensor has no held twin: not tied). Counts (numel, nan, pinf,
  ninf, zero, neg, pos), min, max, hist and range bins must be equal; mean and norm within
  the bound of `close` below;
- overflow_check writes exactly the origins among the single-op steps; the tensor task's
  saved .npy files hold the tensors bit for bit; under on_anomaly a step whose loss (the
  float64 sum of the op's floating outputs) is NaN/Inf is replayed, reproduced, and its ops
  recorded, while a healthy step records none.

Standalone:  /usr/bin/python3 tests/python/opinfo_sweep.py --bounded|--full [--ops N]
             [--jobs J] [--json out.json] [--only NAME]
(PYTHONPATH must reach the built precprobe package, e.g. build/python.) Prints the figures:
ops, samples, dtypes, configurations, runs, records and statistics checked, skips by reason,
failures with what differed. Exit status 1 when a failure was found.

Written for PyTorch 1.13 and 2.x alike: OpInfo attributes and signatures are
feature-detected, and `expecttest` (which torch's test helpers import and Debian does not
package) is replaced by tests/python/opinfo/expecttest.py only when it is missing.
"""

import argparse
import collections
import io
import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))

# ---- configurations: keyword options of precprobe.PrecisionDebugger (docs/config.md) ----

# Options every configuration shares: its own dump directory, reused; dropout as the
# program set it (the DropoutGuard would otherwise force p = 0 and the outputs of the
# dropout ops would differ from the plain run by design); no gradient monitor (no model).
COMMON = {"overwrite": True, "keep_dropout": True, "grad_monitor": False}

CONFIGS = collections.OrderedDict([
    ("L1-async", {"task": "statistics", "level": "L1", "async_stats": True}),
    # The synchronous ones also record range statistics (every op: "all"), checked too.
    ("L1-sync", {"task": "statistics", "level": "L1", "async_stats": False,
                 "statistics": {"range": "all"}}),
    ("L2-async", {"task": "statistics", "level": "L2", "async_stats": True}),
    ("L2-sync", {"task": "statistics", "level": "L2", "async_stats": False,
                 "statistics": {"range": "all"}}),
    ("overflow_check", {"task": "overflow_check", "level": "L1",
                        "overflow_check": {"overflow_nums": -1}}),
    # Every op's full tensors: "." is in every record name (op.call.dir).
    ("tensor", {"task": "tensor", "level": "L1", "tensor": {"list": ["."]}}),
    ("on_anomaly", {"task": "statistics", "level": "L1", "record": "on_anomaly",
                    "on_anomaly": {"max_replays": 2147483647}}),
])

HARNESS = "opinfo_harness"  # precprobe.Scope of the sweep's own ops inside a step

# The allocation ops: their outputs are uninitialized memory (never compared; the debugger
# must record them as unwritten: counts 0, statistics null, docs/debugger.md).
UNINITIALIZED_OPS = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                     "empty_permuted"}
# Ops whose outputs differ in their last bits from one plain run to the next without the
# debugger, too rarely for a few plain reruns to see it every time: their outputs are never
# compared bitwise (a verdict left to chance is no verdict); their records are still checked
# against the tensors they describe. linalg.lstsq (LAPACK's gelsy driver on CPU): measured on
# an AMD EPYC VM, LibTorch 1.13, float32, about 190 of its samples differ between plain runs
# alone, and the full sweep once failed on sample 17 (6 elements, last bits) after its eight
# plain reruns and sixteen moved copies all agreed with the reference.
NONDETERMINISTIC_OPS = {"linalg.lstsq": "LAPACK's gelsy driver: last bits vary from run to run "
                                        "without the debugger"}
# resize_ / resize_as_ hand back memory nothing wrote when they grow their tensor.
REGROW_OPS = {"resize_", "resize_as_"}

BOUNDED_SAMPLES = 1  # samples per op and dtype in --bounded

# precprobe bugs this sweep found, each with the failures it causes. They stay failures
# (printed, counted, in --json); `--expect-known` and the pytest test accept exactly these
# and fail when one of them no longer occurs (fixed: remove it here) or when any other
# failure appears.
# Failures of precprobe bugs not fixed yet, accepted by the bounded test while they last
# (tests/python/test_opinfo_sweep.py): {"id", "what", "match": {failure key: allowed values}}.
# The sweep's first run found three, fixed since: a conjugate or negative view given its
# base's statistics (the statistics cache's key ignored is_conj()/is_neg()), and the tensor
# task saving a conjugate view un-conjugated and crashing on autograd's ZeroTensor.
KNOWN_BUGS = []


def known_bug(failure):
    """The id of the KNOWN_BUGS entry that explains `failure`, else None."""
    for bug in KNOWN_BUGS:
        if all((tuple(failure.get(k) or ()) if k == "flags" else failure.get(k)) in v
               for k, v in bug["match"].items()):
            return bug["id"]
    return None


def dtype_list(torch):
    return [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64,
            torch.bool, torch.complex64]


def nonfinite_dtypes(torch, mode):
    """The dtypes whose samples also run with NaN/+Inf/-Inf planted: every floating and
    complex one."""
    return {d for d in dtype_list(torch) if d.is_floating_point or d.is_complex}


def ensure_expecttest():
    try:
        import expecttest  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.join(HERE, "opinfo"))


def load_op_db():
    ensure_expecttest()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
    return op_db


def op_label(op):
    v = getattr(op, "variant_test_name", "") or ""
    return f"{op.name}.{v}" if v else op.name


# ============================== the worker ==============================

def c10_dtype_name(torch, dt):
    return {
        torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
        torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int",
        torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool",
        torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
        getattr(torch, "complex32", None): "ComplexHalf",
    }.get(dt, str(dt))


class Expected:
    """The statistics of one tensor recomputed in float64 from its values, with the
    definitions of docs/dump-format.md ("Tensor object") and src/probe/stats/stats.cpp:

    - complex tensors are read as their real and imaginary components (view_as_real after
      resolving the conjugate and negative bits): every count is over 2*numel components,
      `numel` stays the element count;
    - Bool: False is a zero, True a positive element; integers have no NaN/Inf;
    - nan/pinf/ninf count non-finite elements; zero counts elements == 0 of either sign;
      neg/pos count finite elements < 0 / > 0;
    - min, max, mean, norm are over the finite elements, in float64 (int64 beyond 2^53
      rounds there, as in the probe); none when there is no finite element;
    - hist (integer tensors but Bool, at most 2^16 elements, values spanning fewer than 1024
      integers and at most 256 distinct values): (value, count) ascending;
    - range (floating and complex): per binary exponent e, the finite non-zero elements with
      2^e <= |x| < 2^(e+1)."""

    __slots__ = ("dtype", "shape", "numel", "counts", "min", "max", "mean", "norm", "n",
                 "sum_abs", "hist", "hist_applies", "range", "floating", "rg")

    @staticmethod
    def of(torch, np, t):
        e = Expected()
        e.dtype = c10_dtype_name(torch, t.dtype)
        e.shape = list(t.shape)
        e.numel = t.numel()
        e.rg = bool(t.requires_grad)
        e.floating = t.is_floating_point() or t.is_complex()
        v = t.detach()
        if v.is_conj():
            v = v.resolve_conj()
        if hasattr(v, "is_neg") and v.is_neg():
            v = v.resolve_neg()
        if v.is_complex():
            v = torch.view_as_real(v)
        x = v.to(torch.float64).reshape(-1).numpy()
        nan = np.isnan(x)
        pinf = np.isposinf(x)
        ninf = np.isneginf(x)
        fin = x[np.isfinite(x)]
        e.counts = {"nan": int(nan.sum()), "pinf": int(pinf.sum()), "ninf": int(ninf.sum()),
                    "zero": int((fin == 0).sum()), "neg": int((fin < 0).sum()),
                    "pos": int((fin > 0).sum())}
        e.n = fin.size
        e.hist, e.hist_applies, e.range = None, False, None
        if e.n == 0:
            e.min = e.max = e.mean = e.norm = None
            e.sum_abs = 0.0
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                e.min = float(fin.min())
                e.max = float(fin.max())
                e.mean = float(fin.sum()) / e.n
                e.norm = math.sqrt(float(np.dot(fin, fin)))
                e.sum_abs = float(np.abs(fin).sum())
        if e.floating:
            nz = fin[fin != 0]
            if nz.size:
                ex = np.frexp(nz)[1].astype(np.int64) - 1
                vals, cnt = np.unique(ex, return_counts=True)
                e.range = [[int(a), int(b)] for a, b in zip(vals, cnt)]
            else:
                e.range = []
        elif t.dtype != torch.bool and e.numel > 0:
            ints = v.reshape(-1).numpy()
            lo, hi = int(ints.min()), int(ints.max())
            if (e.numel <= (1 << 16) and float(e.max) - float(e.min) < 1024.0
                    and hi - lo < 1024):
                vals, cnt = np.unique(ints, return_counts=True)
                if len(vals) <= 256:
                    e.hist_applies = True
                    e.hist = [[int(a), int(b)] for a, b in zip(vals, cnt)]
        return e


def stat_value(obj, key):
    """A statistic as the dump holds it: a number, or null with `<key>_nonfinite` naming a
    non-finite value, or null alone (undefined: no finite element)."""
    v = obj.get(key)
    if v is not None:
        return float(v)
    name = obj.get(key + "_nonfinite")
    if name is None:
        return None
    return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[name]


# The bound on mean and norm. The probe accumulates in float64 (a compensated block sum) and
# writes the float32 rounding of the result (docs/dump-format.md, "Values": the shortest text
# of static_cast<float>(v), src/core/json_lite.cpp; a value beyond float32's range is written
# as the double). Two float64 sums of the same n values in different orders differ by at most
# 2 * n * 2^-53 * sum(|x|) (each is within n * 2^-53 * sum(|x|) of the exact sum; the norm's
# squares are all >= 0, so sum(|x|) is the sum itself); the float32 rounding then moves the
# probe's value by at most half an ulp, <= 2^-24 relative, and a rounding boundary between
# the two float64 values can put them one float32 ulp (<= 2^-23 relative) apart; 2^-149 (the
# smallest float32 subnormal) covers values rounded to float32 subnormals or to 0. So:
#   |recorded - recomputed| <= 2^-23 * |recomputed| + 4 * n * 2^-53 * scale + 2^-149
# where scale is sum(|x|)/count for the mean and the norm itself for the norm (the 4 leaves
# a factor 2 over the two sums' bound). Counts, min, max, hist and range are exact.
def close(recorded, expected, n, scale):
    if expected is None or recorded is None:
        return recorded is None and expected is None
    if math.isnan(expected) or math.isnan(recorded):
        return math.isnan(expected) and math.isnan(recorded)
    if math.isinf(expected) or math.isinf(recorded):
        return recorded == expected
    tol = 2.0 ** -23 * abs(expected) + 4.0 * n * 2.0 ** -53 * scale + 2.0 ** -149
    return abs(recorded - expected) <= tol


def compare_tensor(obj, e, figures, range_on, unwritten=False):
    """Differences (list of strings) between a recorded tensor object and Expected `e`;
    figures["statistics"] counts the fields compared. `unwritten`: the tensor is memory no op
    wrote (an allocation op's output), which must be recorded with counts 0 and no
    statistics."""
    diffs = []

    def check(name, got, want):
        figures["statistics"] += 1
        if got != want:
            diffs.append(f"{name}: recorded {got!r}, recomputed {want!r}")

    check("dtype", obj.get("dtype"), e.dtype)
    check("shape", obj.get("shape", []), e.shape)
    check("numel", obj.get("numel", 0), e.numel)
    check("rg", obj.get("rg", False), e.rg)
    if unwritten:
        for k in ("nan", "pinf", "ninf", "zero", "neg", "pos"):
            check(k, obj.get(k, 0), 0)
        for k in ("min", "max", "mean", "norm"):
            check(k, obj.get(k, 0), None)
        return diffs
    for k, want in e.counts.items():
        check(k, obj.get(k, 0), want)
    check("min", stat_value(obj, "min"), e.min)
    check("max", stat_value(obj, "max"), e.max)
    for k, want, scale in (("mean", e.mean, e.sum_abs / e.n if e.n else 0.0),
                           ("norm", e.norm, e.norm or 0.0)):
        if k == "mean" and math.isinf(e.sum_abs):
            # sum(|x|) beyond DBL_MAX (nextafter's float64 extremes): whether a float64 sum
            # overflows depends on its order, so the mean is not compared
            figures["mean_not_comparable"] += 1
            continue
        got = stat_value(obj, k)
        figures["statistics"] += 1
        if not close(got, want, e.n, scale):
            diffs.append(f"{k}: recorded {got!r}, recomputed {want!r} (float64)")
    if e.hist_applies or "hist" in obj:
        check("hist", obj.get("hist"), e.hist)
    if range_on and e.floating:
        check("range", obj.get("range"), e.range)
    elif "range" in obj:
        diffs.append(f"range recorded for a {e.dtype} tensor: {obj['range']!r}")
    return diffs


class Case:
    __slots__ = ("op_index", "op", "label", "dtype", "sample", "variant", "call", "pristine",
                 "mutating", "ref", "ref_exc", "skip_compare", "key_base", "uninit",
                 "ref_loss_finite", "single", "_flaky")

    def key(self, config):
        return f"{self.key_base}|{config}"


def tree_map_tensors(torch, obj, fn):
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(tree_map_tensors(torch, o, fn) for o in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(tree_map_tensors(torch, o, fn) for o in obj)
    if isinstance(obj, dict):
        return {k: tree_map_tensors(torch, v, fn) for k, v in obj.items()}
    return obj


def leaves(torch, obj, out=None):
    """Every leaf of a nested output (tensors and other values) in order."""
    if out is None:
        out = []
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            leaves(torch, o, out)
    elif isinstance(obj, dict):
        for k in obj:
            leaves(torch, obj[k], out)
    else:
        out.append(obj)
    return out


def tensors_of(torch, obj):
    return [t for t in leaves(torch, obj) if isinstance(t, torch.Tensor)]


def bits(torch, t):
    """A tensor's identity for the bitwise comparison: dtype, layout, shape, strides and the
    bytes of its values in logical order."""
    t = t.detach()
    if t.layout != torch.strided:
        try:
            t = t.to_dense()
        except Exception:
            return (str(t.layout), repr(t))
    head = (str(t.dtype), tuple(t.shape), tuple(t.stride()))
    if hasattr(t, "_is_zerotensor") and t._is_zerotensor():
        # autograd's efficient zeros (a real input's SgnBackward0): no memory behind them
        return head + ("zerotensor",)
    if t.is_conj():
        t = t.resolve_conj()
    if hasattr(t, "is_neg") and t.is_neg():
        t = t.resolve_neg()
    # a fresh row-major copy: .contiguous() keeps a stride 0 on a dimension of size 1
    flat = torch.empty(t.shape, dtype=t.dtype).copy_(t).reshape(-1)
    if flat.numel() == 0:
        return head + (b"",)
    return head + (flat.view(torch.uint8).numpy().tobytes(),)


def same_value(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:
        return repr(a) == repr(b)


def output_signature(torch, out):
    """The comparable form of an op's result: per leaf, the bits of a tensor or the value."""
    return [("T",) + bits(torch, x) if isinstance(x, torch.Tensor) else ("V", x)
            for x in leaves(torch, out)]


def only_nan_payload(dtype_text, a, b):
    """Whether two byte strings of a floating or complex tensor differ only where both
    hold a NaN (its sign or payload: LAPACK's kernels give NaN inputs back with either sign
    depending on the order they take, which the memory layout picks)."""
    import torch
    dt = getattr(torch, dtype_text.replace("torch.", ""), None)
    if dt is None or not (dt.is_floating_point or dt.is_complex):
        return False
    x = torch.frombuffer(bytearray(a), dtype=dt)
    y = torch.frombuffer(bytearray(b), dtype=dt)
    if dt.is_complex:
        x, y = torch.view_as_real(x), torch.view_as_real(y)
    both = torch.isnan(x) & torch.isnan(y)
    keep = ~both
    return bool(torch.equal(x[keep].view(-1).view(torch.uint8) if x[keep].numel() else
                            torch.zeros(0, dtype=torch.uint8),
                            y[keep].view(-1).view(torch.uint8) if y[keep].numel() else
                            torch.zeros(0, dtype=torch.uint8)))


def signatures_equal(a, b):
    """(True, "") when the outputs are the same bits; (True, "nan payload") when they differ
    only in the sign or payload of NaNs (counted apart); else (False, what differs)."""
    nan_payload = False
    if len(a) != len(b):
        return False, f"{len(a)} outputs vs {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if x[0] != y[0]:
            return False, f"output {i}: a tensor vs a value"
        if x[0] == "T":
            if x[1:-1] != y[1:-1]:
                return False, f"output {i}: dtype/shape/strides {x[1:-1]} vs {y[1:-1]}"
            if x[-1] != y[-1]:
                if not (isinstance(x[-1], bytes) and isinstance(y[-1], bytes)):
                    return False, f"output {i}: {x[-1]!r} vs {y[-1]!r}"
                if only_nan_payload(x[1], x[-1], y[-1]):
                    nan_payload = True
                    continue
                size = max(1, len(x[-1]) // max(1, math.prod(x[2]) if x[2] else 1))
                diff = [k for k in range(0, len(x[-1]), size)
                        if x[-1][k:k + size] != y[-1][k:k + size]]
                k = diff[0]
                return False, (f"output {i} ({x[1]}{list(x[2])}): {len(diff)} elements differ, "
                               f"the first at flat index {k // size}: bytes "
                               f"{x[-1][k:k + size].hex()} without the debugger, "
                               f"{y[-1][k:k + size].hex()} with it")
        elif not same_value(x[1], y[1]):
            return False, f"output {i}: {x[1]!r} vs {y[1]!r}"
    return True, "nan payload" if nan_payload else ""


def exc_text(e):
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]


def same_exception(x, y):
    """The same exception text, but for the argument LAPACK calls illegal: with NaN in the
    input its number varies from call to call (2.6's linalg.eigvals: "Argument 4" in one run,
    "Argument 5" in the next, with or without the debugger)."""
    if x is None or y is None:
        return x is y
    lapack = re.compile(r"Argument \d+ has illegal value")
    return lapack.sub("Argument N has illegal value", x) == \
        lapack.sub("Argument N has illegal value", y)


def plant_nonfinite(torch, sample_input, args, kwargs):
    """A copy of the call whose first tensor input (`input`, or the first tensor of an input
    list) has NaN, +Inf, -Inf as its first three elements (logical order); None when it has
    fewer than 3 elements."""
    def first(obj):
        if isinstance(obj, torch.Tensor):
            return obj
        if isinstance(obj, (list, tuple)):
            for o in obj:
                f = first(o)
                if f is not None:
                    return f
        return None

    t = first(sample_input)
    if (t is None or t.layout != torch.strided or t.numel() < 3
            or not (t.is_floating_point() or t.is_complex())):
        return None  # sparse inputs (sparse.sampled_addmm) keep their samples as they are
    planted = t.detach().clone(memory_format=torch.contiguous_format)
    flat = planted.view(-1)
    with torch.no_grad():
        flat[0] = float("nan")
        flat[1] = float("inf")
        flat[2] = float("-inf")
    planted.requires_grad_(t.requires_grad)

    def swap(obj):
        if obj is t:
            return planted
        if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
            return type(obj)(swap(o) for o in obj)
        return obj

    return swap(sample_input), args, kwargs


class Worker:
    def __init__(self, job):
        import numpy as np
        import torch

        import precprobe
        sys.path.insert(0, HERE)
        from conftest import read_stream
        self.np, self.torch, self.pp, self.read_stream = np, torch, precprobe, read_stream
        self.job = job
        self.mode = job["mode"]
        self.exclude = set(job.get("exclude", []))
        self.progress = open(job["progress"], "a", buffering=1, encoding="utf-8")
        self.root = job["dump_root"]
        torch.set_num_threads(1)
        warnings.simplefilter("ignore")
        self.op_db = load_op_db()
        self.model = torch.nn.Linear(1, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.0)

    # ---- cases ----

    def supported(self, op, dtype):
        try:
            return dtype in op.supported_dtypes("cpu")
        except Exception:
            try:
                return dtype in op.dtypes
            except Exception:
                return False

    def cases_of(self, op_index, figures):
        torch = self.torch
        op = self.op_db[op_index]
        label = op_label(op)
        out = []
        nonfin = nonfinite_dtypes(torch, self.mode)
        for dtype in dtype_list(torch):
            if not self.supported(op, dtype):
                figures["op_dtypes_unsupported"] += 1
                continue
            torch.manual_seed(0)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    gen = op.sample_inputs("cpu", dtype, requires_grad=False)
                    limit = BOUNDED_SAMPLES if self.mode == "bounded" else None
                    samples = list(itertools.islice(iter(gen), limit))
            except Exception as e:
                figures["skips"][f"sample_inputs raised ({type(e).__name__})"] += 1
                continue
            if not samples:
                figures["skips"]["no sample for this dtype"] += 1
                continue
            grad_samples = []
            if dtype == torch.float32 and getattr(op, "supports_autograd", False):
                torch.manual_seed(0)
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        gen = op.sample_inputs("cpu", dtype, requires_grad=True)
                        grad_samples = list(itertools.islice(iter(gen), limit))
                except Exception as e:
                    figures["skips"][f"sample_inputs(requires_grad=True) raised "
                                    f"({type(e).__name__})"] += 1
            dname = str(dtype).replace("torch.", "")
            for i, s in enumerate(samples):
                calls = [("plain", (s.input, tuple(s.args), dict(s.kwargs)))]
                if i < len(grad_samples):
                    g = grad_samples[i]
                    calls.append(("grad", (g.input, tuple(g.args), dict(g.kwargs))))
                if dtype in nonfin:
                    planted = plant_nonfinite(torch, s.input, tuple(s.args), dict(s.kwargs))
                    if planted is not None:
                        calls.append(("nan_inf", planted))
                for variant, call in calls:
                    c = Case()
                    c.op_index, c.op, c.label, c.dtype = op_index, op, label, dname
                    c.sample, c.variant, c.call = i, variant, call
                    c.single = False
                    c.key_base = f"{op_index}|{label}|{dname}|{i}|{variant}"
                    out.append(c)
        return out

    def clone_call(self, call):
        torch = self.torch
        return tree_map_tensors(
            torch, call, lambda t: t.detach().clone().requires_grad_(t.requires_grad))

    def invoke(self, case, call):
        """Runs the op on `call`. The "grad" variant (float32 samples made with
        requires_grad=True) then back-propagates the sum of the differentiable outputs to
        the inputs that require grad (torch.autograd.grad, in the harness's Scope) and
        returns (output, gradients): the gradients are compared bitwise too, and the
        backward pass runs under every configuration."""
        torch = self.torch
        inp, args, kwargs = call
        torch.manual_seed(0)
        out = case.op(inp, *args, **kwargs)
        if case.variant != "grad":
            return out
        with self.pp.Scope(HARNESS):
            diff = [t for t in tensors_of(torch, out)
                    if t.requires_grad and (t.is_floating_point() or t.is_complex())]
            leaves_in = [t for t in tensors_of(torch, call) if t.requires_grad]
            grads = ()
            if diff and leaves_in:
                loss = sum((t.real if t.is_complex() else t).sum() for t in diff)
                grads = torch.autograd.grad(loss, leaves_in, allow_unused=True)
        return out, tuple(g for g in grads)

    @staticmethod
    def forward_out(case, result):
        """The op's own output within what invoke() returned."""
        return result[0] if case.variant == "grad" and result is not None else result

    def prepare(self, case, figures):
        """The plain runs: the reference output (or exception), whether the op writes its
        inputs (then every run gets a fresh copy), whether two plain runs agree."""
        torch = self.torch
        case.pristine = self.clone_call(case.call)
        inputs = tensors_of(torch, case.call)
        versions = [t._version for t in inputs]
        case.uninit = case.op.name in UNINITIALIZED_OPS
        case.skip_compare = None
        try:
            out1 = self.invoke(case, case.call)
            case.ref_exc = None
        except Exception as e:
            out1, case.ref_exc = None, exc_text(e)
        after = [t._version for t in inputs]
        case.mutating = versions != after or any(
            bits(torch, a) != bits(torch, b)
            for a, b in zip(inputs, tensors_of(torch, case.pristine)))
        if case.mutating:
            # Put the sample's tensors back: other samples of the op may share them
            # (batch_norm's running statistics), and must not see this call's writes.
            with torch.no_grad():
                for a, p in zip(inputs, tensors_of(torch, case.pristine)):
                    try:
                        a.copy_(p)
                    except Exception:
                        pass
            case.call = None
            try:
                out1 = self.invoke(case, self.clone_call(case.pristine))
                case.ref_exc = None
            except Exception as e:
                out1, case.ref_exc = None, exc_text(e)
        if case.ref_exc is not None:
            case.ref = None
            case.ref_loss_finite = True
            return
        try:
            out2 = self.invoke(case, self.fresh(case))
            sig2 = output_signature(torch, out2)
        except Exception as e:
            sig2 = [("E", exc_text(e))]
        case.ref = output_signature(torch, out1)
        case.ref_loss_finite = bool(math.isfinite(float(
            self.loss_of(self.forward_out(case, out1)))))
        if case.uninit:
            case.skip_compare = "uninitialized output by design (empty*): not compared"
        elif case.op.name in NONDETERMINISTIC_OPS:
            case.skip_compare = ("nondeterministic without the debugger: "
                                 + NONDETERMINISTIC_OPS[case.op.name])
        elif not signatures_equal(case.ref, sig2)[0]:
            case.skip_compare = "nondeterministic without the debugger (two plain runs differ)"

    def shifted(self, call, k):
        """A copy of `call` whose tensors have the same sizes and strides but start k
        elements further into their memory (another alignment)."""
        torch = self.torch

        def move(t):
            if t.layout != torch.strided or t.numel() == 0 or min(t.stride(), default=1) < 1:
                return t.detach().clone().requires_grad_(t.requires_grad)
            extent = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
            base = torch.empty(extent + k, dtype=t.dtype)
            v = base.as_strided(t.shape, t.stride(), k).detach()
            with torch.no_grad():
                v.copy_(t)
            return v.requires_grad_(t.requires_grad)

        return tree_map_tensors(torch, call, move)

    def flaky(self, case):
        """Why a difference under the debugger may not be the debugger's, or None: 8 more
        plain runs give other bits (linalg.lstsq's gelsy driver does, 7 times in 20 on
        1.13), or the plain run on inputs moved 1 to 16 elements further into memory does
        (LAPACK's results depend on the alignment of its operands; the debugger's own
        allocations move the program's). Asked only after a difference; kept."""
        if getattr(case, "_flaky", None) is None:
            case._flaky = None
            calls = [("nondeterministic without the debugger (found by 8 more plain runs "
                      "after a difference)", lambda: self.fresh(case))] * 8
            calls += [("the output depends on the inputs' memory alignment (found by plain "
                       "runs on moved copies after a difference)",
                       lambda k=k: self.shifted(case.pristine, k)) for k in range(1, 17)]
            for why, make in calls:
                try:
                    sig = output_signature(self.torch, self.invoke(case, make()))
                except Exception as e:
                    sig = [("E", exc_text(e))]
                if not signatures_equal(case.ref, sig)[0]:
                    case._flaky = why
                    break
        return case._flaky

    def fresh(self, case):
        return self.clone_call(case.pristine) if case.mutating else case.call

    def loss_of(self, out):
        """The step's "loss" under on_anomaly: the float64 sum of every floating or complex
        (real and imaginary parts) output; 0 when there is none."""
        torch = self.torch
        total = torch.zeros((), dtype=torch.float64)
        for t in tensors_of(torch, out):
            if t.layout != torch.strided:
                continue
            if t.is_complex():
                total = total + torch.view_as_real(t.detach().resolve_conj()).to(
                    torch.float64).sum()
            elif t.is_floating_point():
                total = total + t.detach().to(torch.float64).sum()
        return total

    # ---- one configuration over a chunk of cases ----

    def run_config(self, name, cases, figures):
        torch, pp = self.torch, self.pp
        dump = os.path.join(self.root, name)
        opts = dict(COMMON)
        opts.update(CONFIGS[name])
        dbg = pp.PrecisionDebugger(dump_path=dump, **opts)
        on_anomaly = opts.get("record") == "on_anomaly"
        if on_anomaly:
            dbg.start(self.model, self.optimizer)
        else:
            dbg.start()
        results = []  # per case: (held call, output or None, exception text or None, ran)
        for case in cases:
            key = case.key(name)
            if key in self.exclude:
                results.append((None, None, None, False))
                dbg.step()
                continue
            self.progress.write(f"RUN {key}\n")
            holder = {}

            def fn(case=case, holder=holder):
                with pp.Scope(HARNESS):
                    call = self.fresh(case)
                holder["call"] = call
                try:
                    holder["out"] = self.invoke(case, call)
                    holder["exc"] = None
                except Exception as e:
                    holder["out"], holder["exc"] = None, exc_text(e)
                    return None
                if not on_anomaly:
                    return None
                with pp.Scope(HARNESS):
                    return self.loss_of(self.forward_out(case, holder["out"]))

            if on_anomaly:
                dbg.run_step(fn)
            else:
                fn()
                dbg.step()
            results.append((holder.get("call"), holder.get("out"), holder.get("exc"), True))
            figures["runs"] += 1
        dbg.stop()
        self.check_config(name, dump, cases, results, figures)

    # ---- checks ----

    def fail(self, figures, case, config, what, detail, tensor=None):
        """A failure; `tensor`: the held tensor it is about, whose lazy bits (conj, neg) go
        into "flags" (KNOWN_BUGS match on them)."""
        flags = []
        if tensor is not None:
            flags = [f for f, on in (("conj", tensor.is_conj()),
                                     ("neg", hasattr(tensor, "is_neg") and tensor.is_neg()))
                     if on]
        figures["failures"].append({
            "op": case.label, "dtype": case.dtype, "sample": case.sample,
            "variant": case.variant, "config": config, "what": what, "detail": detail[:2000],
            "flags": flags})

    def check_config(self, name, dump, cases, results, figures):
        torch = self.torch
        opts = CONFIGS[name]
        ops = self.read_stream(dump, "ops")
        by_step = collections.defaultdict(list)
        for r in ops:
            by_step[r["step"]].append(r)
        events = self.read_stream(dump, "events")
        anomalies = {e["step"]: e for e in events if e.get("name") == "anomaly"}
        range_on = bool(opts.get("statistics", {}).get("range"))
        for step, (case, (call, out, exc, ran)) in enumerate(zip(cases, results)):
            if not ran:
                continue
            # 1. the outputs, bitwise
            if exc is not None or case.ref_exc is not None:
                if not same_exception(exc, case.ref_exc):
                    self.fail(figures, case, name, "outputs differ",
                              f"without the debugger: {case.ref_exc or 'returned'}; "
                              f"with it: {exc or 'returned'}")
                else:
                    figures["raised_same"] += 1
            elif case.skip_compare:
                figures["skips"][case.skip_compare] += 1
            else:
                ok, why = signatures_equal(case.ref, output_signature(torch, out))
                figures["outputs_compared"] += 1
                if ok and why:
                    figures["outputs_nan_payload"] += 1
                if not ok and self.flaky(case):
                    figures["skips"][self.flaky(case)] += 1
                elif not ok:
                    self.fail(figures, case, name, "outputs differ", why)
            recs = [r for r in by_step.get(step, [])
                    if r.get("dir", "forward") == "forward" and r.get("depth", 0) == 0
                    and not r.get("scope", "").startswith(HARNESS)]
            if name == "L1-async":  # one ATen op at depth 0: overflow_check's expectation
                case.single = recs[0]["op"] if len(recs) == 1 else False
            nested = [r for r in by_step.get(step, []) if r.get("depth", 0) != 0]
            figures["records_nested"] += len(nested)
            figures["records_backward"] += sum(
                r.get("dir") == "backward" for r in by_step.get(step, []))
            # 2. task-specific expectations
            if opts.get("record") == "on_anomaly":
                an = anomalies.get(step)
                if case.skip_compare:
                    pass  # the loss itself may differ from run to run: nothing to expect
                elif case.ref_exc is None and not case.ref_loss_finite and exc is None:
                    if an is None:
                        self.fail(figures, case, name, "no replay",
                                  "the step's loss is not finite but no anomaly event was "
                                  "written")
                        continue
                    figures["replays_checked"] += 1
                    if an.get("reproduced") is not True:
                        self.fail(figures, case, name, "replay not reproduced", json.dumps(an))
                elif an is not None:
                    self.fail(figures, case, name, "unexpected replay", json.dumps(an))
                elif recs:
                    self.fail(figures, case, name, "records in a healthy step",
                              ", ".join(r["op"] for r in recs))
                    continue
            if opts["task"] == "overflow_check":
                self.check_overflow(name, case, call, self.forward_out(case, out), recs,
                                    figures)
            if call is None or exc is not None:
                continue
            if not recs and (opts["task"] == "overflow_check" or opts.get("record")):
                continue  # nothing to tie: no origin, or a healthy step
            # 3. the statistics of the records tied to held tensors
            if len(recs) != 1:
                figures["not_tied"]["no depth-0 record" if not recs else
                                    "several ops at depth 0 (composite)"] += 1
                continue
            if (opts["task"] == "overflow_check" or opts.get("record")) and (
                    recs[0]["op"] != case.single):
                # overflow_check writes only the origin, on_anomaly's replay what ran: one
                # record there may still be one op of several (the L1 run tells)
                figures["not_tied"]["one op of a composite (overflow_check, replay)"] += 1
                continue
            self.check_record(name, case, recs[0], call, self.forward_out(case, out), range_on,
                              figures, dump, step)

    def tie(self, objs, held):
        """For each recorded tensor object, the held tensors of its dtype and shape that it may
        describe, best first: (index, candidates, positional). `positional`: both sides have
        as many tensors of that (dtype, shape), and the first candidate is the one in the
        same position among them (then a recorded tensor that matches no candidate is a
        failure); otherwise the candidates are all the held tensors of that (dtype, shape)
        and one that matches none is only "not tied" (a Python number ATen wrapped into a
        0-d tensor, or an argument Python built without an op)."""
        torch = self.torch
        groups = collections.defaultdict(list)
        for t in held:
            if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                groups[(c10_dtype_name(torch, t.dtype), tuple(t.shape))].append(t)
        rec_groups = collections.defaultdict(list)
        for i, o in enumerate(objs):
            if "dtype" in o:
                rec_groups[(o["dtype"], tuple(o.get("shape", [])))].append(i)
        ties = []
        for g, idx in rec_groups.items():
            h = groups.get(g, [])
            for k, i in enumerate(idx):
                if len(h) == len(idx):
                    ties.append((i, [h[k]] + [t for j, t in enumerate(h) if j != k], True))
                else:
                    ties.append((i, h, False))
        return ties

    def check_record(self, name, case, rec, call, out, range_on, figures, dump, step):
        """Compares the tied record's tensors with the held ones. Python's argument order is
        not always ATen's (F.batch_norm passes running_mean before weight, aten::batch_norm
        the other way; torch.where(cond, x, y) is OpInfo's where(x, cond, y); the reflected
        __r*__ ops swap their operands): among the held tensors of one dtype and shape, the
        one in the same position is tried first, then the others, and a recorded tensor is
        tied to the first that it matches in every statistic (counted as tied by value when
        that is not the positional one). A recorded tensor that matches none of them is a
        failure, reported against the positional candidate; a wrongly ordered argument list
        whose tensors are each recorded correctly is not detected."""
        torch, np = self.torch, self.np
        figures["records_checked"] += 1
        figures["tied_ops"].add(case.label)
        ins = rec.get("in", [])
        outs = rec.get("out", [])
        # Inputs as they were before the op (an op that writes its input is given a fresh
        # copy of the pristine call, which is what the record's input describes).
        held_in = tensors_of(torch, case.pristine if case.mutating else call)
        where = f"record {rec['op']}.{rec.get('call', 0)}.{rec.get('dir', 'forward')} (step {step})"
        grows = case.op.name in REGROW_OPS
        rec_uninit = rec.get("op", "").split("::")[-1] in UNINITIALIZED_OPS
        expected = {}
        for side, objs, held in (("in", ins, held_in), ("out", outs, tensors_of(torch, out))):
            for i, cands, positional in self.tie(objs, held):
                obj = objs[i]
                chosen, first_diffs, first_unwritten, first_count = None, None, False, 0
                for rank, t in enumerate(cands):
                    # The record's own op counts too: a Python function that hands back
                    # torch.empty(0) (2.6's signal.windows.* for M = 0) is an allocation op.
                    unwritten = side == "out" and (case.uninit or rec_uninit or (
                        grows and t.numel() > tensors_of(torch, case.pristine)[0].numel()))
                    if (side == "in" and name == "overflow_check" and case.mutating
                            and not any(obj.get(k, 0) for k in
                                        ("zero", "neg", "pos", "nan", "pinf", "ninf"))):
                        # overflow_check records an argument the op writes without its
                        # values (they are gone once the op is found to be an origin):
                        # src/probe/capture/observer_overflow.cpp.
                        unwritten = True
                    if id(t) not in expected:
                        expected[id(t)] = Expected.of(torch, np, t)
                    scratch = collections.Counter()
                    diffs = compare_tensor(obj, expected[id(t)], scratch, range_on, unwritten)
                    if rank == 0:
                        first_diffs, first_unwritten = diffs, unwritten
                        first_count = scratch["statistics"]
                    if not diffs:
                        chosen = (t, unwritten, scratch, rank)
                        break
                if chosen is None and not positional:
                    figures["tensors_not_tied"] += 1
                    continue
                figures["tensors_checked"] += 1
                if chosen is None:
                    figures["statistics"] += first_count
                    self.fail(figures, case, name, "statistics differ",
                              f"{where} {side}[{i}]: " + "; ".join(first_diffs), cands[0])
                    t, unwritten = cands[0], first_unwritten
                else:
                    t, unwritten, counted, rank = chosen
                    figures["statistics"] += counted["statistics"]
                    figures["mean_not_comparable"] += counted["mean_not_comparable"]
                    if rank > 0 or not positional:
                        figures["tensors_tied_by_value"] += 1
                if CONFIGS[name]["task"] == "tensor" and not unwritten:
                    self.check_saved(name, case, rec, side, i, t, dump, step, figures)

    def check_saved(self, name, case, rec, side, i, t, dump, step, figures):
        """The tensor task's file of this argument holds its values bit for bit (BFloat16 is
        written as float32, exactly)."""
        import zstandard
        torch, np = self.torch, self.np
        rname = f"{rec['op']}.{rec.get('call', 0)}.{rec.get('dir', 'forward')}"
        path = os.path.join(dump, "rank0", "tensors", f"step{step}", f"{rname}.{side}{i}.npy.zst")
        if t.dtype == getattr(torch, "complex32", None):
            # NumPy has no complex32: such tensors are not written (docs/dump-format.md).
            figures["skips"]["ComplexHalf tensor: no .npy (NumPy lacks the dtype)"] += 1
            return
        if not os.path.exists(path):
            self.fail(figures, case, name, "tensor not saved", path)
            return
        with open(path, "rb") as f:
            raw = zstandard.ZstdDecompressor().stream_reader(f).read()
        arr = np.load(io.BytesIO(raw), allow_pickle=False)
        v = t.detach()
        if v.is_conj():
            v = v.resolve_conj()
        if hasattr(v, "is_neg") and v.is_neg():
            v = v.resolve_neg()
        if v.dtype == torch.bfloat16:
            v = v.to(torch.float32)
        want = v.contiguous().numpy()
        figures["saved_checked"] += 1
        if (arr.dtype != want.dtype or arr.shape != want.shape
                or arr.tobytes() != want.tobytes()):
            self.fail(figures, case, name, "saved tensor differs",
                      f"{path}: {arr.dtype}{arr.shape} vs {want.dtype}{want.shape}", t)

    def check_overflow(self, name, case, call, out, recs, figures):
        """overflow_check: a single-op step whose tensor inputs are finite and whose output
        is not (and is no view) must be recorded; a recorded op must be such an origin."""
        torch = self.torch
        for r in recs:
            bad_in = any(o.get("nan", 0) + o.get("pinf", 0) + o.get("ninf", 0)
                         for o in r.get("in", []) if "dtype" in o)
            bad_out = any(o.get("nan", 0) + o.get("pinf", 0) + o.get("ninf", 0)
                          for o in r.get("out", []) if "dtype" in o)
            figures["overflow_records"] += 1
            if bad_in or not bad_out:
                self.fail(figures, case, name, "not an origin",
                          f"{r['op']}: inputs non-finite {bad_in}, outputs non-finite {bad_out}")
        if call is None or out is None:
            return
        held_in = tensors_of(torch, case.pristine if case.mutating else call)
        held_out = tensors_of(torch, out)
        def nonfinite(t):
            if not (t.is_floating_point() or t.is_complex()) or t.layout != torch.strided:
                return False
            v = torch.view_as_real(t.detach().resolve_conj()) if t.is_complex() else t.detach()
            return not bool(torch.isfinite(v).all())
        if (getattr(case, "single", False) and not case.uninit
                and case.op.name not in REGROW_OPS
                and not any(nonfinite(t) for t in held_in)
                and any(nonfinite(t) and not t._is_view() for t in held_out)
                and not any(isinstance(x, float) and not math.isfinite(x)
                            for x in leaves(torch, call))):
            figures["overflow_expected"] += 1
            if not recs:
                self.fail(figures, case, name, "origin not recorded",
                          "finite inputs, non-finite output, no overflow record")

    # ---- driver ----

    def run(self):
        chunk = 8 if self.mode == "bounded" else 2
        ops = self.job["ops"]
        for start in range(0, len(ops), chunk):
            part = ops[start:start + chunk]
            figures = new_figures()
            t0 = time.time()
            cases = []
            for oi in part:
                self.progress.write(f"PREP {oi}|{op_label(self.op_db[oi])}\n")
                cases += self.cases_of(oi, figures)
            cases = [c for c in cases if c.key("plain") not in self.exclude]
            for c in cases:
                self.progress.write(f"RUN {c.key('plain')}\n")
                self.prepare(c, figures)
            figures["cases"] = len(cases)
            figures["nan_inf_cases"] = sum(c.variant == "nan_inf" for c in cases)
            figures["grad_cases"] = sum(c.variant == "grad" for c in cases)
            figures["ops_run"] = sorted({c.label for c in cases})
            figures["dtypes"] = sorted({c.dtype for c in cases})
            for name in CONFIGS:
                self.run_config(name, cases, figures)
            figures["seconds"] = time.time() - t0
            figures["tied_ops"] = sorted(figures["tied_ops"])
            self.progress.write("DONE " + json.dumps({"ops": part, "figures": figures}) + "\n")
        self.progress.close()


def new_figures():
    return {
        "cases": 0, "nan_inf_cases": 0, "grad_cases": 0, "runs": 0, "outputs_compared": 0, "raised_same": 0,
        "records_checked": 0, "tensors_checked": 0, "statistics": 0, "tensors_not_tied": 0,
        "records_nested": 0, "saved_checked": 0, "tensors_tied_by_value": 0, "records_backward": 0,
        "mean_not_comparable": 0, "outputs_nan_payload": 0, "overflow_records": 0,
        "overflow_expected": 0, "replays_checked": 0, "op_dtypes_unsupported": 0,
        "not_tied": collections.Counter(), "skips": collections.Counter(), "failures": [],
        "tied_ops": set(), "ops_run": set(), "dtypes": set(), "seconds": 0.0,
    }


def merge(total, f):
    for k, v in f.items():
        if k == "failures":
            total[k].extend(v)
        elif k in ("not_tied", "skips"):
            total[k].update(v)
        elif k in ("tied_ops", "ops_run", "dtypes"):
            total[k] |= set(v)
        else:
            total[k] += v


# ============================== the driver ==============================

def _worker_main(job_path):
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    w = Worker(job)
    skip = set(job.get("skip_ops", []))
    job["ops"] = [o for o in job["ops"] if o not in skip]
    w.run()


def _key_fields(key):
    oi, label, dtype, sample, variant, config = key.split("|")
    return {"op": label, "dtype": dtype, "sample": int(sample), "variant": variant,
            "config": config}


class Lane:
    """One worker process at a time over a list of ops; restarted after a crash or hang,
    skipping the case that killed it."""

    def __init__(self, index, ops, mode, workdir):
        self.index, self.ops, self.mode, self.workdir = index, list(ops), mode, workdir
        self.exclude, self.skip_ops = [], []
        self.proc, self.starts = None, 0
        self.progress = os.path.join(workdir, f"lane{index}.progress")
        self.log = os.path.join(workdir, f"lane{index}.stderr")
        self.offset = 0
        self.last_key, self.last_prep = None, None

    def start(self):
        self.starts += 1
        self.started_at = time.time()
        dump_root = os.path.join(self.workdir, f"lane{self.index}-dumps")
        shutil.rmtree(dump_root, ignore_errors=True)
        os.makedirs(dump_root)
        job = {"ops": self.ops, "mode": self.mode, "exclude": self.exclude,
               "skip_ops": self.skip_ops, "progress": self.progress, "dump_root": dump_root}
        path = os.path.join(self.workdir, f"lane{self.index}.job.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(job, f)
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        for k in ("PRECPROBE_CONFIG", "PRECPROBE_DISABLE"):  # they would replace CONFIGS
            env.pop(k, None)
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--worker", path],
                stdout=subprocess.DEVNULL, stderr=err, env=env, start_new_session=True)
        self.last_key = self.last_prep = None

    def read(self, total):
        """New progress lines: merges finished chunks, remembers what runs now."""
        if not os.path.exists(self.progress):
            return
        with open(self.progress, encoding="utf-8") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind("\n")
        if end < 0:
            return
        self.offset += len(data[:end + 1].encode("utf-8"))
        for line in data[:end].split("\n"):
            kind, _, rest = line.partition(" ")
            if kind == "DONE":
                done = json.loads(rest)
                merge(total, done["figures"])
                self.ops = [o for o in self.ops if o not in set(done["ops"])]
                self.last_key = self.last_prep = None
            elif kind == "RUN":
                self.last_key = rest
            elif kind == "PREP":
                self.last_prep, self.last_key = rest, None

    def stderr_tail(self, n=12):
        try:
            with open(self.log, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log) - 4000))
                lines = [ln for ln in f.read().decode("utf-8", "replace").splitlines()
                         if not ln.startswith(("precprobe: glibc malloc set",
                                               "precprobe: step "))]
            return "\n".join(lines[-n:])
        except OSError:
            return ""

    def died(self, total, why):
        """The worker ended with `why` (a signal, an exit status, a hang) before finishing its
        ops: the case it was running becomes a failure (or, when it died without the debugger
        or in PyTorch's sample generation, a skip), and the lane goes on after it."""
        tail = self.stderr_tail()
        if self.last_key:
            f = _key_fields(self.last_key)
            if f["config"] == "plain" and "died with SIG" in why:
                total["skips"][f"crashes without the debugger ({why})"] += 1
            elif f["config"] == "plain":
                f.update(what="sweep error", detail=f"the worker {why}; stderr: {tail}")
                total["failures"].append(f)
            else:
                f.update(what="crash" if "hang" not in why else "hang",
                         detail=f"the worker {why}; stderr: {tail}")
                total["failures"].append(f)
            self.exclude.append(self.last_key)
        elif self.last_prep:
            oi, label = self.last_prep.split("|", 1)
            oi = int(oi)
            if "died with SIG" in why:
                total["skips"][f"sample generation crashed ({why})"] += 1
            else:  # an exception the sweep did not catch: its own error
                total["failures"].append({
                    "op": label, "dtype": "?", "sample": -1, "variant": "?", "config": "prep",
                    "what": "sweep error", "detail": f"the worker {why}; stderr: {tail}"})
            self.skip_ops.append(oi)
            self.ops = [o for o in self.ops if o != oi]
        else:
            total["failures"].append({"op": "?", "dtype": "?", "sample": -1, "variant": "?",
                                      "config": "?", "what": "worker died",
                                      "detail": f"{why}; stderr: {tail}"})
            self.ops = []


def run_sweep(mode="bounded", max_ops=None, only=None, jobs=2, hang_seconds=None,
              workdir=None):
    """Runs the sweep over op_db in `jobs` worker processes; returns the summary dict (see
    report())."""
    t0 = time.time()
    import torch
    op_db = load_op_db()
    indices = [i for i, op in enumerate(op_db)
               if not only or op.name in only or op_label(op) in only]
    if max_ops is not None:
        indices = indices[:max_ops]
    total = new_figures()
    total["failures"] = []
    own_dir = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="precprobe-opinfo-")
    hang_seconds = hang_seconds or (300 if mode == "bounded" else 1200)
    # Batches of ops, interleaved (neighbours in op_db are alike: linalg, fft, pooling...),
    # taken from a queue by `jobs` workers at a time: a heavy batch does not hold the others
    # up. A bounded sweep makes 2 per worker; a full one batches of 10 ops (a worker starts
    # in about 3 s: torch and op_db).
    n = max(1, min(len(indices), jobs * 2 if mode == "bounded" else -(-len(indices) // 10)))
    lanes = [Lane(k, indices[k::n], mode, workdir) for k in range(n)]
    lanes = [ln for ln in lanes if ln.ops]
    pending = collections.deque(lanes)
    running = []
    try:
        while pending or running:
            while pending and len(running) < jobs:
                ln = pending.popleft()
                ln.start()
                running.append(ln)
            time.sleep(0.5)
            for ln in list(running):
                rc = ln.proc.poll()
                ln.read(total)
                if rc is None:
                    last = max(ln.started_at, os.path.getmtime(ln.progress)
                               if os.path.exists(ln.progress) else 0)
                    if time.time() - last <= hang_seconds:
                        continue
                    os.killpg(ln.proc.pid, signal.SIGKILL)
                    ln.proc.wait()
                    ln.read(total)
                    why = f"made no progress for {hang_seconds:.0f} s (hang)"
                elif ln.ops:
                    why = (f"died with {signal.Signals(-rc).name}" if rc < 0
                           else f"exited with status {rc}")
                else:
                    why = None
                ln.proc = None
                if why:
                    ln.died(total, why)
                if ln.ops:
                    ln.start()  # after the case that killed it
                else:
                    running.remove(ln)
    finally:
        for ln in running:
            if ln.proc is not None and ln.proc.poll() is None:
                os.killpg(ln.proc.pid, signal.SIGKILL)
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    total["mode"] = mode
    total["torch"] = torch.__version__
    total["ops_in_db"] = len(op_db)
    total["ops_selected"] = len(indices)
    total["configs"] = list(CONFIGS)
    total["wall_seconds"] = time.time() - t0
    total["worker_starts"] = sum(ln.starts for ln in lanes)
    for k in ("tied_ops", "ops_run", "dtypes"):
        total[k] = sorted(total[k])
    total["not_tied"] = dict(total["not_tied"])
    total["skips"] = dict(total["skips"])
    return total


def triage(s):
    """(new failures, ids of the known bugs seen, ids of the known bugs not seen)."""
    new = [f for f in s["failures"] if known_bug(f) is None]
    seen = {known_bug(f) for f in s["failures"]} - {None}
    return new, seen, [b["id"] for b in KNOWN_BUGS if b["id"] not in seen]


def report(s):
    """The figures, as text."""
    new, seen, _ = triage(s)
    lines = [
        f"opinfo sweep ({s['mode']}), PyTorch {s['torch']}: {len(s['ops_run'])} ops covered "
        f"of {s['ops_selected']} selected ({s['ops_in_db']} in op_db), {s['cases']} samples "
        f"({s['cases'] - s['nan_inf_cases'] - s['grad_cases']} as generated, "
        f"{s['nan_inf_cases']} with NaN/+Inf/-Inf planted, {s['grad_cases']} with "
        f"requires_grad and a backward pass)",
        f"  dtypes: {', '.join(s['dtypes'])}; {len(s['configs'])} configurations: "
        f"{', '.join(s['configs'])}",
        f"  runs under the debugger: {s['runs']}; outputs compared bitwise: "
        f"{s['outputs_compared']} (of them {s['outputs_nan_payload']} equal but for the sign or "
        f"payload of NaNs); same exception with and without: {s['raised_same']}",
        f"  records checked: {s['records_checked']} ({len(s['tied_ops'])} ops), tensors: "
        f"{s['tensors_checked']}, statistics: {s['statistics']}; saved tensors compared: "
        f"{s['saved_checked']}; overflow origins expected: {s['overflow_expected']}, "
        f"records: {s['overflow_records']}; replays checked: {s['replays_checked']}",
        f"  not tied: " + (", ".join(f"{k}: {v}" for k, v in sorted(s["not_tied"].items()))
                           or "none") + f"; tensors not tied in tied records: "
        f"{s['tensors_not_tied']}, tied by value: {s['tensors_tied_by_value']}; nested "
        f"records (L2): {s['records_nested']}; backward records (grad samples): "
        f"{s['records_backward']}; means not comparable (sum |x| > DBL_MAX): "
        f"{s['mean_not_comparable']}",
        f"  op x dtype pairs not supported on the CPU: {s['op_dtypes_unsupported']}",
        "  skipped: " + (", ".join(f"{k}: {v}" for k, v in sorted(s["skips"].items()))
                         or "none"),
        f"  failures: {len(s['failures'])}, of them {len(s['failures']) - len(new)} from the "
        f"known bugs ({', '.join(sorted(seen)) or 'none'}), {len(new)} new",
    ]
    for bug in KNOWN_BUGS:
        hits = [f for f in s["failures"] if known_bug(f) == bug["id"]]
        if hits:
            cases = sorted({f"{f['op']}/{f['dtype']}" for f in hits})
            lines.append(f"    known bug {bug['id']}: {len(hits)} failures ({', '.join(cases)}; "
                         f"--json lists them): {bug['what']}")
    for f in new[:200]:
        lines.append(f"    {f['op']} {f['dtype']} sample {f['sample']} {f['variant']} "
                     f"[{f['config']}] {f['what']}: {f['detail']}")
    if len(new) > 200:
        lines.append(f"    ... {len(new) - 200} more (--json lists all)")
    lines.append(f"  wall time {s['wall_seconds']:.1f} s, {s['worker_starts']} worker "
                 f"process(es)")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--bounded", action="store_true", help="one sample per op and dtype (default)")
    g.add_argument("--full", action="store_true", help="every sample")
    ap.add_argument("--ops", type=int, help="only the first N ops of op_db")
    ap.add_argument("--only", action="append", help="only this op (name or name.variant)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--json", help="write the figures and failures here")
    ap.add_argument("--hang-seconds", type=float, help="a worker silent this long is killed")
    ap.add_argument("--expect-known", action="store_true",
                    help="exit 0 when the failures are exactly those of KNOWN_BUGS")
    ap.add_argument("--workdir", help="keep the workers' dumps, progress and stderr here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        _worker_main(a.worker)
        return 0
    if a.workdir:
        os.makedirs(a.workdir, exist_ok=True)
    s = run_sweep("full" if a.full else "bounded", a.ops, a.only, a.jobs, a.hang_seconds,
                  a.workdir)
    print(report(s), flush=True)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(s, f, indent=1, default=str)
    if a.expect_known:
        new, _, gone = triage(s)
        for g in gone:
            print(f"known bug {g} did not occur: fixed? remove it from KNOWN_BUGS")
        return 1 if new or (gone and not a.only and not a.ops) else 0
    return 1 if s["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
