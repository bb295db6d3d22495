"""Gradients one optimizer's backward left in another optimizer's `.grad`, applied by that one's
next step (session 16).

A backward reaches every parameter its loss depends on: a GAN generator's loss runs through the
discriminator, so `loss_g.backward()` writes into the discriminator's `.grad` too. That is
harmless when the discriminator's gradients are reset before its own backward (`zero_grad()` at
the top of its update). When the reset sits elsewhere (right after the discriminator's own step),
the discriminator's next backward adds onto the generator pass's gradient and its step applies
the sum: half of every discriminator update follows the generator's objective.

Followed with `DiscardWatch`'s passes (its sampled parameters): a pass applied by optimizer A
(A held a parameter it reached and stepped with that `.grad`) whose other reached parameters sit
in optimizer B. Optimizers that step before the next backward apply the same pass (one loss, an
encoder optimizer and a decoder optimizer): those are dropped. What is left when the next
backward begins is another objective's gradient sitting in B's `.grad`. It is dropped when
something resets it (a `zero_grad()` of an optimizer or a module, `.grad` set to None or replaced,
or changed in place outside a backward: a hand-written `grad.zero_()`); when B steps with it
still there, B applied it. The harm is that application, counted: a finding needs B to have done
it at two or more steps. Attributes only (identity and version of the sampled `.grad`s).
"""

from __future__ import annotations

import dataclasses
import os
import weakref
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame

MIN_STEPS = 2


@dataclasses.dataclass
class Spill:
    """A pass's gradient left in parameters its applying optimizer does not hold."""

    owner: str  # the optimizer that applied the pass
    frame: UserFrame | None  # the pass's backward
    step: int
    params: dict[int, tuple[weakref.ref[torch.Tensor], weakref.ref[torch.Tensor], int]]  # id -> (p, grad, version)
    armed: bool = False  # a backward began since: no longer the applying round


@dataclasses.dataclass
class Applied:
    owner: str
    stepper: str
    frame: UserFrame | None
    steps: list[int] = dataclasses.field(default_factory=list)
    params: list[str] = dataclasses.field(default_factory=list)


def _name(session: Any, opt: torch.optim.Optimizer) -> str:
    """`Adam(discriminator)`: the optimizer's class and the common module path of its parameters."""
    index = session.param_index
    infos = [i for g in opt.param_groups for p in g["params"] if (i := index.info(p)) is not None]
    names = [i.qualname for i in infos]
    labels = {i.label for i in infos if i.label}
    parts = [n.split(".")[:-1] for n in names]
    if len(labels) == 1 and len({i.root for i in infos}) == 1:  # one model: D, not D.0.weight
        inner = [q for q in parts if q]
        if not inner or len({q[0] for q in inner}) > 1:
            return f"{type(opt).__name__}({labels.pop()})"
    common: list[str] = []
    for level in zip(*parts) if parts else ():
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return f"{type(opt).__name__}({'.'.join(common) or (names[0] + ', ...' if names else '?')})"


class SpillWatch:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.spills: list[Spill] = []
        self.applied: dict[tuple[str, str, Any], Applied] = {}

    @property
    def active(self) -> bool:
        return bool(self.spills)

    @staticmethod
    def _same(entry: tuple[weakref.ref[torch.Tensor], weakref.ref[torch.Tensor], int]) -> bool:
        p, g = entry[0](), entry[1]()
        return p is not None and g is not None and p.grad is g and g._version == entry[2]

    def _prune(self) -> None:
        for sp in self.spills:
            sp.params = {k: v for k, v in sp.params.items() if self._same(v)}
        self.spills = [sp for sp in self.spills if sp.params]

    def pass_applied(self, params: dict[int, tuple[weakref.ref[torch.Tensor], int, int]],
                     opt: torch.optim.Optimizer, frame: UserFrame | None, step: int) -> None:
        """`opt` applied a pass that reached `params` (id -> (param ref, id(grad), version))."""
        held = {id(p) for g in opt.param_groups for p in g["params"]}
        others = {}
        for pid, (ref, gid, _) in params.items():
            p = ref()
            if pid in held or p is None or p.grad is None or id(p.grad) != gid:
                continue
            others[pid] = (ref, weakref.ref(p.grad), p.grad._version)
        if others:
            self.spills.append(Spill(_name(self.session, opt), frame, step, others))

    def backward_begin(self) -> None:
        if not self.spills:
            return
        self._prune()  # changed outside a backward: reset by hand
        for sp in self.spills:
            sp.armed = True

    def backward_end(self) -> None:
        for sp in self.spills:  # the new backward added onto them: follow the new version
            sp.params = {k: (r, gr, g._version if (g := gr()) is not None else -1)
                         for k, (r, gr, _) in sp.params.items()}
        self._prune()

    def reset(self, ids: set[int]) -> None:
        for sp in self.spills:
            sp.params = {k: v for k, v in sp.params.items() if k not in ids}
        self.spills = [sp for sp in self.spills if sp.params]

    def stepped(self, opt: torch.optim.Optimizer, step: int) -> None:
        """`opt` steps: an armed spill in its parameters, still there, is applied by it."""
        if not self.spills:
            return
        self._prune()
        held = {id(p) for g in opt.param_groups for p in g["params"]}
        index = self.session.param_index
        for sp in self.spills:
            hit = [k for k in sp.params if k in held]
            if not hit:
                continue
            if sp.armed:
                stepper = _name(self.session, opt)
                key = (sp.owner, stepper, (sp.frame.file, sp.frame.line) if sp.frame is not None else None)
                rec = self.applied.setdefault(key, Applied(sp.owner, stepper, sp.frame))
                rec.steps.append(step)
                if not rec.params:
                    rec.params = [n for k in hit[:4] if (n := index.name(sp.params[k][0]()))]
            for k in hit:  # applied (by the round's other optimizer, or here): followed no more
                del sp.params[k]
        self.spills = [sp for sp in self.spills if sp.params]

    def findings(self) -> list[Finding]:
        out = []
        for rec in self.applied.values():
            steps = sorted(set(rec.steps))
            if len(steps) < MIN_STEPS:
                continue
            backward = f"{os.path.basename(rec.frame.file)}:{rec.frame.line}" if rec.frame is not None else "?"
            out.append(from_catalogue(
                Category.GRADIENT, "gradient.foreign_grads_applied", "ledger.spilled",
                fields={"stepper": rec.stepper, "owner": rec.owner, "backward": backward, "n": len(steps)},
                cause_key="ledger.spilled.cause", next_key="ledger.spilled.next", frame=rec.frame,
                source_line=True, severity=Severity.WARNING, stage=Stage.OPTIMIZER, step=steps[0],
                parameter=rec.params[0] if rec.params else None, op="zero_grad",
                evidence={"backward_line": backward, "applied_by": rec.owner, "also_stepped_by": rec.stepper,
                          "steps_applying_it": len(steps), "first_steps": steps[:8],
                          "parameters": rec.params}))
        return out
