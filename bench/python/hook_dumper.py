"""A forward/backward-hook statistics dumper written for the benchmark: msprobe's mechanism
(module forward hooks and backward hooks computing min, max, mean and norm of each module
output with torch ops, read to Python floats, one JSON file per step), so that precprobe's
L1 can be set beside what a Python dumper of that kind costs. Not a product: only the cost
is of interest.
"""

import json
import os

import torch


def _stats(t):
    if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() == 0:
        return None
    d = t.detach()
    return {"dtype": str(d.dtype), "shape": list(d.shape), "min": d.min().item(),
            "max": d.max().item(), "mean": d.mean().item(), "norm": d.norm().item()}


def _flat(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for item in x for t in _flat(item)]
    return []


class HookDumper:
    def __init__(self, model, out_dir):
        self.out_dir = out_dir
        self.records = {}
        self.step = 0
        self.calls = {}
        self.handles = []
        os.makedirs(out_dir, exist_ok=True)
        for name, m in model.named_modules():
            if name == "":
                continue
            self.handles.append(m.register_forward_hook(self._forward(name)))
            self.handles.append(m.register_full_backward_hook(self._backward(name)))

    def _key(self, name, direction):
        n = self.calls.get((name, direction), 0)
        self.calls[(name, direction)] = n + 1
        return f"{name}.{n}.{direction}"

    def _forward(self, name):
        def hook(module, inputs, output):
            self.records[self._key(name, "forward")] = {
                "input": [_stats(t) for t in _flat(inputs)],
                "output": [_stats(t) for t in _flat(output)]}
        return hook

    def _backward(self, name):
        def hook(module, grad_input, grad_output):
            self.records[self._key(name, "backward")] = {
                "grad_input": [_stats(t) for t in _flat(grad_input)],
                "grad_output": [_stats(t) for t in _flat(grad_output)]}
        return hook

    def end_step(self):
        with open(os.path.join(self.out_dir, f"step{self.step}.json"), "w") as f:
            json.dump(self.records, f)
        self.records = {}
        self.calls = {}
        self.step += 1

    def close(self):
        for h in self.handles:
            h.remove()
