"""Transformers written the way people write them, held to issue 66 (README.md here).

Programs: the LibTorch programs tfm_gpt (hand-written attention, masked_fill(mask, -inf)) and
tfm_encoder (torch::nn::TransformerEncoder, generate_square_subsequent_mask and a key padding
mask), and python/lm.py's `mha` (nn.TransformerEncoderLayer: attn_mask and key_padding_mask),
`hf` (an additive mask filled with torch.finfo(dtype).min) and `sdpa`
(F.scaled_dot_product_attention, is_causal=True; PyTorch 2.x). Each in fp32 and under bf16
autocast, recorded three ways: statistics with range statistics (read by summary, check,
overflow, watch, precision and report), "task": "overflow_check", and "record": "on_anomaly".

- Healthy: 0 alarms in every command and in the live op watchpoints; the mask is shown as
  masking (summary's masking line, with the -inf elements counted independently here).
- --fully-masked-from PLANT (sequence 0 all padding: its rows see no key): when the program's
  own grad norm turns NaN at PLANT, overflow names the softmax that made it, in its module, at
  PLANT, with "every element of K of its R rows was -inf: fully masked rows" (K and R from the
  model's shapes) and the masking op upstream; overflow_check and the on_anomaly replay
  (origin class `invalid`) give the same answer. When it stays finite (a finfo.min mask makes a
  fully masked row uniform; PyTorch 2.5's SDPA gives such rows zeros), nothing is raised.
- Placement (issue 66 item 3): the ops of block b0 of tfm_gpt and of lm.py's `hf` each in the
  module whose forward ran them (masked_fill in b0, not b0.qkv), the loss at top level, and the
  modules "(top level)", "(after backward)", "(optimizer)" named.

TFM_SIDE=cpp or python selects one side (ctest runs them as transformers.cpp and
transformers.python); both when unset. Skipped without the CLI or the programs.
"""

import functools
import io
import json
import math
import os
import subprocess
import sys

import pytest

CLI = os.environ.get("PRECPROBE_CLI", "")
BIN = os.environ.get("PRECPROBE_TFM_BIN", "")
SIDE = os.environ.get("TFM_SIDE", "")
HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.environ.get("PRECPROBE_TFM_PYTHON", sys.executable)

# The programs' shapes (tfm_common.h, python/lm.py).
VOCAB, SEQ, BATCH, HEADS = 16, 16, 8, 2
STEPS = 10   # healthy runs
PLANT = 5    # the planted runs' first fully masked step (odd: its batch is otherwise unpadded)
PLANT_STEPS = PLANT + 2

SOFTMAX = {"aten::softmax", "aten::_softmax", "aten::_safe_softmax", "aten::log_softmax",
           "aten::_log_softmax"}

CONFIGS = {
    "stats": {"task": "statistics", "level": "L1", "statistics": {"range": True}},
    "overflow_check": {"task": "overflow_check", "level": "L1"},
    "on_anomaly": {"task": "statistics", "level": "L1", "record": "on_anomaly"},
}


