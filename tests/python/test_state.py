"""save_state / load_state across languages: a file written by C++ read by an independent
reader, a Python model's state through the LibTorch twin and back bit for bit, and the
errors that name a mismatch."""

import os

import numpy as np
import pytest
import torch

import precprobe
from conftest import independent_read_state, run_tool
from twin import make_model, pattern


def python_names(model):
    return [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]


def test_a_cpp_written_file_reads_with_struct_json_numpy(tmp_path):
    path = tmp_path / "cpp.safetensors"
    run_tool("pattern", path)
    header, arrays = independent_read_state(path)
    model = make_model()
    # The LibTorch twin names its tensors as Python names the same architecture, in the same
    # order (parameters, then buffers; BatchNorm's num_batches_tracked included).
    names = [k for k in header if k != "__metadata__"]
    assert names == python_names(model)
    assert header["__metadata__"]["writer"] == "precprobe_pytest_tool"
    state = dict(model.named_parameters())
    state.update(dict(model.named_buffers()))
    for i, name in enumerate(names):
        t = state[name]
        assert list(arrays[name].shape) == list(t.shape), name
        expected = pattern(t.numel(), i, t.dtype).reshape(t.shape).numpy()
        assert arrays[name].dtype == expected.dtype, name
        assert np.array_equal(arrays[name], expected), name
    assert header["1.num_batches_tracked"]["dtype"] == "I64"
    assert header["1.num_batches_tracked"]["shape"] == []


def test_python_state_through_the_cpp_twin_and_back_bit_for_bit(tmp_path):
    torch.manual_seed(3)
    model = make_model()
    with torch.no_grad():
        model[1].running_mean.normal_()
        model[1].running_var.uniform_(0.5, 2.0)
        model[1].num_batches_tracked.fill_(5)
    src, back = tmp_path / "py.safetensors", tmp_path / "back.safetensors"
    precprobe.save_state(model, src, metadata={"who": "pytest"})
    header, arrays = independent_read_state(src)
    assert header["__metadata__"]["who"] == "pytest"
    for name, t in precprobe.state_tensors(model):
        assert np.array_equal(arrays[name], t.detach().numpy()), name
    run_tool("roundtrip", src, back)
    _, again = independent_read_state(back)
    for name, t in precprobe.state_tensors(model):
        assert again[name].tobytes() == t.detach().numpy().tobytes(), name
    # And into a fresh Python model.
    other = make_model()
    precprobe.load_state(other, back)
    for (n, a), (_, b) in zip(precprobe.state_tensors(model), precprobe.state_tensors(other)):
        assert torch.equal(a, b), n
    assert other[1].num_batches_tracked.item() == 5
    assert other[0].weight.requires_grad


def test_read_state_returns_the_files_tensors(tmp_path):
    path = tmp_path / "cpp.safetensors"
    run_tool("pattern", path)
    tensors, meta = precprobe.read_state(path, with_metadata=True)
    assert meta["producer"] == "precprobe"
    _, arrays = independent_read_state(path)
    assert list(tensors) == list(arrays)
    for name, t in tensors.items():
        assert np.array_equal(t.numpy(), arrays[name])


def test_a_mismatch_is_an_error_naming_it_and_nothing_is_loaded(tmp_path):
    path = tmp_path / "wide.safetensors"
    wide = torch.nn.Sequential(torch.nn.Conv2d(1, 5, 3, padding=1), torch.nn.BatchNorm2d(5))
    precprobe.save_state(wide, path)
    model = make_model()
    before = [t.clone() for _, t in precprobe.state_tensors(model)]
    with pytest.raises(precprobe.Error) as e:
        precprobe.load_state(model, path)
    msg = str(e.value)
    assert str(path) in msg
    assert "'0.weight': shape [5,1,3,3] in the file vs [4,1,3,3] in the module" in msg
    assert "'4.bias' is missing from the file" in msg
    assert "'1.running_mean': shape [5] in the file vs [4] in the module" in msg
    for b, (_, t) in zip(before, precprobe.state_tensors(model)):
        assert torch.equal(b, t)
    # The C++ side says the same.
    r = run_tool("load", path, check=False)
    assert r.returncode == 3
    assert "'0.weight': shape [5,1,3,3] in the file vs [4,1,3,3] in the module" in r.stderr


def test_dtype_and_unexpected_names(tmp_path):
    path = tmp_path / "d.safetensors"
    precprobe.save_state({"w": torch.zeros(2, dtype=torch.float64), "extra": torch.zeros(1)}, path)
    with pytest.raises(precprobe.Error, match="'w': dtype F64 in the file vs F32 in the module"):
        precprobe.load_state({"w": torch.zeros(2)}, path)
    with pytest.raises(precprobe.Error, match="'extra' is in the file but not in the module"):
        precprobe.load_state({"w": torch.zeros(2, dtype=torch.float64)}, path)


def test_strict_false_returns_what_load_state_dict_returns(tmp_path):
    """A port without the original's bias: the same missing and unexpected keys as PyTorch's
    own load_state_dict(strict=False), and the same values loaded."""
    path = tmp_path / "bias.safetensors"
    with_bias = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1))
    precprobe.save_state(with_bias, path)
    ours = torch.nn.Sequential(torch.nn.Linear(3, 2, bias=False), torch.nn.ReLU(),
                               torch.nn.Linear(2, 1))
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 2, bias=False), torch.nn.ReLU(),
                                 torch.nn.Linear(2, 1))
    got = precprobe.load_state(ours, path, strict=False)
    want = theirs.load_state_dict(with_bias.state_dict(), strict=False)
    assert got.missing_keys == list(want.missing_keys) == []
    assert got.unexpected_keys == list(want.unexpected_keys) == ["0.bias"]
    for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()):
        assert torch.equal(a, b)
    with pytest.raises(precprobe.Error, match="'0.bias' is in the file but not in the module"):
        precprobe.load_state(ours, path)


def test_wrong_arguments_raise_python_errors(tmp_path):
    with pytest.raises(TypeError):
        precprobe.save_state(42, tmp_path / "x")
    with pytest.raises(TypeError):
        precprobe.save_state({"a": 1}, tmp_path / "x")
    with pytest.raises(TypeError):
        precprobe.load_state(make_model(), 3.5)
    with pytest.raises(precprobe.Error, match="cannot open state file"):
        precprobe.load_state(make_model(), tmp_path / "absent.safetensors")
    with pytest.raises(precprobe.Error, match="ComplexFloat"):
        precprobe.save_state({"z": torch.zeros(2, dtype=torch.complex64)}, tmp_path / "z")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00[]")
    with pytest.raises(precprobe.Error, match="does not start with"):
        precprobe.read_state(bad)
    assert issubclass(precprobe.Error, RuntimeError)
    assert not os.path.exists(tmp_path / "x")
