"""A schedule sized in micro-batches but stepped per optimizer update.

Every correct run with gradient accumulation counts its schedule in the unit it steps it in: a
scheduler stepped once per optimizer update (after `optimizer.step()`, or by accelerate's
prepared scheduler, which only steps when the optimizer does) is built for the number of
updates, a scheduler stepped per micro-batch for the number of micro-batches. The run shows both
numbers: backward calls per optimizer step (k, the accumulation) and scheduler calls per
optimizer step. A scheduler stepped once per update whose declared horizon is k times the
updates the run took (`num_training_steps=max_train_steps * gradient_accumulation_steps`) only
ever walks the first 1/k of its schedule: its warm-up lasts k times longer and its decay never
comes. The harm is measured: the lr the run ended at, against the schedule's peak.

The horizon is read from the scheduler itself: `T_max` (CosineAnnealingLR), `total_steps`
(OneCycleLR), `total_iters` (PolynomialLR), or, for a LambdaLR, the first step at which its
factor falls to ~0 (probed at the run's end around k x the updates, at most ~600 calls of the
factor, a pure function of the step; the factor is kept from the scheduler's first call).
"""

from __future__ import annotations

from typing import Any, Callable

from .._findings import Category, Finding, Stage
from ._common import finding, num

NEAR_ZERO = 1e-6  # of the schedule's peak factor: the schedule's end (~0)
MIN_ACCUM = 2  # backward calls per optimizer step
MIN_LEFT = 0.1  # the run ended at >= this share of the peak lr: the decay did not happen


def declared_schedule(sched: Any) -> int | Callable[[int], float] | None:
    """What declares where the scheduler's schedule ends (its lr at ~0), taken at its first call
    (the scheduler may be gone by the run's end): the step itself, or a LambdaLR's factor (a pure
    function of the step, kept to be probed at the end)."""
    kind = type(sched).__name__
    try:
        if kind == "CosineAnnealingLR":
            base = max(getattr(sched, "base_lrs", [0.0]) or [0.0])
            floor = float(getattr(sched, "eta_min", 0.0) or 0.0)
            return int(sched.T_max) if base > 0 and floor <= 0.0101 * base else None
        if kind == "OneCycleLR":
            return int(sched.total_steps)
        if kind == "PolynomialLR":
            return int(sched.total_iters)
        fns = getattr(sched, "lr_lambdas", None) if kind == "LambdaLR" else None
        return fns[0] if fns and callable(fns[0]) else None
    except Exception:  # an attribute of another type: not judged
        return None


def ends_at(schedule: int | Callable[[int], float] | None, expected: int, calls: int) -> int | None:
    """The step near `expected` at which `schedule` first reaches ~0, having stayed above ~0 from
    `calls` on (the lr was still high when the run ended); None when it does not end there."""
    if schedule is None:
        return None
    if isinstance(schedule, int):
        return schedule
    tol = max(2, int(0.1 * expected))
    try:
        f = schedule
        probe = range(calls, expected + tol + 1, max(1, (expected + tol - calls) // 512))
        peak = max(float(f(s)) for s in range(0, calls + 1, max(1, calls // 256)))
        if not peak > 0:
            return None
        for s in (*probe, *range(max(calls, expected - tol), expected + tol + 1)):
            if float(f(s)) <= NEAR_ZERO * peak:
                return s if abs(s - expected) <= tol else None
        return None
    except Exception:  # a lambda that needs more than a step number: not probed
        return None


Schedule = int | Callable[[int], float] | None


def horizon_times_accumulation(schedule: Schedule, kind: str, calls: int, opt_steps: int, backwards: int,
                               all_steps: int, peak: float, lr_end: float | None, frame: Any) -> Finding | None:
    """`schedule`: what declares the scheduler's end (`declared_schedule`); `calls`: its steps;
    `opt_steps`: its optimizer's; `backwards` / `all_steps`: backward calls and optimizer steps of
    the whole run (k = their ratio); `peak` / `lr_end`: the largest lr the scheduler set and the lr
    it left."""
    if opt_steps < 8 or all_steps <= 0 or not 0.9 * opt_steps <= calls <= 1.1 * opt_steps + 1:
        return None  # not stepped once per optimizer update
    k = backwards / all_steps
    accum = round(k)
    if accum < MIN_ACCUM or abs(k - accum) > 0.1:
        return None  # no steady accumulation
    if lr_end is None or peak <= 0 or lr_end < MIN_LEFT * peak:
        return None  # the schedule reached its low end anyway
    horizon = ends_at(schedule, accum * calls, calls)
    if horizon is None or abs(horizon - accum * calls) > max(2, 0.1 * accum * calls):
        return None
    used = calls / horizon
    return finding("schedule_horizon_accumulated", category=Category.OTHER, stage=Stage.OPTIMIZER, step=0,
                   frame=frame, op=kind, module=kind, scheduler=kind, horizon=horizon, calls=calls,
                   accum=accum, used=f"{used:.0%}", lr_end=num(lr_end), peak=num(peak),
                   share=f"{lr_end / peak:.0%}",
                   evidence={"scheduler": kind, "declared_horizon": horizon, "scheduler_steps": calls,
                             "optimizer_steps": opt_steps, "backward_calls_per_optimizer_step": round(k, 3),
                             "lr_peak": num(peak), "lr_end": num(lr_end),
                             "harm": f"the run ended at {lr_end / peak:.0%} of the peak lr after {used:.0%} of "
                                     "the declared schedule: its decay never happened"})
