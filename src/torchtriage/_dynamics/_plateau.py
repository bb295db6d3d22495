"""ReduceLROnPlateau monitoring a metric in the wrong direction (issue 26 item 4).

`ReduceLROnPlateau(mode="min")` (the default) cuts the lr when the metric has not gone
*down* for `patience` calls; handed an accuracy, every rise counts as no improvement and the
lr is cut while the model improves (the mirror image: a loss given to `mode="max"`). What is
measurable, with no knowledge of the metric's name: at the scheduler's first cut, the values
it was given so far never once improved in its own mode (the first value is still its best),
they moved the other way, steadily, by more than the scheduler's threshold, over at least 3
calls. Over the same calls a metric that is a fraction of a fixed count of samples (every value
is k / N for one N, on a 0-1 or 0-100 scale: an accuracy, a recall on a fixed set) is a score
in which higher is better: then a `warning`, which the harm gate keeps only when the loss did
not fall after the cut. Otherwise (a validation loss rising from its first evaluation on, which
a cut is right to answer) an `info`.

The metric is read only when it is a Python number or a CPU tensor (the scheduler itself reads
it with `float()`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from .._findings import Finding, Severity, Stage
from .._frames import UserFrame
from ._common import finding, num

MIN_CALLS = 3
MAX_COUNT = 100_000  # the largest sample count a count fraction is searched for
MAX_VALUES = 64


def _value(metric: Any) -> float | None:
    if isinstance(metric, torch.Tensor):
        return float(metric) if metric.device.type == "cpu" and metric.numel() == 1 else None
    try:
        return float(metric)
    except (TypeError, ValueError):
        return None


def count_fraction(values: list[float]) -> int | None:
    """The N (2..MAX_COUNT) with every value k / N (on a 0-1 or 0-100 scale), or None."""
    for scale in (1.0, 100.0):
        xs = [v / scale for v in values]
        if min(xs) < 0 or max(xs) > 1 or not any(0 < x < 1 for x in xs):
            continue
        n = torch.arange(2, MAX_COUNT + 1, dtype=torch.float64)
        ok = torch.ones_like(n, dtype=torch.bool)
        for x in xs:
            prod = n * x
            ok &= (prod - prod.round()).abs() <= 1e-6
        hit = ok.nonzero()
        if len(hit):
            return int(n[hit[0, 0]])
    return None


class _Watched:
    def __init__(self, sched: Any, frame: UserFrame | None) -> None:
        self.ref = weakref.ref(sched)
        self.frame = frame
        self.values: list[float] = []
        self.lr_before: list[float | None] = []
        self.done = False


class PlateauWatch:
    """The metrics one session's ReduceLROnPlateau schedulers were given, and their first cut."""

    def __init__(self, lr_value: Callable[[Any], float | None]) -> None:
        self.lr_value = lr_value  # a group's lr without a device read (`_schedules.lr_value`)
        self.watched: dict[int, _Watched] = {}
        self.found: list[Finding] = []

    def before(self, sched: Any, args: tuple[Any, ...], kwargs: dict[str, Any], frame: UserFrame | None,
               step: int) -> None:
        if type(sched).__name__ != "ReduceLROnPlateau":
            return
        w = self.watched.get(id(sched))
        if w is None or w.ref() is not sched:
            w = self.watched[id(sched)] = _Watched(sched, frame)
        if w.done or len(w.values) >= MAX_VALUES:
            return
        metric = args[0] if args else kwargs.get("metrics")
        v = _value(metric)
        if v is None:
            w.done = True
            return
        w.values.append(v)
        w.lr_before = self._lrs(sched)

    def _lrs(self, sched: Any) -> list[float | None]:
        return [self.lr_value(g["lr"]) for g in sched.optimizer.param_groups]

    def after(self, sched: Any, step: int) -> None:
        w = self.watched.get(id(sched))
        if w is None or w.done or w.ref() is not sched or not w.values:
            return
        now = self._lrs(sched)
        cut = any(a is not None and b is not None and b < a for a, b in zip(w.lr_before, now))
        if not cut:
            return
        w.done = True  # judged at the first cut only
        f = self._judge(sched, w, now, step)
        if f is not None:
            self.found.append(f)

    def _judge(self, sched: Any, w: _Watched, now: list[float | None], step: int) -> Finding | None:
        vals = w.values
        mode = getattr(sched, "mode", "min")
        if len(vals) < MIN_CALLS or mode not in ("min", "max"):
            return None
        sign = 1.0 if mode == "min" else -1.0  # improvement = sign * (value - best) < 0
        first = vals[0]
        if any(sign * (v - first) < 0 for v in vals[1:]):
            return None  # it improved once in its own mode: the cut answers a real plateau
        steps = [b - a for a, b in zip(vals, vals[1:])]
        moved = sum(1 for d in steps if sign * d > 0)
        span = sign * (vals[-1] - first)
        if moved < len(steps) - 1 or span <= max(abs(first) * 1e-3, 1e-12):
            return None
        n = count_fraction(vals)
        severity = Severity.WARNING if n is not None else Severity.INFO
        other = "max" if mode == "min" else "min"
        return finding("plateau_wrong_mode", severity=severity, stage=Stage.OPTIMIZER, step=step, frame=w.frame,
                       op="ReduceLROnPlateau", module="scheduler (ReduceLROnPlateau)", mode=mode, other=other,
                       calls=len(vals), first=num(first), last=num(vals[-1]),
                       direction="rose" if mode == "min" else "fell",
                       evidence={"scheduler": "ReduceLROnPlateau", "mode": mode,
                                 "metrics_given": [num(v) for v in vals],
                                 "lr_before_cut": [num(x) for x in w.lr_before][:4],
                                 "lr_after_cut": [num(x) for x in now][:4],
                                 **({"metric_is_fraction_of": n} if n is not None else {})})
