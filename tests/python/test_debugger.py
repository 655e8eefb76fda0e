"""precprobe.PrecisionDebugger on PyTorch programs: what it records (against float64
recomputations of the tensors), parameter names, dropout forcing, scopes, scalars, and the
errors a Python program can cause (none of which may crash the interpreter)."""

import io
import json
import math
import os

import pytest
import zstandard
import torch
import torch.nn.functional as F
from torch import nn

import precprobe
from conftest import read_meta, read_stream, run_cli


def stats64(t):
    """The statistics a record holds, from the tensor in float64: counts, and min, max, mean
    and L2 norm over the finite values."""
    x = t.detach().to(torch.float64).reshape(-1)
    finite = x[torch.isfinite(x)]
    out = {
        "numel": x.numel(),
        "nan": int(torch.isnan(x).sum()),
        "pinf": int((x == math.inf).sum()),
        "ninf": int((x == -math.inf).sum()),
        "zero": int((x == 0).sum()),
        "neg": int((finite < 0).sum()),
        "pos": int((finite > 0).sum()),
    }
    if finite.numel():
        out.update(min=float(finite.min()), max=float(finite.max()),
                   mean=float(finite.mean()), norm=float(finite.norm()))
    return out


def assert_stats(rec, t, what):
    want = stats64(t)
    assert rec["dtype"] == "Float", what
    assert rec["shape"] == list(t.shape), what
    for k in ("numel", "nan", "pinf", "ninf", "zero", "neg", "pos", "min", "max"):
        assert rec[k] == want[k], f"{what}: {k} {rec[k]} vs {want[k]}"
    # mean and norm are written as their float32 rounding (docs/dump-format.md).
    for k in ("mean", "norm"):
        assert rec[k] == pytest.approx(want[k], rel=2e-7, abs=1e-30), f"{what}: {k}"


def config(dump, **kw):
    c = {"task": "statistics", "level": "L1", "dump_path": dump, "overwrite": True}
    c.update(kw)
    return c


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(5, 4)
        self.drop = nn.Dropout(0.5)
        self.fc2 = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


def test_records_hold_float64_statistics_of_the_tensors_and_parameter_names(dump_dir):
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(6, 5)
    x[0, 0] = math.inf
    x[1, 1] = math.nan
    x[2, 2] = 0.0
    with precprobe.PrecisionDebugger(config(dump_dir)) as dbg:
        dbg.start(net)
        h = net.fc1(x)
        r = torch.relu(h)
        dbg.step()
    ops = read_stream(dump_dir, "ops")
    lin = [o for o in ops if o["op"] == "aten::linear" and o["dir"] == "forward"]
    assert len(lin) == 1
    rec = lin[0]
    assert rec["step"] == 0 and rec["call"] == 0
    assert_stats(rec["in"][0], x, "linear input")
    assert_stats(rec["in"][1], net.fc1.weight, "fc1.weight")
    assert rec["in"][1]["param"] == "fc1.weight"
    assert rec["in"][2]["param"] == "fc1.bias"
    assert_stats(rec["out"][0], h, "linear output")
    relu = [o for o in ops if o["op"] == "aten::relu"][0]
    assert_stats(relu["out"][0], r, "relu output")
    assert read_meta(dump_dir)["state"] == "stopped"