def python_torch():
    """(major, minor) of the interpreter's torch, or None without torch or precprobe."""
    r = subprocess.run([PY, "-c", "import torch, precprobe; print(torch.__version__)"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    major, minor = r.stdout.strip().split(".")[:2]
    return int(major), int(minor)


TORCH = python_torch() if SIDE in ("", "python") else None

PROGRAMS = []
if SIDE in ("", "cpp"):
    PROGRAMS += ["gpt", "encoder"]
if SIDE in ("", "python"):
    PROGRAMS += ["mha", "hf", "sdpa"]


def skip_reason(prog):
    if not CLI:
        return "needs the CLI (PRECPROBE_CLI)"
    if prog in ("gpt", "encoder"):
        if not BIN or not os.path.exists(os.path.join(BIN, "tfm_" + prog)):
            return "needs the LibTorch programs (PRECPROBE_TFM_BIN)"
    else:
        if TORCH is None:
            return f"{PY} imports no torch or precprobe"
        if prog == "sdpa" and TORCH < (2, 0):
            return f"F.scaled_dot_product_attention is PyTorch 2.0 on; this is {TORCH}"
    return None


def cases(progs=None):
    """(prog, dtype) params."""
    out = []
    for prog in progs or PROGRAMS:
        if prog not in PROGRAMS:
            continue
        for dtype in ("fp32", "bf16"):
            reason = skip_reason(prog)
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            out.append(pytest.param(prog, dtype, id=f"{prog}-{dtype}", marks=marks))
    return out


def command(prog):
    if prog in ("gpt", "encoder"):
        return [os.path.join(BIN, "tfm_" + prog)]
    return [PY, os.path.join(HERE, "python", "lm.py"), "--attn", prog]


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("tfm")


class Run:
    def __init__(self, dump, stdout):
        self.dump = str(dump)
        self.stdout = stdout
        self.grad_norms = [float(l.split()[5]) for l in stdout.splitlines()
                           if l.startswith("step ")]
        live = [l for l in stdout.splitlines() if l.startswith("live watch hits ")]
        self.live_hits = int(live[0].split()[-1]) if live else None
        self.live_lines = [l for l in stdout.splitlines() if l.startswith("  step ")]


@functools.lru_cache(maxsize=None)
def _run(workdir, prog, dtype, mode, planted):
    name = f"{prog}-{dtype}-{mode}-{'planted' if planted else 'healthy'}"
    cfg = os.path.join(workdir, name + ".json")
    with open(cfg, "w") as f:
        json.dump(CONFIGS[mode], f)
    dump = os.path.join(workdir, name)
    cmd = command(prog) + ["--dtype", dtype, "--config", cfg, "--dump", dump]
    cmd += ["--steps", str(PLANT_STEPS), "--fully-masked-from", str(PLANT)] if planted else \
        ["--steps", str(STEPS)]
    r = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout}\n{r.stderr}"
    return Run(dump, r.stdout)


@pytest.fixture(scope="session")
def run(workdir):
    return lambda prog, dtype, mode, planted=False: _run(str(workdir), prog, dtype, mode, planted)


def cli(*args, codes=(0,)):
    r = subprocess.run([CLI, *args], capture_output=True, text=True)
    assert r.returncode in codes, f"precprobe {' '.join(args)} exited {r.returncode}\n" \
                                  f"{r.stdout}\n{r.stderr}"
    return r


def cli_json(*args, codes=(0, 1)):
    r = cli(*args, "--json", codes=codes)
    return json.loads(r.stdout), r.returncode


def report_data(dump, tmp_path):
    html = tmp_path / "report.html"
    cli("report", dump, "-o", str(html))
    page = html.read_text()
    tag = '<script type="application/json" id="precprobe-data">'
    start = page.index(tag) + len(tag)
    return json.loads(page[start:page.index("</script>", start)])


def events(dump, name):
    """The events of rank 0 named `name`, read with zstandard (no precprobe)."""
    import zstandard
    path = os.path.join(dump, "rank0", "events.jsonl.zst")
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        reader = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)
        text = io.TextIOWrapper(reader, encoding="utf-8").read()
    return [e for e in (json.loads(l) for l in text.splitlines() if l) if e.get("name") == name]


def written_records(dump):
    """The names and steps of the op records of a dump (for a failure's message)."""
    out = cli("export", dump, "--format", "jsonl").stdout
    return sorted({(json.loads(l)["step"], json.loads(l)["name"]) for l in out.splitlines()})


