"""A gradient scale that shrinks through every pass and comes back at the next: a normalizer
accumulated since the pass began and never reset.

Every correct step hands the optimizer a gradient whose scale does not depend on where the
step falls in the pass: a token- or sample-weighted accumulation divides each window by that
window's count. A running total kept since the epoch began and never reset after
`optimizer.step()` divides the k-th window by k windows' worth: the k-th update of every pass
gets about 1/k of its gradient, and the scale jumps back at the next pass when the total is
reset there.

Read at the run's end from the `grad_norm` series (the sentinel's one read per step): restarts
are steps whose norm is at least `JUMP` times the median of the few before; at least two,
evenly spaced (one period, within 10%, of at least `MIN_PERIOD` steps: a pass), in every
segment between them the last quarter's median at most 1/`SHRINK` of its first 3 steps', the
lr not jumping with the restart (a warm restart of the schedule) and no new optimizer starting
there (a fold, a new model). The shrink is the harm, measured on the gradients this run stepped.
"""

from __future__ import annotations

import statistics
from typing import Any

from .._findings import Category, Finding, Severity, Stage
from ._common import finding, num

JUMP = 8.0
SHRINK = 5.0
MIN_PERIOD = 8
MIN_RESTARTS = 2


def _median(vals: list[float]) -> float:
    return statistics.median(vals) if vals else 0.0


def grad_scale_restarts(norms: list[tuple[int, float | None]], lrs: list[tuple[int, float | None]],
                        new_optimizers: set[int]) -> Finding | None:
    pts = [(s, v) for s, v in norms if v is not None and v == v and v > 0]
    if len(pts) < MIN_PERIOD * (MIN_RESTARTS + 1):
        return None
    steps = [s for s, _ in pts]
    if steps != list(range(steps[0], steps[0] + len(steps))):
        return None  # (a decimated series: not judged)
    vals = [v for _, v in pts]
    restarts: list[int] = []
    for i in range(3, len(vals)):
        if vals[i] >= JUMP * _median(vals[i - 3:i]) and (not restarts or i - restarts[-1] >= MIN_PERIOD):
            restarts.append(i)  # (the steps right after a restart are still above the median before it)
    if len(restarts) < MIN_RESTARTS:
        return None
    gaps = [b - a for a, b in zip([0, *restarts], restarts)]
    period = _median([float(g) for g in gaps])
    if period < MIN_PERIOD or any(abs(g - period) > 0.1 * period + 1 for g in gaps):
        return None
    lr_at = {s: v for s, v in lrs if v is not None}
    for i in restarts:
        s = steps[i]
        if any(abs(s - n) <= 1 for n in new_optimizers):
            return None  # a new optimizer starts there: a fold, a new model
        a, b = lr_at.get(s - 1), lr_at.get(s)
        if a is not None and b is not None and a > 0 and b > 2 * a:
            return None  # the schedule restarted: a warm restart's lr jump
    bounds = [0, *restarts, len(vals)]
    shrinks = []
    for a, b in zip(bounds, bounds[1:]):
        seg = vals[a:b]
        if len(seg) < MIN_PERIOD:
            continue
        first, last = _median(seg[:3]), _median(seg[-max(2, len(seg) // 4):])
        shrinks.append(first / last if last > 0 else float("inf"))
    if len(shrinks) < MIN_RESTARTS or min(shrinks) < SHRINK:
        return None
    shrink = _median(shrinks)
    at = steps[restarts[0]]
    ev: dict[str, Any] = {
        "restart_steps": [steps[i] for i in restarts][:12], "period_steps": int(period),
        "segments": len(shrinks), "shrink_within_segment_median": num(shrink),
        "shrink_within_segment_min": num(min(shrinks)),
        "grad_norm_first_steps": [num(v) for v in vals[:3]],
        "grad_norm_before_first_restart": num(vals[restarts[0] - 1]),
        "grad_norm_at_first_restart": num(vals[restarts[0]]),
        "harm": f"the gradient norm handed to the optimizer fell {shrink:.0f}x within every stretch of "
                f"{int(period)} steps and came back at the next one: the later updates of each stretch "
                f"got a fraction of their gradient",
    }
    return finding("grad_scale_restarts", category=Category.GRADIENT, stage=Stage.BACKWARD,
                   severity=Severity.WARNING, step=at, evidence=ev, period=int(period), restarts=len(restarts),
                   shrink=f"{shrink:.0f}")