def test_backward_and_optimizer_ops_are_recorded_with_the_gradients(dump_dir):
    torch.manual_seed(1)
    net = nn.Linear(3, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    x = torch.randn(4, 3)
    dbg = precprobe.PrecisionDebugger(config(dump_dir))
    dbg.start(net, opt)
    loss = net(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    grad_w = net.weight.grad.clone()
    opt.step()
    dbg.step()
    dbg.stop()
    ops = read_stream(dump_dir, "ops")
    dirs = {o["dir"] for o in ops}
    assert dirs == {"forward", "backward"}
    # The gradient accumulated into fc.weight: AccumulateGrad's incoming gradient.
    acc = [o for o in ops if o["dir"] == "backward" and "AccumulateGrad" in o["op"]]
    assert acc, [o["op"] for o in ops]
    w_acc = [o for o in acc if o["in"] and o["in"][0]["shape"] == [2, 3]]
    assert len(w_acc) == 1
    assert_stats(w_acc[0]["in"][0], grad_w, "weight gradient")
    grads = read_stream(dump_dir, "grads")
    assert {g["param"] for g in grads} == {"weight", "bias"}
    gw = [g for g in grads if g["param"] == "weight"][0]
    assert gw["gn"] == pytest.approx(float(grad_w.double().norm()), rel=1e-12)


def test_named_models_prefix_their_parameter_names(dump_dir):
    g, d = nn.Sequential(nn.Linear(2, 3)), nn.Sequential(nn.Linear(3, 1))
    opt_g = torch.optim.Adam(g.parameters())
    opt_d = torch.optim.Adam(d.parameters())
    dbg = precprobe.PrecisionDebugger(config(dump_dir))
    dbg.start({"G": g, "D": d}, [opt_g, opt_d])
    assert dbg.parameter_name(g[0].weight) == "G.0.weight"
    assert dbg.parameter_name(d[0].bias) == "D.0.bias"
    assert dbg.parameter_name(torch.zeros(1)) == ""
    d(g(torch.randn(2, 2))).sum().backward()
    dbg.step()
    dbg.stop()
    names = {a.get("param") for o in read_stream(dump_dir, "ops") for a in o.get("in", [])}
    assert {"G.0.weight", "G.0.bias", "D.0.weight", "D.0.bias"} <= names
    events = read_stream(dump_dir, "events")
    assert any(e["name"] == "check/optimizers" and e["value"] == 2 for e in events)


def test_dropout_is_forced_to_zero_for_modules_and_functional_calls(dump_dir):
    x = torch.randn(1000) + 3.0
    drop = nn.Dropout(0.5).train()
    dbg = precprobe.PrecisionDebugger(config(dump_dir))
    dbg.start(drop)
    assert torch.equal(drop(x), x)
    assert torch.equal(F.dropout(x, 0.5, training=True), x)
    assert torch.equal(torch.dropout(x, 0.9, True), x)
    x4 = x.reshape(2, 5, 10, 10)
    assert torch.equal(F.dropout2d(x4, 0.5, training=True), x4)
    assert torch.equal(F.alpha_dropout(x, 0.5, training=True), x)
    y = x.clone()
    F.dropout(y, 0.5, training=True, inplace=True)
    assert torch.equal(y, x)
    dbg.stop()
    assert (F.dropout(x, 0.5, training=True) == 0).sum() > 300  # random again after stop
    keep = precprobe.PrecisionDebugger(config(dump_dir, keep_dropout=True))
    keep.start()
    assert (F.dropout(x, 0.5, training=True) == 0).sum() > 300
    keep.stop()


def test_scopes_steps_and_scalars(dump_dir):
    dbg = precprobe.PrecisionDebugger(config(dump_dir))
    dbg.start()
    with precprobe.Scope("encoder"):
        assert precprobe.Scope.current_path() == "encoder"
        with precprobe.Scope("block1"):
            torch.ones(3).exp()
    torch.ones(3).neg()
    dbg.log_scalar("loss", 0.25)
    dbg.log_scalar("lr", torch.tensor(1e-3))
    dbg.step()
    torch.ones(2).sin()
    dbg.step()
    assert dbg.current_step == 2
    dbg.stop()
    ops = read_stream(dump_dir, "ops")
    by_op = {o["op"]: o for o in ops}
    assert by_op["aten::exp"]["scope"] == "encoder/block1"
    assert "scope" not in by_op["aten::neg"] or by_op["aten::neg"]["scope"] == ""
    assert by_op["aten::sin"]["step"] == 1
    events = {e["name"]: e for e in read_stream(dump_dir, "events")}
    assert events["loss"]["value"] == 0.25 and events["loss"]["step"] == 0
    assert events["lr"]["value"] == pytest.approx(1e-3)


def test_run_step_returns_what_fn_returns_and_propagates_its_exceptions(dump_dir):
    net = nn.Linear(2, 1)
    dbg = precprobe.PrecisionDebugger(config(dump_dir))
    dbg.start(net)
    loss = dbg.run_step(lambda: net(torch.ones(1, 2)).sum())
    assert isinstance(loss, torch.Tensor)
    pair = dbg.run_step(lambda: (net(torch.ones(1, 2)).sum(), torch.zeros(2)))
    assert isinstance(pair, tuple) and len(pair) == 2
    # As in C++: the step run_step ran stays open (a log_scalar after it belongs to it) until
    # the next run_step(), step() or stop(); step() ends that same step.
    assert dbg.current_step == 1
    dbg.step()
    assert dbg.current_step == 2

    def boom():
        raise ValueError("from the step")

    with pytest.raises(ValueError, match="from the step"):
        dbg.run_step(boom)
    with pytest.raises(TypeError, match="must return the loss tensor"):
        dbg.run_step(lambda: 3)
    with pytest.raises(TypeError):
        dbg.run_step(42)
    dbg.stop()


def test_misuse_raises_and_never_crashes(dump_dir, tmp_path):
    with pytest.raises(precprobe.Error, match="lvel"):
        precprobe.PrecisionDebugger(config(dump_dir, lvel="L1"))
    with pytest.raises(precprobe.Error, match="level"):
        precprobe.PrecisionDebugger(config(dump_dir, level="L7"))
    with pytest.raises(precprobe.Error, match="absent.json"):
        precprobe.PrecisionDebugger(str(tmp_path / "absent.json"))
    with pytest.raises(TypeError):
        precprobe.PrecisionDebugger(12)
    dbg = precprobe.PrecisionDebugger(config(dump_dir))
    dbg.stop()  # before start: nothing to do
    dbg.step()
    with pytest.raises(TypeError, match="torch.nn.Module"):
        dbg.start("not a model")
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        dbg.start(nn.Linear(1, 1), optimizer="sgd")
    with pytest.raises(TypeError):
        dbg.start({"G": nn.Linear(1, 1), 3: nn.Linear(1, 1)})
    with pytest.raises(precprobe.Error, match="contains a '.'"):
        dbg.start({"a.b": nn.Linear(1, 1)})
    assert not dbg.started
    net = nn.Linear(2, 2)
    dbg.start(net)
    second = precprobe.PrecisionDebugger(config(str(tmp_path / "other")))
    with pytest.raises(precprobe.Error, match="already started"):
        second.start()
    with pytest.raises(TypeError):
        dbg.log_scalar(1, 2.0)
    with pytest.raises(TypeError):
        dbg.observe_batch([1, 2])
    del net  # the debugger keeps the tensors it was given
    import gc
    gc.collect()
    dbg.step()
    torch.ones(2).add(1)
    dbg.step()
    dbg.stop()
    dbg.stop()
    second.start()  # the first one stopped: the second may start now
    second.stop()


def test_observe_batch_records_the_checklist_inputs(dump_dir):
    net = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3), nn.Dropout(0.1))
    dbg = precprobe.PrecisionDebugger(config(dump_dir))
    dbg.start(net)
    x = torch.randn(8, 3)
    y = torch.tensor([0, 1, 1, 2, 2, 2, 0, 1])
    dbg.observe_batch(x, y, epoch=0)
    net.eval()
    dbg.observe_batch(x, y, epoch=0)
    dbg.stop()
    ev = [e for e in read_stream(dump_dir, "events")]
    training = [e["value"] for e in ev if e["name"] == "check/batch/training"]
    stat = [e["value"] for e in ev if e["name"] == "check/batch/stat_modules_training"]
    assert training == [1, 0]
    assert stat == [2, 0]  # BatchNorm1d and Dropout, by their Python class names


