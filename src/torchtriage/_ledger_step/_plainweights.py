"""Weights kept as plain tensors: multiplied into the forward, never trained (session 12).

The invariant: a tensor used as a weight in the forward that is meant to learn is a registered
parameter. `nn.Module.__setattr__` registers an `nn.Parameter` (and `register_buffer` a buffer);
a plain tensor assigned as an attribute (`self.W = torch.zeros(...)`, `Variable(...)`) is neither:
it is not in `parameters()`, gets no gradient, and the optimizer never sees it. With
`requires_grad=True` the gradient check names it (`gradient.unregistered_tensor`); without, it
is a constant that nothing reports.

Seen from the backward graph at the ledger's walked backwards (`GradSinks.backward` hands its
nodes here): a multiplying node (`Mul`, `Div`, `Mm`, `Bmm`, `Addmm`, convolution) saves the
operand that does not require grad to compute the other's gradient. A saved operand that is a
plain floating tensor attribute of a module of a watched model (not a parameter, not a buffer),
with more than one element, is such a weight. At the end (one read) it is judged by its values:

  * all zeros or all ones, unchanged since first seen, in a multiplication: a learnable gate left
    at its initialization (peephole weights, a ReZero / LayerScale gain): the product is zero (or
    the other operand) at every step — the term it was meant to learn does nothing (warning);
  * anything else: a constant kept as an attribute (a fixed random projection, a mask): info.

Cost: a scan of the walked nodes' saved operands on the walked backwards (at most `WALKS` per set
of optimizers), one read at the end.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import weakref
from typing import Any

import torch
import torch.nn as nn

from .._deferred import read_scalars
from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame

# node type -> the attributes that hold a saved operand
_SAVED = {
    "MulBackward0": ("_saved_self", "_saved_other"),
    "DivBackward0": ("_saved_other",),
    "MmBackward0": ("_saved_self", "_saved_mat2"),
    "BmmBackward0": ("_saved_self", "_saved_mat2"),
    "AddmmBackward0": ("_saved_mat1", "_saved_mat2"),
    "ConvolutionBackward0": ("_saved_weight",),
}
SAMPLE = 64


@dataclasses.dataclass
class _Plain:
    ref: weakref.ref[torch.Tensor]
    module: weakref.ref[nn.Module]
    path: str  # module path . attribute
    attr: str
    model: str
    shape: tuple[int, ...]
    ops: set[str]
    start: torch.Tensor | None = None
    index: torch.Tensor | None = None
    uses: int = 0


def _plain_attributes(models: list[tuple[nn.Module, str]]) -> dict[int, tuple[nn.Module, str, str, str, torch.Tensor]]:
    """storage pointer -> (module, module path, attribute, model label, tensor) of every plain
    floating tensor attribute (not a parameter, not a buffer) of the watched models' modules."""
    out: dict[int, tuple[nn.Module, str, str, str, torch.Tensor]] = {}
    for model, label in models:
        for mname, mod in model.named_modules():
            for attr, value in vars(mod).items():
                if not isinstance(value, torch.Tensor) or isinstance(value, nn.Parameter) \
                        or value.requires_grad or not value.is_floating_point() or value.numel() < 2 \
                        or value.layout is not torch.strided or value.device.type == "meta":
                    continue
                try:
                    ptr = value.untyped_storage().data_ptr()
                except RuntimeError:
                    continue
                if ptr:
                    out[ptr] = (mod, mname, attr, label, value)
    return out


