"""The port pairs of tests/ports (README.md there): a PyTorch program written as PyTorch users
write it and its LibTorch port written as LibTorch users write it, started from the same state
(the Python side's save_state, the C++ side's load_state), 20 steps each, recorded and set
side by side by `precprobe compare --first --by module --json`.

- A faithful pair compares with 0 divergent ops and trains alike (the losses each side prints
  agree), however differently the two sides build their batches (per-sample ToTensor +
  Normalize in a DataLoader against a dataset divided by 255 once and a per-sample Normalize +
  Stack), compute their loss (cross_entropy against log_softmax + nll_loss) or their metrics
  (argmax / eq / sum / item on one side only), or zero their gradients: the GAN's original
  resets both optimizers before each backward (or after each step; `set_to_none` or
  `zero_()`), its port zeroes only the optimizer it is about to step, so that each backward
  adds into the other network's gradients on one side only. Those differences are dead:
  zeroed before any update reads them.
- Each planted port bug is named at its first effect: the step, the op, the module ("(top
  level)" for the data pipeline before the model, "(after backward)" for gradient clipping:
  docs/cli.md, "Modules"), why (the cause), and where the user typed a constant wrong, both constants
  in the text verdict ("0.5 ... vs 5").
- --first and --by module name the same first op; precprobe.compare (Python) returns what the
  CLI prints, and `precprobe report --compare` names the same first op.

Skipped without Debian's dataset-fashion-mnist, torchvision, or the built ports."""

import gzip
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

try:
    import precprobe
except ImportError:  # skipped below without the built module
    precprobe = None

CLI = os.environ.get("PRECPROBE_CLI", "")
BIN = os.environ.get("PRECPROBE_PORTS_BIN", "")
HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.environ.get("FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"
FILES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
         "t10k-labels-idx1-ubyte"]

try:
    import torchvision  # noqa: F401
    HAVE_TORCHVISION = True
except ImportError:
    HAVE_TORCHVISION = False

pytestmark = pytest.mark.skipif(
    not (CLI and BIN and HAVE_TORCHVISION and precprobe is not None and
         all(os.path.exists(os.path.join(DATA, f + ".gz")) for f in FILES)),
    reason="needs the CLI, the ports (PRECPROBE_PORTS_BIN), torchvision and Debian's "
           "dataset-fashion-mnist")

STEPS = "20"
try:
    import torch
    TORCH_MAJOR = int(torch.__version__.split(".")[0])
except ImportError:
    TORCH_MAJOR = 0
PAIRS = ["cnn", "lstm", "transformer", "vae", "gan", "lm"]
# The language model reads a text of the repository, the others Fashion-MNIST.
CORPUS = os.path.join(HERE, "data", "lm.txt")


