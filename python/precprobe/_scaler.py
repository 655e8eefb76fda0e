"""The GradScaler's records for a loop that uses PyTorch's own torch.amp.GradScaler or
torch.cuda.amp.GradScaler: what precprobe::GradScaler writes (scaler.jsonl.zst, read by
`precprobe scale`), made by watching the scaler instead of replacing it.

ScalerWatch wraps the scaler instance's unscale_ and update (instance attributes; the class is
untouched, and stop() removes them):
  - unscale_(optimizer), called by the program or by scaler.step: before PyTorch unscales,
    one read of each gradient of each parameter group (the C++ scaler's loop, in C++, not
    recorded as ops) gives the group's non-finite parameters and its gradient norm before
    and after the division by the scale;
  - update(): the optimizers' found_inf (PyTorch's own, from _per_optimizer_states, read
    before update() clears them) says which step() was skipped; after it, the new scale and
    growth tracker. One record per optimizer and parameter group, "event": "backoff",
    "growth", "set" (update(new_scale)) or "collapse" (the scale fell below 1, or 10 backoffs
    in a row; reported once).
A disabled scaler (enabled=False, or torch.cuda.amp's on a machine without CUDA) writes
nothing, as precprobe::GradScaler.

Threads: the training thread.
"""

import math

from . import _precprobe

_COLLAPSE_SCALE = 1.0
_COLLAPSE_BACKOFFS = 10
_MAX_BAD_NAMES = 8


class ScalerWatch:
    @staticmethod
    def check(scaler):
        """Raises TypeError for an object that is not a GradScaler."""
        for attr in ("unscale_", "update", "is_enabled", "get_scale"):
            if not callable(getattr(scaler, attr, None)):
                raise TypeError(
                    "precprobe: the scaler must be a torch.amp.GradScaler or "
                    f"torch.cuda.amp.GradScaler; {type(scaler).__name__} has no {attr}()")

    def __init__(self, debugger, scaler, names):
        ScalerWatch.check(scaler)
        self.debugger = debugger
        self.scaler = scaler
        self.names = names  # id(param) -> name
        self.updates = 0
        self.backoffs = 0
        self.collapsed = False
        self._opt_index = {}  # id(optimizer) -> index, in order of first use
        self._groups = {}  # id(optimizer) -> [group record] since the last update
        self._unscale = scaler.unscale_
        self._update = scaler.update
        scaler.unscale_ = self._unscale_watched
        scaler.update = self._update_watched

    def close(self):
        s = self.scaler
        if s.__dict__.get("unscale_") == self._unscale_watched:
            del s.unscale_
        if s.__dict__.get("update") == self._update_watched:
            del s.update

    def _scale_value(self):
        scale = getattr(self.scaler, "_scale", None)
        return float(scale.item()) if scale is not None else float(self.scaler.get_scale())

    def _unscale_watched(self, optimizer):
        if self.scaler.is_enabled():
            try:
                self._check(optimizer)
            except Exception as e:  # never into the training step
                self.debugger._report(f"precprobe: GradScaler watch: unscale_: {e}")
        return self._unscale(optimizer)

    def _check(self, optimizer):
        inv = 1.0 / self._scale_value()
        index = self._opt_index.setdefault(id(optimizer), len(self._opt_index))
        records = []
        for gi, group in enumerate(optimizer.param_groups):
            params = [p for p in group["params"] if p.grad is not None]
            checks = _precprobe._grad_check([p.grad for p in params], inv)
            bad = [self.names.get(id(p), f"param{i}")
                   for i, (p, c) in enumerate(zip(params, checks)) if c[0]]
            records.append({
                "opt": index, "group": gi, "found_inf": bool(bad), "n_bad": len(bad),
                "bad": bad[:_MAX_BAD_NAMES],
                "gn_scaled": math.sqrt(sum(c[1] for c in checks)),
                "gn": math.sqrt(sum(c[2] for c in checks)),
            })
        self._groups[id(optimizer)] = records

    def _update_watched(self, new_scale=None):
        if not self.scaler.is_enabled():
            return self._update(new_scale)
        try:
            before = self._scale_value()
            skipped = {}
            for opt_id, st in getattr(self.scaler, "_per_optimizer_states", {}).items():
                found = st.get("found_inf_per_device", {})
                skipped[opt_id] = sum(float(v.item()) for v in found.values()) > 0
        except Exception as e:
            self.debugger._report(f"precprobe: GradScaler watch: update: {e}")
            return self._update(new_scale)
        result = self._update(new_scale)
        try:
            self._write(before, skipped, new_scale is not None)
        except Exception as e:
            self.debugger._report(f"precprobe: GradScaler watch: update: {e}")
        self._groups.clear()
        self.updates += 1
        return result

    def _write(self, before, skipped, set_scale):
        after = self._scale_value()
        tracker_fn = getattr(self.scaler, "_get_growth_tracker", None)
        tracker = int(tracker_fn()) if tracker_fn else 0
        event = "set" if set_scale else "backoff" if after < before else \
            "growth" if after > before else ""
        self.backoffs = self.backoffs + 1 if event == "backoff" else 0
        if not self.collapsed and ((_COLLAPSE_SCALE > 0 and after < _COLLAPSE_SCALE) or
                                   self.backoffs >= _COLLAPSE_BACKOFFS):
            self.collapsed = True
            event = "collapse"
            self.debugger._report(
                f"precprobe: GradScaler: loss scale collapsed to {after:g} at update "
                f"{self.updates} ({self.backoffs} backoffs in a row)")
        for opt_id, records in sorted(self._groups.items(), key=lambda kv: self._opt_index[kv[0]]):
            for r in records:
                r.update({"step": self.updates, "scale": before, "scale_next": after,
                          "tracker": tracker, "skipped": skipped.get(opt_id, r["found_inf"]),
                          "event": event})
                self.debugger._dbg.submit_scaler(r)
