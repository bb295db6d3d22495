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
import sys
import types
import warnings
import weakref
from typing import Any

import torch

from .._findings import Finding, Severity, Stage
from .._frames import UserFrame, is_user_file, user_frame_from_stack
from ._common import finding, num
from ._outerloop import OuterLoop
from ._stepcalls import assigned_names, step_called

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
    loop: OuterLoop | None = None  # the user's loops around its optimizer's steps (no DataLoader)
    names: set[str] = dataclasses.field(default_factory=set)  # what the user's code calls it
    codes: set[types.CodeType] = dataclasses.field(default_factory=set)  # the user's frames that built it
    plan: Plan | None = None  # read at its optimizer's second step while it was still unstepped
    steps: int = 0  # its optimizer's steps after it was made
    moved: bool = False  # its optimizer's lr changed anyway (by hand, another scheduler)
    opt_kind: str = ""
    hold: Any = None  # the scheduler itself until its plan is read (one nobody keeps is never stepped either)


def _lrs(opt: Any) -> list[float | None]:
    out: list[float | None] = []
    for g in getattr(opt, "param_groups", []):
        lr = g.get("lr")
        out.append(float(lr) if isinstance(lr, (int, float)) else None)
    return out


def _ahead(sched: Any, k: int) -> list[float] | None:
    """The lrs the schedule gives `k` steps after its current one, read and put back (no lr is
    written): a closed form where the scheduler has one, LambdaLR's factor, else `get_lr()` one
    step ahead only (the chainable forms read the group's current lr)."""
    last = sched.last_epoch
    closed = getattr(sched, "_get_closed_form_lr", None)
    if k > 1 and closed is None and type(sched).__name__ != "LambdaLR":
        return None
    try:
        sched.last_epoch = last + k
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            values = closed() if closed is not None and k > 1 else sched.get_lr()
        return [float(v) for v in values]
    except Exception:
        return None
    finally:
        sched.last_epoch = last


def _probes(horizon: int) -> list[int]:
    """Steps ahead at which a schedule is read: every step up to 256, then every ~2 %, and the last."""
    out = list(range(1, min(horizon, 256) + 1))
    k = 256
    while k < horizon:
        k = max(k + 1, int(k * 1.02))
        out.append(min(k, horizon))
    return out


def first_change(sched: Any, horizon: int = 1) -> tuple[int | None, list[float | None]]:
    """Scheduler steps until the lr first changes, looking up to `horizon` steps ahead (None:
    unknown or not within them), and the lrs then."""
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
    def changed(ahead: list[float]) -> bool:
        return any(n is not None and abs(a - n) > 1e-12 * max(abs(n), 1e-30) for a, n in zip(ahead, now))

    prev = 0
    for k in _probes(max(horizon, 1)):
        ahead = _ahead(sched, k)
        if ahead is None:
            break
        if changed(ahead):
            for j in range(prev + 1, k):  # (between two probes: the first step that changed it)
                earlier = _ahead(sched, j)
                if earlier is not None and changed(earlier):
                    return j, list(earlier)
            return k, list(ahead)
        prev = k
    return None, now


def lrs_at(sched: Any, k: int) -> list[float] | None:
    """The lrs the schedule gives `k` steps ahead (None where it cannot be read without stepping)."""
    return _ahead(sched, k) if k >= 1 else None


@dataclasses.dataclass
class Plan:
    """A never-stepped scheduler's schedule, read while it is alive (a training function's locals
    are gone by the session's end): its first change within `HORIZON` steps and its lrs at the
    probed steps ahead."""
    change: int | None
    change_lrs: list[float | None]
    table: list[tuple[int, list[float]]]

    def at(self, k: int) -> list[float] | None:
        best = None
        for j, lrs in self.table:
            if j > k:
                break
            best = lrs
        return best


HORIZON = 1 << 20


