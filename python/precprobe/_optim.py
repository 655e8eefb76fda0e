"""The "on_anomaly" snapshot of a torch.optim optimizer's own state.

The C++ snapshot covers the parameters (and buffers, RNG) of the models given to start(); a
Python optimizer keeps its state in `optimizer.state` (a dict per parameter: tensors such as
exp_avg, and Python values) and its hyper-parameters in `param_groups`. OptimizerSnapshot
copies both before each watched step and puts them back when the step is replayed: tensors
into buffers allocated once per state layout (copies the debugger does not record), other
values by deep copy, entries created during the step removed.

Threads: the training thread, between steps.
"""

import copy

import torch

from . import _precprobe


class OptimizerSnapshot:
    def __init__(self, optimizer):
        self.optimizer = optimizer
        self._layout = None  # (id(param), key, shape, dtype, device) of each state tensor
        self._buffers = []
        self._saved = None

    def capture(self):
        opt = self.optimizer
        live, layout, entries = [], [], {}
        for p, s in opt.state.items():
            values = {}
            for k, v in s.items():
                if isinstance(v, torch.Tensor):
                    live.append((p, k, v))
                    layout.append((id(p), k, tuple(v.shape), v.dtype, v.device))
                else:
                    values[k] = copy.deepcopy(v)
            entries[p] = (values, set(s.keys()))
        tensors = [v for _, _, v in live]
        if layout == self._layout:
            _precprobe._quiet_copy(self._buffers, tensors)
        else:
            self._buffers = _precprobe._quiet_clone(tensors)
            self._layout = layout
        groups = [{k: copy.deepcopy(v) for k, v in g.items() if k != "params"}
                  for g in opt.param_groups]
        self._saved = (entries, live, groups)

    def restore(self):
        if self._saved is None:
            return
        entries, live, groups = self._saved
        state = self.optimizer.state
        for p in list(state.keys()):
            if p not in entries:
                del state[p]  # made during the step (the optimizer's first step)
        for p, (values, keys) in entries.items():
            s = state[p]
            for k in list(s.keys()):
                if k not in keys:
                    del s[k]
            for k, v in values.items():
                s[k] = copy.deepcopy(v)
        for (p, k, t), _ in zip(live, self._buffers):
            state[p][k] = t  # the very tensor, in case the step replaced it
        _precprobe._quiet_copy([t for _, _, t in live], self._buffers)
        for g, saved in zip(self.optimizer.param_groups, groups):
            g.update(copy.deepcopy(saved))

    @property
    def bytes(self):
        return sum(b.numel() * b.element_size() for b in self._buffers)
