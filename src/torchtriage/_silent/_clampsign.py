"""A clamp that replaces every value it is given, with the opposite sign: `(b - a).clamp(min=eps)`
where `b - a` is negative everywhere.

A clamp written as a guard (`den.clamp(min=1e-6)`, `std.clamp_min(eps)`) keeps a value away from
zero on the rare element that reaches it: on almost every element it is the identity. When the
clamped tensor lies entirely on the other side of zero from the bound (every element negative
under `min=eps > 0`, every element positive under `max=-eps < 0`), the clamp is not a guard: it
throws away every value the code computed and puts the bound in its place, with the sign flipped
and the scale set by the epsilon (a velocity divided by 1e-6 instead of by -0.1). Nothing is
non-finite, so no numerical check sees it.

The model: every taped clamp of the step (the loop's own code, the warm-up steps) with a scalar
bound whose result flows, through the taped ops, into the tensor given to backward(). Measured on
the step's tensors, read with the step's one read: the input's smallest and largest value and how
many elements the clamp replaced. A warning when it replaced all of them and each changed sign.
"""

from __future__ import annotations

from typing import Any

import torch

from .._findings import Category, Severity, Stage
from ._common import shape
from ._divisor import _feeds
from ._plans import Plan, Verdict

_CLAMP = frozenset({"clamp", "clip", "clamp_min", "clamp_max"})
MAX_CLAMPS = 16


def _bounds(op: Any) -> tuple[float | None, float | None]:
    """The clamp's scalar (min, max); a tensor bound is not judged (None)."""
    args, kw = op.args, op.kwargs
    if op.name == "clamp_min":
        lo, hi = (args[1] if len(args) > 1 else kw.get("min")), None
    elif op.name == "clamp_max":
        lo, hi = None, (args[1] if len(args) > 1 else kw.get("max"))
    else:
        lo = args[1] if len(args) > 1 else kw.get("min")
        hi = args[2] if len(args) > 2 else kw.get("max")

    def num(x: Any) -> float | None:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            return None
        return float(x)

    return num(lo), num(hi)


def clamp_plans(ops: list[Any], root: torch.Tensor, judged: frozenset[int] | set[int] = frozenset()
                ) -> list[tuple[Plan, Any]]:
    """(plan, frame) for each taped clamp of the step that feeds `root` and whose bound lies on
    the far side of zero (`min > 0` or `max < 0`): only such a bound can flip every sign."""
    found: list[tuple[Plan, Any]] = []
    for i, op in enumerate(ops):
        if len(found) >= MAX_CLAMPS:
            break
        if op.name not in _CLAMP or not op.args or id(op) in judged:
            continue
        x, out = op.args[0], op.output
        if not (isinstance(x, torch.Tensor) and isinstance(out, torch.Tensor) and x.is_floating_point()) \
                or x.numel() == 0:
            continue
        lo, hi = _bounds(op)
        if not ((lo is not None and lo > 0) or (hi is not None and hi < 0)):
            continue
        if not _feeds(ops, i, out, root):
            continue
        found.append((_plan(x, lo, hi, op.name), op.frame))
    return found


def _plan(x: torch.Tensor, lo: float | None, hi: float | None, name: str) -> Plan:
    v = x.detach().float()
    replaced = torch.zeros((), device=v.device)
    if lo is not None:
        replaced = replaced + (v < lo).sum()
    if hi is not None:
        replaced = replaced + (v > hi).sum()
    n, xshape = v.numel(), shape(x)

    def judge(vals: list[float]) -> Verdict | None:
        x_min, x_max, n_replaced = vals
        if n_replaced < n:
            return None
        if lo is not None and lo > 0 and x_max < 0:
            bound, side = lo, "min"
        elif hi is not None and hi < 0 and x_min > 0:
            bound, side = hi, "max"
        else:
            return None
        scale = max(abs(x_min), abs(x_max)) / abs(bound)
        return dict(name="clamp_flips_sign", severity=Severity.WARNING, stage=Stage.LOSS,
                    category=Category.NUMERICAL, bound=f"{side}={bound:g}", count=n,
                    x_min=f"{x_min:.4g}", x_max=f"{x_max:.4g}",
                    evidence={"input_shape": xshape, "elements_replaced": f"{int(n_replaced)}/{n}",
                              "input_min": x_min, "input_max": x_max, "bound": f"{side}={bound:g}",
                              "largest_scale_change": float(f"{scale:.4g}")})

    return Plan([v.amin(), v.amax(), replaced.float()], judge)
