"""One way to build a dynamics `Finding` from the catalogue, and number formatting."""

from __future__ import annotations

import math
from typing import Any

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame


def finding(name: str, *, category: Category = Category.SILENT, severity: Severity = Severity.WARNING,
            stage: Stage | None = None, step: int | None = None, module: str | None = None,
            op: str | None = None, parameter: str | None = None, frame: UserFrame | None = None,
            evidence: dict[str, Any] | None = None, variant: str | None = None,
            cause: str | None = None, next_key: str | None = None, **fields: Any) -> Finding:
    """A `dynamics.<name>` finding (or `silent.<name>` when `name` has a dot) from the catalogue."""
    key = name if "." in name else f"dynamics.{name}"
    fields.setdefault("op", op)
    fields.setdefault("step", step)
    return from_catalogue(category, key, key + (f".{variant}" if variant else ""), fields=fields,
                          cause_key=cause or f"{key}.cause", next_key=next_key or f"{key}.next", frame=frame,
                          evidence=evidence, source_line=True, severity=severity, stage=stage, step=step,
                          module=module, op=op, parameter=parameter)


def num(v: float | None) -> str:
    """A number as a person reads it in a message: 4 significant digits."""
    if v is None:
        return "n/a"
    if v != v or math.isinf(v):
        return str(v)
    return f"{v:.4g}"
