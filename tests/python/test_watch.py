"""The op watchpoints from Python (docs/watchpoints.md): a planted slow blow-up in a PyTorch
loop warns at the same steps, in the same modules, as the same loop in C++
(tests/probe/test_op_watch.cpp: 8 in the loss, "(top level)"; 10 in the Net's own forward,
"(root)", and in fc2; the first NaN/Inf at 107), and the hits the run judged live are those
`precprobe watch` recomputes from the dump."""

import json

import torch

import precprobe
from conftest import run_cli


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x, scale):
        return self.fc2(torch.relu(self.fc1(x)) * scale)


def test_a_slow_blow_up_warns_as_in_cpp_and_live_equals_after(dump_dir):
    torch.manual_seed(7)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.0)
    x, y = torch.randn(64, 8), torch.randn(64, 4)
    dbg = precprobe.PrecisionDebugger(dump_path=str(dump_dir), overwrite=True)
    dbg.start(net, opt)
    for step in range(120):
        loss = torch.nn.functional.mse_loss(net(x, 1.5 ** step), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        dbg.step()
    dbg.stop()
    live = dbg.watch_hits()
    got = [(h["step"], h["module"], h["watch"], h["op"]) for h in live]
    # Each op in the module whose forward ran it (docs/cli.md, "Modules"): the loss after fc2
    # outside the model, the scaling mul between fc1 and fc2 in the Net's own forward, fc2's
    # linear in fc2 (its own episode: no longer held by the loss's).
    assert got[:4] == [(8, "(top level)", "tensor_too_large", "aten::mse_loss"),
                       (10, "(root)", "tensor_too_large", "aten::mul"),
                       (10, "fc2", "tensor_too_large", "aten::linear"),
                       (107, "(top level)", "tensor_overflow", "aten::mse_loss")], got
    out = json.loads(run_cli("watch", str(dump_dir), "--json").stdout)
    assert out["live"] and out["same_as_live"]
    assert out["hits"] == live
    assert out["early"]["step"] == 8 and out["first_nonfinite_step"] == 107
    assert out["steps_earlier"] == 99


def test_a_healthy_loop_has_no_hit(dump_dir):
    torch.manual_seed(7)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    x, y = torch.randn(64, 8), torch.randn(64, 4)
    dbg = precprobe.PrecisionDebugger(dump_path=str(dump_dir), overwrite=True)
    dbg.start(net, opt)
    for _ in range(80):
        loss = torch.nn.functional.mse_loss(net(x, 1.0), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        dbg.step()
    dbg.stop()
    assert dbg.watch_hits() == []
