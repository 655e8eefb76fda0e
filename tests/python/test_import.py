"""The extension and the torch package share one LibTorch: one libtorch_cpu mapped in the
process, the one the extension was linked against, with the same pybind11 and C++ ABI."""

import os
import subprocess

import torch

import precprobe
from precprobe import _precprobe


def test_one_libtorch_cpu_in_the_process_and_it_is_the_extensions():
    abi = _precprobe._abi
    mapped = {line.split()[-1] for line in open("/proc/self/maps") if "libtorch_cpu" in line}
    assert len(mapped) == 1
    assert set(abi["libtorch_cpu"]) == mapped
    ldd = subprocess.run(["ldd", _precprobe.__file__], capture_output=True, text=True).stdout
    linked = [line.split("=>")[1].split()[0] for line in ldd.splitlines()
              if "libtorch_cpu" in line and "=>" in line]
    assert linked and os.path.realpath(linked[0]) == os.path.realpath(next(iter(mapped)))


def test_the_abi_tags_agree_with_torchs():
    abi = _precprobe._abi
    assert abi["cxx11_abi"] == torch._C._GLIBCXX_USE_CXX11_ABI
    for key in ("PYBIND11_COMPILER_TYPE", "PYBIND11_STDLIB", "PYBIND11_BUILD_ABI"):
        assert abi[key] == getattr(torch._C, "_" + key)
    assert abi["libtorch_headers"].split(".")[:2] == torch.__version__.split(".")[:2]


def test_a_tensor_crosses_as_the_same_tensor(tmp_path):
    """save_state reads the tensor's memory: a view's values, an in-place change just made."""
    t = torch.arange(6.0).reshape(2, 3)
    t.mul_(2)
    precprobe.save_state({"v": t.t()}, tmp_path / "v.safetensors")
    back = precprobe.read_state(tmp_path / "v.safetensors")["v"]
    assert torch.equal(back, t.t())
    assert precprobe.Error.__module__ == "precprobe"
