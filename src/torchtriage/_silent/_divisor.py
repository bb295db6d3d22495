"""Normalizations by a spread that is zero: `x / (std + eps)` where `std` is 0 for some group.

A division that normalizes (`(r - mean) / (std + 1e-8)`, `v / (norm + eps)`) is safe when the
spread is zero only where the numerator is zero too: a constant group has nothing left after
its mean is taken away. A leave-one-out baseline, a mean and a std taken over different sets,
or a numerator that is not centred break that: where the divisor is only the epsilon, the
quotient is the numerator / eps (1e6 for eps = 1e-6), finite, so no non-finite check sees it,
and it outweighs every other element of the loss.

The model: every taped division of the step (the loop's own code, the warm-up steps) whose
result flows, through the taped ops, into the tensor given to backward(). Measured on the
step's tensors, read with the step's one read: the divisor elements that are degenerate (at
most 1e-4 of the largest divisor), the largest quotient there and elsewhere, and the share of
the quotient's absolute sum that the degenerate elements carry. A warning when the degenerate
elements' quotients exceed every regular one a thousandfold: the division, not the data, sets
the scale of the loss.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from .._findings import Category, Severity, Stage
from ._common import shape
from ._plans import Plan, Verdict

_DIV = frozenset({"div", "__truediv__", "true_divide", "divide", "div_", "__itruediv__"})
_ADD = frozenset({"add", "__add__", "__radd__", "add_", "__iadd__"})
REL = 1e-4  # a divisor at most this fraction of the largest one is degenerate
RATIO = 1e3  # degenerate quotients this many times the largest regular one: the division sets the scale
MAX_DIVISIONS = 16


def _tensors(x: Any) -> list[torch.Tensor]:
    try:
        return [t for t in pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]
    except Exception:
        return []


def _feeds(ops: list[Any], start: int, out: torch.Tensor, root: torch.Tensor) -> bool:
    """Does `out` (the output of ops[start]) flow through the later taped ops into `root`?"""
    tainted = {id(out)}
    if out is root:
        return True
    for op in ops[start + 1:]:
        if any(id(t) in tainted for t in _tensors((op.args, op.kwargs))):
            for t in _tensors(op.output):
                if t is root:
                    return True
                tainted.add(id(t))
    return False


def _epsilon(ops: list[Any], upto: int, divisor: torch.Tensor) -> float | None:
    """The small number added to make `divisor` (`std + 1e-6`), when a taped op shows it."""
    for op in reversed(ops[:upto]):
        if op.output is divisor and op.name in _ADD and len(op.args) >= 2:
            eps = next((a for a in op.args[:2] if isinstance(a, (int, float)) and not isinstance(a, bool)), None)
            return float(eps) if eps is not None and 0 < abs(eps) < 1e-2 else None
    return None


def division_plans(ops: list[Any], root: torch.Tensor, judged: frozenset[int] | set[int] = frozenset()
                   ) -> list[tuple[Plan, Any]]:
    """(plan, frame) for each taped division of the step that feeds `root` (not in `judged`:
    the ids of ops an earlier backward of the step judged)."""
    found: list[tuple[Plan, Any]] = []
    for i, op in enumerate(ops):
        if len(found) >= MAX_DIVISIONS:
            break
        if op.name not in _DIV or len(op.args) < 2 or id(op) in judged:
            continue
        num, den, out = op.args[0], op.args[1], op.output
        if not (isinstance(den, torch.Tensor) and isinstance(out, torch.Tensor) and out.is_floating_point()):
            continue
        if den.numel() < 2 or out.numel() < 4 or not den.is_floating_point() or not _feeds(ops, i, out, root):
            continue
        found.append((_plan(ops, i, num, den, out), op.frame))
    return found


def _plan(ops: list[Any], i: int, num: Any, den: torch.Tensor, out: torch.Tensor) -> Plan:
    q = out.detach().abs().float()
    d = den.detach().abs().float().expand_as(q) if den.shape != q.shape else den.detach().abs().float()
    deg = d <= d.amax() * REL
    regular = ~deg
    eps = _epsilon(ops, i, den)
    qshape, dshape = shape(out), shape(den)

    def judge(v: list[float]) -> Verdict | None:
        n_deg, q_deg, q_reg, total, deg_sum, d_min, d_max = v
        if n_deg < 1 or d_max <= 0 or q_deg <= 0 or q_deg < RATIO * max(q_reg, 1e-12) or q_deg < 1.0:
            return None
        n_groups = int(n_deg)
        return dict(name="eps_dominated_division", severity=Severity.WARNING, stage=Stage.LOSS,
                    category=Category.NUMERICAL, count=n_groups, quotient=f"{q_deg:.3g}",
                    regular=f"{q_reg:.3g}", eps=f"{eps:g}" if eps is not None else f"{d_min:.3g}",
                    evidence={"result_shape": qshape, "divisor_shape": dshape,
                              "result_elements_with_degenerate_divisor": n_groups,
                              "divisor_min": d_min, "divisor_max": d_max,
                              "largest_quotient_where_divisor_degenerate": q_deg,
                              "largest_quotient_elsewhere": q_reg,
                              "share_of_abs_sum": round(deg_sum / total, 6) if total > 0 else None,
                              **({"epsilon": eps} if eps is not None else {})})

    zero = q.new_zeros(())
    return Plan([deg.sum().float(), torch.where(deg, q, zero).amax(), torch.where(regular, q, zero).amax(),
                 q.sum(), torch.where(deg, q, zero).sum(), d.amin(), d.amax()], judge)
