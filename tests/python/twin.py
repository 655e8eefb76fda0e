"""The small model of the Python tests and its LibTorch twin in state_tool.cpp: same
architecture, so the same parameter and buffer names on both sides."""

import torch
from torch import nn


def make_model():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Flatten(), nn.Linear(4 * 5 * 5, 3))


def pattern(numel, index, dtype):
    """Tensor `index` of state_tool's "pattern" command, computed independently."""
    v = (torch.arange(numel, dtype=torch.int64) % 97 - 48) * (index + 1)
    if dtype.is_floating_point:
        return (v.to(torch.float64) / 64.0).to(dtype)
    return v.to(dtype)


def inputs(seed=7):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 1, 5, 5, generator=g)
    y = torch.randint(0, 3, (8,), generator=g)
    return x, y
