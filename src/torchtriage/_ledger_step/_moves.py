"""Parameters an optimizer moves although they are frozen (issue 26, parameter updates).

An optimizer skips a parameter whose `.grad` is None, not one whose `requires_grad` is off.
Freezing a layer in the middle of training (`requires_grad_(False)` for a second stage) while
its `.grad` is still a tensor — `zero_grad(set_to_none=False)` keeps zeros there, a grad left
from the last backward stays — lets the optimizer go on moving it: momentum, Adam's running
averages and decoupled weight decay change it at every step, with no gradient at all.

At each judged `optimizer.step()` the tensors it holds with `requires_grad=False` and a `.grad`
are noted with their version counters (an in-place update bumps it); after the step, a bumped
counter is a parameter that moved although it is frozen. No kernel, no sync: attributes only.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from .._findings import Category, Severity, Stage, from_catalogue

_SETTINGS = ("weight_decay", "momentum", "betas")


class FrozenMoves:
    def __init__(self, session: Any) -> None:
        self.session = session
        self._before: dict[int, list[tuple[weakref.ref[torch.Tensor], int, int]]] = {}
        self.reported: set[int] = set()

    def pre(self, opt: torch.optim.Optimizer) -> None:
        if id(opt) in self.reported:
            return
        noted = [(weakref.ref(p), p._version, gi) for gi, g in enumerate(opt.param_groups) for p in g["params"]
                 if isinstance(p, torch.Tensor) and not p.requires_grad and p.grad is not None]
        if noted:
            self._before[id(opt)] = noted

    def post(self, opt: torch.optim.Optimizer) -> None:
        noted = self._before.pop(id(opt), None)
        if not noted:
            return
        moved = [(p, gi) for ref, v, gi in noted if (p := ref()) is not None and p._version != v]
        if not moved:
            return
        self.reported.add(id(opt))
        sess = self.session
        index = sess.param_index
        names = [index.name(p) or "?" for p, _ in moved]
        first, gi = moved[0]
        info = index.info(first)
        group = opt.param_groups[gi]
        settings = {k: group[k] for k in _SETTINGS if k in group and group[k]}
        grad = first.grad
        zero_grad = bool(grad is not None and grad.numel() and grad.device.type == "cpu" and not grad.any())
        evidence: dict[str, Any] = {
            "parameters": names[:8], "count": len(moved), "requires_grad": False,
            "grad": "a tensor" + (" of zeros" if zero_grad else ""), "optimizer": type(opt).__name__,
            "group": gi, "values_changed_by_step": True, **{k: str(v) for k, v in settings.items()}}
        if info is not None and info.label:
            evidence["model"] = info.label
        fields = {"count": len(moved), "first": names[0], "opt": type(opt).__name__, "step": sess.step,
                  "settings": ", ".join(f"{k}={v}" for k, v in settings.items()) or "its state"}
        sess.add(from_catalogue(Category.GRADIENT, "gradient.frozen_moved", "ledger.frozen_moved", fields=fields,
                                cause_key="ledger.frozen_moved.cause", next_key="ledger.frozen_moved.next",
                                evidence=evidence, severity=Severity.WARNING, stage=Stage.OPTIMIZER, step=sess.step,
                                module=info.module if info is not None else None, parameter=names[0]))
