"""One way to build a silent-bug `Finding` from the catalogue, and small shared helpers."""

from __future__ import annotations

from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame


def finding(name: str, *, severity: Severity = Severity.ERROR, stage: Stage | None = Stage.LOSS,
            frame: UserFrame | None = None, module: str | None = None, op: str | None = None,
            parameter: str | None = None, step: int | None = None,
            evidence: dict[str, Any] | None = None, variant: str | None = None,
            family: str = "silent", category: Category | None = None, own_cause: bool = False,
            **fields: Any) -> Finding:
    """A `silent.<name>` finding whose message, cause and next check come from the catalogue
    (`family` "data": a `data.<name>` one, a fault in the data the loop computes on: the
    target among the input features is the label leaking into the inputs). `own_cause`: the
    variant has its own cause and next check (`<key>.<variant>.cause`)."""
    fields.setdefault("op", op)
    key = f"{family}.{name}"
    category = category or (Category.DATA if family == "data" else Category.SILENT)
    why = f"{key}.{variant}" if variant and own_cause else key
    return from_catalogue(category, key, key + (f".{variant}" if variant else ""), fields=fields,
                          cause_key=f"{why}.cause", next_key=f"{why}.next", frame=frame, evidence=evidence,
                          source_line=True, severity=severity, stage=stage, step=step, module=module, op=op,
                          parameter=parameter)


def shape(t: Any) -> tuple[int, ...]:
    return tuple(t.shape) if isinstance(t, torch.Tensor) else ()


def first_tensor(out: Any) -> torch.Tensor | None:
    """The main tensor of a model's output: the tensor itself, `.logits`, or the first tensor inside."""
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(out, dict):
        if isinstance(out.get("logits"), torch.Tensor):
            return out["logits"]
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        for item in out:
            t = first_tensor(item)
            if t is not None:
                return t
    return None


def fmt(value: float) -> str:
    return f"{value:.6f}"


def is_index_tensor(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool


def storage_ptr(t: torch.Tensor) -> int | None:
    """The address of the memory `t` views; None for a tensor without a plain storage (sparse,
    nested, a subclass) and for one with no memory (empty, meta)."""
    try:
        p = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
    return p or None


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Do the two tensors view one memory (the same tensor, a `.detach()` or a view of it)?"""
    pa = storage_ptr(a)
    return a is b or (pa is not None and pa == storage_ptr(b))
