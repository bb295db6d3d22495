"""An optimizer stepped again on the gradients it already applied (session 17).

The invariant: one `optimizer.step()` per backward (or per accumulation window): each step
applies gradients a backward wrote since the optimizer's last step. A wrapper that already
steps (a static-capture / AMP training-step decorator calling `scaler.step(optimizer)`) and a
loop that calls `optimizer.step()` after it apply the same gradients twice: the parameters move
twice per batch, Adam's moments and bias correction advance twice, the schedule is not the one
configured.

At each judged `optimizer.step()` the identity and version of every `.grad` the optimizer holds
are noted (`_stale._signature`) with the number of backwards heard so far. A step whose
optimizer heard no backward since its last step and whose gradients are the same objects at the
same versions is a repeat; the versions of the parameters are read around it, and a repeat that
changed a parameter is harm measured. At the end: a warning once at least `MIN_REPEATS` repeats
moved parameters. An optimizer whose `.grad`s were all None (nothing to apply) is skipped; a
closure optimizer (LBFGS) runs its backward inside `step()` and so between its steps.
Attributes only: no kernel, no read.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_frame_from_stack
from ._stale import Signature, _signature, _unchanged

MIN_REPEATS = 2


class _Opt:
    def __init__(self, opt: torch.optim.Optimizer) -> None:
        self.ref = weakref.ref(opt)
        self.kind = type(opt).__name__
        self.backwards = -1  # backwards heard at its last judged step
        self.sig: Signature = {}
        self.steps = 0
        self.repeats = 0
        self.moved = 0  # repeats that changed a parameter
        self.pending: list[tuple[weakref.ref[torch.Tensor], int]] | None = None
        self.frame: UserFrame | None = None
        self.step = 0
        self.first_frame: UserFrame | None = None  # the step before the first repeat


class RepeatedSteps:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.backwards = 0
        self.opts: dict[int, _Opt] = {}

    def backward_end(self) -> None:
        self.backwards += 1

    def step_pre(self, opt: torch.optim.Optimizer) -> None:
        t = self.opts.get(id(opt))
        if t is None or t.ref() is not opt:
            if len(self.opts) >= 16:
                return
            t = self.opts[id(opt)] = _Opt(opt)
        t.steps += 1
        if t.backwards == self.backwards and t.sig and _unchanged(opt, t.sig):
            t.repeats += 1
            t.pending = [(weakref.ref(p), p._version) for g in opt.param_groups for p in g["params"]
                         if isinstance(p, torch.Tensor) and p.grad is not None]
            if t.frame is None:
                t.frame = user_frame_from_stack(3)
                t.step = self.session.step
        else:
            t.first_frame = user_frame_from_stack(3) if t.frame is None else t.first_frame
        t.backwards = self.backwards
        t.sig = _signature(opt)

    def step_post(self, opt: torch.optim.Optimizer) -> None:
        t = self.opts.get(id(opt))
        if t is None or t.pending is None:
            return
        pending, t.pending = t.pending, None
        if any((p := ref()) is not None and p._version != v for ref, v in pending):
            t.moved += 1

    def end(self) -> list[Finding]:
        out = []
        for t in self.opts.values():
            if t.moved < MIN_REPEATS:
                continue
            first = t.first_frame
            evidence: dict[str, Any] = {
                "optimizer": t.kind, "judged_steps": t.steps, "steps_on_the_same_gradients": t.repeats,
                "repeats_that_moved_parameters": t.moved,
                "other_step_line": f"{first.file.rsplit('/', 1)[-1]}:{first.line}" if first is not None else None,
                "harm": f"{t.moved} of {t.steps} judged {t.kind}.step() calls applied gradients that an earlier step "
                        f"had already applied (no backward in between): the parameters moved again"}
            fields = {"opt": t.kind, "repeats": t.repeats, "steps": t.steps, "moved": t.moved,
                      "other": evidence["other_step_line"] or "another call"}
            out.append(from_catalogue(
                Category.GRADIENT, "gradient.step_repeated", "ledger.step_repeated", fields=fields,
                cause_key="ledger.step_repeated.cause", next_key="ledger.step_repeated.next", frame=t.frame,
                source_line=t.frame is not None, evidence=evidence, severity=Severity.WARNING,
                stage=Stage.OPTIMIZER, step=t.step, op="optimizer.step"))
        self.opts.clear()
        return out