def test_meta_and_config_of_a_python_run(dump_dir, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"task": "statistics", "level": "L2", "dump_path": "%s", "overwrite": true}'
                   % dump_dir)
    dbg = precprobe.PrecisionDebugger(cfg, step=[0])
    assert dbg.options["level"] == "L2"
    assert dbg.options["step"] == [0]
    dbg.start()
    torch.ones(2).mul(2)
    dbg.step()
    torch.ones(2).mul(3)  # step 1: not selected
    dbg.step()
    dbg.stop()
    meta = read_meta(dump_dir)
    assert meta["level"] == "L2"
    assert meta["torch_version"].startswith(torch.__version__[:4])
    assert {o["step"] for o in read_stream(dump_dir, "ops")} == {0}


def _train_three_steps(dump, **kw):
    torch.manual_seed(5)
    net = Net()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    data = torch.randn(8, 5)
    with precprobe.PrecisionDebugger(config(dump, **kw)) as dbg:
        dbg.start(net, opt)
        for _ in range(3):
            loss = net(data).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            dbg.step()


def test_memory_numpy_fills_after_torch_empty_is_read_as_data(tmp_path):
    # 64 MiB: a fresh mapping, all zeros; numpy writes zeros into it, with no op and no
    # version bump. sum's input is those zeros, not uninitialized memory.
    n = 16 << 20
    dump = str(tmp_path / "d")
    with precprobe.PrecisionDebugger(config(dump)) as dbg:
        dbg.start()
        buf = torch.empty(n)
        buf.numpy()[:] = 0.0
        buf.sum()
        dbg.step()
    (total,) = [o for o in read_stream(dump, "ops") if o["op"] == "aten::sum"]
    stats = total["in"][0]
    assert stats["numel"] == n
    assert stats["zero"] == n
    assert stats["max"] == 0.0