@pytest.fixture(scope="session")
def data_root(tmp_path_factory):
    """Fashion-MNIST uncompressed where both sides look: ROOT/FashionMNIST/raw."""
    root = tmp_path_factory.mktemp("fashion")
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for f in FILES:
        with gzip.open(os.path.join(DATA, f + ".gz"), "rb") as src, open(raw / f, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return str(root)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def losses(out):
    """Each step's losses: the numbers after the words ending in "loss" on its `step N` line
    ("step 3 loss 2.1", "step 3 d_loss 1.3 g_loss 0.7")."""
    steps = []
    for line in out.splitlines():
        words = line.split()
        if words[:1] == ["step"]:
            steps.append([float(v) for k, v in zip(words, words[1:]) if k.endswith("loss")])
    return steps


def pair_data(pair, data_root):
    return CORPUS if pair == "lm" else data_root


def python_side(pair, data, dump, state, *flags):
    return run([sys.executable, os.path.join(HERE, "python", pair + ".py"), "--data",
                pair_data(pair, data), "--steps", STEPS, "--dump", str(dump), "--save-state",
                str(state), *flags])


def cpp_side(pair, data, dump, state, *flags):
    return run([os.path.join(BIN, "port_" + pair), "--data", pair_data(pair, data), "--steps",
                STEPS, "--dump", str(dump), "--load-state", str(state), *flags])


def report_compare(a, b, tmp_path):
    """The compare section `precprobe report A --compare B` embeds in its page."""
    html = tmp_path / "report.html"
    run([CLI, "report", str(a), "--compare", str(b), "-o", str(html)])
    page = html.read_text()
    tag = '<script type="application/json" id="precprobe-data">'
    start = page.index(tag) + len(tag)
    return json.loads(page[start:page.index("</script>", start)])["compare"]


def compare(a, b, tmp_path=None):
    r = subprocess.run([CLI, "compare", str(a), str(b), "--first", "--by", "module", "--json"],
                       capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr
    res = json.loads(r.stdout)
    assert (r.returncode == 1) == res["found"]
    # One verdict: the Python API gives what the CLI prints, key for key.
    assert precprobe.compare(a, b, first=True, by="module") == res
    # One verdict: --exact names the first op that differs at all (a port's backward seed
    # differs in its memory_format), and --first's op, found and counted the same, beside it.
    r = subprocess.run([CLI, "compare", str(a), str(b), "--exact", "--json"],
                       capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr
    ex = json.loads(r.stdout)
    assert (ex["found"], ex["divergent_ops"]) == (res["found"], res["divergent_ops"])
    assert ex["first_divergent"] == res["first_divergent"]
    if res["found"]:
        fd = ex["first_divergent"]
        assert (fd["step"], fd["seq"], fd["name"], fd["module"]) == (
            res["step"], res["seq"], res["name"], res["module"])
    else:
        assert ex["first_divergent"] is None
    if tmp_path is not None:  # and the report names the same first op
        page = report_compare(a, b, tmp_path)
        assert page["result"]["divergent_ops"] == res["divergent_ops"]
        if res["found"]:
            assert (page["first"]["step"], page["first"]["name"]) == (res["step"], res["name"])
        else:
            assert page["first"] is None
    # One verdict: --by module's first divergent module holds --first's op.
    firsts = [m["first_divergent"] for m in res["modules"] if m.get("first_divergent")]
    if res["found"]:
        earliest = min(firsts, key=lambda f: (f["step"], f["seq"]))
        assert (earliest["step"], earliest["seq"], earliest["name"]) == (
            res["step"], res["seq"], res["name"])
    else:
        assert firsts == [] and res["divergent_ops"] == 0
    return res


@pytest.fixture(scope="session")
def python_runs(tmp_path_factory, data_root):
    """Each pair's Python run and initial state, recorded once."""
    d = tmp_path_factory.mktemp("py")
    out = {}
    for pair in PAIRS:
        text = python_side(pair, data_root, d / pair, d / (pair + ".safetensors"))
        out[pair] = (d / pair, d / (pair + ".safetensors"), losses(text))
    return out


# (pair, Python flags): each pair as written, and the GAN's original under the other zeroing
# schedules: set_to_none given either way (its default is False before PyTorch 2.0, True
# since), and both optimizers reset after each step instead of before each backward.
FAITHFUL = [(pair, []) for pair in PAIRS] + [
    ("gan", ["--set-to-none", "true"]),
    ("gan", ["--set-to-none", "false"]),
    ("gan", ["--zero-grad", "after-step"]),
]


def params(cases, ids):
    return [pytest.param(*c, id=i) for c, i in zip(cases, ids)]


@pytest.mark.parametrize("pair,py_flags", params(
    FAITHFUL, [f"{p}:{' '.join(f)}" if f else p for p, f in FAITHFUL]))
def test_faithful_port_compares_clean(pair, py_flags, python_runs, data_root, tmp_path):
    py, state, py_losses = python_runs[pair]
    if py_flags:
        py = tmp_path / "py"
        state = tmp_path / "state.safetensors"
        py_losses = losses(python_side(pair, data_root, py, state, *py_flags))
    text = cpp_side(pair, data_root, tmp_path / "cpp", state)
    cpp_losses = losses(text)
    assert len(cpp_losses) == len(py_losses) == int(STEPS)
    # The two programs train alike (Python prints 6 decimals, C++ 7 significant digits).
    flat = [[v for step in run for v in step] for run in (cpp_losses, py_losses)]
    assert flat[0] == pytest.approx(flat[1], rel=1e-4, abs=2e-6)
    res = compare(py, tmp_path / "cpp", tmp_path)
    assert not res["found"], json.dumps({k: res[k] for k in ("name", "step", "module", "cause")})
    assert res["divergent_ops"] == 0
    # The model's ops pair: most of what both run is compared (the LM's 20 steps run ~1500
    # ops a side; on LibTorch 2.14 940 of its 1462 pair).
    assert res["matched"] > min(1000, res["ops_a"] / 2)
    assert res["match_ops"] + res["noise_ops"] == res["matched"]


# (pair, C++ flags, Python flags, config, expected step, op, module, cause, parameter)
BUGS = [
    ("cnn", ["--norm-mean", "0.2680"], [], None, 0, None, "(top level)", None, None),
    # The batch entering the model differs: named at the collate's stack, in the data.
    ("cnn", ["--no-normalize"], [], None, 0, "aten::stack", "(top level)", "data", None),
    ("cnn", ["--momentum", "0.9"], [], None, 1, "aten::mul_", "conv1", None, "conv1.weight"),
    ("cnn", ["--bn-eps", "1e-3"], [], None, 0, "aten::batch_norm", "bn1", None, None),
    ("cnn", ["--dropout", "0.5"], [], {"keep_dropout": True}, 0, None, "dropout", None, None),
    ("cnn", ["--lr", "0.02"], [], None, 0, None, "conv1", None, "conv1.weight"),
    # A layer built otherwise: fc1 without its bias (loaded with strict=False), conv2 padding
    # by reflection (LibTorch pads, then convolves with padding 0).
    ("cnn", ["--no-bias"], [], None, 0, None, "fc1", None, "fc1.weight"),
    ("cnn", ["--reflect-padding"], [], None, 0, "aten::conv2d", "conv2", None, "conv2.weight"),
    ("lstm", ["--no-normalize"], [], None, 0, "aten::stack", "(top level)", "data", None),
    ("lstm", ["--beta2", "0.99"], [], None, 0, None, "lstm", None, None),
    ("lstm", ["--adam-eps", "1e-6"], [], None, 0, None, "lstm", None, None),
    ("transformer", ["--norm-mean", "0.2680"], [], None, 0, None, "(top level)", None, None),
    ("transformer", ["--weight-decay", "0.1"], [], None, 0, None, "embed", None, "embed.weight"),
    ("vae", ["--beta2", "0.99"], [], None, 0, None, "fc1", None, None),
    ("vae", [], ["--loader-generator", "global"], None, 0, "aten::randn_like", None, "draws",
     None),
    # LeakyReLU's default slope (0.01) where the original has 0.2: named in the module that
    # runs it, the discriminator's LeakyReLU (D runs first, on the real images).
    ("gan", ["--leaky-slope", "0.01"], [], None, 0, "aten::leaky_relu", "D.1", None, None),
    # Adam's first beta: on PyTorch 1.x both sides update exp_avg with add_, compared at step
    # 0; PyTorch 2.x's Adam does it with lerp_, which the port does not run, and step 0's
    # bias-corrected update does not depend on beta1 (m / (1 - beta1) = g): the first compared
    # op that differs is step 1's update.
    ("gan", ["--beta1", "0.9"], [], None, 0 if TORCH_MAJOR < 2 else 1, None, "D.0", None,
     "D.0.weight"),
    # D's gradients not zeroed before its step: step 0's gradients (and what G's backward
    # added to them) are read by D's update at step 1, whatever the original's zeroing.
    ("gan", ["--no-zero-d"], [], None, 1, None, "D.0", None, "D.0.weight"),
    ("gan", ["--no-zero-d"], ["--zero-grad", "after-step"], None, 1, None, "D.0", None,
     "D.0.weight"),
    # The clip norm typed 5 for 0.5: the gradient norm is below both until step 2 (about 0.3,
    # 0.36, then 1.2), where the clip acts on one side only; clipping runs after backward,
    # outside every module.
    ("lm", ["--clip-norm", "5"], [], None, 2, "aten::clamp", "(after backward)", None, None),
]

# The constants the user typed, as the text verdict names them (A's, then B's): in their
# shortest form, whether the op reads them as arguments or ops of one run only made them (the
# clip norm: Python's max_norm / x is reciprocal + mul, LibTorch's fill_ + div_).
CONSTANTS = {
    ("gan", "--leaky-slope 0.01"): ("0.2", "0.01"),
    ("lm", "--clip-norm 5"): ("0.5", "5"),
}


@pytest.mark.parametrize("pair,cpp_flags,py_flags,config,step,op,module,cause,param", params(
    BUGS, [f"{b[0]}:{' '.join(b[1] + b[2])}" for b in BUGS]))
def test_planted_port_bug_is_named(pair, cpp_flags, py_flags, config, step, op, module, cause,
                                   param, python_runs, data_root, tmp_path):
    py, state, _ = python_runs[pair]
    extra = []
    if config is not None:
        cfg = tmp_path / "config.json"
        cfg.write_text(json.dumps(config))
        extra = ["--config", str(cfg)]
    if py_flags or config is not None:
        py = tmp_path / "py"
        python_side(pair, data_root, py, tmp_path / "state.safetensors", *py_flags, *extra)
        state = tmp_path / "state.safetensors"
    cpp_side(pair, data_root, tmp_path / "cpp", state, *cpp_flags, *extra)
    res = compare(py, tmp_path / "cpp", tmp_path if pair == "cnn" else None)
    assert res["found"], f"{pair} {cpp_flags} {py_flags}: no divergent op"
    got = {k: res[k] for k in ("step", "name", "op", "module", "cause", "param")}
    assert res["step"] == step, got
    if op is not None:
        assert res["op"] == op, got
    if module is not None:
        assert res["module"] == module, got
    if cause is not None:
        assert res["cause"] == cause, got
    if param is not None:
        assert res["param"] == param, got
    consts = CONSTANTS.get((pair, " ".join(cpp_flags + py_flags)))
    if consts is not None:
        r = subprocess.run([CLI, "compare", str(py), str(tmp_path / "cpp"), "--first"],
                           capture_output=True, text=True)
        assert r.returncode == 1, r.stderr
        a, b = (re.escape(c) for c in consts)
        verdict = r.stdout[r.stdout.index("First divergent op"):]
        assert re.search(rf"(?<![\w.]){a}(?![\w.])[^\n]* vs {b}(?![\w.])", verdict), verdict
