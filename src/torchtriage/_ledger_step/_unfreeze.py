"""An unfreeze that cannot unfreeze (session 12).

The invariant: a method that sets `requires_grad` from its argument (`set_trainable(flag)`,
`freeze(mode)`) turns it on as well as off. Written as

    for p in self.parameters():
        if p.requires_grad:
            p.requires_grad = trainable

it only ever touches parameters that already require grad: `set_trainable(False)` freezes them,
and `set_trainable(True)` afterwards skips every one of them. The fine-tuning phase trains the
new head only, on frozen features.

Measured: parameters that required grad when their optimizer was built, that this optimizer
stepped past (it stepped at least `MIN_STEPS` times), and that are frozen at the end; then the
classes of the modules holding them (and their mixins) are read for a method that assigns
`x.requires_grad = <not a literal False>` under `if x.requires_grad` (the same `x`). Both
together are a warning at that line: the run kept them frozen, and the code that should have
unfrozen them cannot. A backbone frozen for the whole run by `requires_grad_(False)` or by a
loop without such a guard stays quiet (no method that cannot do what it says).
Cost: a dict of flags per optimizer when it becomes known; at the end, one source read per class.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import weakref
from typing import Any

import torch
import torch.nn as nn

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame

MIN_STEPS = 3


def _guarded_assignment(fn: Any) -> tuple[int, str] | None:
    """(line, source) of `x.requires_grad = v` (v not the literal False) under `if x.requires_grad:`."""
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        test = node.test
        if not (isinstance(test, ast.Attribute) and test.attr == "requires_grad"):
            continue
        base = ast.dump(test.value)
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                tgt = stmt.targets[0]
                if isinstance(tgt, ast.Attribute) and tgt.attr == "requires_grad" and ast.dump(tgt.value) == base \
                        and not (isinstance(stmt.value, ast.Constant) and stmt.value.value is False):
                    return start + stmt.lineno - 1, lines[stmt.lineno - 1].strip()
    return None


class UnfreezeWatch:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.built: dict[int, tuple[weakref.ref[torch.optim.Optimizer], list[weakref.ref[torch.Tensor]]]] = {}
        self.scanned: set[type] = set()
        # (class, method name) -> [calls, file, line, source]
        self.methods: dict[tuple[type, str], list[Any]] = {}

    def model(self, model: nn.Module) -> None:
        """Read the classes of a watched model's modules once; wrap each method that cannot
        unfreeze (through `session.patch`, undone at the end) to count its calls."""
        for mod in model.modules():
            for klass in type(mod).__mro__:
                if klass in self.scanned or klass.__module__.startswith("torch") or klass is object:
                    continue
                self.scanned.add(klass)
                for name, fn in list(vars(klass).items()):
                    code = getattr(fn, "__code__", None)
                    if code is None:
                        continue
                    found = _guarded_assignment(fn)
                    if found is None:
                        continue
                    entry = self.methods[(klass, name)] = [0, code.co_filename, found[0], found[1]]
                    self.session.patch(klass, name, _counting(fn, entry))

    def optimizer(self, opt: torch.optim.Optimizer) -> None:
        if id(opt) in self.built:
            return
        for m in self.session.models:
            self.model(m)
        # (no walk of the user's frames' locals here: reading a long-lived frame's f_locals keeps a
        # snapshot of its variables alive, the optimizer a loop just replaced among them)
        trainable = [weakref.ref(p) for g in opt.param_groups for p in g["params"]
                     if isinstance(p, torch.Tensor) and p.requires_grad]
        self.built[id(opt)] = (weakref.ref(opt), trainable)

    def end(self, steps: dict[int, int]) -> list[Finding]:
        frozen: dict[int, torch.Tensor] = {}
        for oid, (_, refs) in self.built.items():
            if steps.get(oid, 0) < MIN_STEPS:  # (the optimizer itself may be freed by now)
                continue
            for r in refs:
                p = r()
                if p is not None and not p.requires_grad:
                    frozen[id(p)] = p
        if not frozen:
            return []
        out = []
        for model in self.session.models:
            mine = [(n, p) for n, p in model.named_parameters() if id(p) in frozen] if isinstance(model, nn.Module) \
                else []
            if not mine:
                continue
            hit = self._method(model)
            if hit is None:
                continue
            (file, line, src, qual) = hit
            frame = UserFrame(file, line, qual, src)
            names = [n for n, _ in mine]
            evidence = {"parameters": names[:10], "count": len(names), "values": sum(p.numel() for _, p in mine),
                        "requires_grad_when_optimizer_built": True, "requires_grad_at_end": False,
                        "method": qual}
            label = self.session.model_label(model) or type(model).__name__
            fields = {"count": len(names), "model": label, "method": qual, "values": evidence["values"]}
            out.append(from_catalogue(Category.GRADIENT, "gradient.unfreeze_noop", "ledger.unfreeze",
                                      fields=fields, cause_key="ledger.unfreeze.cause",
                                      next_key="ledger.unfreeze.next", frame=frame, evidence=evidence,
                                      source_line=True, severity=Severity.WARNING, stage=Stage.PARAMETER,
                                      step=self.session.step, parameter=names[0]))
        return out

    def _method(self, model: nn.Module) -> tuple[str, int, str, str] | None:
        """A method of the model's classes that cannot unfreeze and was called twice or more (to
        freeze, then to unfreeze)."""
        classes = {k for mod in model.modules() for k in type(mod).__mro__}
        for (klass, name), (calls, file, line, src) in self.methods.items():
            if klass in classes and calls >= 2:
                return file, line, src, f"{klass.__name__}.{name}"
        return None


def _counting(fn: Any, entry: list[Any]) -> Any:
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        entry[0] += 1
        return fn(*args, **kwargs)

    return wrapper
