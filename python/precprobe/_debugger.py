"""precprobe.PrecisionDebugger: the C++ PrecisionDebugger (include/precprobe/debugger.h) for
PyTorch programs. It observes every ATen op the program runs — the Python torch and precprobe
share one libtorch_cpu — and writes the same dump the C++ library writes.

Models are torch.nn.Modules (parameter names from named_parameters()), optimizers
torch.optim optimizers; both cross to C++ as the tensors they hold (src/python/mirror.h).

Threads: construct, start, step, run_step, stop from one Python thread.
"""

import json
import os
import random
import weakref
from collections.abc import Mapping

import torch

from . import _precprobe
from ._optim import OptimizerSnapshot
from ._scaler import ScalerWatch

_live = weakref.WeakSet()


def _stop_all():
    """At interpreter exit: stop every debugger while Python can still free tensors."""
    for d in list(_live):
        try:
            d.stop()
        except Exception:
            pass


def _json_default(v):
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    if isinstance(v, (set, tuple)):
        return list(v)
    raise TypeError(f"precprobe: a config value of type {type(v).__name__} is not JSON")


def _model_spec(name, module):
    if not isinstance(module, torch.nn.Module):
        raise TypeError(
            f"precprobe: start(): the model {name + ' ' if name else ''}must be a "
            f"torch.nn.Module, not {type(module).__name__}")
    modules = [(path, type(m).__name__) for path, m in module.named_modules()]
    params = list(module.named_parameters())
    buffers = [(n, b) for n, b in module.named_buffers() if b is not None]
    return _precprobe._ModelSpec(name, modules, params, buffers)


def _optimizer_list(optimizer):
    if optimizer is None:
        return []
    opts = list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer]
    for i, o in enumerate(opts):
        if not isinstance(o, torch.optim.Optimizer):
            raise TypeError(
                f"precprobe: start(): optimizer {i} must be a torch.optim.Optimizer, not "
                f"{type(o).__name__}")
    return opts


def _mark_optimizer_steps(debugger):
    """The ops every optimizer's step() runs are marked in the records ("opt"), so that the
    commands tell its work from what ran between backward and it (clip_grad_norm_, which runs
    under no_grad from PyTorch 2.0 on: docs/cli.md, "Modules"). PyTorch 2.0 on has global
    optimizer step hooks; 1.13 has none (its clip_grad_norm_ runs with grad mode on, which
    tells it apart). The hooks hold the debugger weakly (a debugger the program drops is
    collected and stops) and go with it. The handles, to remove at stop()."""
    try:
        from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                           register_optimizer_step_pre_hook)
    except ImportError:
        return []
    ref = weakref.ref(debugger)

    def mark(in_step):
        d = ref()
        if d is not None:
            d._dbg.mark_optimizer(in_step)

    handles = [register_optimizer_step_pre_hook(lambda *_: mark(True)),
               register_optimizer_step_post_hook(lambda *_: mark(False))]
    weakref.finalize(debugger, _remove_hooks, list(handles))
    return handles


def _remove_hooks(handles):
    for h in handles:
        h.remove()


