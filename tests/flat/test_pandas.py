"""Runs the pandas recipe of docs/dump-format.md ("Flat tables without precprobe") as the
page shows it, on a format_version 2 dump with NaN and +-Inf, and checks its tables against
`precprobe export --format jsonl` (precprobe's own reader) on the same dump.

usage: test_pandas.py DUMP_FORMAT_MD DUMP_DIR PRECPROBE_CLI
"""
import json
import math
import os
import re
import subprocess
import sys

try:
    import pandas as pd
    import zstandard  # noqa: F401  (the recipe imports it)
except ImportError as e:
    sys.exit(f"flat.pandas needs pandas and zstandard: apt-get install python3-pandas "
             f"python3-zstandard (scripts/install-deps.sh installs them): {e}")

doc, dump, cli = sys.argv[1:4]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED:", what)


# The recipe: the python block after the "tested: tests/flat/test_pandas.py" marker.
text = open(doc, encoding="utf-8").read()
m = re.search(r"<!-- tested: tests/flat/test_pandas.py -->\s*```python\n(.*?)```", text, re.S)
if not m:
    sys.exit(f"{doc}: no python block after <!-- tested: tests/flat/test_pandas.py -->")
recipe = m.group(1)
# Everything up to the example calls at the end (they read dump/rank0/...).
definitions = recipe[: recipe.index("\nt = tensor_table(")]
ns = {}
exec(compile(definitions, doc, "exec"), ns)
rank0 = os.path.join(dump, "rank0")

# --- ops: one row per tensor -------------------------------------------------------------
t = ns["tensor_table"](os.path.join(rank0, "ops.jsonl.zst"))
for col in ["min", "max", "mean", "norm"]:
    check(str(t[col].dtype) == "float64", f"{col} is float64, not {t[col].dtype}")
for col in ["step", "call", "index", "numel", "nan", "pinf", "ninf", "zero", "neg", "pos"]:
    check(str(t[col].dtype) == "int64", f"{col} is int64, not {t[col].dtype}")
check(int((t["nan"] > 0).sum()) > 100, "the dump has NaN tensors")
check(int(t["max"].isna().sum()) > 100, "undefined statistics are NaN")
check(int((t["pinf"] > 0).sum()) > 0, "the dump has +Inf tensors")
# Finite elements are zero + neg + pos (0 also for tensors the probe did not summarise,
# e.g. the uninitialized output of aten::empty).
check(bool((t["max"].isna() == (t["zero"] + t["neg"] + t["pos"] == 0)).all()),
      "max is NaN exactly where no finite element was counted")

export = subprocess.run([cli, "export", dump, "--format", "jsonl"], check=True,
                        capture_output=True, text=True).stdout
rows = [json.loads(line) for line in export.splitlines()]
rows = [r for r in rows if r["rank"] == 0 and r["dtype"]]
check(len(rows) == len(t), f"{len(t)} tensor rows, precprobe export has {len(rows)}")


def same(a, b):
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None or (isinstance(b, float) and math.isnan(b))
    return a == b


mismatches = 0
for (_, row), r in zip(t.iterrows(), rows):
    for col in ["step", "op", "call", "dir", "io", "index", "dtype", "numel", "nan", "pinf",
                "ninf", "zero", "neg", "pos", "min", "max", "mean", "norm", "param"]:
        if not same(row[col], r[col]):
            mismatches += 1
            if mismatches < 10:
                print(f"row {r['step']} {r['name']} {r['io']}{r['index']}: {col} pandas "
                      f"{row[col]!r} export {r[col]!r}")
check(mismatches == 0, f"{mismatches} cells differ from precprobe export")

finite_max = [r["max"] for r in rows if r["max"] is not None]
check(t["max"].max() == max(finite_max),
      f"max over max: pandas {t['max'].max()!r}, precprobe {max(finite_max)!r}")
check(t["max"].max() == 1.7e308, "the extra record's max 1.7e308 is the largest")

# --- grads, scaler, events: named non-finite values come back --------------------------
g = ns["record_table"](os.path.join(rank0, "grads.jsonl.zst"))
for col in ["gn", "gmax", "gmean", "wn", "ur"]:
    check(str(g[col].dtype) == "float64", f"grads {col} is float64, not {g[col].dtype}")
extra = g[g["gn_nonfinite"].notna()]
check(len(extra) == 1, "one grad record names its non-finite values")
if len(extra) == 1:
    e = extra.iloc[0]
    check(e["gn"] == math.inf and e["gmax"] == math.inf and e["wn"] == -math.inf,
          f"grads +-inf restored: {e['gn']} {e['gmax']} {e['wn']}")
    check(math.isnan(e["gmean"]) and math.isnan(e["ur"]), "grads NaN restored")
check(g["gn"].drop(extra.index).notna().all(), "the probe's grad norms are finite numbers")

s = ns["record_table"](os.path.join(rank0, "scaler.jsonl.zst"))
for col in ["gn_scaled", "gn", "scale", "scale_next"]:
    check(str(s[col].dtype) == "float64", f"scaler {col} is float64, not {s[col].dtype}")
check(s["scale"].max() == math.inf and s["scale_next"].min() == -math.inf,
      "scaler +-inf restored")

ev = ns["record_table"](os.path.join(rank0, "events.jsonl.zst"))
check(str(ev["value"].dtype) == "float64", f"events value is float64, not {ev['value'].dtype}")
loss = ev[ev["name"] == "loss"]["value"]
check(int(loss.isna().sum()) == 2, "two NaN losses: the probe's overflow step and the extra one")
check(list(ev["value_nonfinite"].dropna()) == ["nan", "nan"], "NaN losses are named")

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print(f"ok: {len(t)} tensor rows, {len(g)} grads, {len(s)} scaler, {len(ev)} events")
