"""An exception that an earlier non-finite value caused: counted on that value's finding.

A NaN loss applied by the optimizer leaves NaN parameters; the next step's forward then feeds
NaN logits to `Categorical(logits=...)`, NaN probabilities to `torch.multinomial`, and those
raise. The error is real, but it is the NaN's consequence, not a second bug: when a non-finite
finding was recorded before it, and the failing call's own tensors (the user's call, the
innermost torch call, the running module's inputs) hold NaN/Inf, the error joins the earlier
finding (its count and evidence) instead of being reported on its own.

The evidence is the operands' values, read here (the report path, after the exception); when
no operand can be read (a call whose arguments are expressions), the values the message
itself prints (`tensor([[nan, nan]])`) are the fallback. An error that a table or family rule
reads as a fault of metadata (shape, dtype, device, layout, memory, files), of the graph's
structure (no graph, in-place, backward twice) or of integer values (a target or an id out of
range) does not depend on float values and is never folded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import torch

from .._catalogue import msg
from .._findings import Category, Finding, Severity
from ._context import Context

# Faults decided by metadata, the graph's structure or integer values (ids, targets, indices):
# NaN operands cannot have caused them. Only when a table or family rule read the error: a
# reading by the message's words alone is a guess that the operands' values outweigh.
_STRUCTURAL = frozenset({Category.SHAPE, Category.DTYPE, Category.DEVICE, Category.LAYOUT, Category.GRADIENT,
                         Category.DATA, Category.MEMORY, Category.ENVIRONMENT})
# A tensor's repr in a message that shows a NaN/Inf value: `tensor([[nan, 0.5]])`, `tensor(-inf)`.
_PRINTED = re.compile(r"tensor\([^()]*?(?<![\w.])-?(?:nan|inf)(?![\w.])")
_MAX_TENSORS = 12


def earlier_nonfinite(findings: Iterable[Finding], finding: Finding) -> Finding | None:
    """The first recorded non-finite value (a numerical error) that could explain `finding`."""
    if finding.category in _STRUCTURAL and "vocabulary" not in finding.evidence:
        return None
    found = [f for f in findings if f.category is Category.NUMERICAL and f.severity is Severity.ERROR
             and (finding.step is None or f.step is None or f.step <= finding.step)]
    return min(found, key=lambda f: f.order) if found else None


def nonfinite_operands(ctx: Context) -> list[str]:
    """Names of the failing call's floating tensors that hold NaN or Inf."""
    candidates: list[tuple[str, Any]] = []
    for site in (ctx.sites.user, ctx.sites.inner):
        if site is not None:
            candidates += site.arguments()
    candidates += ctx.inputs()
    names: list[str] = []
    seen: set[int] = set()
    for name, value in _flat(candidates):
        if id(value) in seen or len(seen) >= _MAX_TENSORS:
            continue
        seen.add(id(value))
        if _holds_nonfinite(value):
            names.append(name)
    return names


def consequence_evidence(finding: Finding, ctx: Context) -> dict[str, Any] | None:
    """What to add to the earlier finding when `finding`'s operands are non-finite, else None."""
    names = nonfinite_operands(ctx)
    printed = not names and bool(_PRINTED.search(str(ctx.exc)))
    if not names and not printed:
        return None
    where = f"{finding.file}:{finding.line}" if finding.file else msg("consequence.no_line")
    error = finding.evidence.get("exception") or f"{type(ctx.exc).__name__}: {ctx.exc}"
    ev: dict[str, Any] = {"then raised": msg("consequence.raised", error=error, step=finding.step, where=where)}
    ev["non-finite operands"] = ", ".join(names) if names else msg("consequence.printed")
    return ev


def _flat(items: list[tuple[str, Any]]) -> Iterable[tuple[str, torch.Tensor]]:
    for name, value in items:
        if isinstance(value, torch.Tensor):
            yield name, value
        elif isinstance(value, (list, tuple)):
            yield from ((f"{name}[{i}]", v) for i, v in enumerate(value[:_MAX_TENSORS]) if isinstance(v, torch.Tensor))


def _holds_nonfinite(t: torch.Tensor) -> bool:
    if not (t.is_floating_point() or t.is_complex()) or t.is_meta or t.numel() == 0:
        return False
    try:
        with torch.no_grad():
            return not bool(torch.isfinite(t.detach()).all())
    except Exception:  # a sparse / odd subclass tensor: no evidence either way
        return False
