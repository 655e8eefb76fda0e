"""Every op PyTorch tests, under every task: the bounded sweep of
opinfo_sweep.py — PyTorch's OpInfo database (op_db), the first sample of every op for each
dtype it supports among float32, float64, bfloat16, float16, int64, bool and complex64,
the same samples with NaN/+Inf/-Inf planted (floating and complex dtypes) and with
requires_grad plus a backward pass (float32), each run without the debugger and under seven
configurations (statistics L1/L2 x asynchronous/synchronous statistics, overflow_check, the
tensor task, "record": "on_anomaly").

Checked there, per run: no crash (worker processes), the outputs bitwise the same with and
without the debugger, every statistic of the records tied to the op's tensors equal to a
float64 recomputation (counts, min, max, hist, range exactly; mean and norm within the bound
that the dump's float32 rounding allows), the tensor task's files bit for bit, the
overflow_check origins, the on_anomaly replays. Here: the figures are printed (ops, samples,
dtypes, records, statistics), they are as large as a sweep of op_db must give, and the only
failures are those of the precprobe bugs listed in opinfo_sweep.KNOWN_BUGS — each of which
must still occur (once fixed, its entry goes). The whole sweep (every sample) is the ctest
entry opinfo.full (labels sweep, slow: not part of the default run)."""

import numpy as np
import pytest
import torch

import opinfo_sweep
import precprobe
from conftest import read_stream


@pytest.fixture(scope="module")
def sweep():
    s = opinfo_sweep.run_sweep("bounded", jobs=2)
    return s


def test_the_figures_are_printed_and_cover_op_db(sweep, capsys):
    """The sweep reaches nearly every op of op_db (620 of 621 on 1.13: the one left,
    nn.functional.batch_norm.without_cudnn, has no CPU dtype), every dtype and
    configuration, and checks statistics of records tied to most ops. Lower bounds, so that
    PyTorch 2.x's larger op_db passes too; on 1.13: 5 013 samples (1 501 with NaN/Inf, 489
    with a backward pass), 35 090 runs, 34 194 outputs compared, 24 282 records of 571 ops
    and 902 655 statistics checked, 11 758 saved tensors, 1 391 replays, 78 origins."""
    with capsys.disabled():
        print("\n" + opinfo_sweep.report(sweep))
    assert len(sweep["ops_run"]) >= 500
    assert len(sweep["ops_run"]) >= 0.9 * sweep["ops_in_db"]
    assert sweep["dtypes"] == sorted(
        ["float32", "float64", "bfloat16", "float16", "int64", "bool", "complex64"])
    assert sweep["configs"] == ["L1-async", "L1-sync", "L2-async", "L2-sync",
                                "overflow_check", "tensor", "on_anomaly"]
    assert sweep["cases"] >= 4000
    assert sweep["nan_inf_cases"] >= 1000
    assert sweep["grad_cases"] >= 300
    # every case ran under every configuration, but the few a crash took out
    assert sweep["runs"] >= 7 * sweep["cases"] - 7
    assert sweep["outputs_compared"] >= 25000
    assert sweep["records_checked"] >= 15000
    assert len(sweep["tied_ops"]) >= 450
    assert sweep["statistics"] >= 500000
    assert sweep["saved_checked"] >= 5000
    assert sweep["replays_checked"] >= 500
    assert sweep["overflow_expected"] >= 20
    assert sweep["records_backward"] >= 10000


def test_no_failure_but_the_known_precprobe_bugs(sweep):
    """Every failure (a crash, outputs that differ, a statistic that differs from its
    recomputation, a saved tensor that differs, a missing origin or replay) is one of
    KNOWN_BUGS; the message lists the others with op, dtype, sample, configuration and what
    differed."""
    new, _, _ = opinfo_sweep.triage(sweep)
    assert new == [], "\n".join(
        f"{f['op']} {f['dtype']} sample {f['sample']} {f['variant']} [{f['config']}] "
        f"{f['what']}: {f['detail']}" for f in new)


def test_the_known_bugs_still_occur(sweep):
    """Each KNOWN_BUGS entry still fails somewhere: when one no longer does, precprobe was
    fixed and the entry must go, so that the failure it hid cannot come back unseen."""
    _, _, gone = opinfo_sweep.triage(sweep)
    assert gone == [], f"fixed? remove from opinfo_sweep.KNOWN_BUGS: {gone}"


def test_the_recomputation_follows_the_dump_format_and_the_comparison_is_not_vacuous(dump_dir):
    """The sweep's own yardstick: Expected.of gives the documented definitions (complex as
    2*numel components, NaN/Inf counted apart from the finite statistics, Bool as 0/1, the
    integer histogram), and compare_tensor rejects a mean 8 float32 ulps off, a count off by
    one and a missing range, while it accepts the record precprobe writes for that tensor."""
    inf, nan = float("inf"), float("nan")
    e = opinfo_sweep.Expected.of(torch, np, torch.tensor([1 + 2j, -3j, complex(nan, 0),
                                                          complex(inf, -inf)]))
    assert (e.dtype, e.numel, e.n) == ("ComplexFloat", 4, 5)
    assert e.counts == {"nan": 1, "pinf": 1, "ninf": 1, "zero": 2, "neg": 1, "pos": 2}
    assert (e.min, e.max, e.mean, e.norm ** 2) == (-3.0, 2.0, 0.0, 14.0)
    assert e.range == [[0, 1], [1, 2]]  # |1| in [1, 2); |2|, |-3| in [2, 4)
    b = opinfo_sweep.Expected.of(torch, np, torch.tensor([True, False, True]))
    assert b.counts["zero"] == 1 and b.counts["pos"] == 2 and (b.min, b.max) == (0.0, 1.0)
    assert b.hist is None and b.range is None
    i = opinfo_sweep.Expected.of(torch, np, torch.tensor([5, 7, 5, -1]))
    assert i.hist == [[-1, 1], [5, 2], [7, 1]] and i.hist_applies
    wide = opinfo_sweep.Expected.of(torch, np, torch.tensor([0, 5000]))
    assert not wide.hist_applies  # a span of 1024 or more: no hist

    x = torch.tensor([0.1, -2.5, 3.25, 0.0, nan], dtype=torch.float32)
    dbg = precprobe.PrecisionDebugger(dump_path=dump_dir, async_stats=False,
                                      statistics={"range": "all"})
    dbg.start()
    x.clone()
    dbg.stop()
    (rec,) = [r["in"][0] for r in read_stream(dump_dir, "ops") if r["op"] == "aten::clone"]
    assert rec["range"] == [[-4, 1], [1, 2]]  # 0.1 in [2^-4, 2^-3); 2.5, 3.25 in [2, 4)
    want = opinfo_sweep.Expected.of(torch, np, x)
    figures = {"statistics": 0}
    assert opinfo_sweep.compare_tensor(rec, want, figures, True) == []
    assert figures["statistics"] == 15  # dtype shape numel rg, 6 counts, 4 statistics, range
    off = dict(rec, mean=rec["mean"] * (1 + 8 * 2.0 ** -23))
    assert [d.split(":")[0] for d in opinfo_sweep.compare_tensor(off, want, figures, True)] == [
        "mean"]
    assert opinfo_sweep.compare_tensor(dict(rec, pos=3), want, figures, True)[0].startswith(
        "pos: recorded 3, recomputed 2")
    no_range = {k: v for k, v in rec.items() if k != "range"}
    assert opinfo_sweep.compare_tensor(no_range, want, figures, True)[0].startswith("range")
