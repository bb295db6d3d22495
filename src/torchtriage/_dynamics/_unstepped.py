"""Learning-rate schedulers that are made and never stepped (session 8).

A scheduler does nothing until `scheduler.step()` runs. Lightning steps the schedulers that
`configure_optimizers` returns only under automatic optimization; with
`automatic_optimization = False`, a plain loop that forgets the call, or a scheduler built for a
second optimizer and stepped for the first only, the lr stays at its initial value for the whole
run while the schedule says it should decay (or warm up, or anneal).

Measured, per scheduler made while the session watches (its constructor's own first step is
how it becomes known): its `step()` calls after construction, and the training epochs its
optimizer stepped in after it was made (DataLoader passes during which that optimizer stepped:
a validation pass has no optimizer step and is no training epoch). A finding when

  * the scheduler was never stepped after its construction, and
  * its optimizer stepped in at least `MIN_EPOCHS` training epochs, so that even a per-epoch
    schedule was due at least once, and
  * the schedule changes the lr within the steps that were due (`first_change`: StepLR's
    `step_size`, MultiStepLR's first milestone, 1 for a schedule whose next value differs, read
    from its `get_lr()` one step ahead), and
  * the optimizer's lr is still the value it had when the scheduler was made (nobody set it
    by hand instead).

Its harm is its own evidence: the lr the run trained at versus the lr the schedule gives. A
`ReduceLROnPlateau` (its steps depend on a metric) and a scheduler in a loop without a
DataLoader (no epoch is known) are not judged. Cost: one wrapper call per `scheduler.step()`
(already wrapped), one loader-pass event per epoch, a dictionary update per optimizer step.
"""

from __future__ import annotations

import dataclasses
import warnings
import weakref
from typing import Any

import torch

from .._findings import Finding, Severity, Stage
from .._frames import UserFrame, user_frame_from_stack
from ._common import finding, num

MIN_EPOCHS = 2


@dataclasses.dataclass
class Made:
    ref: weakref.ref[Any]
    opt: weakref.ref[Any] | None
    kind: str
    frame: UserFrame | None
    lrs: list[float | None] | None = None  # at its optimizer's first step after it was made
    calls: int = 0
    passes: set[tuple[int, int]] = dataclasses.field(default_factory=set)


def _lrs(opt: Any) -> list[float | None]:
    out: list[float | None] = []
    for g in getattr(opt, "param_groups", []):
        lr = g.get("lr")
        out.append(float(lr) if isinstance(lr, (int, float)) else None)
    return out


def first_change(sched: Any) -> tuple[int | None, list[float | None]]:
    """Scheduler steps until the lr first changes (None: unknown or never), and the lrs then."""
    opt = getattr(sched, "optimizer", None)
    now = _lrs(opt)
    kind = type(sched).__name__
    gamma = getattr(sched, "gamma", None)
    if kind == "StepLR":
        size = int(getattr(sched, "step_size", 0) or 0)
        if size <= 0 or gamma == 1:
            return None, now
        return size, [v * gamma if v is not None and gamma is not None else None for v in now]
    if kind == "MultiStepLR":
        milestones = sorted(getattr(sched, "milestones", {}) or {})
        if not milestones or gamma == 1:
            return None, now
        return int(milestones[0]), [v * gamma if v is not None and gamma is not None else None for v in now]
    if not isinstance(sched, torch.optim.lr_scheduler.LRScheduler) or kind in (
            "ReduceLROnPlateau", "SequentialLR", "ChainedScheduler", "CosineAnnealingWarmRestarts"):
        return None, now
    # one step ahead: get_lr() at last_epoch + 1, read and put back (no lr is written)
    last = sched.last_epoch
    try:
        sched.last_epoch = last + 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ahead = [float(v) for v in sched.get_lr()]
    except Exception:
        return None, now
    finally:
        sched.last_epoch = last
    changed = any(n is not None and abs(a - n) > 1e-12 * max(abs(n), 1e-30) for a, n in zip(ahead, now))
    return (1 if changed else None), list(ahead)


class UnsteppedSchedulers:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.made: dict[int, Made] = {}
        self.current: tuple[int, int] | None = None  # (id(loader), its pass number)
        self.pass_count: dict[int, int] = {}
        self._loaders: dict[int, weakref.ref[Any]] = {}

    # ------------------------------------------------------------------ events
    def created(self, sched: Any) -> None:
        """A scheduler's constructor ran its initial step (called before that step)."""
        if len(self.made) >= 16:
            return
        opt = getattr(sched, "optimizer", None)
        self.made[id(sched)] = Made(weakref.ref(sched), weakref.ref(opt) if opt is not None else None,
                                    type(sched).__name__, user_frame_from_stack(3))

    def stepped(self, sched: Any) -> None:
        m = self.made.get(id(sched))
        if m is not None and m.ref() is sched:
            m.calls += 1

    def on_begin(self, it: Any, loader: Any) -> None:  # a DataLoader pass begins (`_loaderstream`)
        key = id(loader)
        ref = self._loaders.get(key)
        if ref is None or ref() is not loader:
            self._loaders[key] = weakref.ref(loader)
            self.pass_count[key] = 0
        self.pass_count[key] += 1
        self.current = (key, self.pass_count[key])

    def optimizer_stepped(self, opt: torch.optim.Optimizer) -> None:
        if not self.made or self.current is None:
            return
        for m in self.made.values():
            if m.opt is not None and m.opt() is opt and not m.calls:
                if m.lrs is None:
                    m.lrs = _lrs(opt)
                m.passes.add(self.current)

    # ------------------------------------------------------------------ verdicts
    def findings(self) -> list[Finding]:
        out = []
        for m in self.made.values():
            opt = m.opt() if m.opt is not None else None
            sched = m.ref()
            if m.calls or opt is None or sched is None or m.lrs is None:
                continue
            per_loader: dict[int, int] = {}
            for key, _ in m.passes:
                per_loader[key] = per_loader.get(key, 0) + 1
            epochs = max(per_loader.values(), default=0)
            due = epochs - 1  # a per-epoch step at the end of each epoch but the last
            now = _lrs(opt)
            if epochs < MIN_EPOCHS or now != m.lrs:
                continue  # (the lr changed anyway: set by hand, or by another scheduler)
            change, next_lrs = first_change(sched)  # never stepped: as it was when made
            if change is None or due < change:
                continue
            lr0 = next((v for v in now if v is not None), None)
            nxt = next((v for v in next_lrs if v is not None), None)
            out.append(finding("scheduler_never_stepped", severity=Severity.WARNING, stage=Stage.OPTIMIZER,
                               frame=m.frame, op=m.kind, scheduler=m.kind, epochs=epochs, lr=num(lr0),
                               next_lr=num(nxt), after=change, optimizer=type(opt).__name__,
                               evidence={"scheduler": m.kind, "scheduler_steps_after_construction": 0,
                                         "optimizer": type(opt).__name__, "training_epochs": epochs,
                                         "lr_whole_run": [num(v) for v in now][:4],
                                         "lr_after_first_change": [num(v) for v in next_lrs][:4],
                                         "scheduler_steps_to_first_change": change}))
        return out
