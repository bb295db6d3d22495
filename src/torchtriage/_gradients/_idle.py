"""An optimizer that never steps while its parameters get gradients: the backward computes them
and nothing applies them (a seq2seq loop with one optimizer per model and one `.step()`
forgotten). The parameters never change; no error is raised.

Seen in the gradient check's window (which stays open, up to its extension, until every watched
optimizer has stepped once): at each optimizer step of the window, the optimizers that have not
stepped yet are asked whether their parameters hold gradients (a Python read of `.grad`, no
kernel). An optimizer that never stepped in the window, whose parameters held gradients at two
of those moments or more, and whose parameters no stepping optimizer holds, gives a finding.
It is held until the session ends and dropped if that optimizer steps after all (a generator
trained after a warm-up of its discriminator).
"""

from __future__ import annotations

from typing import Any

import torch

from .._findings import Finding, Severity, Stage
from .._frames import optimizer_frame


class IdleOptimizers:
    def __init__(self) -> None:
        self.with_grads: dict[int, int] = {}  # id(optimizer) -> moments its parameters held grads
        self.moments = 0

    def at_step(self, optimizers: list[torch.optim.Optimizer], stepped: set[int]) -> None:
        """An optimizer steps (the window is open): count the idle ones whose parameters hold grads."""
        self.moments += 1
        for o in optimizers:
            if id(o) not in stepped and any(p.grad is not None for g in o.param_groups for p in g["params"]):
                self.with_grads[id(o)] = self.with_grads.get(id(o), 0) + 1

    def findings(self, session: Any, optimizers: list[torch.optim.Optimizer], stepped: set[int],
                 step: int | None, make: Any) -> dict[int, Finding]:
        """id(optimizer) -> the finding, for each optimizer the window saw idle with gradients."""
        applied = {id(p) for o in optimizers if id(o) in stepped for g in o.param_groups for p in g["params"]}
        out: dict[int, Finding] = {}
        for oi, o in enumerate(optimizers):
            if id(o) in stepped or self.with_grads.get(id(o), 0) < 2:
                continue
            idle = [p for g in o.param_groups for p in g["params"] if id(p) not in applied]
            if not idle:
                continue  # its parameters are updated by an optimizer that steps
            names = [n for n in (session.param_index.name(p) for p in idle) if n]
            model = _model_of(session, idle)
            label = (session.model_label(model) or type(model).__name__) if model is not None else None
            out[id(o)] = make("gradient.optimizer_idle", Severity.ERROR, Stage.OPTIMIZER,
                              module=_common_module(names), op=type(o).__name__, frame=optimizer_frame(o),
                              step=step, wording="model" if label else "", optimizer=oi, model=label,
                              parameters=len(idle), examples=", ".join(names[:3]), steps=self.moments,
                              times_with_grads=self.with_grads[id(o)])
        return out


def _model_of(session: Any, params: list[torch.Tensor]) -> Any:
    """The watched model that holds all of `params`, or None."""
    ids = {id(p) for p in params}
    for m in session.models:
        if ids <= {id(p) for p in m.parameters()}:
            return m
    return None


def _common_module(names: list[str]) -> str | None:
    """The module path all the parameters share ("encoder"), or None."""
    if not names:
        return None
    parts = [n.split(".")[:-1] for n in names]
    common = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return ".".join(common) or None
