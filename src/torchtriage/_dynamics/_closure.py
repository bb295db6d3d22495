"""A closure-driven step whose re-evaluations add onto the previous evaluation's gradient.

`optimizer.step(closure)` (LBFGS, and any optimizer handed a closure) calls the closure to get
the loss and the gradient *at the current point*; LBFGS calls it up to `max_iter` times per
step, at each point of its line search. Every correct closure starts from reset gradients
(`optimizer.zero_grad()` at its top): `backward()` adds into `.grad`, so a closure without it
returns the running sum of every gradient evaluated so far, and the optimizer's directions and
curvature pairs are built from that sum, not from the loss's gradient.

The session announces `on_optimizer_step_pre` after the closure's first call and
`on_closure_call` before each further call (a plain step has none: nothing is kept for it). From
the first re-evaluation on, the identity and version counter of (at most `SAMPLE`) gradients
the optimizer holds are noted before it and at the end of each backward; the first
backward of a re-evaluation that finds them the same objects at the same versions (no
`zero_grad`, with or without `set_to_none`, since the evaluation before) and changes them added
onto the previous evaluation. Attributes only, no device read.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage
from .._frames import UserFrame, optimizer_frame, user_frame_from_stack
from ._common import finding

SAMPLE = 8

Noted = list[tuple["weakref.ref[torch.Tensor]", "weakref.ref[torch.Tensor]", int]]  # (param, grad, version)


def _note(opt: torch.optim.Optimizer) -> Noted:
    out: Noted = []
    for g in opt.param_groups:
        for p in g["params"]:
            if isinstance(p, torch.Tensor) and p.grad is not None and not p.grad.is_sparse:
                out.append((weakref.ref(p), weakref.ref(p.grad), p.grad._version))
                if len(out) >= SAMPLE:
                    return out
    return out


@dataclass
class _InStep:
    opt: weakref.ref[torch.optim.Optimizer]
    noted: Noted
    evaluations: int = 1  # the closure's first call ran before step_pre
    accumulated: int = 0
    fresh: bool = False  # the next backward is the first of an evaluation
    kept: list[tuple[weakref.ref[torch.Tensor], weakref.ref[torch.Tensor], int]] = field(default_factory=list)
    frame: UserFrame | None = None


class ClosureEvaluations:
    """Per optimizer step: the closure's re-evaluations whose backward found the gradients of the
    evaluation before still in place."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.open: _InStep | None = None
        self.reported: set[int] = set()

    def step_pre(self, opt: torch.optim.Optimizer) -> None:
        self.open = None  # (a step that raised inside its closure left one open)

    def closure_call(self, opt: torch.optim.Optimizer) -> None:
        """Before a re-evaluation: the gradients are as the evaluations so far left them."""
        rec = self.open
        if rec is None or rec.opt() is not opt:
            if id(opt) in self.reported:
                return
            rec = self.open = _InStep(weakref.ref(opt), _note(opt))
        rec.evaluations += 1
        rec.fresh = True

    def backward(self) -> None:
        """Only an evaluation's first backward is judged: a closure may backpropagate several
        losses in turn, each adding onto the one before on purpose."""
        rec = self.open
        if rec is None or not rec.fresh:
            return
        rec.fresh = False
        # the gradients the previous evaluation left, not reset since: this backward adds onto them
        rec.kept = [(pr, gr, v) for pr, gr, v in rec.noted
                    if (p := pr()) is not None and p.grad is not None and p.grad is gr() and p.grad._version == v]
        if rec.kept and rec.frame is None:
            rec.frame = user_frame_from_stack(2)

    def backward_end(self) -> None:
        rec = self.open
        if rec is None:
            return
        opt = rec.opt()
        if opt is None:
            self.open = None
            return
        if rec.kept and any((g := gr()) is not None and g._version != v for _, gr, v in rec.kept):
            rec.accumulated += 1
        rec.kept = []
        rec.noted = _note(opt)

    def step_post(self, opt: torch.optim.Optimizer, step: int) -> Finding | None:
        rec, self.open = self.open, None
        if rec is None or rec.opt() is not opt or rec.accumulated == 0:
            return None
        self.reported.add(id(opt))
        names = []
        for pr, _, _ in rec.noted[:3]:
            p = pr()
            name = self.session.param_index.name(p) if p is not None else None
            names.append(name or "?")
        kind = type(opt).__name__
        built = optimizer_frame(opt)
        return finding("gradient.closure_grads_accumulated", category=Category.GRADIENT,
                       severity=Severity.WARNING, stage=Stage.BACKWARD, step=step, module=kind, op="backward",
                       parameter=", ".join(names), frame=rec.frame, optimizer=kind,
                       evaluations=rec.evaluations, accumulated=rec.accumulated,
                       evidence={"optimizer": kind, "closure_evaluations": rec.evaluations,
                                 "evaluations_added_onto_previous": rec.accumulated,
                                 "parameters_sampled": names,
                                 "optimizer_built_at": f"{built.file}:{built.line}" if built is not None else None,
                                 "harm": f"{rec.accumulated} of the closure's {rec.evaluations} evaluations in this "
                                         f"step returned the sum of the gradients evaluated so far, not the "
                                         f"gradient at the current point"})
