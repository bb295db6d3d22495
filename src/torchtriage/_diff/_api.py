"""`torchtriage.diff(step_fn_a, step_fn_b, batch)`: the first op where two implementations
of a training step part, in-process (issue 28) — for a test that pins a model against its
reference implementation."""

from __future__ import annotations

from typing import Any, Callable

from .._findings import Report
from ._compare import compare
from ._record import OpRecorder


def _record(step_fn: Callable[..., Any], batch: Any, steps: int, seed: int | None,
            reference: OpRecorder | None) -> OpRecorder:
    from .._session import Session

    init = reference.init_state if reference is not None else None
    seeds = [s["used"] for s in reference.record["seeds"]] if reference is not None else None
    recorder = OpRecorder(steps, init=init, seeds=seeds, seed=seed)
    try:
        with Session(checks=[recorder], discover=True, report=False):
            for _ in range(steps):
                step_fn() if batch is None else step_fn(batch)
    except Exception:  # where one implementation raises and the other goes on, the runs part there
        if "raised" not in recorder.record:
            raise
    return recorder


def diff(step_fn_a: Callable[..., Any], step_fn_b: Callable[..., Any], batch: Any = None, *, steps: int = 3,
         seed: int | None = 0) -> Report:
    """Run two training-step functions for the same steps, seeds, batch and initial weights,
    and report the first step, stage, module and op where they part.

    Arguments:
        step_fn_a: the reference step: `step_fn_a(batch)` (or `step_fn_a()` without a batch)
            runs one training step (forward, loss, backward, optimizer step).
        step_fn_b: the step under test, called the same way.
        batch: passed to both at every step.
        steps: how many steps to run each.
        seed: torch, numpy and random are seeded with it before each side (None: not).

    Returns:
        A `Report`: `report.ok` when the runs agree; else its primary finding (code
        `diff.diverged`, or `diff.structure` when the two cannot be aligned) names the step,
        stage, module and op, with both sides' lines and values in its evidence.

    B's models get A's initial weights (matched by name, else by shape and order), so both
    are trained from the same start; both are left trained for `steps` steps.

    Example:
        >>> report = torchtriage.diff(reference_step, my_step, batch)  # doctest: +SKIP
        >>> report.assert_ok()  # doctest: +SKIP
    """
    if steps < 1:
        raise ValueError(f"steps={steps}: expected a number of steps >= 1")
    a = _record(step_fn_a, batch, steps, seed, None)
    b = _record(step_fn_b, batch, steps, seed, a)
    from .._catalogue import msg

    for name, side in (("step_fn_a", a), ("step_fn_b", b)):
        if not side.record["ops"]:
            raise ValueError(msg("diff.no_steps", side=name))
    return compare(dict(a.record, target="A"), dict(b.record, target="B"))
