"""The Fashion-MNIST example and its Python twin from the same saved state: the same batches
and the same step-0 arithmetic, op for op, on Debian's real data (skipped without the
dataset-fashion-mnist package or the built C++ example). `compare --first` of the two finds
no divergent op, and finds each planted port bug at its op, step and module."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

import precprobe
from conftest import CLI, SOURCE_DIR, read_stream

EXAMPLE = os.environ.get("PRECPROBE_EXAMPLE", "")
DATA = os.environ.get("FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"

pytestmark = pytest.mark.skipif(
    not EXAMPLE or not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")),
    reason="needs the C++ example (PRECPROBE_EXAMPLE) and Debian's dataset-fashion-mnist")


def test_python_twin_and_cpp_example_start_alike(tmp_path):
    state, py, cpp = tmp_path / "init.safetensors", tmp_path / "py", tmp_path / "cpp"
    common = ["--steps", "3", "--threads", "1", "--log-every", "0", "--overwrite"]
    r = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "examples", "python",
                                                     "train_fashion_mnist.py"),
                        *common, "--save-state", str(state), "--dump", str(py)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([EXAMPLE, *common, "--load-state", str(state), "--dump", str(cpp)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lp = [e["value"] for e in read_stream(str(py), "events") if e["name"] == "loss"]
    lc = [e["value"] for e in read_stream(str(cpp), "events") if e["name"] == "loss"]
    assert len(lp) == len(lc) == 3
    assert lp[0] == lc[0]  # same weights, same batch: the same double
    # Later steps differ in the last bits (clip_grad_norm_'s coefficient, docs/python.md).
    for a, b in zip(lp[1:], lc[1:]):
        assert a == pytest.approx(b, rel=1e-5)

    def first(dump, op, step=0):
        return [o for o in read_stream(str(dump), "ops")
                if o["op"] == op and o["step"] == step and o["dir"] == "forward"]

    # The same permutation, the same batch, the same first convolution and its gradient.
    assert first(py, "aten::randperm")[0]["out"] == first(cpp, "aten::randperm")[0]["out"]
    for op in ("aten::index_select", "aten::conv2d", "aten::batch_norm",
               "aten::cross_entropy_loss"):
        a, b = first(py, op), first(cpp, op)
        assert len(a) == len(b) and a, op
        for x, y in zip(a, b):
            assert x["out"] == y["out"], op


TWIN = os.path.join(SOURCE_DIR, "examples", "python", "train_fashion_mnist.py")
COMMON = ["--steps", "3", "--threads", "1", "--log-every", "0", "--overwrite"]


def run_twin(dump, *flags):
    r = subprocess.run([sys.executable, TWIN, *COMMON, "--dump", str(dump), *flags],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def run_example(dump, *flags):
    r = subprocess.run([EXAMPLE, *COMMON, "--dump", str(dump), *flags],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def compare_first(a, b):
    r = subprocess.run([CLI, "compare", str(a), str(b), "--first", "--json"],
                       capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


@pytest.fixture(scope="module")
def twin_state(tmp_path_factory):
    """The Python twin's initial weights, and the same without fc.bias (for the port that
    forgot it: load_state refuses a file whose names differ from the module's)."""
    d = tmp_path_factory.mktemp("twin")
    state, py = d / "init.safetensors", d / "py"
    run_twin(py, "--save-state", str(state))
    spec = importlib.util.spec_from_file_location("twin_example", TWIN)
    twin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(twin)
    net = twin.Net(fc_bias=False)
    tensors = precprobe.read_state(str(state))
    del tensors["fc.bias"]
    net.load_state_dict(tensors, strict=True)
    no_bias = d / "init-no-bias.safetensors"
    precprobe.save_state(net, str(no_bias))
    return d, state, no_bias, py


def test_port_compares_with_no_divergent_op(twin_state, tmp_path):
    d, state, _, py = twin_state
    run_example(tmp_path / "cpp", "--load-state", str(state))
    rc, res = compare_first(tmp_path / "cpp", py)
    assert (rc, res["found"], res["divergent_ops"], res["divergent"]) == (0, False, 0, [])
    # Most ops pair across the languages: the ones that do not are the optimizers' and
    # clip_grad_norm_'s own implementations, and nn.Linear (aten::linear in Python,
    # t + addmm in LibTorch's C++ API), compared by their results. Paired and compared: 443
    # ops on 1.13, 332 on 2.6 (Python 2.6's optimizer runs more ops of its own).
    assert res["matched"] > 300 and res["match_ops"] + res["noise_ops"] == res["matched"]


KEEP_DROPOUT = {"keep_dropout": True}


@pytest.mark.parametrize("bug,cpp_flags,py_flags,config,op,module", [
    ("BatchNorm eps 1e-3 where PyTorch has 1e-5", ["--bn-eps", "1e-3"], [], None,
     "aten::batch_norm", "bn1"),
    ("fc without its bias", ["--no-fc-bias"], [], None, "aten::matmul", "fc"),
    ("a constant 1.01 where the original has 1.0", ["--act-scale", "1.01"],
     ["--act-scale", "1.0"], None, "aten::mul", "(root)"),  # Net's forward, conv1 -> bn1
    ("dropout p 0.2 where the original has 0.1", ["--dropout", "0.2"], ["--dropout", "0.1"],
     KEEP_DROPOUT, "aten::dropout", "drop"),
])
def test_planted_port_bug_is_found_and_named(twin_state, tmp_path, bug, cpp_flags, py_flags,
                                             config, op, module):
    d, state, no_bias, py = twin_state
    extra = []
    if config is not None:
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config))
        extra = ["--config", str(path)]
    if py_flags or extra:
        py = tmp_path / "py"
        run_twin(py, "--load-state", str(state), *py_flags, *extra)
        # Without the bug the same flags compare clean (the twin pair itself is sound).
        if config is not None:
            run_example(tmp_path / "cpp-ok", "--load-state", str(state), *py_flags, *extra)
            rc, res = compare_first(tmp_path / "cpp-ok", py)
            assert (rc, res["divergent_ops"]) == (0, 0), res["divergent"][:1]
    start = no_bias if "--no-fc-bias" in cpp_flags else state
    run_example(tmp_path / "cpp", "--load-state", str(start), *cpp_flags, *extra)
    rc, res = compare_first(tmp_path / "cpp", py)
    assert rc == 1 and res["found"], bug
    # The first divergent op: the bug's own op, at step 0 (A is the port, B the original).
    assert (res["op"], res["step"], res["direction"]) == (op, 0, "forward"), bug
    # The module whose forward ran the op (docs/cli.md, "Modules"): the op between conv1 and
    # bn1 is the model's own, "(root)"; a dropout, which reads no parameter, that of the
    # dropout module registered after the last one read (meta.json's "modules": LibTorch's C++
    # modules have no forward hooks).
    first = [o for o in res["divergent"] if (o["step"], o["seq"]) == (res["step"], res["seq"])]
    assert first, bug
    assert first[0]["module"] == module, (bug, first[0])
