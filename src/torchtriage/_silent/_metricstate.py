"""A stateful metric computed again and again without a reset (session 12).

A torchmetrics `Metric` keeps a state that every `update()` (or `forward()`, `metric(preds,
target)`) adds into, and `compute()` reads; only `reset()` empties it. A loop that computes the
metric at each epoch's end and never resets it reports, at epoch k, the metric over epochs
0..k: the numbers lag behind the model, flatten its progress, and an early stop or a checkpoint
chosen on them follows a stale average.

The model: per metric object, its updates and computes in order (class-level wrappers on
`Metric._wrap_update` / `_wrap_compute` / `forward` / `reset`, so every instance made in the
session is followed; the calls torchmetrics makes inside `forward` are one update). A compute
that follows a group of updates (two or more) after an earlier compute, with no reset in
between, reports over every group so far. The harm is measured at that compute: the state
added since the previous compute (a sum state's difference, a list state's new items) gives
the metric over that group alone, computed on a copy; the finding shows both. A metric reset
anywhere after its first compute (a running figure reset at each epoch's end) is the user's
design and stays quiet; states that cannot be split (a running mean or max) give an `info`
with the counts only.
"""

from __future__ import annotations

import copy
import functools
import importlib.abc
import importlib.machinery
import math
import sys
import weakref
from typing import Any

import torch

from .._findings import Finding, Severity, Stage
from .._frames import user_frame_from_stack
from ._common import finding

MODULE = "torchmetrics.metric"
REL = 0.01  # the reported value and the group's own differ by this share: a warning
MAX_ELEMENTS = 10_000_000  # list states larger than this are not copied to measure the harm
MAX_SHOWN = 8


class _Trace:
    """What one metric object did: its groups of updates between computes."""

    def __init__(self, metric: Any) -> None:
        self.name = type(metric).__name__
        self.group = 0  # updates since the last compute (or reset)
        self.samples = 0
        self.total = 0  # updates since the last reset
        self.total_samples = 0
        self.computes: list[dict[str, Any]] = []  # computes that followed a group, since the last reset
        self.stale: list[dict[str, Any]] = []  # computes over more than their group
        self.reset_after_compute = False
        self.prev: dict[str, Any] | None = None  # the state at the previous compute
        self.update_frame: Any = None


