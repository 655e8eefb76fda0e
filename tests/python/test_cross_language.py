"""The same small model trained from the same state file in Python (precprobe.PrecisionDebugger)
and in C++ (state_tool.cpp's twin, precprobe::PrecisionDebugger): where the two programs run
the same op, its record is the same, bit for bit — Python's torch and precprobe share one
LibTorch, so the same op on the same tensors gives the same values."""

import torch
import torch.nn.functional as F

import precprobe
from conftest import read_stream, run_tool
from twin import inputs, make_model

STEPS = 2


def python_run(state, x, y, dump):
    precprobe.seed_all(1234, True)
    model = make_model()
    precprobe.load_state(model, state)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dbg = precprobe.PrecisionDebugger(task="statistics", level="L1", dump_path=dump,
                                      overwrite=True)
    dbg.start(model)
    for _ in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        dbg.log_scalar("loss", loss.item())
        dbg.step()
    dbg.stop()
    return model


def strip(args):
    """The arguments without "rg": LibTorch's optimizers update parameters through .data()
    (requires_grad false), PyTorch's under no_grad (requires_grad true); the values agree."""
    return [{k: v for k, v in a.items() if k != "rg"} for a in args or []]


def key(rec):
    return (rec["step"], rec["dir"], rec["op"], rec["call"])


def test_same_state_same_records_where_the_ops_are_the_same(tmp_path):
    torch.manual_seed(21)
    state, data = tmp_path / "init.safetensors", tmp_path / "inputs.safetensors"
    precprobe.save_state(make_model(), state)
    x, y = inputs()
    precprobe.save_state({"x": x, "y": y}, data)
    cpp_dump, py_dump = str(tmp_path / "cpp"), str(tmp_path / "py")
    run_tool("train", state, data, cpp_dump, STEPS)
    python_run(state, x, y, py_dump)

    py = {key(r): r for r in read_stream(py_dump, "ops")}
    cpp = {key(r): r for r in read_stream(cpp_dump, "ops")}
    common = sorted(set(py) & set(cpp))
    ops = {k[2] for k in common}
    # The layers both languages run as the same ATen op, forward and backward.
    for op in ("aten::conv2d", "aten::batch_norm", "aten::relu", "aten::flatten",
               "aten::cross_entropy_loss", "ConvolutionBackward0",
               "NativeBatchNormBackward0", "AddmmBackward0"):
        assert op in ops, (op, sorted(ops))
    compared, value_diffs = 0, set()
    for k in common:
        if py[k].get("ovl") != cpp[k].get("ovl"):
            # Another overload: Python passes a number as a 0-d tensor where LibTorch's
            # C++ passes a Scalar (BatchNorm's num_batches_tracked.add_(1): add_.Tensor in
            # Python, add_.Scalar in C++).
            assert k[2] == "aten::add_", (k, py[k].get("ovl"), cpp[k].get("ovl"))
            continue
        for side in ("in", "out"):
            a, b = strip(py[k].get(side)), strip(cpp[k].get(side))
            assert len(a) == len(b), (k, side)
            for x, y in zip(a, b):
                if "dtype" in x or "dtype" in y:
                    assert x == y, (k, side, x, y)  # a tensor's statistics: the same bits
                elif x != y:
                    value_diffs.add(k[2])
        compared += 1
    # Non-tensor arguments differ at one call site: backward's seed gradient, which Python
    # makes with ones_like(loss, dtype=float, layout=strided, device=cpu) and C++ with
    # ones_like(loss) (None, None, None).
    assert value_diffs <= {"aten::ones_like"}, value_diffs
    assert compared >= 20, compared
    # Where they differ: Python's nn.Linear is one aten::linear, LibTorch 1.13's is t + addmm.
    only_py = {k[2] for k in set(py) - set(cpp)}
    only_cpp = {k[2] for k in set(cpp) - set(py)}
    assert "aten::linear" in only_py
    assert {"aten::t", "aten::addmm"} <= only_cpp
    # The losses and the final weights are the same bits.
    lp = [e["value"] for e in read_stream(py_dump, "events") if e["name"] == "loss"]
    lc = [e["value"] for e in read_stream(cpp_dump, "events") if e["name"] == "loss"]
    assert lp == lc and len(lp) == STEPS
