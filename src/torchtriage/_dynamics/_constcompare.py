"""A comparison whose result is the same for every value its tensor's dtype can hold (session 16).

A bool tensor holds 0 or 1, so `mask.eq(2)`, `mask >= 2` or `mask > 1` are False everywhere and
`mask.ne(2)`, `mask < 2` are True everywhere. The usual source is a count built by adding two
comparisons: `((pred == c) + (true == c)).eq(2)` as an intersection. In PyTorch (since 1.2) and
NumPy `bool + bool` is a logical OR that stays bool, never 2, so every intersection, IoU and
true-positive count computed from it is 0. The harm needs no sampling: the dtype's range makes
the result constant for any input (a warning; the evidence names the dtype, the constant and,
when the region saw it, the op that made the bool tensor).

Checked inside `MetricRegion` (metric code after a forward), on the op's arguments only.
"""

from __future__ import annotations

from typing import Any

import torch

from .._findings import Category, Finding, Severity
from .._frames import UserFrame
from ._common import finding

_OPS = {"eq": "eq", "__eq__": "eq", "ne": "ne", "__ne__": "ne", "lt": "lt", "__lt__": "lt", "le": "le",
        "__le__": "le", "gt": "gt", "__gt__": "gt", "ge": "ge", "__ge__": "ge"}
_SYMBOL = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def constant_compare(func: Any, args: tuple[Any, ...]) -> dict[str, Any] | None:
    """`bool_tensor <op> c` with `c` above 1, the result always the same: the finding's fields."""
    if len(args) < 2:
        return None
    x, c = args[0], args[1]
    op = _OPS.get(getattr(func, "__name__", ""))
    if op is None or not isinstance(x, torch.Tensor) or x.dtype != torch.bool or isinstance(c, bool) \
            or not isinstance(c, (int, float)):
        return None
    if op in ("eq", "ne", "ge", "lt") and c > 1:
        always = op in ("ne", "lt")
    elif op in ("gt", "le") and c >= 1:
        always = op == "le"
    else:
        return None
    return {"op": op, "symbol": _SYMBOL[op], "constant": c, "always": "True" if always else "False",
            "shape": list(x.shape)}


def constant_finding(fields: dict[str, Any], frame: UserFrame | None, step: int | None, made_by: str | None) -> Finding:
    ev: dict[str, Any] = {"tensor_dtype": "torch.bool (values 0 and 1)", "compared_with": fields["constant"],
                          "result_is_always": fields["always"], "shape": tuple(fields["shape"])}
    if made_by:
        ev["bool_tensor_made_by"] = made_by
    return finding("silent.constant_comparison", category=Category.DTYPE, severity=Severity.WARNING,
                   stage=None, step=step, frame=frame, evidence=ev, **fields)
