"""Shared helpers of the Python module's tests (run by ctest's python:pytest entry, which sets
PYTHONPATH to the built package and names the CLI and the C++ tool in the environment).

The dump and the state file are read here without precprobe: zstandard + json for the
streams, struct + json + numpy for the state file, so the tests check precprobe's files
against the published formats, not against its own reader.
"""

import io
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch
import zstandard

sys.path.insert(0, os.path.dirname(__file__))

CLI = os.environ.get("PRECPROBE_CLI", "")
TOOL = os.environ.get("PRECPROBE_TEST_TOOL", "")
SOURCE_DIR = os.environ.get(
    "PRECPROBE_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def read_stream(dump, name, rank=0):
    """Every record of rank<rank>/<name>.jsonl.zst, as dicts (zstd frames of JSON lines); the
    op records of a binary ops.bin.zst (the debugger's default) through precprobe.read_ops."""
    if name == "ops" and os.path.exists(os.path.join(dump, f"rank{rank}", "ops.bin.zst")):
        import precprobe
        return precprobe.read_ops(os.path.join(dump, f"rank{rank}"))
    path = os.path.join(dump, f"rank{rank}", f"{name}.jsonl.zst")
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        reader = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)
        text = io.TextIOWrapper(reader, encoding="utf-8").read()
    return [json.loads(line) for line in text.splitlines() if line]


def read_meta(dump, rank=0):
    with open(os.path.join(dump, f"rank{rank}", "meta.json"), encoding="utf-8") as f:
        return json.load(f)


# safetensors' dtype names and NumPy's little-endian types (BF16 has none: raw uint16).
SAFETENSORS_NUMPY = {
    "BOOL": "|b1", "U8": "|u1", "I8": "|i1", "I16": "<i2", "F16": "<f2", "BF16": "<u2",
    "I32": "<i4", "F32": "<f4", "F64": "<f8", "I64": "<i8",
}


def independent_read_state(path):
    """A safetensors reader written from the format's description: (header, {name: array}).
    Checks the layout rules (header length, '{', 8-byte padding, offsets contiguous from 0,
    sizes, end of file) with plain asserts."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    assert 8 + n <= len(data)
    header_text = data[8:8 + n].decode("utf-8")
    assert header_text.startswith("{")
    header = json.loads(header_text)
    body = data[8 + n:]
    arrays, spans = {}, []
    for name, info in header.items():
        if name == "__metadata__":
            assert all(isinstance(v, str) for v in info.values())
            continue
        begin, end = info["data_offsets"]
        dtype = np.dtype(SAFETENSORS_NUMPY[info["dtype"]])
        count = int(np.prod(info["shape"], dtype=np.int64))
        assert end - begin == count * dtype.itemsize, name
        arrays[name] = np.frombuffer(body[begin:end], dtype=dtype).reshape(info["shape"])
        spans.append((begin, end))
    at = 0
    for begin, end in sorted(spans):
        assert begin == at
        at = end
    assert 8 + n + at == len(data)
    return header, arrays


def run_tool(*args, check=True):
    assert TOOL, "PRECPROBE_TEST_TOOL is not set (run through ctest)"
    r = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"{TOOL} {args}: exit {r.returncode}\n{r.stderr}")
    return r


def run_cli(*args):
    assert CLI, "PRECPROBE_CLI is not set (run through ctest)"
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
    yield


@pytest.fixture
def dump_dir(tmp_path):
    return str(tmp_path / "dump")
