"""`module.requires_grad = False`: an attribute on the module, not on its parameters (session 10).

`nn.Module` has `requires_grad_()`, a method, and no `requires_grad` attribute: assigning
`model.encoder.requires_grad = False` stores a Python attribute on the module and freezes
nothing. Its parameters keep `requires_grad=True`, get gradients, and the optimizer moves the
layer the code means to hold fixed.

The invariant: parameters under a module whose `requires_grad` attribute says False do not
move. At a judged `optimizer.step()` the watched models' modules are read for that attribute
(`vars(module)`, nothing patched); the parameters under such a module that still require grad,
have a `.grad` and belong to the optimizer are noted with their version counters; a bumped
counter after the step is the frozen layer moving. The assignment's line is then looked for in
the user's files on the stack (`<...>.<module>.requires_grad = False`, by `ast`). Attributes
only, no device read.
"""

from __future__ import annotations

import ast
import weakref
from pathlib import Path
from typing import Any

import torch

from .._findings import Category, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_files_on_stack, user_frame_of_line


def _chain_end(node: ast.expr) -> str | None:
    """The last name of an attribute chain or the index of a subscript: `outc` of
    `self.model.outc`, `2` of `model[2]`."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return str(node.slice.value)
    return None


def assignment_line(files: list[str], path: str) -> UserFrame | None:
    """The line `<...>.<last part of path>.requires_grad = False` in the user's files, if one."""
    last = path.rsplit(".", 1)[-1]
    for file in files:
        try:
            tree = ast.parse(Path(file).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign) or not (isinstance(node.value, ast.Constant)
                                                        and node.value.value is False):
                continue
            for target in node.targets:
                if isinstance(target, ast.Attribute) and target.attr == "requires_grad" \
                        and _chain_end(target.value) == last:
                    return user_frame_of_line(file, node.lineno, "")
    return None


class ModuleFlag:
    def __init__(self, session: Any) -> None:
        self.session = session
        self._before: dict[int, list[tuple[weakref.ref[torch.Tensor], int, int]]] = {}
        self._flagged_at: dict[int, list[torch.nn.Module]] = {}
        self.reported: set[int] = set()

    def _flagged(self) -> list[torch.nn.Module]:
        return [m for model in self.session.models for m in model.modules()
                if m.__dict__.get("requires_grad") is False]

    def pre(self, opt: torch.optim.Optimizer) -> None:
        if id(opt) in self.reported:
            return
        flagged = self._flagged()
        if not flagged:
            return
        held = {id(p) for g in opt.param_groups for p in g["params"]}
        noted: list[tuple[weakref.ref[torch.Tensor], int, int]] = []
        for i, m in enumerate(flagged):
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
        module = flagged[moved[0][1]]
        mine = [p for p, i in moved if i == moved[0][1]]
        index = self.session.param_index
        names = [index.name(p) or "?" for p in mine]
        first = names[0]
        path = first.rsplit(".", 1)[0] if "." in first else type(module).__name__
        for name, p in module.named_parameters():  # the module's own path: the parameter's name less its local name
            if p is mine[0] and first.endswith("." + name):
                path = first[: -len(name) - 1]
                break
        frame = assignment_line(user_files_on_stack(2), path)
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
