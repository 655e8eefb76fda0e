"""precprobe for PyTorch programs: the same debugger, dump format and state files as the C++
library, so that a Python reference run and its LibTorch port can be recorded alike and
compared op by op (`precprobe compare python_dump cpp_dump --first`).

    import precprobe
    precprobe.seed_all(1234, True)
    precprobe.save_state(model, "init.safetensors")    # the C++ port loads the same weights
    dbg = precprobe.PrecisionDebugger("config.json")     # or keyword options
    dbg.start(model, optimizer)
    for x, y in batches:
        loss = dbg.run_step(lambda: train_step(x, y))   # or: train_step(x, y); dbg.step()
    dbg.stop()

Import it with the build's package on the path: PYTHONPATH=build/python python3 -c
"import precprobe". Errors are precprobe.Error (a RuntimeError) with the C++ library's
messages. docs/python.md has the whole workflow.

Threads: a debugger is driven from one Python thread; ops are observed on every thread.
"""

import atexit as _atexit
import os as _os
import random as _random

from . import _precprobe
from ._precprobe import Error, Scope, SeedReport
from ._debugger import PrecisionDebugger, _stop_all
from ._state import save_state, load_state, read_state, state_tensors
from ._compare import compare, read_ops

__version__ = _precprobe.__version__
for _t in (Error, Scope, SeedReport):
    _t.__module__ = "precprobe"  # tracebacks say precprobe.Error, not precprobe._precprobe.Error
del _t

__all__ = [
    "Error",
    "PrecisionDebugger",
    "compare",
    "read_ops",
    "Scope",
    "SeedReport",
    "seed_all",
    "save_state",
    "load_state",
    "read_state",
    "state_tensors",
]


def seed_all(seed=1234, deterministic=False, *, warn_only=False, num_threads=0):
    """Seeds LibTorch's generators (CPU and every CUDA device: the ones torch uses), Python's
    `random` and NumPy's global generator, sets PYTHONHASHSEED for child processes and, with
    `deterministic`, turns on deterministic algorithms (cuDNN deterministic, no benchmark, no
    TF32). Returns a SeedReport (print it, or .summary()). Raises precprobe.Error for a seed
    outside [0, 2**32 - 1] or a negative thread count."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"precprobe.seed_all: seed must be an int, not {type(seed).__name__}")
    if seed < 0 or seed > 0xFFFFFFFF:
        raise Error(f"precprobe: seed_all: the seed {seed} is outside [0, 4294967295]")
    report = _precprobe._seed_all(seed, bool(deterministic), bool(warn_only), int(num_threads))
    _random.seed(seed)
    report._add_applied("random.seed", str(seed))
    try:
        import numpy

        numpy.random.seed(seed)
        report._add_applied("numpy.random.seed", str(seed))
    except ImportError:
        pass
    _os.environ["PYTHONHASHSEED"] = str(seed)
    report._add_applied("env PYTHONHASHSEED (child processes)", str(seed))
    return report


_atexit.register(_stop_all)
