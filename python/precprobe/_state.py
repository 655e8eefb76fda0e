"""save_state / load_state / read_state: a model's parameters and buffers by name in the
safetensors layout, through the same C++ code as precprobe::save_state (precprobe/state.h),
so that a file written here loads into the LibTorch port and the other way round.

Names are named_parameters() then named_buffers() (buffers set to None are left out): the
names LibTorch's named_parameters()/named_buffers() give the same architecture.
"""

import collections
import os
from collections.abc import Mapping

import torch

from . import _precprobe


def state_tensors(module):
    """[(name, tensor)]: the module's parameters, then its buffers; or a mapping's items."""
    if isinstance(module, torch.nn.Module):
        out = list(module.named_parameters())
        out += [(n, b) for n, b in module.named_buffers() if b is not None]
        return out
    if isinstance(module, Mapping):
        out = []
        for name, t in module.items():
            if not isinstance(name, str) or not isinstance(t, torch.Tensor):
                raise TypeError(
                    "precprobe: a state mapping holds str -> torch.Tensor; "
                    f"{name!r} -> {type(t).__name__}")
            out.append((name, t))
        return out
    raise TypeError(
        "precprobe: expected a torch.nn.Module or a mapping of names to tensors, not "
        f"{type(module).__name__}")


def _path(path):
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"precprobe: a path is a str or os.PathLike, not {type(path).__name__}")
    return os.fsdecode(os.fspath(path))


def save_state(module, path, metadata=None):
    """Writes the module's parameters and buffers (or a mapping's tensors) to `path`.
    `metadata`: a dict of strings for the header's "__metadata__". Raises precprobe.Error
    naming the tensor or path (a dtype the format cannot hold, an I/O error)."""
    if metadata is not None and not isinstance(metadata, Mapping):
        raise TypeError("precprobe: save_state: metadata is a dict of strings")
    _precprobe._save_state(state_tensors(module), _path(path), metadata)


LoadResult = collections.namedtuple("LoadResult", ["missing_keys", "unexpected_keys"])


def load_state(module, path, strict=True):
    """Copies the file's tensors into the module's parameters and buffers, in place. Raises
    precprobe.Error naming every name missing from the file or from the module, and every
    shape or dtype that differs, before anything is written. With `strict=False`, as
    `load_state_dict(strict=False)`: names on one side only are returned as
    LoadResult(missing_keys, unexpected_keys) instead (a shape or dtype still raises)."""
    missing, unexpected = _precprobe._load_state(state_tensors(module), _path(path),
                                                 bool(strict))
    return LoadResult(list(missing), list(unexpected))


def read_state(path, with_metadata=False):
    """{name: tensor} of every tensor in the file, in its header's order (CPU tensors);
    with `with_metadata`, (tensors, the header's "__metadata__")."""
    tensors, metadata = _precprobe._read_state(_path(path))
    out = dict(tensors)
    return (out, dict(metadata)) if with_metadata else out
