"""`module.requires_grad = False`: an attribute on the module, not on its parameters (session 10).

`nn.Module` has `requires_grad_()`, a method, and no `requires_grad` attribute: assigning
`model.encoder.requires_grad = False` stores a Python attribute on the module and freezes
nothing. Its parameters keep `requires_grad=True`, get gradients, and the optimizer moves the
layer the code means to hold fixed.

The invariant: parameters under a module whose `requires_grad` attribute says False do not
move. While the session runs, a data descriptor on `nn.Module` notes each assignment (its line;
reads and writes behave as before, the value lives in the instance's `__dict__`); modules that
carried the attribute before the session are found in the watched models at the first judged
step. At a judged `optimizer.step()` the parameters under such a module that still require grad
and have a `.grad` are noted with their version counters; a bumped counter after the step is
the frozen layer moving. Attributes only, no device read.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from .._findings import Category, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_frame_from_stack


class _Flag:
    """The data descriptor put on `nn.Module.requires_grad` for the session."""

    def __init__(self, watch: ModuleFlag) -> None:
        self.watch = watch

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        try:
            return instance.__dict__["requires_grad"]
        except KeyError:
            raise AttributeError(f"'{type(instance).__name__}' object has no attribute 'requires_grad'") from None

    def __set__(self, instance: Any, value: Any) -> None:
        instance.__dict__["requires_grad"] = value
        try:
            self.watch.assigned(instance, value)
        except Exception as e:  # our bug: the user's assignment has happened
            self.watch.session.internal_error("step_ledger.module_requires_grad", e)

    def __delete__(self, instance: Any) -> None:
        try:
            del instance.__dict__["requires_grad"]
        except KeyError:
            raise AttributeError("requires_grad") from None


class ModuleFlag:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.modules: dict[int, tuple[weakref.ref[torch.nn.Module], UserFrame | None]] = {}
        self._scanned = False
        self._before: dict[int, list[tuple[weakref.ref[torch.Tensor], int, int]]] = {}
        self._flagged_at: dict[int, list[tuple[torch.nn.Module, UserFrame | None]]] = {}
        self.reported: set[int] = set()

    def install(self) -> None:
        if "requires_grad" not in torch.nn.Module.__dict__:
            self.session.patch(torch.nn.Module, "requires_grad", _Flag(self))

    def assigned(self, module: torch.nn.Module, value: Any) -> None:
        if value is False and not self.session.busy:
            self.modules[id(module)] = (weakref.ref(module), user_frame_from_stack(2))

    def _flagged(self) -> list[tuple[torch.nn.Module, UserFrame | None]]:
        if not self._scanned:  # set before the session began: found on the watched models
            self._scanned = True
            for model in list(getattr(self.session, "models", ()) or ()):
                for m in model.modules():
                    if m.__dict__.get("requires_grad") is False and id(m) not in self.modules:
                        self.modules[id(m)] = (weakref.ref(m), None)
        out = []
        for ref, frame in self.modules.values():
            m = ref()
            if m is not None and m.__dict__.get("requires_grad") is False:
                out.append((m, frame))
        return out

    def pre(self, opt: torch.optim.Optimizer) -> None:
        if id(opt) in self.reported or not self.modules and self._scanned:
            return
        flagged = self._flagged()
        if not flagged:
            return
        held = {id(p) for g in opt.param_groups for p in g["params"]}
        noted: list[tuple[weakref.ref[torch.Tensor], int, int]] = []
        for i, (m, _) in enumerate(flagged):
            noted += [(weakref.ref(p), p._version, i) for p in m.parameters()
                      if p.requires_grad and p.grad is not None and id(p) in held]
        if noted:
            self._before[id(opt)] = noted
            self._flagged_at[id(opt)] = flagged

    def post(self, opt: torch.optim.Optimizer) -> None:
        noted = self._before.pop(id(opt), None)
        flagged = self._flagged_at.pop(id(opt), [])
        if not noted:
            return
        moved = [(p, i) for ref, v, i in noted if (p := ref()) is not None and p._version != v]
        if not moved:
            return
        self.reported.add(id(opt))
        module, frame = flagged[moved[0][1]]
        mine = [p for p, i in moved if i == moved[0][1]]
        index = self.session.param_index
        names = [index.name(p) or "?" for p in mine]
        first = names[0]
        path = first.rsplit(".", 1)[0] if "." in first else type(module).__name__
        for name, p in module.named_parameters():  # the module's own path: the parameter's name less its local name
            if p is mine[0] and first.endswith("." + name):
                path = first[: -len(name) - 1]
                break
        total = sum(1 for _ in module.parameters())
        evidence: dict[str, Any] = {"module": path, "module_attribute_requires_grad": False,
                                    "parameters_requiring_grad": sum(p.requires_grad for p in module.parameters()),
                                    "parameters": total, "parameters_moved_by_step": names[:8],
                                    "values": sum(p.numel() for p in mine), "optimizer": type(opt).__name__}
        fields = {"module": path, "kind": type(module).__name__, "n": len(mine), "total": total,
                  "opt": type(opt).__name__, "step": self.session.step}
        self.session.add(from_catalogue(
            Category.GRADIENT, "gradient.module_flag_not_frozen", "ledger.module_flag", fields=fields,
            cause_key="ledger.module_flag.cause", next_key="ledger.module_flag.next", frame=frame,
            evidence=evidence, source_line=True, severity=Severity.WARNING, stage=Stage.OPTIMIZER,
            step=self.session.step, module=path, parameter=first))
