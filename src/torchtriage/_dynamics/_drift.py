"""The schedule a run follows against the one its code declares: per scheduler, from its own
`step()` calls and the lr each optimizer step uses (Python floats; no device read).

  * extra steps: a scheduler stepped at every optimizer step from one line and, between two
    optimizer steps, again from another line (a per-epoch call left beside the per-batch one):
    each such call moves the schedule one step ahead of the optimizer;
  * overridden: a change the scheduler made to the lr (its value after `step()` differs from
    the lr before it) that never reached the optimizer: at the next optimizer step the group's
    lr is the value from before the scheduler's step again, and no scheduler set it (a manual
    warm-up that keeps writing the initial lr after the scheduler has decayed it);
  * not resumed: an optimizer whose state counts steps this run never saw (loaded from a
    checkpoint) driving a scheduler whose counter starts near 0: at the cadence the scheduler
    is stepped in this run it should stand at about (those steps) x (calls per optimizer step).

Each verdict's evidence is the run's own numbers (calls, steps, the lr values involved), the
measured harm. A call site is one frame read per call (`sys._getframe`); the stack is walked
at a scheduler's first call and at its first call between two optimizer steps (which correct
programs rarely make). The optimizer's state step count is read once per scheduler, on the
CPU only (Adam-like optimizers keep it there unless `capturable` / `fused`).
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage
from .._frames import UserFrame, optimizer_frame, user_frame_from_stack
from ._burst import Cadence, burst_finding
from ._common import finding, num
from ._horizon import declared_schedule
from ._pastend import PastEnd

WRAPS_MIN = 2  # a decaying schedule that climbed back to its peak this often has wrapped
NEAR_ZERO = 0.0101
_CYCLIC = ("CosineAnnealingLR", "CosineAnnealingWarmRestarts", "CyclicLR", "OneCycleLR")  # (cosine: `_schedules`)
EXTRA_MIN = 3  # calls between two optimizer steps, from a second line, before it is a pattern
UNDONE_MIN = 2  # scheduler changes undone before the optimizer used them
MAX_GONE = 16
MAX_TRACKS = 64
_NO_COUNTER = ("ReduceLROnPlateau",)  # its state is patience counters, not a position in a schedule


def _same(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15)


def _lrs(opt: Any, lr_value: Any) -> list[float | None]:
    return [lr_value(g.get("lr")) for g in getattr(opt, "param_groups", [])]


def state_steps(opt: Any) -> float | None:
    """The step count an optimizer's state records (Adam-like: `state[p]["step"]`), read from
    the first parameters that have state; None when it keeps none, or keeps it on a device."""
    seen = 0
    for g in getattr(opt, "param_groups", []):
        for p in g.get("params", []):
            seen += 1
            if seen > 16:
                return None
            st = opt.state.get(p) if hasattr(opt.state, "get") else None
            if not st or "step" not in st:
                continue
            v = st["step"]
            if isinstance(v, torch.Tensor):
                return float(v) if v.device.type == "cpu" and v.numel() == 1 else None
            try:
                return float(v)
            except (TypeError, ValueError):
                return None
    return None


class _Track:
    def __init__(self, sched: Any) -> None:
        self.ref = weakref.ref(sched)
        self.kind = type(sched).__name__
        self.calls = 0
        self.last_opt_steps = -1
        self.last_site: tuple[Any, int] | None = None
        self.extra = 0
        self.extra_step: int | None = None
        self.extra_frame: UserFrame | None = None
        self.regular_line: tuple[str, int] | None = None
        self.before: list[float | None] = []
        self.fresh: list[float | None] = []
        self.applied_after = 0
        self.undone = 0
        self.undone_first: tuple[int, float | None, float | None] | None = None
        self.first_last_epoch: int | None = None
        self.last_epoch: int | None = None
        self.opt_id = 0
        self.frame: UserFrame | None = None
        self.reported = False
        self.peak = 0.0  # the largest lr the scheduler set (or found)
        self.low = False  # its lr is at ~0 of that peak now
        self.first_low: int | None = None  # its calls when the lr first reached ~0
        self.wraps = 0  # times the lr climbed back to >= half its peak after reaching ~0
        self.wrap_step: int | None = None
        self.low_at = 0  # its calls when the lr last reached ~0
        self.climb = 0  # the fewest calls it took to climb back (1: a restart on purpose)
        self.unseen_steps: float | None = None
        self.opt_steps_at_first = 0
        self.schedule: Any = None  # what declares where its schedule ends (`_horizon`)
        self.params: frozenset[int] = frozenset()  # ids of its optimizer's parameters (at its first call)
        self.lost: tuple[int, float, float, float, str, int, UserFrame | None] | None = None
        self.lost_at: tuple[int, int] = (0, 0)  # (its calls, its optimizer's steps) when it was replaced
        self.cadence = Cadence()  # its calls per gap between two optimizer steps (`_burst`)
        self.past_end = PastEnd()  # its lr against its own floor (`_pastend`)


class DriftWatch:
    """Scheduler calls against optimizer steps and the lr each step used."""

    def __init__(self, session: Any, lr_value: Any) -> None:
        self.session = session
        self.lr_value = lr_value
        self.tracks: dict[int, _Track] = {}
        self.pending: dict[int, list[_Track]] = {}  # id(optimizer) -> schedulers that changed its lr
        self.gone: list[_Track] = []
        self.epochs = 0

    def _track(self, sched: Any) -> _Track | None:
        t = self.tracks.get(id(sched))
        if t is None and len(self.tracks) >= MAX_TRACKS:
            return None  # (a scheduler made per epoch: the first ones are followed)
        if t is None or t.ref() is not sched:
            if t is not None and len(self.gone) < MAX_GONE:
                self.gone.append(t)  # a scheduler collected since: its id is reused, its verdict still counts
            t = self.tracks[id(sched)] = _Track(sched)
        return t

    # ------------------------------------------------------------------ scheduler calls
    def before_call(self, sched: Any, opt_steps: int, caller: Any) -> None:
        """`sched.step()` is about to run; `opt_steps`: its optimizer's steps seen so far;
        `caller`: the frame that called it."""
        t = self._track(sched)
        if t is None:
            return
        opt = getattr(sched, "optimizer", None)
        site = (caller.f_code, caller.f_lineno) if caller is not None else None
        if t.calls == 0:
            t.frame = user_frame_from_stack(3)
            t.first_last_epoch = getattr(sched, "last_epoch", None)
            t.opt_steps_at_first = opt_steps
            t.schedule = declared_schedule(sched)
            t.params = frozenset(id(p) for g in getattr(opt, "param_groups", []) for p in g.get("params", []))
            steps = state_steps(opt)
            t.unseen_steps = steps - opt_steps if steps is not None else None
        elif opt_steps == t.last_opt_steps and opt_steps > 0 and site != t.last_site:
            # a second call between the same two optimizer steps, from another line
            t.extra += 1
            if t.extra_frame is None:
                t.extra_step = self.session.step
                t.extra_frame = user_frame_from_stack(3)
                if t.last_site is not None:
                    t.regular_line = (t.last_site[0].co_filename, t.last_site[1])
        if t.cadence.call(opt_steps) and t.cadence.frame is None:  # a call in a burst: its line, once
            t.cadence.first(self.session.step, user_frame_from_stack(3))
        t.calls += 1
        t.opt_id = id(opt)
        t.last_epoch = getattr(sched, "last_epoch", None)
        t.last_opt_steps = opt_steps
        t.last_site = site
        t.before = _lrs(opt, self.lr_value)

    def after_call(self, sched: Any) -> None:
        t = self.tracks.get(id(sched))
        if t is None:
            return
        t.last_epoch = getattr(sched, "last_epoch", None)
        try:
            t.fresh = [self.lr_value(v) for v in sched.get_last_lr()]
        except Exception:  # a scheduler without a last lr (a custom one): nothing to compare
            t.fresh = []
            return
        self._follow(t)
        if len(t.fresh) == len(t.before) and any(not _same(a, b) for a, b in zip(t.fresh, t.before)):
            opt = getattr(sched, "optimizer", None)
            waiting = self.pending.setdefault(id(opt), [])
            if t not in waiting:
                waiting.append(t)

    def _follow(self, t: _Track) -> None:
        """The lr the scheduler set, against its peak: ~0, then back to half the peak, is a wrap."""
        vals = [v for v in (*t.before, *t.fresh) if v is not None]
        if not vals:
            return
        t.peak = max(t.peak, *vals)
        if t.kind in _CYCLIC:
            return
        now = max((v for v in t.fresh if v is not None), default=None)
        if now is None or t.peak <= 0:
            return
        t.past_end.lr(t.calls, now, t.peak, self.session.step)
        if not t.low and now <= NEAR_ZERO * t.peak:
            t.low, t.low_at = True, t.calls
            if t.first_low is None:
                t.first_low = t.calls
        elif t.low and now >= 0.5 * t.peak:
            t.low = False
            t.wraps += 1
            t.climb = min(t.climb, t.calls - t.low_at) if t.climb else t.calls - t.low_at
            if t.wrap_step is None:
                t.wrap_step = self.session.step

    def epoch_began(self) -> None:
        """A DataLoader pass during which an optimizer stepped (the run's epochs)."""
        self.epochs += 1

    # ------------------------------------------------------------------ optimizer steps
    def optimizer_step(self, opt: Any, used: list[float | None], first: bool = False) -> None:
        """The lr `opt`'s groups hold as it steps, against what its schedulers last set; `first`:
        the optimizer's first step (one that may replace another)."""
        if first:
            self._replacing(opt, used)
        waiting = self.pending.pop(id(opt), None)
        if not waiting:
            return
        others = [t.fresh for t in self.tracks.values() if t.ref() is not None
                  and getattr(t.ref(), "optimizer", None) is opt]
        for t in waiting:
            if len(used) != len(t.fresh):
                continue
            if all(_same(a, b) for a, b in zip(used, t.fresh)):
                if t.undone:
                    t.applied_after += 1
                continue
            by_scheduler = any(len(f) == len(used) and all(_same(a, b) for a, b in zip(used, f)) for f in others)
            if not by_scheduler and all(_same(a, b) for a, b in zip(used, t.before)):
                t.undone += 1
                if t.undone_first is None:
                    i = next(i for i, (a, b) in enumerate(zip(used, t.fresh)) if not _same(a, b))
                    t.undone_first = (self.session.step, t.fresh[i], used[i])

    def _replacing(self, opt: Any, used: list[float | None]) -> None:
        """`opt` steps for the first time: a scheduler whose last change (a decay) no step of its own
        optimizer used, over parameters `opt` now holds, while `opt` runs at the lr from before that
        change: the optimizer and scheduler were rebuilt and the decay was lost."""
        mine: set[int] | None = None
        for key, waiting in list(self.pending.items()):
            for t in list(waiting):
                sched = t.ref()
                if sched is not None and getattr(sched, "optimizer", None) is opt:
                    continue  # its own optimizer's step: judged below
                if len(t.fresh) != len(t.before) or not t.fresh:
                    continue
                drop = [(b, f) for b, f in zip(t.before, t.fresh) if b is not None and f is not None and f < b]
                if not drop:
                    continue
                if mine is None:
                    mine = {id(p) for g in opt.param_groups for p in g["params"]}
                if not t.params & mine:
                    continue  # another model's optimizer (a GAN's second one)
                before, after = drop[0]
                if any(_same(u, after) for u in used) or not any(_same(u, before) for u in used):
                    continue  # the new optimizer carries the decayed lr (or another one): a choice
                t.lost = (self.session.step, before, after, before, type(opt).__name__, id(opt), optimizer_frame(opt))
                t.lost_at = (t.calls, t.last_opt_steps)
                waiting.remove(t)
            if not waiting:
                self.pending.pop(key, None)

    # ------------------------------------------------------------------ verdicts
    def findings(self, opt_steps: dict[int, int]) -> list[Finding]:
        """`opt_steps`: id(optimizer) -> its steps in this run (the optimizers the session watches)."""
        out: list[Finding] = []
        resumed: set[int] = set()
        for t in [*self.gone, *self.tracks.values()]:  # (a scheduler gone by now still counts)
            if t.reported or (t.opt_id not in opt_steps and t.lost is None):
                continue  # an optimizer the session does not watch: its steps are not counted
            total = opt_steps[t.opt_id]
            f = (self._lost(t, opt_steps) or self._extra(t, total)
                 or burst_finding(t.cadence, t.kind, t.calls, total, self.epochs, t.fresh, t.peak, t.frame)
                 or self._wrapped(t, total)
                 or t.past_end.finding(t.kind, t.calls, total, t.fresh, t.peak, t.frame)
                 or self._undone(t) or (self._not_resumed(t) if t.opt_id not in resumed else None))
            if f is not None:
                t.reported = True
                if f.code == "dynamics.scheduler_not_resumed":
                    resumed.add(t.opt_id)
                out.append(f)
        return out

    def _lost(self, t: _Track, opt_steps: dict[int, int]) -> Finding | None:
        if t.lost is None:
            return None
        step, before, after, used, kind, new, frame = t.lost
        ran = opt_steps.get(new, 0)
        calls, steps = t.lost_at
        if ran < 2 or t.opt_id not in opt_steps or t.calls > calls or (t.opt_id != new and opt_steps[t.opt_id] > steps):
            return None  # (an optimizer the session does not count, or it went on: it was not replaced)
        return finding("scheduler_decay_lost", category=Category.OTHER, stage=Stage.OPTIMIZER, step=step,
                       frame=frame or t.frame, op=t.kind, module=t.kind, scheduler=t.kind, before=num(before),
                       after=num(after), used=num(used), optimizer=kind, ran=ran,
                       factor=f"{used / after:.3g}" if after > 0 else "inf",
                       evidence={"scheduler": t.kind, "scheduler_steps": t.calls,
                                 "lr_before_its_last_step": num(before), "lr_it_set": num(after),
                                 "new_optimizer": kind, "new_optimizer_lr": num(used),
                                 "new_optimizer_steps": ran, "rebuilt_at_step": step,
                                 "harm": f"{ran} optimizer steps ran from lr {num(used)} where the schedule had set "
                                         f"{num(after)}: its decay never applied"})

    def _extra(self, t: _Track, ran: int) -> Finding | None:
        """`ran`: the optimizer's steps in this run."""
        per_step = t.calls - t.extra
        if t.extra < EXTRA_MIN or ran <= 0 or not 0.9 * ran <= per_step <= 1.1 * ran + 1:
            return None
        regular = f"line {t.regular_line[1]}" if t.regular_line else "another line"
        ahead = t.extra / max(ran, 1)
        return finding("scheduler_extra_steps", category=Category.OTHER, stage=Stage.OPTIMIZER, step=t.extra_step,
                       frame=t.extra_frame or t.frame, op=t.kind, module=t.kind, scheduler=t.kind,
                       extra=t.extra, calls=t.calls, ran=ran, regular=regular, ahead=f"{ahead:.0%}",
                       evidence={"scheduler": t.kind, "scheduler_steps": t.calls, "optimizer_steps": ran,
                                 "calls_between_optimizer_steps": t.extra, "per_step_call": regular,
                                 "last_epoch": t.last_epoch,
                                 "harm": f"the schedule runs {t.extra} steps ({ahead:.0%}) ahead of the optimizer"})

    def _wrapped(self, t: _Track, ran: int) -> Finding | None:
        """A decaying schedule stepped per batch that wraps: its lr reaches ~0 and climbs back (over
        more than one step: not a restart) again and again; where the run's epochs are known
        (DataLoader passes), the steps to ~0 are about their count (a horizon in epochs)."""
        horizon, epochs = t.first_low, self.epochs
        if t.wraps < WRAPS_MIN or horizon is None or ran <= 0 or t.calls < 0.9 * ran or t.climb < 2:
            return None  # (a climb in one step is a restart, made on purpose)
        if epochs >= 2 and abs(horizon - epochs) > max(2, 0.2 * epochs):
            return None  # the epochs are known (DataLoader passes) and the horizon is not their count
        return finding("epoch_scheduler_per_batch", variant="wraps.epochs" if epochs >= 2 else "wraps",
                       cause="dynamics.epoch_scheduler_per_batch.cause.wraps",
                       category=Category.SILENT, stage=Stage.OPTIMIZER, step=t.wrap_step, frame=t.frame, op=t.kind,
                       module=t.kind, scheduler=t.kind, horizon=horizon, wraps=t.wraps,
                       epochs=epochs,
                       peak=num(t.peak),
                       evidence={"scheduler": t.kind, "scheduler_steps": t.calls, "optimizer_steps": ran,
                                 "epochs": epochs or None, "steps_to_lr_near_0": horizon, "lr_peak": num(t.peak),
                                 "climbs_back_to_peak": t.wraps, "lr_now": [num(v) for v in t.fresh][:4],
                                 "harm": f"the lr fell to ~0 and climbed back to its peak {t.wraps} times"})

    def _undone(self, t: _Track) -> Finding | None:
        if t.undone < UNDONE_MIN or t.applied_after or t.undone_first is None:
            return None
        step, set_lr, used = t.undone_first
        return finding("scheduler_overridden", category=Category.OTHER, stage=Stage.OPTIMIZER, step=step,
                       frame=t.frame, op=t.kind,
                       module=t.kind, scheduler=t.kind, undone=t.undone, first=step, set_lr=num(set_lr),
                       used=num(used),
                       evidence={"scheduler": t.kind, "changes_undone": t.undone, "changes_applied_after": 0,
                                 "first_undone_at_step": step, "lr_set_by_scheduler": num(set_lr),
                                 "lr_used_by_optimizer": num(used), "lr_now": [num(v) for v in t.fresh][:4],
                                 "harm": f"none of the scheduler's last {t.undone} changes to the lr reached "
                                         "the optimizer"})

    def _not_resumed(self, t: _Track) -> Finding | None:
        unseen, first = t.unseen_steps, t.first_last_epoch
        span = t.last_opt_steps - t.opt_steps_at_first  # optimizer steps from its first call to its last
        if t.kind in _NO_COUNTER or unseen is None or unseen < 1 or first is None or span <= 0 or t.calls < 2:
            return None
        rate = (t.calls - 1) / span
        expected = unseen * rate
        if expected < 2 or first >= 0.5 * expected:
            return None
        # the harm is an lr other than the schedule's: a factor that is the same at the steps this
        # run took and at the steps it should have taken (a constant LambdaLR) lost nothing
        flat = _flat(t.schedule, (first, int(round(expected))), t.calls)
        return finding("scheduler_not_resumed", category=Category.OTHER, stage=Stage.OPTIMIZER, step=0,
                       severity=Severity.INFO if flat else Severity.WARNING,
                       frame=t.frame, op=t.kind,
                       module=t.kind, scheduler=t.kind, unseen=int(unseen), last_epoch=first,
                       expected=int(round(expected)), rate=f"{rate:.3g}",
                       evidence={"scheduler": t.kind, "optimizer_state_steps_before_this_run": int(unseen),
                                 "scheduler_last_epoch_at_first_step": first,
                                 "scheduler_steps_per_optimizer_step": f"{rate:.3g}",
                                 "expected_last_epoch": int(round(expected)),
                                 **({"same_lr_at_both_positions": True} if flat else {}),
                                 "harm": f"the schedule restarted {int(round(expected)) - first} scheduler steps "
                                         "behind the optimizer it drives"})


def _flat(schedule: Any, starts: tuple[int, int], calls: int) -> bool:
    """Does a LambdaLR's factor (`declared_schedule`: a pure function of the step) take one value
    over `calls` steps from each start (at most 256 probes each)? False when it is not known."""
    if not callable(schedule) or calls < 1:
        return False
    try:
        stride = max(1, calls // 256)
        vals = [float(schedule(s)) for a in starts for s in range(a, a + calls + 1, stride)]
    except Exception:  # a factor that needs more than a step number: not probed
        return False
    return all(math.isclose(v, vals[0], rel_tol=1e-9, abs_tol=1e-15) for v in vals)
