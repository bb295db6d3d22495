"""Learning-rate schedules: who steps which scheduler, when, and what the lr does.

`scheduler.step()` is observed by wrapping `LRScheduler.step` (and the subclasses that define
their own) for the session's duration; the lr itself is read from the optimizers' param groups
at each `optimizer.step()` (Python floats: no device read). Verdicts:

  * an epoch-scale scheduler (StepLR, MultiStepLR, ExponentialLR, PolynomialLR,
    CosineAnnealingLR) stepped at every optimizer step whose lr fell below 1% of its initial
    value (cosine: that passed 1.5 periods), while training went on;
  * `scheduler.step()` before the first `optimizer.step()` and then at every step: PyTorch
    warns once, at that first call; the finding is an info;
  * a warm-up that never ends: the lr only ever rose, for >= 100 steps, and ended below half of
    the group's `initial_lr` (which every torch scheduler records);
  * lr exactly 0 in every group for >= 10 optimizer steps after it was positive.
"""

from __future__ import annotations

import collections
import functools
import sys
import warnings
import weakref
from typing import Any

import torch
from torch.optim import lr_scheduler as lrs

from .._catalogue import msg
from .._errors import TriageInternalWarning
from .._findings import Finding, Severity, Stage
from .._frames import UserFrame, optimizer_frame, user_frame_from_stack, user_stacklevel
from .._loaderstream import stream
from ._common import finding, num
from ._drift import DriftWatch
from ._horizon import horizon_times_accumulation
from ._plateau import PlateauWatch
from ._ramps import Ramps
from ._unstepped import UnsteppedSchedulers
from ._warmuplen import long_warmup
from ._zerolr import ZeroLrSteps

EPOCH_SCALE = ("StepLR", "MultiStepLR", "ExponentialLR", "PolynomialLR", "CosineAnnealingLR")
_OWN_STEP = ("ReduceLROnPlateau", "SequentialLR", "ChainedScheduler", "CosineAnnealingWarmRestarts")
MAX_SCHEDULERS = 16
NEAR_ZERO = 0.0101  # "decayed to ~0": at or below 1% of the initial lr
LR_ZERO_STEPS = 10
WARMUP_MIN_STEPS = 100


def lr_value(lr: Any) -> float | None:
    """A group's lr as a float without a device read (a CUDA tensor lr is not read here)."""
    if isinstance(lr, torch.Tensor):
        return float(lr) if lr.device.type == "cpu" and lr.numel() == 1 else None
    try:
        return float(lr)
    except (TypeError, ValueError):
        return None


class _Sched:
    def __init__(self, sched: Any, opt_steps: int, frame: UserFrame | None, before_first: bool) -> None:
        self.ref = weakref.ref(sched)
        self.kind = type(sched).__name__
        self.calls = 0
        self.opt_steps_at_first = opt_steps
        self.frame = frame
        self.before_first = before_first
        self.reached: int | None = None
        self.reached_ratio = 1.0
        self.reported = False