def planted_goes_nan(run, prog, dtype):
    """Whether the planted fully masked row turns the program's own gradient norm NaN at PLANT
    (its stdout, not precprobe). Every hand-written softmax over a row of -inf does (gpt,
    encoder, mha on 1.13); a finfo.min mask (hf) gives the row finite scores; SDPA may."""
    r = run(prog, dtype, "stats", True)
    assert len(r.grad_norms) == PLANT_STEPS, r.stdout
    assert all(math.isfinite(g) for g in r.grad_norms[:PLANT]), r.stdout
    nan = not math.isfinite(r.grad_norms[PLANT])
    if prog in ("gpt", "encoder") or (prog == "mha" and TORCH is not None and TORCH < (2, 0)):
        assert nan, f"{prog} {dtype}: a fully masked softmax row should make NaN\n{r.stdout}"
    if prog == "hf":
        assert not nan, f"hf {dtype}: finfo.min rows are finite\n{r.stdout}"
    return nan


# ---- what the planted rows are, worked out from the programs' shapes ----

def expected_origin(prog, dtype):
    """(module of the softmax, K fully masked rows, R rows, masking ops upstream)."""
    if prog == "gpt":  # att [B, H, T, T]: sequence 0's 2 x 16 rows
        return "b0", HEADS * SEQ, BATCH * HEADS * SEQ, {"aten::masked_fill"}
    if prog == "encoder":
        if dtype == "fp32":  # key padding: LibTorch's MHA masked_fill on [B*H, T, T]
            return ("encoder.layers.0.self_attn", HEADS * SEQ, BATCH * HEADS * SEQ,
                    {"aten::masked_fill"})
        # bf16: the causal mask's diagonal off by one: row 0 of each sequence and head
        return "encoder.layers.0.self_attn", BATCH * HEADS, BATCH * HEADS * SEQ, \
            {"aten::full", "aten::triu"}
    if prog == "mha":
        return ("encoder.layers.0.self_attn", HEADS * SEQ, BATCH * HEADS * SEQ,
                {"aten::masked_fill", "aten::masked_fill_"})
    if prog == "sdpa":
        return "b0", HEADS * SEQ, BATCH * HEADS * SEQ, \
            {"aten::masked_fill", "aten::masked_fill_", "aten::where", "aten::logical_not"}
    raise AssertionError(prog)


