"""Optimizer steps at learning rate 0 before a schedule first gives a positive one (session 15).

An optimizer step whose every param group has lr exactly 0 moves no parameter (SGD, Adam and
their kin scale the whole update by lr; AdamW's decay too): the step's forward and backward
were computed for nothing, and Adam-like optimizers still fold the gradients into their
moments and step counts. A warm-up written as `lambda step: step / warmup` starts at 0: with the
scheduler stepped after every optimizer step, exactly one step is lost (transformers' schedules
do the same); stepped once per epoch, or once per update of several optimizer steps (PPO epochs
over mini-batches), every step of the first epoch or update runs at lr 0.

Measured, per optimizer, at each of its steps until its lr first is positive (Python floats the
dynamics check already read; nothing after that): the steps at lr 0 in every group while some
parameter had a gradient, the scheduler calls between them, and the change of a slice of one
trained parameter over those steps (cloned at the first, compared at the first positive step,
read once at the end). A single step at lr 0 is the design of a per-step warm-up from 0 and
stays quiet; two or more, then a positive lr, is `dynamics.warmup_steps_at_lr_zero`, a warning:
its harm is its evidence (optimizer steps that moved nothing). A run that never leaves lr 0 is `gradient.lr_zero`'s.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

import torch

from .._findings import Finding, Severity, Stage
from .._frames import UserFrame, optimizer_frame
from ._common import finding, num

MAX_OPTIMIZERS = 8
SLICE = 4096


@dataclasses.dataclass
class _Opt:
    ref: weakref.ref[Any]
    kind: str
    steps: int = 0  # optimizer steps seen
    zero: int = 0  # steps at lr 0 in every group, with gradients, before the first positive lr
    first_zero: int | None = None  # the session step of the first of them
    positive_at: int | None = None  # the session step that first ran at a positive lr
    positive_lr: float | None = None
    done: bool = False  # a positive lr (or one we cannot read) was seen: nothing more to do
    sched_calls: int = 0  # scheduler calls on this optimizer during the zero steps
    sched_kind: str | None = None
    sched_frame: UserFrame | None = None  # the first scheduler call after the zero steps began
    sched_built: UserFrame | None = None
    param: str | None = None
    saved: torch.Tensor | None = None  # the slice at the first zero step
    source: weakref.ref[torch.Tensor] | None = None
    change: torch.Tensor | None = None  # max |change| of the slice over the zero steps (device)
    built: UserFrame | None = None  # the optimizer's line (when no scheduler call is known)


def _with_grad(opt: torch.optim.Optimizer) -> torch.Tensor | None:
    for g in opt.param_groups:
        for p in g["params"]:
            if isinstance(p, torch.Tensor) and p.grad is not None and p.numel():
                return p
    return None


class ZeroLrSteps:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.opts: dict[int, _Opt] = {}
        self.active = True

    def observe(self, opt: torch.optim.Optimizer, lrs: list[float | None]) -> None:
        """`opt` is about to step with these group lrs."""
        o = self.opts.get(id(opt))
        if o is None or o.ref() is not opt:
            if len(self.opts) >= MAX_OPTIMIZERS:
                return
            o = self.opts[id(opt)] = _Opt(weakref.ref(opt), type(opt).__name__)
        o.steps += 1
        if o.done:
            return
        if not lrs or any(v is None for v in lrs):
            o.done = True  # a tensor lr on a device: not read here
            return
        if all(v == 0 for v in lrs):
            p = _with_grad(opt)
            if p is None:
                return  # nothing to move anyway
            o.zero += 1
            if o.first_zero is None:
                o.first_zero = self.session.step
                with torch.no_grad():
                    o.saved = p.detach().reshape(-1)[:SLICE].clone()
                o.source = weakref.ref(p)
                o.param = self.session.param_index.name(p) if hasattr(self.session, "param_index") else None
            return
        o.done = True
        if o.zero and any(v is not None and v > 0 for v in lrs):
            o.positive_at = self.session.step
            if o.sched_frame is None:
                o.built = optimizer_frame(opt)
            o.positive_lr = max(v for v in lrs if v is not None)
            p = o.source() if o.source is not None else None
            if p is not None and o.saved is not None:
                with torch.no_grad():
                    o.change = (p.detach().reshape(-1)[:SLICE] - o.saved).abs().max()
            o.saved = None
        if all(x.done for x in self.opts.values()) and not any(x.zero for x in self.opts.values()):
            self.active = False

    def scheduler_called(self, sched: Any, frame: UserFrame | None, built: UserFrame | None) -> None:
        opt = getattr(sched, "optimizer", None)
        o = self.opts.get(id(opt)) if opt is not None else None
        if o is None or o.ref() is not opt or o.done or not o.zero:
            return
        o.sched_calls += 1
        if o.sched_frame is None:
            o.sched_frame, o.sched_kind, o.sched_built = frame, type(sched).__name__, built

    def findings(self) -> list[Finding]:
        out: list[Finding] = []
        for o in self.opts.values():
            if o.zero < 2 or o.positive_at is None or o.positive_lr is None:
                # (one step: a warm-up from 0 stepped after every optimizer step, as transformers'
                # schedules are; the lost step is the schedule's design, not worth a line)
                continue
            change = None
            if o.change is not None:
                try:
                    change = float(o.change)
                except Exception:
                    change = None
            if change is not None and change > 0:
                continue  # the parameters moved after all: not an lr of 0 in effect
            share = o.zero / max(o.steps, 1)
            frame = o.sched_frame or o.built
            evidence: dict[str, Any] = {
                "optimizer": o.kind, "steps_at_lr_0": o.zero, "optimizer_steps": o.steps,
                "share_of_steps": f"{share:.1%}", "first_step_at_lr_0": o.first_zero,
                "first_step_at_positive_lr": o.positive_at, "first_positive_lr": num(o.positive_lr),
                "scheduler": o.sched_kind, "scheduler_calls_before_positive_lr": o.sched_calls}
            if o.sched_built is not None:
                evidence["scheduler_built_at"] = f"{o.sched_built.file}:{o.sched_built.line}"
            if change is not None:
                evidence["parameter_sampled"] = o.param
                evidence["max_abs_change_over_lr_0_steps"] = change
            evidence["harm"] = f"{o.zero} optimizer steps computed gradients and moved no parameter"
            out.append(finding("warmup_steps_at_lr_zero", severity=Severity.WARNING, stage=Stage.OPTIMIZER,
                               step=o.first_zero, frame=frame, op=o.sched_kind or o.kind,
                               steps=o.zero, total=o.steps, share=f"{share:.1%}",
                               optimizer=o.kind, lr=num(o.positive_lr), at=o.positive_at,
                               scheduler=o.sched_kind or "no scheduler", evidence=evidence))
        return out