class MetricStates:
    """Follows torchmetrics metrics for the session; `findings()` at its end."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.live = True
        self.depth = 0  # inside our own or torchmetrics' nested calls
        self.traces: dict[int, _Trace] = {}
        self.refs: list[weakref.ref[Any]] = []
        self.finder: _Finder | None = None
        self.done = False
        if MODULE in sys.modules:
            self.patch()
        else:
            self.finder = _Finder(self)
            sys.meta_path.insert(0, self.finder)

    def guarded(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as e:  # our bug must never reach the user's code
            self.live = False
            self.session.internal_error("silent.metric_state", e)
            return None

    # ---------------------------------------------------------------- patches
    def patch(self) -> None:
        if self.done or MODULE not in sys.modules:
            return
        self.done = True
        cls = getattr(sys.modules[MODULE], "Metric", None)
        if cls is None:
            return
        watch = self
        wrap_update, wrap_compute, forward, reset = cls._wrap_update, cls._wrap_compute, cls.forward, cls.reset

        @functools.wraps(wrap_update)
        def _wrap_update(metric: Any, update: Any) -> Any:
            inner = wrap_update(metric, update)

            @functools.wraps(inner)
            def counted(*args: Any, **kwargs: Any) -> Any:
                if watch.live and not watch.depth:
                    watch.guarded(watch.on_update, metric, args, kwargs)
                return inner(*args, **kwargs)
            return counted

        @functools.wraps(wrap_compute)
        def _wrap_compute(metric: Any, compute: Any) -> Any:
            inner = wrap_compute(metric, compute)

            @functools.wraps(inner)
            def computed(*args: Any, **kwargs: Any) -> Any:
                if not watch.live or watch.depth:
                    return inner(*args, **kwargs)
                value = inner(*args, **kwargs)
                watch.guarded(watch.on_compute, metric, value)
                return value
            return computed

        @functools.wraps(forward)
        def _forward(metric: Any, *args: Any, **kwargs: Any) -> Any:
            if not watch.live or watch.depth:
                return forward(metric, *args, **kwargs)
            watch.guarded(watch.on_update, metric, args, kwargs)
            watch.depth += 1
            try:
                return forward(metric, *args, **kwargs)
            finally:
                watch.depth -= 1

        @functools.wraps(reset)
        def _reset(metric: Any) -> Any:
            if watch.live and not watch.depth:
                watch.guarded(watch.on_reset, metric)
            return reset(metric)

        for attr, new in (("_wrap_update", _wrap_update), ("_wrap_compute", _wrap_compute), ("forward", _forward),
                          ("reset", _reset)):
            self.session.patch(cls, attr, new)

    # ---------------------------------------------------------------- events
    def _trace(self, metric: Any) -> _Trace:
        t = self.traces.get(id(metric))
        if t is None:
            t = self.traces[id(metric)] = _Trace(metric)
            self.refs.append(weakref.ref(metric))  # (keeps the id from being reused unseen)
        return t

    def on_update(self, metric: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        t = self._trace(metric)
        n = next((int(a.shape[0]) for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and a.dim() >= 1),
                 1)
        t.group += 1
        t.samples += n
        t.total += 1
        t.total_samples += n
        if t.update_frame is None:
            t.update_frame = user_frame_from_stack(1)

    def on_reset(self, metric: Any) -> None:
        t = self._trace(metric)
        if t.computes:
            t.reset_after_compute = True
        t.group = t.samples = t.total = t.total_samples = 0
        t.computes = []
        t.prev = None

    def on_compute(self, metric: Any, value: Any) -> None:
        t = self._trace(metric)
        if t.group == 0:
            return  # the same state read again (a cached compute, a second log of it)
        state = _state(metric)
        entry = {"updates": t.total, "samples": t.total_samples, "group_updates": t.group,
                 "group_samples": t.samples, "value": _number(value), "group_value": None,
                 "frame": user_frame_from_stack(1)}
        if t.computes and t.group >= 2 and t.total > t.group:
            self.depth += 1
            try:
                entry["group_value"] = _group_value(metric, t.prev, state)
            finally:
                self.depth -= 1
            t.stale.append(entry)
        t.computes.append(entry)
        t.prev = state
        t.group = t.samples = 0

    # ---------------------------------------------------------------- the end
    def close(self) -> None:
        self.live = False
        if self.finder is not None and self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        self.finder = None

    def findings(self, step: int | None) -> list[Finding]:
        out: list[Finding] = []
        for t in self.traces.values():
            if t.reset_after_compute or len(t.stale) < 1:
                continue
            valued = [e for e in t.stale if e["value"] is not None and e["group_value"] is not None]
            gaps = [abs(e["value"] - e["group_value"]) for e in valued]
            worst = max(zip(gaps, valued), key=lambda g: g[0], default=(None, None))[1]
            last = t.stale[-1]
            harmful = worst is not None and abs(worst["value"] - worst["group_value"]) >= REL * max(
                abs(worst["group_value"]), 1e-12)
            shown = worst or last
            reported = [round(e["value"], 6) for e in t.computes if e["value"] is not None]
            own = [round(e["group_value"], 6) if e["group_value"] is not None else None for e in t.computes]
            own[0] = reported[0] if reported and own[0] is None and t.computes[0]["value"] is not None else own[0]
            evidence = {"metric": t.name, "computes": len(t.computes), "resets": 0,
                        "updates_in_last_compute": last["updates"], "updates_since_previous_compute":
                            last["group_updates"], "samples_in_last_compute": last["samples"],
                        "samples_since_previous_compute": last["group_samples"],
                        "reported_values": reported[-MAX_SHOWN:], "values_over_each_group": own[-MAX_SHOWN:]}
            if t.update_frame is not None:
                evidence["updated_at_line"] = t.update_frame.line
            k = t.computes.index(shown)
            fields = {"metric": t.name, "computes": len(t.computes), "k": k + 1, "updates": shown["updates"],
                      "group": shown["group_updates"], "samples": shown["samples"],
                      "group_samples": shown["group_samples"]}
            if shown.get("group_value") is not None and shown["value"] is not None:
                fields.update(value=f"{shown['value']:.4g}", own=f"{shown['group_value']:.4g}")
                variant = None
            else:
                variant = "counts"
            out.append(finding("metric_never_reset", severity=Severity.WARNING if harmful else Severity.INFO,
                               stage=Stage.DATA, frame=shown["frame"], module=t.name, step=step, evidence=evidence,
                               variant=variant, **fields))
        return out


def _number(value: Any) -> float | None:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        v = float(value.detach().float().item())
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        v = float(value)
    else:
        return None
    return v if math.isfinite(v) else None


def _state(metric: Any) -> dict[str, Any] | None:
    """The metric's splittable state now: sum states cloned, list states' lengths; None when a
    state is reduced another way (a mean, a max: the group's part cannot be taken out)."""
    out: dict[str, Any] = {}
    for name, default in getattr(metric, "_defaults", {}).items():
        fx = getattr(metric, "_reductions", {}).get(name)
        value = getattr(metric, name, None)
        fname = getattr(fx, "__name__", "")
        if isinstance(default, torch.Tensor) and fname == "dim_zero_sum" and isinstance(value, torch.Tensor):
            out[name] = value.detach().clone()
        elif isinstance(default, list) and isinstance(value, list):
            if sum(v.numel() for v in value if isinstance(v, torch.Tensor)) > MAX_ELEMENTS:
                return None
            out[name] = len(value)
        else:
            return None
    return out


def _group_value(metric: Any, prev: dict[str, Any] | None, now: dict[str, Any] | None) -> float | None:
    """The metric over the updates since the previous compute alone, computed on a copy."""
    if prev is None or now is None or prev.keys() != now.keys():
        return None
    part = copy.deepcopy(metric)
    for name, value in now.items():
        if isinstance(value, torch.Tensor):
            setattr(part, name, value - prev[name])
        else:
            setattr(part, name, list(getattr(metric, name)[prev[name]:]))
    part._computed = None
    part._update_count = max(int(getattr(metric, "_update_count", 1)), 1)
    return _number(part.compute())


class _Finder(importlib.abc.MetaPathFinder):
    """Patches torchmetrics' Metric right after its module is first imported."""

    def __init__(self, watch: MetricStates) -> None:
        self.watch = weakref.ref(watch)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        w = self.watch()
        if w is None or fullname != MODULE or w.done:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            q = self.watch()
            if q is not None:
                q.guarded(q.patch)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
