"""Memory overlap: an in-place op or `out=` that would write where it reads (issue 27 §4).

PyTorch refuses two kinds of writes, each with its own message:

  * internal overlap, "more than one element of the written-to tensor refers to a single memory
    location": the tensor written has several elements on one address, the mark of a view made
    by `expand()` / `broadcast_to()` (stride 0 along the expanded dims), `as_strided()` or
    `unfold()`;
  * partial overlap, "some elements of the input tensor and the written-to tensor refer to a
    single memory location": the output and an input are overlapping slices of one storage
    (`x[1:].copy_(x[:-1])`).

Both are layout faults, not element-count or shape faults: the message's words ("more than one
element", "single") must not be read by the vocabulary. The refinement names the tensor written
to, with its shape and strides where the failing line names it, and the stride-0 dims that
make it an expanded tensor.
"""

from __future__ import annotations

import ast
import re
from typing import Any, Optional

import torch

from .._catalogue import msg
from .._findings import Category
from ._operands import lookup
from ._rules import Rule, _r

Fields = Optional[tuple[str, dict[str, Any]]]


def written_to(ctx: Any) -> tuple[str, torch.Tensor | None]:
    """(expression, tensor) of what the user's failing call writes: the `out=` argument, else the
    receiver of an in-place method (`scale` in `scale.mul_(2)`); the tensor is None when the
    expression is not a plain name or attribute chain (nothing is evaluated)."""
    site = ctx.sites.user
    node = getattr(site, "node", None)
    if site is None or not isinstance(node, ast.Call):
        return msg("triage.layout.written_tensor"), None
    target: ast.AST | None = next((k.value for k in node.keywords if k.arg == "out"), None)
    if target is None and isinstance(node.func, ast.Attribute):
        target = node.func.value
    if target is None:
        return msg("triage.layout.written_tensor"), None
    found, value = lookup(target, site.frame)
    return ast.unparse(target), value if found and isinstance(value, torch.Tensor) else None


def expanded_dims(t: torch.Tensor) -> list[int]:
    """The dims along which `t` repeats one memory location (stride 0, size > 1)."""
    if t.layout != torch.strided:
        return []
    return [d for d, (size, stride) in enumerate(zip(t.shape, t.stride())) if stride == 0 and size > 1]


def _detail(t: torch.Tensor | None) -> str:
    if t is None:
        return ""
    dims = expanded_dims(t)
    key = "triage.layout.overlap_detail.expanded" if dims else "triage.layout.overlap_detail"
    return msg(key, shape=list(t.shape), stride=list(t.stride()), dims=", ".join(map(str, dims)))


def _internal_overlap(m: re.Match[str], ctx: Any) -> Fields:
    name, t = written_to(ctx)
    dims = expanded_dims(t) if t is not None else []
    kind = "unknown" if t is None else "expanded" if dims else "strided"
    kind = msg(f"triage.layout.overlap_kind.{kind}")
    return "layout.internal_overlap", {"tensor": name, "detail": _detail(t), "kind": kind}


def _partial_overlap(m: re.Match[str], ctx: Any) -> Fields:
    name, t = written_to(ctx)
    return "layout.partial_overlap", {"tensor": name, "detail": _detail(t)}


OVERLAP: tuple[Rule, ...] = (
    Rule("layout.internal_overlap", Category.LAYOUT,
         _r(r"more than one element of the written-to tensor refers? to a single memory location"),
         refine=_internal_overlap),
    Rule("layout.partial_overlap", Category.LAYOUT,
         _r(r"some elements of the input tensor and the written-to tensor refer to a single memory location"
            r"|the input tensors cannot refer to any of the output memory locations"),
         refine=_partial_overlap),
)


def match_overlap(exc: BaseException) -> tuple[Rule, re.Match[str]] | None:
    for rule in OVERLAP:
        m = rule.match(exc)
        if m is not None:
            return rule, m
    return None
