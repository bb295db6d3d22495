"""One way to build a dynamics `Finding` from the catalogue, and number formatting."""

from __future__ import annotations

import math
from typing import Any

from .._catalogue import msg
from .._findings import Category, Finding, Severity, Stage
from .._frames import UserFrame


def finding(name: str, *, category: Category = Category.SILENT, severity: Severity = Severity.WARNING,
            stage: Stage | None = None, step: int | None = None, module: str | None = None,
            op: str | None = None, parameter: str | None = None, frame: UserFrame | None = None,
            evidence: dict[str, Any] | None = None, variant: str | None = None,
            cause: str | None = None, next_key: str | None = None, **fields: Any) -> Finding:
    """A `dynamics.<name>` finding (or `silent.<name>` when `name` has a dot) from the catalogue."""
    key = name if "." in name else f"dynamics.{name}"
    ev = dict(evidence or {})
    fields.setdefault("op", op)
    fields.setdefault("step", step)
    if frame is not None and frame.source:
        ev.setdefault("source_line", frame.source)
    return Finding(
        category=category, code=key, severity=severity, stage=stage, step=step, module=module, op=op,
        parameter=parameter, file=frame.file if frame is not None else None,
        line=frame.line if frame is not None else None,
        message=msg(key + (f".{variant}" if variant else ""), **fields),
        cause=msg(cause or f"{key}.cause", **fields), next_check=msg(next_key or f"{key}.next", **fields),
        evidence=ev)


def num(v: float | None) -> str:
    """A number as a person reads it in a message: 4 significant digits."""
    if v is None:
        return "n/a"
    if v != v or math.isinf(v):
        return str(v)
    return f"{v:.4g}"
