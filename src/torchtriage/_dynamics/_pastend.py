"""A schedule stepped past its end: the lr a scheduler sets annealed to its floor, then climbed
back, gradually, towards its peak (session 16).

A decaying schedule written as a formula of its step (a warm-up + cosine LambdaLR, transformers'
cosine schedule) is sized for a number of steps; stepped more often than that (once per optimizer
step where it was built for global steps of several optimizer steps, per batch where it counts
epochs, a total computed too small), it reaches its floor part-way through the run and the cosine
past its end climbs back up: the end of the run trains at the peak lr the schedule meant to have
annealed away. Read from the lr each call of the scheduler sets (`DriftWatch._follow`, Python
floats). A climb in one call is a restart made on purpose (SGDR, a warm-up per cycle) and a fall
in one call a warm-up cut off (`_ramps`): neither counts. Cyclic kinds (CyclicLR, OneCycleLR,
CosineAnnealingLR, its warm restarts) are judged elsewhere (`_schedules`, `_drift._wrapped`).

The harm is the evidence: the lr the schedule reached at its floor, and the lr it climbed back
to, as a share of its peak.
"""

from __future__ import annotations

from .._findings import Category, Finding, Stage
from .._frames import UserFrame
from ._common import finding, num

FLOOR = 0.1  # of the peak: the schedule has annealed
BACK = 0.5  # of the peak: it climbed back
MIN_MOVE = 2  # calls for the fall and for the climb: one is a restart or a cut


class PastEnd:
    def __init__(self) -> None:
        self.high_at: int | None = None  # its calls when its lr was last >= BACK of the peak
        self.low = False
        self.floor_at = 0  # its calls at its lowest lr since it last fell
        self.floor_lr = 0.0
        self.fall = 0  # calls from the last high lr to the floor
        self.climb: tuple[int, int, float, float, int] | None = None  # (floor at, back at, floor lr, lr, step)

    def lr(self, calls: int, now: float, peak: float, step: int) -> None:
        """The scheduler's `calls`-th call set `now` (its largest group lr); `peak`: the largest so far."""
        if self.low:
            if now < self.floor_lr:
                self.floor_lr, self.floor_at = now, calls
            elif now >= BACK * peak:
                self.low = False
                if self.climb is None and self.fall >= MIN_MOVE and calls - self.floor_at >= MIN_MOVE:
                    self.climb = (self.floor_at, calls, self.floor_lr, now, step)
        if not self.low:
            if now >= BACK * peak:
                self.high_at = calls
            elif now <= FLOOR * peak and self.high_at is not None:
                self.low, self.floor_at, self.floor_lr, self.fall = True, calls, now, calls - self.high_at

    def finding(self, kind: str, calls: int, ran: int, lr_now: list[float | None], peak: float,
                frame: UserFrame | None) -> Finding | None:
        if self.climb is None or peak <= 0:
            return None
        floor_at, back_at, floor_lr, back_lr, step = self.climb
        now = max((v for v in lr_now if v is not None), default=back_lr)
        top = max(back_lr, now)
        return finding("schedule_past_end", category=Category.OTHER, stage=Stage.OPTIMIZER, step=step, frame=frame,
                       op=kind, module=kind, scheduler=kind, calls=calls, horizon=floor_at, floor=num(floor_lr),
                       floor_share=f"{floor_lr / peak:.0%}", back=num(top), back_share=f"{top / peak:.0%}",
                       peak=num(peak), ran=ran,
                       evidence={"scheduler": kind, "scheduler_steps": calls, "optimizer_steps": ran,
                                 "step_of_its_floor": floor_at, "lr_floor": num(floor_lr), "lr_peak": num(peak),
                                 "lr_climbed_back_to": num(top), "lr_now": num(now),
                                 "harm": f"after its floor {num(floor_lr)} at its step {floor_at}, the lr climbed "
                                         f"back to {num(top)} ({top / peak:.0%} of its peak) over "
                                         f"{back_at - floor_at} steps"})
