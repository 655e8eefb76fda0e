"""The GradScaler watch on PyTorch's own torch.cuda.amp.GradScaler. Bookworm's PyTorch 1.13
has no CPU kernels for it (torch._amp_foreach_non_finite_check_and_unscale_ and
torch._amp_update_scale_ are CUDA-only), so the test double below puts CPU versions of those
two kernels and of scale()'s device check under PyTorch's own unscale_/step/update, which run
unchanged: the state machine, _per_optimizer_states, the skipped step."""

import math

import pytest
import torch
from torch import nn
from torch.cuda.amp import GradScaler

import precprobe
from conftest import read_stream, run_cli


class CpuGradScaler(GradScaler):
    """torch.cuda.amp.GradScaler, enabled on the CPU: the two kernels and the device check."""

    def __init__(self, init_scale=1024.0, growth_interval=2000):
        super().__init__(enabled=False)  # no CUDA: construct disabled, then enable as PyTorch does
        self._enabled = True
        self._init_scale = init_scale
        self._scale = None
        self._growth_factor = 2.0
        self._backoff_factor = 0.5
        self._growth_interval = growth_interval
        self._init_growth_tracker = 0
        self._growth_tracker = None
        from collections import defaultdict
        try:  # PyTorch 2.x: torch.cuda.amp.GradScaler is torch.amp.GradScaler("cuda")
            from torch.amp.grad_scaler import _refresh_per_optimizer_state
        except ImportError:  # 1.13
            from torch.cuda.amp.grad_scaler import _refresh_per_optimizer_state
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def scale(self, outputs):
        if self._scale is None:
            self._lazy_init_scale_growth_tracker(outputs.device)
        return outputs * self._scale

    def _unscale_grads_(self, optimizer, inv_scale, found_inf, allow_fp16):
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        if not torch.isfinite(p.grad).all():
                            found_inf.fill_(1.0)
                        p.grad.mul_(inv_scale)
        return {found_inf.device: found_inf}


def update_scale_(scale, tracker, found_inf, growth, backoff, interval):
    """torch._amp_update_scale_'s documented rule."""
    if found_inf.item() > 0:
        scale.mul_(backoff)
        tracker.zero_()
    else:
        n = int(tracker.item()) + 1
        if n == interval:
            scale.mul_(growth)
            tracker.zero_()
        else:
            tracker.fill_(n)
    return scale


@pytest.fixture
def cpu_amp(monkeypatch):
    monkeypatch.setattr(torch, "_amp_update_scale_", update_scale_)


def train(dbg, scaler, net, opt, steps, bad_step, seen):
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    for step in range(steps):
        opt.zero_grad()
        loss = net(x).pow(2).mean()
        scaler.scale(loss).backward()
        if step == bad_step:
            with torch.no_grad():
                net.weight.grad[0, 1] = math.inf
        # What the watch must report, computed here from the scaled gradients.
        seen.append([math.sqrt(sum(float(p.grad.double()[torch.isfinite(p.grad)].pow(2).sum())
                                   for p in g["params"])) for g in opt.param_groups])
        scaler.step(opt)
        scaler.update()
        dbg.step()


def test_scale_history_and_per_group_inf_nan(cpu_amp, dump_dir):
    scaler_history_case(CpuGradScaler(init_scale=1024.0, growth_interval=3), dump_dir)


@pytest.mark.skipif(not hasattr(torch.amp, "GradScaler"),
                    reason="PyTorch 1.13 has no torch.amp.GradScaler (2.3+ runs it on the CPU)")
def test_torch_amp_grad_scaler_on_the_cpu(dump_dir):
    # PyTorch 2.x's own CPU kernels, nothing replaced: the same records as above.
    scaler_history_case(torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=3),
                        dump_dir)


def scaler_history_case(scaler, dump_dir):
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    opt = torch.optim.SGD([{"params": [net.weight]}, {"params": [net.bias], "lr": 0.01}], lr=0.1)
    dbg = precprobe.PrecisionDebugger(task="statistics", dump_path=dump_dir, overwrite=True)
    dbg.start(net, opt, scaler=scaler)
    seen = []
    train(dbg, scaler, net, opt, 5, bad_step=1, seen=seen)
    dbg.stop()
    assert "unscale_" not in scaler.__dict__ and "update" not in scaler.__dict__  # unwatched
    recs = read_stream(dump_dir, "scaler")
    assert [(r["step"], r["group"]) for r in recs] == [(s, g) for s in range(5) for g in (0, 1)]
    by = {(r["step"], r["group"]): r for r in recs}
    # Step 1: weight's gradient holds an Inf: group 0 names it, the optimizer is skipped
    # (both groups), the scale backs off 1024 -> 512.
    assert by[(1, 0)]["found_inf"] is True and by[(1, 0)]["n_bad"] == 1
    assert by[(1, 0)]["bad"] == ["weight"]
    assert by[(1, 1)]["found_inf"] is False and by[(1, 1)]["n_bad"] == 0
    assert by[(1, 0)]["skipped"] is True and by[(1, 1)]["skipped"] is True
    assert by[(1, 0)]["event"] == "backoff"
    assert (by[(1, 0)]["scale"], by[(1, 0)]["scale_next"]) == (1024.0, 512.0)
    assert by[(0, 0)]["skipped"] is False and by[(0, 0)]["event"] == ""
    # Growth after 3 finite steps in a row (2, 3, 4): 512 -> 1024 at step 4.
    assert by[(4, 0)]["event"] == "growth"
    assert (by[(4, 0)]["scale"], by[(4, 0)]["scale_next"]) == (512.0, 1024.0)
    assert [by[(s, 0)]["tracker"] for s in range(5)] == [1, 0, 1, 2, 0]
    # Norms before and after unscaling, per group.
    for s in range(5):
        for g in (0, 1):
            r = by[(s, g)]
            assert r["gn_scaled"] == pytest.approx(seen[s][g], rel=1e-9), (s, g)
            assert r["gn"] == pytest.approx(seen[s][g] / r["scale"], rel=1e-6), (s, g)
    # The CLI reads them as it reads precprobe::GradScaler's.
    out = run_cli("scale", dump_dir)
    assert out.returncode == 0, out.stderr
    assert "5 optimizer steps, 1 skipped, final scale 1024" in out.stdout


def test_a_disabled_scaler_writes_nothing_and_trains_as_without(dump_dir):
    net = nn.Linear(3, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    scaler = GradScaler(enabled=False)
    dbg = precprobe.PrecisionDebugger(task="statistics", dump_path=dump_dir, overwrite=True)
    dbg.start(net, opt, scaler=scaler)
    w = net.weight.detach().clone()
    loss = net(torch.ones(1, 3)).sum()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    dbg.step()
    dbg.stop()
    assert not torch.equal(w, net.weight)
    assert read_stream(dump_dir, "scaler") == []


def test_watch_refuses_what_is_not_a_scaler(dump_dir):
    dbg = precprobe.PrecisionDebugger(task="statistics", dump_path=dump_dir, overwrite=True)
    with pytest.raises(TypeError, match="GradScaler"):
        dbg.start(nn.Linear(1, 1), scaler=object())
    dbg.stop()
