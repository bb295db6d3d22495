"""An optimizer stepped after a backward that wrote none of its gradients (session 10).

Every correct step applies gradients the step's backward wrote: the optimizer stepped after a
backward holds parameters that backward reached. A loop that builds a new model (a
hyper-parameter sweep, a restart, a k-fold split) but keeps calling `step()` on the optimizer
of the first one breaks it: the new model's gradients are computed and never applied, and the
old optimizer re-applies the gradients its parameters kept from their last backward.

At each judged `optimizer.step()` the identity and version counter of every `.grad` the
optimizer holds are noted. At the end of a later backward, an optimizer none of whose
gradients that backward changed (same objects, same versions) is a suspect; the backward's
graph is walked once to its leaves, and only when it reached tensors no optimizer of the
session holds is the suspect kept (a backward for another model's optimizer reaches that
one's parameters). If the suspect then steps with those gradients still unchanged, the
finding: the backward's gradients fall where no optimizer applies them, and the optimizer
steps on stale ones. Attributes only; the walk runs on a suspect backward only.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import torch

from .._findings import Category, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_frame_from_stack
from .._gradients._graph import reach

# id(param) -> (a weak reference to its grad, grad._version). A weak reference, not id(grad):
# a grad freed by zero_grad(set_to_none=True) and the next backward's new one may share an
# address, and so an id, with the same version.
Signature = dict[int, tuple["weakref.ref[torch.Tensor]", int]]


def _signature(opt: torch.optim.Optimizer) -> Signature:
    return {id(p): (weakref.ref(p.grad), p.grad._version) for g in opt.param_groups for p in g["params"]
            if isinstance(p, torch.Tensor) and p.grad is not None}


def _unchanged(opt: torch.optim.Optimizer, before: Signature) -> bool:
    if not before:
        return False
    now = {id(p): p.grad for g in opt.param_groups for p in g["params"]
           if isinstance(p, torch.Tensor) and p.grad is not None}
    if now.keys() != before.keys():
        return False
    return all(before[k][0]() is grad and before[k][1] == grad._version for k, grad in now.items())


class StaleSteps:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.before: dict[int, tuple[weakref.ref[torch.optim.Optimizer], Signature]] = {}
        self.suspects: dict[int, dict[str, Any]] = {}
        self.reported: set[int] = set()

    def step_pre(self, opt: torch.optim.Optimizer) -> None:
        if id(opt) in self.reported:
            return
        suspect = self.suspects.pop(id(opt), None)
        entry = self.before.get(id(opt))
        if suspect is not None and entry is not None and _unchanged(opt, entry[1]):
            self.reported.add(id(opt))
            self.before.pop(id(opt), None)
            self._report(opt, suspect)
            return
        self.before[id(opt)] = (weakref.ref(opt), _signature(opt))

    def backward_end(self, roots: tuple[torch.Tensor, ...]) -> None:
        stale = [opt for ref, sig in self.before.values() if (opt := ref()) is not None
                 and id(opt) not in self.reported and id(opt) not in self.suspects and _unchanged(opt, sig)]
        if not stale:
            return
        r = reach(roots)
        held = {id(p) for o in self.session.optimizers for g in o.param_groups for p in g["params"]}
        orphans = [t for i, t in r.leaves.items() if i not in held and t.grad is not None]
        if not orphans:
            return
        frame = user_frame_from_stack(3)
        for opt in stale:
            self.suspects[id(opt)] = {"frame": frame, "tensors": len(orphans),
                                      "values": sum(t.numel() for t in orphans),
                                      "shapes": ["x".join(map(str, t.shape)) or "scalar" for t in orphans[:4]],
                                      "step": self.session.step}

    def _report(self, opt: torch.optim.Optimizer, suspect: dict[str, Any]) -> None:
        frame: UserFrame | None = suspect["frame"]
        held = [p for g in opt.param_groups for p in g["params"] if isinstance(p, torch.Tensor)]
        with_grad = sum(p.grad is not None for p in held)
        where = f"{os.path.basename(frame.file)}:{frame.line}" if frame is not None else "?"
        names = [n for p in held[:4] if (n := self.session.param_index.name(p))]
        evidence: dict[str, Any] = {
            "backward_line": where, "tensors_reached_in_no_optimizer": suspect["tensors"],
            "values_reached_in_no_optimizer": suspect["values"], "their_shapes": suspect["shapes"],
            "optimizer": type(opt).__name__, "optimizer_parameters": len(held),
            "optimizer_gradients_unchanged": with_grad, "optimizer_holds": names}
        fields = {"opt": type(opt).__name__, "n": len(held), "where": where, "tensors": suspect["tensors"],
                  "values": suspect["values"], "step": self.session.step}
        self.session.add(from_catalogue(
            Category.GRADIENT, "gradient.step_stale_optimizer", "ledger.stale_step", fields=fields,
            cause_key="ledger.stale_step.cause", next_key="ledger.stale_step.next",
            frame=user_frame_from_stack(3), evidence=evidence, source_line=True, severity=Severity.WARNING,
            stage=Stage.OPTIMIZER, step=self.session.step, op="optimizer.step",
            parameter=names[0] if names else None))
