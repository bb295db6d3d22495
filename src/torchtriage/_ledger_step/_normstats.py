"""A normalization layer's running statistics: which layers keep them, a copy at a moment, and how
far they moved since (session 19).

Shared by the two ways a frozen layer's statistics drift: a layer put in `eval()` on its own and
switched back by a parent's `train()` (`_evalundone`), and a frozen part of a model left in
training mode while the rest trains (`_frozenpart`). Both report `silent.frozen_norm_retrained`,
built here.

`Kept` holds a copy of `running_mean`, `running_var` and `num_batches_tracked` taken at the
moment the layer started to drift (clones on the layer's device: no read). At the end, `moved`
reads once per layer: the batches folded in since, the largest shift of a channel's mean in
units of its standard deviation then (`sqrt(running_var + eps)`), and the largest factor by
which a channel's variance grew or shrank.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame


def norms(module: nn.Module) -> list[nn.Module]:
    """The normalization layers under `module` that keep running statistics."""
    return [m for m in module.modules() if keeps_stats(m)]


def keeps_stats(m: nn.Module) -> bool:
    return isinstance(m, nn.modules.batchnorm._NormBase) and bool(m.track_running_stats) \
        and isinstance(m.num_batches_tracked, torch.Tensor) and isinstance(m.running_mean, torch.Tensor)


def _buffer(m: nn.Module, name: str) -> torch.Tensor:
    t = getattr(m, name)
    assert isinstance(t, torch.Tensor)  # (keeps_stats said so)
    return t


def short(frame: UserFrame | None) -> str:
    return f"{os.path.basename(frame.file)}:{frame.line}" if frame is not None else "?"


@dataclass
class Moved:
    batches: int
    mean_shift: float  # largest |Δ running_mean| / sd at the copy, over channels
    var_factor: float  # largest max(v / v0, v0 / v) over channels
    before: int = 0  # batches the statistics had taken in when copied

    @property
    def harm(self) -> bool:
        return self.batches > 0 and (self.mean_shift > 0 or self.var_factor > 1)


@dataclass
class Kept:
    layer: weakref.ref[nn.Module]
    mean: torch.Tensor
    var: torch.Tensor | None
    count: torch.Tensor
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, m: nn.Module, **extra: Any) -> Kept:
        with torch.no_grad():
            var = getattr(m, "running_var", None)
            return cls(weakref.ref(m), _buffer(m, "running_mean").detach().clone(),
                       var.detach().clone() if isinstance(var, torch.Tensor) else None,
                       _buffer(m, "num_batches_tracked").detach().clone(), dict(extra))

    def moved(self) -> Moved | None:
        """Since the copy (one read); None when the layer is gone or its buffers were replaced
        by ones of another shape (a reloaded or rebuilt layer)."""
        m = self.layer()
        if m is None or not keeps_stats(m) or _buffer(m, "running_mean").shape != self.mean.shape:
            return None
        eps = float(getattr(m, "eps", 1e-5))
        with torch.no_grad():
            mean0 = self.mean.float()
            mean = _buffer(m, "running_mean").detach().float().to(mean0.device)
            var0 = self.var.float() if self.var is not None else torch.ones_like(mean0)
            sd0 = (var0.clamp_min(0) + eps).sqrt()
            shift = ((mean - mean0).abs() / sd0).max()
            var = getattr(m, "running_var", None)
            if isinstance(var, torch.Tensor) and self.var is not None:
                v = var.detach().float().to(mean0.device).clamp_min(0) + eps
                v0 = var0.clamp_min(0) + eps
                factor = torch.maximum(v / v0, v0 / v).max()
            else:
                factor = torch.ones((), device=mean0.device)
            grew = (_buffer(m, "num_batches_tracked").detach().to(mean0.device) - self.count.to(mean0.device)).float()
            before = self.count.to(mean0.device).float()
            batches, s, f, b = torch.stack([grew, shift, factor, before]).tolist()
        return Moved(int(batches), float(s), float(f), int(b))


@dataclass
class Drifted:
    """One frozen layer whose statistics moved: what the finding is built from."""
    layer: nn.Module
    name: str
    part: str
    moved: Moved


def finding(variant: str, rows: list[Drifted], frame: UserFrame | None, fields: dict[str, Any],
            evidence: dict[str, Any]) -> Finding:
    """`silent.frozen_norm_retrained` over `rows` (one line's layers), message `ledger.<variant>`."""
    first = rows[0]
    shift = max(r.moved.mean_shift for r in rows)
    factor = max(r.moved.var_factor for r in rows)
    batches = max(r.moved.batches for r in rows)
    parts = sorted({r.part for r in rows})
    f = {"module": first.name, "count": len(rows), "kind": type(first.layer).__name__, "batches": batches,
         "shift": f"{shift:.3g}", "factor": f"{factor:.3g}", "part": ", ".join(parts[:4]), **fields}
    ev = {"modules": [r.name for r in rows][:8], "count": len(rows), "kind": type(first.layer).__name__,
          "frozen_parts": parts[:8], "batches_folded_into_running_stats": batches,
          "running_mean_shift_sd": round(shift, 4), "running_var_factor": round(factor, 4),
          "training_now": first.layer.training, **evidence}
    return from_catalogue(
        Category.SILENT, "silent.frozen_norm_retrained", f"ledger.{variant}", fields=f,
        cause_key=f"ledger.{variant}.cause", next_key=f"ledger.{variant}.next", frame=frame,
        evidence=ev, source_line=True, severity=Severity.WARNING, stage=Stage.FORWARD,
        module=first.name, parameter=f"{first.name}.running_mean", op=type(first.layer).__name__)
