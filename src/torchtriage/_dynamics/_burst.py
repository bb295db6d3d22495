"""A scheduler stepped in bursts: several `scheduler.step()` calls with no optimizer step between
them, at a few places of the run, where the rest of its gaps hold none (session 16).

A scheduler has one cadence in a correct run: once per optimizer step (a per-step schedule), k
times per optimizer step, every time (a schedule counted in micro-batches under accumulation),
or once per epoch (most gaps between two optimizer steps hold no call, one holds one). A call
that lands in a gap that already had one moves the schedule a position whose lr no optimizer
step ever uses. When most gaps hold no call and the gaps that hold one hold several (a per-epoch
step fired on every batch whose index modulo the epoch is below the accumulation: four calls at
each epoch boundary, three of them before the next optimizer step), the schedule runs several
times faster than its cadence: a per-epoch StepLR(step_size=2) halves the lr every half epoch.

Counted per scheduler from its own calls (the optimizer steps seen at each call: no device read).
The gap before the first optimizer step is not counted (a resumed run fast-forwards its scheduler
there on purpose). The harm is the evidence: the calls whose lr no step used, and where the
schedule stands against the places it was stepped at (the run's epochs, when DataLoader passes
tell them).
"""

from __future__ import annotations

from .._findings import Category, Finding, Stage
from .._frames import UserFrame
from ._common import finding, num

MIN_BURSTS = 2  # gaps holding several calls: a fast-forward on resume is one


class Cadence:
    """One scheduler's calls per gap between two optimizer steps."""

    def __init__(self) -> None:
        self.gap = -1  # its optimizer's steps at the current gap
        self.in_gap = 0  # calls in the current gap
        self.gaps = 0  # gaps (after the first optimizer step) that hold a call
        self.bursts = 0  # of them, gaps that hold several
        self.extra = 0  # calls beyond the first of their gap
        self.most = 0  # the most calls in one gap
        self.step: int | None = None  # the session step of the first call in a burst
        self.frame: UserFrame | None = None

    def call(self, opt_steps: int) -> bool:
        """A call made when the optimizer had stepped `opt_steps` times; True when it is not the
        first of its gap (the gap before the first optimizer step is not counted)."""
        if opt_steps != self.gap:
            self.gap, self.in_gap = opt_steps, 0
        self.in_gap += 1
        if opt_steps <= 0:
            return False
        if self.in_gap == 1:
            self.gaps += 1
            return False
        if self.in_gap == 2:
            self.bursts += 1
        self.extra += 1
        self.most = max(self.most, self.in_gap)
        return True

    def first(self, step: int, frame: UserFrame | None) -> None:
        self.step, self.frame = step, frame


def burst_finding(c: Cadence, kind: str, calls: int, ran: int, epochs: int, lr_now: list[float | None],
                  peak: float, frame: UserFrame | None) -> Finding | None:
    """`ran`: the optimizer's steps in this run; `epochs`: DataLoader passes with optimizer steps
    (0 when unknown); `lr_now` / `peak`: the lr the scheduler left and the largest it set."""
    if c.bursts < MIN_BURSTS or c.bursts < 0.5 * c.gaps or c.gaps > 0.5 * ran or ran <= 0:
        return None  # (every gap holds calls: a schedule counted in micro-batches)
    now = max((v for v in lr_now if v is not None), default=None)
    per_epoch = epochs >= 2 and abs(c.bursts - epochs) <= max(1, 0.2 * epochs)  # once per DataLoader pass
    share = f"{now / peak:.3g}" if now is not None and peak > 0 else "n/a"
    return finding("scheduler_burst_steps", variant="epochs" if per_epoch else None, category=Category.OTHER,
                   stage=Stage.OPTIMIZER, step=c.step, frame=c.frame or frame, op=kind, module=kind, scheduler=kind,
                   most=c.most, bursts=c.bursts, calls=calls, gaps=c.gaps, epochs=epochs,
                   per_epoch=f"{calls / max(epochs, 1):.3g}", skipped=c.extra, lr_now=num(now), share=share,
                   evidence={"scheduler": kind, "scheduler_steps": calls, "optimizer_steps": ran,
                             "places_stepped": c.gaps, "places_with_several_calls": c.bursts,
                             "most_calls_between_two_optimizer_steps": c.most, "epochs": epochs or None,
                             "lr_now": num(now), "lr_peak": num(peak),
                             "harm": f"{c.extra} of its {calls} steps set an lr no optimizer step used: the "
                                     f"schedule stands at step {calls} after {c.gaps} places it was stepped at"})
