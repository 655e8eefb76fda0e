"""\"record\": \"on_anomaly\" with a Python model and a torch.optim optimizer: the replayed
step starts from the state before it — parameters and buffers (C++ snapshot) and the
optimizer's own state (Python snapshot) — so training after the replay is bit for bit the
training without the debugger."""

import pytest
import torch
from torch import nn

import precprobe
from conftest import read_stream


def make():
    torch.manual_seed(11)
    net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    return net, opt


def batches():
    g = torch.Generator().manual_seed(5)
    out = []
    for step in range(6):
        x = torch.randn(16, 4, generator=g)
        y = torch.randn(16, 1, generator=g)
        if step == 4:
            y = y * 1000.0  # a loss spike: finite, so the step updates the optimizer state
        out.append((x, y))
    return out


def step_fn(net, opt, x, y):
    def fn():
        opt.zero_grad()
        loss = (net(x) - y).pow(2).mean()
        loss.backward()
        opt.step()
        return loss
    return fn


def test_a_replayed_step_restores_the_python_optimizer_state(dump_dir):
    ref_net, ref_opt = make()
    for x, y in batches():
        step_fn(ref_net, ref_opt, x, y)()

    net, opt = make()
    dbg = precprobe.PrecisionDebugger(
        task="statistics", level="L1", dump_path=dump_dir, overwrite=True, record="on_anomaly",
        on_anomaly={"loss_spike": {"k": 5, "n": 2}})
    dbg.start(net, opt)
    for x, y in batches():
        dbg.run_step(step_fn(net, opt, x, y))
    dbg.stop()
    assert dbg.counters()["replays"] == 1
    events = [e for e in read_stream(dump_dir, "events") if e["name"] == "anomaly"]
    assert len(events) == 1
    assert events[0]["step"] == 4 and events[0]["trigger"] == "loss_spike"
    assert events[0]["reproduced"] is True
    assert {o["step"] for o in read_stream(dump_dir, "ops")} == {4}
    # Everything as without the debugger: parameters, BatchNorm's buffers, Adam's state.
    for (n, a), (_, b) in zip(precprobe.state_tensors(ref_net), precprobe.state_tensors(net)):
        assert torch.equal(a, b), n
    for pa, pb in zip(ref_net.parameters(), net.parameters()):
        sa, sb = ref_opt.state[pa], opt.state[pb]
        assert set(sa) == set(sb)
        for k in sa:
            assert torch.equal(torch.as_tensor(sa[k]), torch.as_tensor(sb[k])), k


def test_on_anomaly_needs_the_optimizer(dump_dir):
    dbg = precprobe.PrecisionDebugger(task="statistics", dump_path=dump_dir, overwrite=True,
                                      record="on_anomaly")
    with pytest.raises(precprobe.Error, match="needs the optimizer"):
        dbg.start(nn.Linear(1, 1))
    assert not dbg.started


def test_a_first_step_replay_removes_the_state_the_step_created(dump_dir):
    """Adam makes its state at its first step: a replay of step 0 must start without it."""
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))
    y = torch.randn(16, 1)
    x_nan = x.clone()
    x_nan[0, 0] = float("nan")
    net, opt = make()
    dbg = precprobe.PrecisionDebugger(task="statistics", dump_path=dump_dir, overwrite=True,
                                      record="on_anomaly")
    dbg.start(net, opt)
    calls = []

    def fn():
        opt.zero_grad()
        loss = (net(x_nan) - y).pow(2).mean()
        loss.backward()
        # A state entry made in the step, under a name of its own on each run.
        opt.state[net[0].weight][f"made{len(calls)}"] = torch.ones(1)
        calls.append(1)
        return loss

    dbg.run_step(fn)
    dbg.stop()
    assert dbg.counters()["replays"] == 1 and len(calls) == 2
    # The replay started from the snapshot, which had no state: only its own entry is left.
    assert list(opt.state[net[0].weight]) == ["made1"]
    assert len(opt.state) == 1


def test_run_step_with_two_losses_checks_each(dump_dir):
    """A GAN step returns (d_loss, g_loss, accuracy): both tensors are checked and logged as
    loss/0 and loss/1, as C++ run_step does with a std::tuple; the float passes through."""
    torch.manual_seed(2)
    g, d = nn.Linear(3, 3), nn.Linear(3, 1)
    opt_g = torch.optim.SGD(g.parameters(), lr=0.05)
    opt_d = torch.optim.SGD(d.parameters(), lr=0.05)
    z = torch.linspace(-1, 1, 12).reshape(4, 3)
    dbg = precprobe.PrecisionDebugger(task="statistics", level="L1", dump_path=dump_dir,
                                      overwrite=True, record="on_anomaly")
    dbg.start({"G": g, "D": d}, [opt_g, opt_d])
    for k in range(4):
        def fn():
            opt_d.zero_grad()
            d_loss = d(g(z).detach()).mean()
            d_loss.backward()
            opt_d.step()
            opt_g.zero_grad()
            g_loss = -d(g(z)).mean() + (float("nan") if k == 2 else 0.0)
            g_loss.backward()
            opt_g.step()
            return d_loss, g_loss, 0.5
        d_loss, g_loss, acc = dbg.run_step(fn)
        assert acc == 0.5
        assert torch.isnan(g_loss).item() == (k == 2)
    dbg.stop()
    records = read_stream(dump_dir, "events")  # log_scalar's scalars and the events
    events = [e for e in records if e["name"] == "anomaly"]
    assert len(events) == 1
    assert events[0]["step"] == 2 and events[0]["trigger"] == "loss_nonfinite"
    assert events[0]["trigger_detail"] == "loss/1 = nan"
    names = {e["name"] for e in records}
    assert {"loss/0", "loss/1"} <= names and "loss" not in names


def test_run_step_rejects_a_result_without_a_tensor(dump_dir):
    net, opt = make()
    dbg = precprobe.PrecisionDebugger(task="statistics", level="L1", dump_path=dump_dir,
                                      overwrite=True)
    dbg.start(net, opt)
    with pytest.raises(TypeError, match="losses"):
        dbg.run_step(lambda: "not a loss")
    dbg.stop()
