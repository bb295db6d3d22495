"""Arithmetic on a `.grad` that is None (session 10).

A parameter's `.grad` stays None until a backward reaches it, and for ever when its
`requires_grad` is False (a frozen layer) or no loss uses it. A loop that touches the
gradients of every parameter by hand (`for p in model.parameters(): p.grad *= scale`,
`p.grad.data.add_(...)`) then fails with Python's words, not torch's: "unsupported
operand type(s) for *=: 'NoneType' and 'float'", "'NoneType' object has no attribute
'data'". Those words name no tensor, and the vocabulary reads 'float' as a dtype.

The rule matches only when the failing line reads `<name>.grad` of a leaf tensor, found
in the failing frame's variables, whose `.grad` is None now: then the parameter, its
`requires_grad` and its module are the evidence.
"""

from __future__ import annotations

import ast
import linecache
import re
from typing import Any

import torch

from .._findings import Category
from ._rules import Rule, _r

_NONE = _r(r"'NoneType'")


def _grad_reads(source: str) -> list[ast.expr]:
    """The expressions whose `.grad` the line reads (`p` of `p.grad *= s`)."""
    text = source.strip()
    for candidate in (text, text.rstrip(":") + ": pass", "(" + text.rstrip(",") + ")"):
        try:
            tree = ast.parse(candidate)
            break
        except SyntaxError:
            continue
    else:
        return []
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "grad"]


def _lookup(expr: ast.expr, f_locals: dict[str, Any], f_globals: dict[str, Any]) -> Any:
    """The value of a name or a dotted name (`self.w`) in the frame, without running code."""
    if isinstance(expr, ast.Name):
        if expr.id in f_locals:
            return f_locals[expr.id]
        return f_globals.get(expr.id)
    if isinstance(expr, ast.Attribute):
        owner = _lookup(expr.value, f_locals, f_globals)
        return getattr(owner, expr.attr, None) if owner is not None and not isinstance(owner, torch.Tensor) else None
    return None


def none_grad(exc: BaseException) -> tuple[str, torch.Tensor] | None:
    """(the expression, the tensor) whose `.grad`, read by the failing line, is None."""
    if not isinstance(exc, (TypeError, AttributeError)) or "'NoneType'" not in str(exc):
        return None
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return None
    frame = tb.tb_frame
    source = linecache.getline(frame.f_code.co_filename, tb.tb_lineno)
    for expr in _grad_reads(source):
        value = _lookup(expr, frame.f_locals, frame.f_globals)
        if isinstance(value, torch.Tensor) and value.is_leaf and value.grad is None:
            return ast.unparse(expr), value
    return None


def _fields(m: re.Match[str], ctx: Any) -> tuple[str, dict[str, Any]] | None:
    found = none_grad(ctx.exc)
    if found is None:
        return None
    expr, t = found
    name = None
    index = getattr(ctx.session, "param_index", None) if ctx.session is not None else None
    if index is not None:
        name = index.name(t)
    return "gradient.grad_none", {"expr": expr, "parameter": name or expr, "requires_grad": t.requires_grad,
                                  "shape": "x".join(str(s) for s in t.shape) or "scalar"}


GRAD_NONE = Rule("gradient.grad_none", Category.GRADIENT, _NONE, (TypeError, AttributeError), refine=_fields)


def match_none_grad(exc: BaseException) -> tuple[Rule, re.Match[str]] | None:
    if none_grad(exc) is None:
        return None
    m = _NONE.search(str(exc))
    return (GRAD_NONE, m) if m is not None else None