class ScheduleWatch:
    """Scheduler calls and lr observations of one session."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.broken = False
        self.scheds: dict[int, _Sched] = {}
        self.opt_steps: dict[int, int] = {}  # id(optimizer) -> steps seen
        self.reported: set[str] = set()
        # lr observations of the clock's (first stepping) optimizer, all groups
        self.first_lr: list[float] | None = None
        self.last_lr: list[float] | None = None
        self.initial_lr: list[float | None] = []
        self.rose = False
        self.fell = False
        self.last_change = 0  # +1 rose, -1 fell
        self.lr_steps = 0
        self.max_lr = 0.0
        self.was_positive = False
        self.zero_since: int | None = None
        self.lr_opt: weakref.ref[Any] | None = None
        self.plateau = PlateauWatch(lr_value)  # ReduceLROnPlateau's metrics (`_plateau`)
        self.unstepped = UnsteppedSchedulers(session)
        self.training_pass: tuple[int, int] | None = None
        self.ramps = Ramps()  # a warm-up that restarts (`_ramps`)
        self.drift = DriftWatch(session, lr_value)  # the schedule followed vs declared (`_drift`)
        self.backwards = 0  # backward calls of the run (the accumulation: per optimizer step)
        self.zero = ZeroLrSteps(session)  # steps at lr 0 before the schedule's first positive lr (`_zerolr`)

    # ------------------------------------------------------------------ wiring
    def install(self) -> None:
        stream(self.session).listen("dynamics.schedulers", self.unstepped)
        self.session.patch(lrs.LRScheduler, "step", self._wrap(lrs.LRScheduler.step))
        for name in _OWN_STEP:
            cls = getattr(lrs, name, None)
            if cls is not None and "step" in cls.__dict__:
                self.session.patch(cls, "step", self._wrap(cls.__dict__["step"]))

    def _wrap(self, original: Any) -> Any:
        watch = self

        @functools.wraps(original)
        def step(sched: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            watched = getattr(sched, "_step_count", 1) != 0 and not watch.broken  # not the constructor's step
            if not watched and not watch.broken:  # the constructor's step
                try:
                    watch.unstepped.created(sched)
                except Exception as e:
                    watch.failed(e)
            elif watched:
                try:
                    watch.unstepped.stepped(sched)
                    watch.called(sched)
                    if watch.zero.active:
                        made = watch.unstepped.made.get(id(sched))
                        watch.zero.scheduler_called(sched, user_frame_from_stack(2),
                                                    made.frame if made is not None and made.ref() is sched else None)
                    opt = getattr(sched, "optimizer", None)
                    watch.drift.before_call(sched, watch.opt_steps.get(id(opt), 0), sys._getframe(1))
                    watch.plateau.before(sched, args, kwargs, user_frame_from_stack(2), watch.session.step)
                except Exception as e:  # our bookkeeping never breaks the user's step
                    watch.failed(e)
            out = original(sched, *args, **kwargs)
            if watched and not watch.broken:
                try:
                    watch.plateau.after(sched, watch.session.step)
                    watch.drift.after_call(sched)
                except Exception as e:
                    watch.failed(e)
            return out

        return step

    def failed(self, e: Exception) -> None:
        self.broken = True
        warnings.warn(msg("internal.warning", where="dynamics.scheduler", error=f"{type(e).__name__}: {e}"),
                      TriageInternalWarning, stacklevel=user_stacklevel())

    def called(self, sched: Any) -> None:
        s = self.scheds.get(id(sched))
        if s is None or s.ref() is not sched:
            if len(self.scheds) >= MAX_SCHEDULERS:
                return
            opt = getattr(sched, "optimizer", None)
            steps = self.opt_steps.get(id(opt), 0)
            s = self.scheds[id(sched)] = _Sched(sched, steps, user_frame_from_stack(3), before_first=steps == 0)
        s.calls += 1

    # ------------------------------------------------------------------ per optimizer step
    def optimizer_stepped(self, opt: torch.optim.Optimizer) -> None:
        self.opt_steps[id(opt)] = self.opt_steps.get(id(opt), 0) + 1
        if self.unstepped.current is not None and self.unstepped.current != self.training_pass:
            self.training_pass = self.unstepped.current  # a DataLoader pass with optimizer steps: an epoch
            self.drift.epoch_began()
        self.unstepped.optimizer_stepped(opt)

    def observe(self, opt: torch.optim.Optimizer, lrs_now: list[float | None]) -> list[Finding]:
        """The lr of `opt`'s groups at this optimizer step (the clock optimizer's drive the
        warm-up and lr-0 rules)."""
        if self.zero.active:
            try:
                self.zero.observe(opt, lrs_now)
            except Exception as e:  # our bookkeeping never breaks the user's step
                self.zero.active = False
                self.session.internal_error("dynamics.warmup_steps_at_lr_zero", e)
        if self.drift.pending:
            self.drift.optimizer_step(opt, lrs_now, first=id(opt) not in self.opt_steps)
        if (lrs_now == self.last_lr and self.zero_since is None and self.was_positive
                and self.lr_opt is not None and self.lr_opt() is opt):
            self.lr_steps += 1  # the common step: the lr did not change (last_lr holds no None)
            return []
        if self.lr_opt is None:
            self.lr_opt = weakref.ref(opt)
        if self.lr_opt() is not opt or any(v is None for v in lrs_now):
            return []
        now: list[float] = lrs_now  # type: ignore[assignment]
        if now == self.last_lr and self.zero_since is None and (self.was_positive or not any(now)):
            self.lr_steps += 1
            return []
        step = self.session.step
        out: list[Finding] = []
        if self.first_lr is None:
            self.first_lr = list(now)
            self.initial_lr = [lr_value(g.get("initial_lr")) for g in opt.param_groups]
        elif self.last_lr is not None and len(now) == len(self.last_lr):
            up = any(a > b for a, b in zip(now, self.last_lr))
            down = any(a < b for a, b in zip(now, self.last_lr))
            self.rose |= up
            self.fell |= down
            if up or down:
                self.last_change = 1 if up and not down else -1
                if now and self.last_lr:
                    self.ramps.change(step, max(self.last_lr), max(now))
        self.last_lr = list(now)
        self.lr_steps += 1
        self.max_lr = max(self.max_lr, *now) if now else self.max_lr
        if all(v == 0 for v in now):
            if self.was_positive and self.zero_since is None:
                self.zero_since = step
            if (self.zero_since is not None and step - self.zero_since + 1 >= LR_ZERO_STEPS
                    and "lr_zero" not in self.reported):
                self.reported.add("lr_zero")
                self.session.health.pin(self.zero_since)
                out.append(finding("lr_zero", stage=Stage.OPTIMIZER, step=self.zero_since, start=self.zero_since,
                                   steps=step - self.zero_since + 1, op=type(opt).__name__,
                                   evidence={"lr": 0.0, "first_step_at_lr_0": self.zero_since,
                                             "steps_at_lr_0": step - self.zero_since + 1,
                                             "lr_before": num(self.max_lr)}))
        else:
            self.zero_since = None
            self.was_positive |= any(v > 0 for v in now)
        return out

    # ------------------------------------------------------------------ verdicts
    def scheduler_findings(self) -> list[Finding]:
        out, self.plateau.found = self.plateau.found, []
        step = self.session.step
        for s in list(self.scheds.values()):
            sched = s.ref()
            if sched is None or s.reported:
                continue
            opt = getattr(sched, "optimizer", None)
            ran = self.opt_steps.get(id(opt), 0) - s.opt_steps_at_first
            per_batch = s.calls >= 8 and ran > 0 and s.calls >= 0.9 * ran
            if s.before_first and per_batch and s.calls >= 8:
                out.append(finding("scheduler_before_optimizer", severity=Severity.INFO, stage=Stage.OPTIMIZER,
                                   step=0, frame=s.frame, op=s.kind, scheduler=s.kind,
                                   evidence={"scheduler": s.kind, "scheduler_steps": s.calls,
                                             "torch_warning": "once, at the first call"}))
                s.before_first = False
            if not per_batch or s.kind not in EPOCH_SCALE:
                continue
            params = _params(sched)
            if s.kind == "CosineAnnealingLR":
                t_max = int(getattr(sched, "T_max", 0) or 0)
                if t_max > 0 and sched.last_epoch >= 1.5 * t_max + 1:
                    s.reported = True
                    out.append(finding("epoch_scheduler_per_batch", variant="cosine", stage=Stage.OPTIMIZER,
                                       step=t_max, frame=s.frame, op=s.kind, scheduler=s.kind, t_max=t_max,
                                       period=2 * t_max, reached=t_max, params=params,
                                       evidence={"scheduler": s.kind, "T_max": t_max, "scheduler_steps": s.calls,
                                                 "optimizer_steps": ran, "lr_now": _lrs(opt),
                                                 "harm": f"the lr reached its minimum at step {t_max} and "
                                                         "climbed back towards its initial value"}))
                continue
            ratio = _ratio(opt)
            if ratio is None:
                continue
            if ratio <= NEAR_ZERO and s.reached is None:
                s.reached, s.reached_ratio = step, ratio
            if s.reached is not None and step - s.reached >= max(20, s.reached // 2):
                s.reported = True
                self.session.health.pin(s.reached)
                out.append(finding("epoch_scheduler_per_batch", stage=Stage.OPTIMIZER, step=s.reached, frame=s.frame,
                                   op=s.kind, scheduler=s.kind, ratio=f"{s.reached_ratio:.2%}", reached=s.reached,
                                   after=step - s.reached, params=params,
                                   evidence={"scheduler": s.kind, "parameters": params, "scheduler_steps": s.calls,
                                             "optimizer_steps": ran, "lr_initial": _initial(opt),
                                             "lr_now": _lrs(opt), "step_lr_below_1%": s.reached}))
        return out

    def end_findings(self) -> list[Finding]:
        out = self.scheduler_findings() + self.unstepped.findings() + self.zero.findings()
        out += self.drift.findings(self.opt_steps)
        out += self._horizons()
        ramps = self.ramps.finding()
        if ramps is not None:
            out.append(ramps)
        opt = self.lr_opt() if self.lr_opt is not None else None
        health = self.session.health
        long = long_warmup(health.points("lr"), health.points("loss"), optimizer_frame(opt) if opt else None)
        if long is not None:
            out.append(long)
        first, last = self.first_lr, self.last_lr
        if (first and last and self.lr_steps >= WARMUP_MIN_STEPS and self.rose and not self.fell
                and self.last_change == 1 and "warmup" not in self.reported):
            ratios = [b / i for b, i in zip(last, self.initial_lr) if i]
            grew = [b / a for a, b in zip(first, last) if a > 0]
            if ratios and max(ratios) < 0.5 and (not grew or max(grew) >= 2 or min(first) == 0):
                self.reported.add("warmup")
                base = max(i for i in self.initial_lr if i)
                out.append(finding("warmup_never_ends", stage=Stage.OPTIMIZER, step=self.session.step - 1,
                                   steps=self.lr_steps, ratio=f"{max(ratios):.1%}", base=num(base),
                                   evidence={"lr_first": num(max(first)), "lr_last": num(max(last)),
                                             "initial_lr": num(base), "optimizer_steps": self.lr_steps,
                                             "lr_ever_decreased": False}))
        return out


    def _horizons(self) -> list[Finding]:
        """Schedulers stepped per optimizer update whose horizon counts micro-batches (`_horizon`)."""
        out: list[Finding] = []
        all_steps = sum(self.opt_steps.values())

        for sid, t in list(self.drift.tracks.items()):
            if t.reported or t.opt_id not in self.opt_steps:
                continue
            made = self.unstepped.made.get(sid)
            frame = made.frame if made is not None and made.kind == t.kind else t.frame
            lr_end = max((v for v in t.fresh if v is not None), default=None)
            f = horizon_times_accumulation(t.schedule, t.kind, t.calls, self.opt_steps[t.opt_id], self.backwards,
                                           all_steps, t.peak, lr_end, frame)
            if f is not None:
                t.reported = True
                out.append(f)
        return out


def _lrs(opt: Any) -> list[str]:
    return [num(lr_value(g["lr"])) for g in getattr(opt, "param_groups", [])][:4]


def _initial(opt: Any) -> list[str]:
    return [num(lr_value(g.get("initial_lr"))) for g in getattr(opt, "param_groups", [])][:4]


def _ratio(opt: Any) -> float | None:
    ratios = []
    for g in getattr(opt, "param_groups", []):
        lr, init = lr_value(g.get("lr")), lr_value(g.get("initial_lr"))
        if lr is None or not init:
            return None
        ratios.append(lr / init)
    return max(ratios) if ratios else None


def _params(sched: Any) -> str:
    keys = {"StepLR": ("step_size", "gamma"), "MultiStepLR": ("milestones", "gamma"), "ExponentialLR": ("gamma",),
            "PolynomialLR": ("total_iters", "power"), "CosineAnnealingLR": ("T_max", "eta_min")}
    out = []
    for k in keys.get(type(sched).__name__, ()):
        v = getattr(sched, k, None)
        if isinstance(v, collections.Counter):
            v = sorted(v.elements())
        out.append(f"{k}={v}")
    return ", ".join(out)