class PlainWeights:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.found: dict[int, _Plain] = {}

    def nodes(self, order: list[Any]) -> None:
        """The nodes of a walked backward's graph, before backward frees their saved tensors."""
        attrs = _plain_attributes([(m, self.session.model_label(m) or "") for m in self.session.models])
        if not attrs:
            return
        for node in order:
            names = _SAVED.get(type(node).__name__)
            if not names:
                continue
            for name in names:
                try:
                    t = getattr(node, name, None)
                except RuntimeError:
                    continue
                if not isinstance(t, torch.Tensor) or t.requires_grad:
                    continue
                try:
                    ptr = t.untyped_storage().data_ptr()
                except RuntimeError:
                    continue
                hit = attrs.get(ptr)
                if hit is None:
                    continue
                mod, mname, attr, label, value = hit
                p = self.found.get(id(value))
                if p is None or p.ref() is not value:
                    path = f"{mname}.{attr}" if mname else attr
                    p = self.found[id(value)] = _Plain(weakref.ref(value), weakref.ref(mod), path, attr, label,
                                                       tuple(value.shape), set())
                    with torch.no_grad():
                        n = value.numel()
                        p.index = torch.linspace(0, n - 1, min(n, SAMPLE), device=value.device).long()
                        p.start = value.detach().reshape(-1).index_select(0, p.index).clone()
                p.ops.add(type(node).__name__.replace("Backward0", ""))
                p.uses += 1

    def end(self) -> list[Finding]:
        rows = [(p, t) for p in self.found.values() if (t := p.ref()) is not None and p.start is not None]
        if not rows:
            return []
        with torch.no_grad():
            dev = rows[0][1].device
            stats = []
            for p, t in rows:
                assert p.index is not None and p.start is not None
                v = t.detach().float()
                same = (t.detach().reshape(-1).index_select(0, p.index) == p.start).all().float()
                stats.append(torch.stack([v.min(), v.max(), same, v.abs().mean()]).to(dev))
            flat = read_scalars([torch.stack(stats).reshape(-1)])
        out = []
        groups: dict[tuple[str, str, float, bool], list[tuple[_Plain, list[float]]]] = {}
        for (p, _), k in zip(rows, range(0, len(flat), 4)):
            lo, hi, unchanged, mean = flat[k:k + 4]
            gate = bool(unchanged) and lo == hi and lo in (0.0, 1.0) and "Mul" in p.ops
            cls = type(p.module()).__name__ if p.module() is not None else "Module"
            groups.setdefault((cls, p.attr if not gate else "", lo if gate else -1.0, gate), []).append(
                (p, [lo, hi, mean]))
        for (cls, _, value, gate), items in groups.items():
            out.append(self._finding(cls, items, gate, value))
        return out

    def _finding(self, cls: str, items: list[tuple[_Plain, list[float]]], gate: bool, value: float) -> Finding:
        p, (lo, hi, mean) = items[0]
        paths = [it[0].path for it in items]
        mod = p.module()
        frame = _assignment_line(mod, p.attr) if mod is not None else None
        values = sum(int(torch.Size(it[0].shape).numel()) for it in items)
        evidence: dict[str, Any] = {
            "tensors": paths[:12], "count": len(items), "values": values, "shape": list(p.shape),
            "module_class": cls, "registered": False, "requires_grad": False, "is_parameter": False,
            "used_in": sorted({op for it in items for op in it[0].ops}), "min": lo, "max": hi,
            "unchanged": True if gate else None}
        if p.model:
            evidence["model"] = p.model
        fields = {"count": len(items), "first": paths[0], "cls": cls, "values": values,
                  "shape": "x".join(str(d) for d in p.shape), "value": f"{value:g}",
                  "ops": ", ".join(evidence["used_in"]),
                  "names": ", ".join(sorted({it[0].attr for it in items}))}
        variant = "gate" if gate else "constant"
        module = p.path.rpartition(".")[0] or None
        return from_catalogue(Category.GRADIENT, "gradient.plain_weight", f"ledger.plain_weight.{variant}",
                              fields=fields, cause_key=f"ledger.plain_weight.{variant}.cause",
                              next_key="ledger.plain_weight.next", frame=frame, evidence=evidence,
                              source_line=frame is not None,
                              severity=Severity.WARNING if gate else Severity.INFO, stage=Stage.FORWARD,
                              step=self.session.step, module=module, parameter=paths[0])


def _assignment_line(module: nn.Module, attr: str) -> UserFrame | None:
    """The line of a method of the module's class that assigns `self.<attr> = ...` (read through
    each method's code object: a class of a script run as `__main__` has no module file)."""
    pat = re.compile(r"\bself\." + re.escape(attr) + r"\s*=(?!=)(?!\s*None\b)")  # not `= None`
    for klass in type(module).__mro__:
        if klass.__module__.startswith("torch.") or klass is object:
            break
        for fn in vars(klass).values():
            code = getattr(fn, "__code__", None)
            if code is None:
                continue
            try:
                lines, start = inspect.getsourcelines(fn)
            except (OSError, TypeError):
                continue
            for i, text in enumerate(lines):
                if pat.search(text):
                    return UserFrame(code.co_filename, start + i, fn.__name__, text.strip())
    return None