def plan_of(sched: Any) -> Plan:
    change, lrs = first_change(sched, HORIZON)
    table = []
    for k in _probes(HORIZON):
        ahead = _ahead(sched, k)
        if ahead is None:
            break
        table.append((k, ahead))
    return Plan(change, lrs, table)


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
        m = self.made[id(sched)] = Made(weakref.ref(sched), weakref.ref(opt) if opt is not None else None,
                                        type(sched).__name__, user_frame_from_stack(3))
        frames: list[types.FrameType] = []
        f: types.FrameType | None = sys._getframe(1)
        while f is not None and len(frames) < 16:
            if is_user_file(f.f_code.co_filename):
                frames.append(f)
            f = f.f_back
        m.hold = sched
        m.loop = OuterLoop({(id(fr), fr.f_code) for fr in frames})
        try:
            m.names = assigned_names(frames)
        except Exception:  # (a source that does not read as expected: no names, judged as never written)
            m.loop = None
        m.codes = {fr.f_code for fr in frames}

    def stepped(self, sched: Any) -> None:
        m = self.made.get(id(sched))
        if m is not None and m.ref() is sched:
            m.calls += 1
            m.hold = None

    def on_begin(self, it: Any, loader: Any) -> None:  # a DataLoader pass begins (`_loaderstream`)
        key = id(loader)
        ref = self._loaders.get(key)
        if ref is None or ref() is not loader:
            self._loaders[key] = weakref.ref(loader)
            self.pass_count[key] = 0
        self.pass_count[key] += 1
        self.current = (key, self.pass_count[key])

    def optimizer_stepped(self, opt: torch.optim.Optimizer) -> None:
        if not self.made:
            return
        for m in self.made.values():
            if m.opt is not None and m.opt() is opt and not m.calls:
                m.steps += 1
                if m.lrs is None:
                    m.lrs, m.opt_kind = _lrs(opt), type(opt).__name__
                    f: types.FrameType | None = sys._getframe(1)
                    while f is not None:  # the functions that step its optimizer (`_stepcalls`)
                        if is_user_file(f.f_code.co_filename):
                            m.codes.add(f.f_code)
                        f = f.f_back
                elif not m.moved and _lrs(opt) != m.lrs:
                    m.moved = True
                if m.steps == 2 and m.plan is None and (sched := m.ref()) is not None:
                    m.plan, m.hold = plan_of(sched), None
                if self.current is not None:
                    m.passes.add(self.current)
                elif not m.passes and m.loop is not None and not m.loop.unknown:
                    try:
                        m.loop.step(sys._getframe(1))
                    except Exception:  # (the user's source or frames not as expected: no loop verdict)
                        m.loop.unknown = True
                    if m.loop.unknown:
                        m.loop = None

    # ------------------------------------------------------------------ verdicts
    def findings(self) -> list[Finding]:
        out = []
        for m in self.made.values():
            if m.calls or m.lrs is None or m.moved:
                continue
            opt = m.opt() if m.opt is not None else None
            sched = m.ref()
            if opt is not None and _lrs(opt) != m.lrs:
                continue  # (the lr changed anyway: set by hand, or by another scheduler)
            if sched is None and m.plan is None:
                continue
            f = self._by_epochs(m, sched) if m.passes else self._by_loop(m, sched)
            if f is not None:
                out.append(f)
        for m in self.made.values():
            m.hold = None
        return out

    def _change(self, m: Made, sched: Any, due: int) -> tuple[int | None, list[float | None]]:
        if sched is not None:
            return first_change(sched, due)  # never stepped: as it was when made
        assert m.plan is not None
        return m.plan.change, m.plan.change_lrs

    def _by_epochs(self, m: Made, sched: Any) -> Finding | None:
        per_loader: dict[int, int] = {}
        for key, _ in m.passes:
            per_loader[key] = per_loader.get(key, 0) + 1
        epochs = max(per_loader.values(), default=0)
        due = epochs - 1  # a per-epoch step at the end of each epoch but the last
        if epochs < MIN_EPOCHS or step_called(m.codes, m.names):
            return None  # (a `step()` written behind a test that never held: not a missing call)
        change, next_lrs = self._change(m, sched, due)
        if change is None or due < change:
            return None
        return self._finding(m, next_lrs, change, None, epochs=epochs, evidence={"training_epochs": epochs})

    def _by_loop(self, m: Made, sched: Any) -> Finding | None:
        """No DataLoader: the iterations of the user's outermost loop around the steps (`_outerloop`)."""
        loop = m.loop
        if loop is None or loop.unknown or loop.iterations < MIN_EPOCHS:
            return None
        due = loop.iterations - 1
        if step_called(m.codes | loop.codes, m.names):
            return None  # the code steps it somewhere that never ran: a period never due, not this
        change, next_lrs = self._change(m, sched, due)
        if change is None or due < change:
            return None
        end = lrs_at(sched, due) if sched is not None else m.plan.at(due) if m.plan is not None else None
        variant = "loop" if loop.nested else "steps"
        ev: dict[str, Any] = {"loop_iterations": loop.iterations, "optimizer_steps": loop.steps}
        if loop.nested:
            ev["outer_loop_line"] = loop.line
        if end is not None:
            ev["lr_scheduled_at_last_step"] = [num(v) for v in end][:4]
        return self._finding(m, next_lrs, change, variant, epochs=loop.iterations, evidence=ev,
                             steps=loop.steps, loop_line=loop.line, end_lr=num(end[0]) if end else "n/a")

    def _finding(self, m: Made, next_lrs: list[float | None], change: int, variant: str | None, *,
                 epochs: int, evidence: dict[str, Any], **fields: Any) -> Finding:
        now = m.lrs or []
        lr0 = next((v for v in now if v is not None), None)
        nxt = next((v for v in next_lrs if v is not None), None)
        ev = {"scheduler": m.kind, "scheduler_steps_after_construction": 0, "optimizer": m.opt_kind,
              **evidence, "lr_whole_run": [num(v) for v in now][:4],
              "lr_after_first_change": [num(v) for v in next_lrs][:4], "scheduler_steps_to_first_change": change,
              "harm": f"the lr stayed at {num(lr0)} where the schedule changes it after {change} step(s)"}
        return finding("scheduler_never_stepped", variant=variant, severity=Severity.WARNING, stage=Stage.OPTIMIZER,
                       frame=m.frame, op=m.kind, scheduler=m.kind, epochs=epochs, lr=num(lr0), next_lr=num(nxt),
                       after=change, optimizer=m.opt_kind, evidence=ev, **fields)