def test_binary_and_json_op_records_of_one_seeded_run_are_the_same_records(tmp_path):
    # The default writes ops.bin.zst (format_version 3); "ops_encoding": "json" writes
    # ops.jsonl.zst (version 2), which zstandard + json read with no precprobe. Both runs in
    # this process, after whatever ran before: AdamW's step counter, torch.tensor(0.), may
    # land in memory that held a zero already, and must be read as data all the same.
    binary, text = str(tmp_path / "bin"), str(tmp_path / "json")
    _train_three_steps(binary)
    _train_three_steps(text, ops_encoding="json")
    assert os.path.exists(os.path.join(binary, "rank0", "ops.bin.zst"))
    assert not os.path.exists(os.path.join(binary, "rank0", "ops.jsonl.zst"))
    assert read_meta(binary)["format_version"] == 3
    assert read_meta(text)["format_version"] == 2
    with open(os.path.join(text, "rank0", "ops.jsonl.zst"), "rb") as f:
        reader = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)
        raw = [json.loads(line) for line in io.TextIOWrapper(reader, encoding="utf-8") if line]
    via_reader = precprobe.read_ops(text)
    from_binary = precprobe.read_ops(binary)
    assert len(raw) > 100
    assert via_reader == raw
    # "sn", autograd's sequence number, counts on from one run to the next in a process.
    def without_sn(records):
        return [{k: v for k, v in r.items() if k != "sn"} for r in records]

    assert without_sn(from_binary) == without_sn(raw)
    assert {o["step"] for o in from_binary} == {0, 1, 2}
    verdict = precprobe.compare(text, binary, exact=True)
    assert verdict["found"] is False, verdict
    assert verdict["first_divergent"] is None


def test_optimizer_steps_are_marked_and_clipping_is_after_backward(dump_dir):
    """The ops of opt.step() carry "opt" (PyTorch 2.0 on: the optimizer step hooks; 1.13 has
    none), and every command places clip_grad_norm_, which runs under no_grad from 2.0 on, "(after
    backward)": not in the first parameter's module, as the optimizer's state work is."""
    torch.manual_seed(2)
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x = torch.randn(5, 3)
    dbg = precprobe.PrecisionDebugger(config(dump_dir))
    dbg.start(net, opt)
    opt.zero_grad()
    net(x).pow(2).mean().backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
    opt.step()
    dbg.step()
    dbg.stop()
    ops = read_stream(dump_dir, "ops")
    marked = [o for o in ops if o.get("opt")]
    import torch.optim.optimizer as optimizer_module
    hooks = hasattr(optimizer_module, "register_optimizer_step_pre_hook")
    updates = [o for o in ops if o["op"].endswith("_") and o["in"] and "param" in o["in"][0]]
    assert updates, [o["op"] for o in ops]  # Adam's update of each parameter
    if hooks:
        assert all(o.get("opt") for o in updates), [(o["op"], o.get("opt")) for o in updates]
        # Nothing before the step is marked: the forward, the backward, the clipping.
        first = min(o["seq"] for o in marked)
        norms = [o for o in ops if "norm" in o["op"]]
        assert norms and all(o["seq"] < first and not o.get("opt") for o in norms)
    else:
        assert marked == []
    r = run_cli("summary", dump_dir, "--by", "module", "--json")
    assert r.returncode == 0, r.stderr
    modules = {m["module"]: m["ops"] for m in json.loads(r.stdout)["modules"]}
    assert modules.get("(after backward)", 0) >= 3, modules  # the norms, the coefficient, the mul
    assert "1" in modules  # the ReLU between the two Linear layers of the Sequential
