"""compare: two dumps set side by side, op by op, from Python: the verdict of
`precprobe compare A B --json` (the same core function, the same options), as a dict."""

import json
import os

from . import _precprobe


def read_ops(dump, rank=None):
    """The op records of `dump` (a dump directory or one rank directory), in file order,
    each as the dict of its JSON line (docs/dump-format.md, "ops.jsonl.zst"), whichever
    encoding the dump holds (ops.bin.zst, the default, or ops.jsonl.zst). `rank`: only that
    rank's records. Raises precprobe.Error naming the dump that cannot be read."""
    text = _precprobe._read_ops(os.fsdecode(os.fspath(dump)), None if rank is None else int(rank))
    return [json.loads(line) for line in text.splitlines() if line]


def compare(a, b, *, first=False, exact=False, by=None, step=None, rank=None, rtol=0.0,
            noise_factor=10.0):
    """Compares dump `a` (the reference, e.g. the Python original's) with dump `b` (e.g. its
    LibTorch port) and returns what `precprobe compare a b --json` prints, with the same
    flags: `first` (--first: the first divergent op), `exact` (--exact: bitwise identity),
    `by="module"` (--by module: a verdict per module, key "modules"), `step`, `rank`, `rtol`,
    `noise_factor`. Keys include "found", "step", "seq", "name", "op", "module", "param",
    "cause" (the first divergent op) and "divergent_ops"; docs/cli.md documents them all.
    Raises precprobe.Error naming the dump that cannot be read."""
    if by not in (None, "op", "module"):
        raise ValueError(f"precprobe.compare: by must be None, 'op' or 'module', not {by!r}")
    text = _precprobe._compare(os.fsdecode(os.fspath(a)), os.fsdecode(os.fspath(b)), bool(first),
                               bool(exact), by == "module",
                               None if step is None else int(step),
                               None if rank is None else int(rank), float(rtol),
                               float(noise_factor))
    return json.loads(text)