class PrecisionDebugger:
    """Records per-op tensor statistics of the steps a config selects.

        dbg = precprobe.PrecisionDebugger("config.json")          # msprobe's config.json
        dbg = precprobe.PrecisionDebugger(task="statistics", level="L1",
                                          dump_path="dump", step=[0, 1, 2])
        dbg.start(model)                       # or start({"G": g, "D": d}, [opt_g, opt_d])
        ... dbg.step() after each step ...
        dbg.stop()

    `config`: a path to a config.json, or a dict of its keys; keyword options are config.json
    keys too (they win over the file's). $PRECPROBE_CONFIG, when set, replaces both (as in
    C++). Raises precprobe.Error naming a bad key or value. Used as a context manager, the
    debugger stops when the block ends.
    """

    def __init__(self, config=None, **options):
        if "config_path" in options:  # msprobe's name for it
            if config is not None:
                raise TypeError("precprobe: give config or config_path, not both")
            config = options.pop("config_path")
        path, text = "", None
        if isinstance(config, (str, bytes, os.PathLike)):
            if options:
                with open(os.fspath(config), encoding="utf-8") as f:
                    try:
                        base = json.load(f)
                    except ValueError as e:
                        raise _precprobe.Error(f"precprobe: {os.fsdecode(config)}: not JSON: {e}")
                base.update(options)
                text = json.dumps(base, default=_json_default)
            else:
                path = os.fsdecode(os.fspath(config))
        elif config is None or isinstance(config, Mapping):
            merged = dict(config or {})
            merged.update(options)
            text = json.dumps(merged, default=_json_default)
        else:
            raise TypeError(
                "precprobe.PrecisionDebugger: config is a path to a config.json or a dict, not "
                f"{type(config).__name__}")
        self._dbg = _precprobe._Debugger(path, text if text is not None else "")
        self._options = json.loads(self._dbg.options_json())
        self._snapshots = []
        self._scaler = None
        self._models = []  # the modules of the running start(), for observe_batch
        self._optimizer_hooks = []  # _mark_optimizer_steps()
        self._seeded = False
        _live.add(self)

    # ---- life cycle ----

    def start(self, model=None, optimizer=None, *, scaler=None):
        """Starts observing. `model`: a torch.nn.Module, or a dict {name: module} (parameters
        named "<name>.<parameter>"), or None. `optimizer`: a torch.optim optimizer or a list
        of them (needed by "record": "on_anomaly": its state joins the snapshot). `scaler`: a
        torch.amp / torch.cuda.amp GradScaler whose loss scale and inf/NaN checks are logged.
        Dropout runs with p = 0 while started (modules and torch.nn.functional alike) unless
        "keep_dropout". Raises precprobe.Error (another debugger is started, a bad dump
        path...) or TypeError."""
        if self.started:
            return
        opts = _optimizer_list(optimizer)
        if scaler is not None:
            ScalerWatch.check(scaler)
        if model is None:
            specs, named, modules = [], False, []
        elif isinstance(model, Mapping):
            if not model:
                raise _precprobe.Error("precprobe: start(models, optimizers): no model given")
            for k in model:
                if not isinstance(k, str):
                    raise TypeError(f"precprobe: start(): model names are str, not {type(k).__name__}")
            specs = [_model_spec(k, m) for k, m in model.items()]
            named, modules = True, list(model.values())
        else:
            specs, named, modules = [_model_spec("", model)], False, [model]
        params = [[p for g in o.param_groups for p in g["params"]] for o in opts]
        self._dbg.start(specs, named, params)
        self._optimizer_hooks = _mark_optimizer_steps(self)
        self._models = modules
        self._snapshots = [OptimizerSnapshot(o) for o in opts] if self._on_anomaly() else []
        if not self._seeded and self._options.get("seed") is not None:
            seed = int(self._options["seed"])
            random.seed(seed)
            try:
                import numpy
                numpy.random.seed(seed)
            except ImportError:
                pass
        self._seeded = True
        if scaler is not None:
            self.watch_scaler(scaler, opts)

    def watch_scaler(self, scaler, optimizers=()):
        """Logs a torch.amp.GradScaler's loss scale history and per-group inf/NaN checks into
        this dump (`precprobe scale DIR` reads them). Parameter names come from the started
        models, else from the optimizers' order ("param3")."""
        if self._scaler is not None:
            self._scaler.close()
        names = {}
        for m in self._models:
            for p in m.parameters():
                names.setdefault(id(p), self._dbg.parameter_name(p))
        for o in _optimizer_list(list(optimizers)):
            for g in o.param_groups:
                for p in g["params"]:
                    names.setdefault(id(p), self._dbg.parameter_name(p) or f"param{len(names)}")
        self._scaler = ScalerWatch(self, scaler, names)

    def step(self):
        """Ends the step: its records are on disk; the step counter + 1."""
        self._dbg.step()

    def run_step(self, fn):
        """Runs one training step fn() (zero_grad, forward, backward, optimizer step) and ends
        it with step(); returns what fn returned: the loss tensor, a tuple or list of losses
        (a GAN's d_loss and g_loss: its tensors are the losses, "loss/0", "loss/1", ...;
        other elements are passed through) or None. With "record": "on_anomaly", the state
        before the step is kept (parameters, buffers, optimizer state, RNG) and a step whose
        losses or gradients turn non-finite runs again from it with every op recorded (fn is
        then called twice). fn's exceptions propagate."""
        if not callable(fn):
            raise TypeError(f"precprobe: run_step(fn): fn must be callable, not {type(fn).__name__}")
        snaps = self._snapshots if self.started else []
        if snaps:
            for s in snaps:
                s.capture()
        calls = 0

        def once():
            nonlocal calls
            calls += 1
            if calls > 1:  # a replay: the C++ side has put the parameters back
                for s in snaps:
                    s.restore()
            return fn()

        return self._dbg.run_step(once)

    def stop(self):
        """Stops observing, flushes, writes meta.json. Idempotent."""
        if self._scaler is not None:
            self._scaler.close()
            self._scaler = None
        _remove_hooks(getattr(self, "_optimizer_hooks", ()))
        self._optimizer_hooks = []
        self._dbg.stop()
        self._models = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    # ---- what the program tells the debugger ----

    def log_scalar(self, name, value):
        """Logs a scalar (a float, or a one-element tensor) for this step (events.jsonl.zst)."""
        if not isinstance(name, str):
            raise TypeError(f"precprobe: log_scalar: the name is a str, not {type(name).__name__}")
        self._dbg.log_scalar(name, float(value))

    def observe_batch(self, inputs, targets=None, epoch=-1, ignore_index=-100):
        """Registers a batch for `precprobe check` before its forward pass: NaN/Inf and
        per-channel statistics of `inputs`, the label histogram of integer `targets`, the
        models' train/eval modes. Never raises for what it finds."""
        if not isinstance(inputs, torch.Tensor):
            raise TypeError("precprobe: observe_batch: inputs must be a torch.Tensor")
        if targets is None:
            targets = torch.Tensor()
        elif not isinstance(targets, torch.Tensor):
            raise TypeError("precprobe: observe_batch: targets must be a torch.Tensor")
        training = [[m.training for _, m in model.named_modules()] for model in self._models]
        self._dbg.observe_batch(inputs, targets, int(epoch), int(ignore_index), training)

    # ---- state ----

    @property
    def started(self):
        return self._dbg.started()

    @property
    def current_step(self):
        return self._dbg.current_step()

    @property
    def rank(self):
        return self._dbg.rank()

    @property
    def world_size(self):
        return self._dbg.world_size()

    @property
    def options(self):
        """The effective configuration (a dict in config.json's layout)."""
        return dict(self._options)

    @property
    def dump_path(self):
        return self._options.get("dump_path", "")

    def counters(self):
        return self._dbg.counters()

    def watch_hits(self):
        """The op watchpoint hits judged so far (config "watch"; docs/watchpoints.md), in the
        order they fired, as dicts: step, rank, module, watch, record, op, seq, value,
        threshold, detail. The records of the last step or two may still be on their way to
        the writer; after stop() every hit is here."""
        return json.loads(self._dbg.watch_hits_json())

    def parameter_name(self, tensor):
        """The name of a parameter of the started models ("fc1.weight"), else ""."""
        return self._dbg.parameter_name(tensor)

    def _on_anomaly(self):
        return self._options.get("record") == "on_anomaly"

    def _report(self, message):
        _precprobe._report_error(message)  # counted; stderr at most once a second