def masked_elements_step0(prog):
    """-inf elements the first mask writer of step 0 writes in tfm_gpt's b0 (causal mask and
    the padding of step 0: sequence b ends in b % 4 padded keys, each hiding itself from the
    queries at or after it)."""
    assert prog == "gpt"
    causal = SEQ * (SEQ - 1) // 2
    per_head = sum(causal + (b % 4) * (b % 4 + 1) // 2 for b in range(BATCH))
    return HEADS * per_head


# ---- healthy runs: 0 alarms everywhere ----

@pytest.mark.parametrize("prog,dtype", cases())
def test_healthy_run_trains(prog, dtype, run):
    r = run(prog, dtype, "stats")
    assert len(r.grad_norms) == STEPS and all(math.isfinite(g) for g in r.grad_norms), r.stdout


@pytest.mark.parametrize("prog,dtype", cases())
def test_healthy_summary_raises_nothing(prog, dtype, run):
    s, _ = cli_json("summary", run(prog, dtype, "stats").dump, codes=(0,))
    assert s["op_records"] > 0
    assert s["nonfinite_op_records"] == 0, s["nonfinite_ops"]
    assert s["first_nonfinite_step"] is None
    assert s["anomalies"] == []
    assert s["op_watch_hits"] == [], s["op_watch_hits"]
    assert s["watch_hits"] == []


@pytest.mark.parametrize("prog,dtype", cases())
def test_healthy_check_raises_nothing(prog, dtype, run):
    c, code = cli_json("check", run(prog, dtype, "stats").dump)
    problems = [(i["id"], i["evidence"]) for i in c["items"] if i["verdict"] == "problem"]
    assert problems == [] and not c["problem"] and code == 0


@pytest.mark.parametrize("prog,dtype", cases())
def test_healthy_overflow_finds_nothing(prog, dtype, run):
    o, code = cli_json("overflow", run(prog, dtype, "stats").dump)
    assert not o["found"], (o["name"], o["module"], o.get("reason"))
    assert not o["any_nonfinite"] and code == 0


@pytest.mark.parametrize("prog,dtype", cases())
def test_healthy_watch_fires_nothing(prog, dtype, run):
    r = run(prog, dtype, "stats")
    w, code = cli_json("watch", r.dump)
    assert w["hits"] == [] and code == 0, w["hits"][:3]
    assert w["first_nonfinite_step"] is None


@pytest.mark.parametrize("prog,dtype", cases())
def test_healthy_live_watchpoints_fire_nothing(prog, dtype, run):
    r = run(prog, dtype, "stats")
    assert r.live_hits == 0, r.live_lines[:3]
    assert events(r.dump, "watch") == []


@pytest.mark.parametrize("prog,dtype", cases())
@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_healthy_precision_no_mask_makes_a_module_unfit(prog, dtype, fmt, run):
    """A mask (its -inf, a finfo.min fill) is no overflow in any format: no op of a healthy run
    of these small models overflows fp16 or bf16, and no module is kept in fp32 for it."""
    p, _ = cli_json("precision", run(prog, dtype, "stats").dump, "--to", fmt)
    over = [(o["op"], o["module"], o["overflow"]) for o in p["ops"] if o["overflow"] > 0]
    assert over == []
    unfit = [m["module"] for m in p["modules"] if m["keep_fp32"] and m["overflow"] > 0]
    assert unfit == []
    if fmt == "bf16":  # bf16's range holds every finite value of these runs
        assert [m["module"] for m in p["modules"] if m["keep_fp32"]] == []


@pytest.mark.parametrize("prog,dtype", cases())
def test_healthy_report_raises_nothing(prog, dtype, run, tmp_path):
    d = report_data(run(prog, dtype, "stats").dump, tmp_path)
    assert not d["overflow"]["found"], (d["overflow"]["name"], d["overflow"]["module"])
    assert not d["checklist"]["problem"], [i["id"] for i in d["checklist"]["items"]
                                           if i["verdict"] == "problem"]
    assert d["op_watch"]["hits"] == []
    assert d["nonfinite"]["steps_with"] == 0
    assert d["precision"]["formats"]["bf16"]["keep_fp32"] == []


@pytest.mark.parametrize("prog,dtype", cases())
def test_healthy_overflow_check_writes_no_origin(prog, dtype, run):
    r = run(prog, dtype, "overflow_check")
    s, _ = cli_json("summary", r.dump, codes=(0,))
    assert s["op_records"] == 0, written_records(r.dump)
    o, code = cli_json("overflow", r.dump)
    assert not o["found"] and code == 0, (o["name"], o["module"])


@pytest.mark.parametrize("prog,dtype", cases())
def test_healthy_on_anomaly_replays_nothing(prog, dtype, run):
    r = run(prog, dtype, "on_anomaly")
    assert events(r.dump, "anomaly") == []
    s, _ = cli_json("summary", r.dump, codes=(0,))
    assert s["anomalies"] == [] and s["op_records"] == 0


@pytest.mark.parametrize("prog,dtype", cases([p for p in PROGRAMS if p not in ("hf", "sdpa")]))
def test_healthy_masking_is_shown_as_masking(prog, dtype, run):
    """summary's masking line: the -inf masks counted and said as masking (hf's finfo.min
    mask writes no -inf: nothing to say; sdpa's bool mask becomes -inf inside the op, seen only
    as an input of its backward kernel, which summary's per-frame digests of non-finite
    outputs do not show: nothing to say either, and nothing raised, as the tests above check)."""
    s, _ = cli_json("summary", run(prog, dtype, "stats").dump, codes=(0,))
    m = s["masking"]
    assert m is not None and m["writers"] > 0 and m["steps"] == STEPS
    assert "-inf" in m["text"] and "not counted as overflow" in m["text"]
    assert m["step"] == 0
    if prog == "gpt":
        assert m["op"] == "aten::masked_fill"
        assert m["elements"] == masked_elements_step0("gpt")


@pytest.mark.parametrize("prog,dtype", cases(["gpt"]))
def test_healthy_masking_line_names_its_module(prog, dtype, run):
    """Issue 66 item 1's example: "... masked with -inf by aten::masked_fill in b0"."""
    s, _ = cli_json("summary", run(prog, dtype, "stats").dump, codes=(0,))
    assert " in b0" in s["masking"]["text"], s["masking"]["text"]


# ---- planted fully masked rows: named where they are born ----

def assert_origin(o, prog, dtype, *, masked_by=True):
    module, k, rows, writers = expected_origin(prog, dtype)
    got = (o["found"], o["step"], o["op"], o["direction"], o["module"])
    assert got == (True, PLANT, got[2], "forward", module) and o["op"] in SOFTMAX, (got, o.get("reason"))
    assert o["reason"] is not None and \
        f"every element of {k} of its {rows} rows was -inf: fully masked rows" in o["reason"], \
        o["reason"]
    if masked_by:
        mb = o["masked_by"]
        assert mb is not None and mb["op"] in writers and mb["step"] == PLANT, mb
        assert mb["seq"] < o["seq"]


@pytest.mark.parametrize("prog,dtype", cases())
def test_planted_overflow_names_the_softmax(prog, dtype, run):
    r = run(prog, dtype, "stats", True)
    o, code = cli_json("overflow", r.dump)
    if not planted_goes_nan(run, prog, dtype):
        assert not o["found"] and not o["any_nonfinite"] and code == 0, (o["name"], o["module"])
        return
    assert code == 1
    assert_origin(o, prog, dtype)
    if prog == "gpt":  # the mask upstream is b0's own masked_fill
        assert o["masked_by"]["module"] == "b0", o["masked_by"]


@pytest.mark.parametrize("prog,dtype", cases())
def test_planted_summary_and_check_name_the_softmax(prog, dtype, run):
    r = run(prog, dtype, "stats", True)
    nan = planted_goes_nan(run, prog, dtype)
    c, _ = cli_json("check", r.dump)
    items = {i["id"]: i for i in c["items"]}
    # Nothing in the batches is NaN: the model made it.
    assert items["data.missing_values"]["verdict"] != "problem", \
        items["data.missing_values"]["evidence"]
    if not nan:
        assert not c["problem"], [i for i in c["items"] if i["verdict"] == "problem"]
        return
    ev = items["mp.overflow"]
    assert ev["verdict"] == "problem" and "fully masked rows" in ev["evidence"], ev["evidence"]
    assert f"step {PLANT}" in ev["evidence"]
    module = expected_origin(prog, dtype)[0]
    assert f"in module {module} " in ev["evidence"], ev["evidence"]


@pytest.mark.parametrize("prog,dtype", cases())
def test_planted_overflow_check_names_the_softmax(prog, dtype, run):
    r = run(prog, dtype, "overflow_check", True)
    o, code = cli_json("overflow", r.dump)
    if not planted_goes_nan(run, prog, dtype):
        assert not o["found"] and code == 0, (o["name"], o["module"])
        return
    assert_origin(o, prog, dtype, masked_by=False)


@pytest.mark.parametrize("prog,dtype", cases())
def test_planted_on_anomaly_replay_names_the_softmax(prog, dtype, run):
    r = run(prog, dtype, "on_anomaly", True)
    anomalies = events(r.dump, "anomaly")
    if not planted_goes_nan(run, prog, dtype):
        assert anomalies == []
        return
    assert anomalies, r.stdout
    a = anomalies[0]
    assert a["step"] == PLANT and a["reproduced"] is True, a
    assert a["origin"] in SOFTMAX, a
    assert a["classification"] == "invalid", (a["classification"], a["why"])
    assert "fully masked rows" in a["why"], a["why"]
    # The replay's records: overflow on them gives the same answer.
    o, _ = cli_json("overflow", r.dump)
    assert_origin(o, prog, dtype)
    assert o["name"] == a["origin_record"]


@pytest.mark.parametrize("prog,dtype", cases())
def test_planted_same_answer_three_ways(prog, dtype, run):
    if not planted_goes_nan(run, prog, dtype):
        pytest.skip("the planted row stays finite here: nothing to name")
    names = {}
    for mode in ("stats", "overflow_check", "on_anomaly"):
        o, _ = cli_json("overflow", run(prog, dtype, mode, True).dump)
        names[mode] = (o["step"], o["name"], o["module"], o["reason"])
    assert len(set(names.values())) == 1, names


# ---- placement (item 3): each op in the module whose forward ran it ----

def forward_ops(dump, step):
    """Step `step`'s forward records of depth 0 in seq order: (seq, name, op, params read),
    from `precprobe export` (the records, not an analysis)."""
    r = cli("export", dump, "--format", "jsonl")
    recs = {}
    for line in r.stdout.splitlines():
        row = json.loads(line)
        if row["step"] != step or row["dir"] != "forward" or row["depth"] != 0:
            continue
        rec = recs.setdefault(row["seq"], {"name": row["name"], "op": row["op"], "params": set()})
        if row["io"] == "input" and row["param"]:
            rec["params"].add(row["param"])
    return [(seq, v["name"], v["op"], v["params"]) for seq, v in sorted(recs.items())]


def block_truth(ops, block, nxt):
    """{record name: module} for the forward ops of `block` (from the first op reading one of
    its parameters to the first reading one of `nxt`'s): a child's ops are those from the first
    to the last reading that child's parameters (a Linear's t, matmul, add_), every other op
    ran in the block's own forward."""
    first = next(i for i, o in enumerate(ops) if any(p.startswith(block + ".") for p in o[3]))
    end = next(i for i, o in enumerate(ops) if any(p.startswith(nxt + ".") for p in o[3]))
    span = ops[first:end]
    truth = {o[1]: block for o in span}
    children = {p.split(".")[1] for o in span for p in o[3]}
    for child in children:
        idx = [i for i, o in enumerate(span) if any(p.startswith(f"{block}.{child}.") for p in o[3])]
        for o in span[idx[0]:idx[-1] + 1]:
            truth[o[1]] = f"{block}.{child}"
    return truth


@pytest.mark.parametrize("prog,dtype", cases(["gpt", "hf"]))
def test_placement_of_block_b0(prog, dtype, run):
    dump = run(prog, dtype, "stats").dump
    truth = block_truth(forward_ops(dump, 1), "b0", "b1")
    mask_op = "aten::masked_fill" if prog == "gpt" else "aten::add"
    p, _ = cli_json("precision", dump, "--to", "bf16")
    placed = {o["op"]: o["module"] for o in p["ops"] if o["direction"] == "forward"}
    judged = {n: m for n, m in truth.items() if n in placed}
    wrong = {n: (placed[n], m) for n, m in judged.items() if placed[n] != m}
    assert wrong == {}, f"record: (placed, ran in): {wrong}"
    # The block's own ops are there to judge: the scores' softmax and the mask.
    own = [n for n, m in judged.items() if m == "b0"]
    assert any(n.startswith("aten::softmax") or n.startswith("aten::_softmax") for n in own), own
    if prog == "gpt":
        assert "aten::masked_fill.0.forward" in own, sorted(truth.items())


@pytest.mark.parametrize("prog,dtype", cases(["gpt", "hf"]))
def test_placement_outside_every_module(prog, dtype, run):
    dump = run(prog, dtype, "stats").dump
    p, _ = cli_json("precision", dump, "--to", "bf16")
    loss = [o for o in p["ops"] if o["direction"] == "forward" and
            ("cross_entropy" in o["op"] or "nll_loss" in o["op"])]
    assert loss and {o["module"] for o in loss} == {"(top level)"}, loss
    s, _ = cli_json("summary", dump, "--by", "module", codes=(0,))
    names = {m["module"] for m in s["modules"]}
    for outside in ("(top level)", "(after backward)", "(optimizer)"):
        assert outside in names, sorted(names)
