"""A warm-up that restarts: the lr ramps up for many steps, then drops in one step back to where
the ramp began, and does so again (a warm-up computed from the step counter of the epoch
instead of the run's). Read from the clock optimizer's lr changes (`ScheduleWatch.observe`).

A warm restart on purpose (SGDR, CosineAnnealingWarmRestarts) jumps *up* after a decay; a
warm-up per cycle decays before it starts over. Only a ramp cut off by a drop to its own start,
twice, is reported: the warm-up never reaches its target, and the lr it did reach is the harm.
"""

from __future__ import annotations

from .._findings import Category, Finding, Stage
from ._common import finding, num

RAMP_MIN = 20  # consecutive rises that make a ramp
RESTARTS_MIN = 2


class Ramps:
    def __init__(self) -> None:
        self.rising = 0
        self.ramp_from: float | None = None
        self.ramp_to = 0.0
        self.restarts: list[tuple[int, float, float, int]] = []  # (step, from, to, rises)
        self.reported = False

    def change(self, step: int, before: float, now: float) -> None:
        """The clock optimizer's largest group lr moved from `before` to `now` at `step`."""
        if now > before:
            if self.rising == 0:
                self.ramp_from = before
            self.rising += 1
            self.ramp_to = now
            return
        start = self.ramp_from
        if (self.rising >= RAMP_MIN and start is not None and now < before
                and now <= start * 1.5 and self.ramp_to >= 4 * max(start, 1e-12)):
            self.restarts.append((step, start, self.ramp_to, self.rising))
        self.rising = 0

    def finding(self) -> Finding | None:
        if self.reported or len(self.restarts) < RESTARTS_MIN:
            return None
        self.reported = True
        step, start, top, rises = self.restarts[0]
        highest = max(r[2] for r in self.restarts)
        return finding("warmup_restarts", category=Category.OTHER, stage=Stage.OPTIMIZER, step=step, op="lr",
                       restarts=len(self.restarts), start=num(start), top=num(top), rises=rises,
                       steps=[r[0] for r in self.restarts][:8],
                       evidence={"restarts": len(self.restarts), "restart_steps": [r[0] for r in self.restarts][:8],
                                 "ramp_start_lr": num(start), "ramp_end_lr": num(top), "ramp_steps": rises,
                                 "harm": f"each ramp was cut off at {num(highest)} or lower and began again at "
                                         f"{num(start)}"})
