"""The extension and the torch package share one LibTorch: one libtorch_cpu mapped in the
process, the one the extension was linked against, with the same pybind11 and C++ ABI."""

import os
import subprocess

import pytest
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


PYBIND11_KEYS = ("PYBIND11_COMPILER_TYPE", "PYBIND11_STDLIB", "PYBIND11_BUILD_ABI")


def test_the_abi_tags_agree_with_torchs():
    abi = _precprobe._abi
    assert abi["cxx11_abi"] == torch._C._GLIBCXX_USE_CXX11_ABI
    # torch up to 2.8 exports pybind11's ABI keys; 2.9 on (pybind11 3) exports none, and
    # the extension then compares none.
    exported = [k for k in PYBIND11_KEYS if hasattr(torch._C, "_" + k)]
    assert [k for k in PYBIND11_KEYS if k in abi] == exported
    for key in exported:
        assert abi[key] == getattr(torch._C, "_" + key)
    assert abi["libtorch_headers"].split(".")[:2] == torch.__version__.split(".")[:2]


class _FakeC:
    """A torch._C shaped like the real one (its ABI attributes copied), one thing changed."""

    def __init__(self, **change):
        self._GLIBCXX_USE_CXX11_ABI = torch._C._GLIBCXX_USE_CXX11_ABI
        for key in PYBIND11_KEYS:
            if hasattr(torch._C, "_" + key):
                setattr(self, "_" + key, getattr(torch._C, "_" + key))
        for name, value in change.items():
            setattr(self, name, value)


class _FakeTorch:
    def __init__(self, version=None, **change):
        self.__version__ = version or torch.__version__
        self._C = _FakeC(**change)


def test_the_import_check_accepts_this_torch_with_or_without_pybind11_keys():
    assert _precprobe._check_torch(_FakeTorch())["torch_package"] == torch.__version__
    bare = _FakeTorch()
    for key in PYBIND11_KEYS:  # as torch 2.9 on: pybind11 3 exports none of them
        bare._C.__dict__.pop("_" + key, None)
    abi = _precprobe._check_torch(bare)
    assert not any(k in abi for k in PYBIND11_KEYS)


def test_the_import_check_refuses_another_libtorch_and_says_what_differs():
    with pytest.raises(ImportError, match=r"built against LibTorch .*, but torch 1\.0\.0 is imported"):
        _precprobe._check_torch(_FakeTorch(version="1.0.0"))
    abi_flag = not torch._C._GLIBCXX_USE_CXX11_ABI
    with pytest.raises(ImportError, match=r"_GLIBCXX_USE_CXX11_ABI=%d" % abi_flag):
        _precprobe._check_torch(_FakeTorch(_GLIBCXX_USE_CXX11_ABI=abi_flag))
    with pytest.raises(ImportError, match=r"pybind11 COMPILER_TYPE differs: torch _msvc"):
        _precprobe._check_torch(_FakeTorch(_PYBIND11_COMPILER_TYPE="_msvc"))
    with pytest.raises(ImportError, match=r"Build precprobe against the LibTorch of the torch you import"):
        _precprobe._check_torch(_FakeTorch(version="1.0.0"))


def test_a_tensor_crosses_as_the_same_tensor(tmp_path):
    """save_state reads the tensor's memory: a view's values, an in-place change just made."""
    t = torch.arange(6.0).reshape(2, 3)
    t.mul_(2)
    precprobe.save_state({"v": t.t()}, tmp_path / "v.safetensors")
    back = precprobe.read_state(tmp_path / "v.safetensors")["v"]
    assert torch.equal(back, t.t())
    assert precprobe.Error.__module__ == "precprobe"
