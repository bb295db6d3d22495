"""Sampled per-layer numbers: gradient norms and update-to-parameter ratios.

Cost, at a sampled step only (steps 0 and 1, then every `dynamics_every`, default 25):
  * before the update: one `torch._foreach_norm` over the gradients, and a copy of at most
    `SLICE` (4,096) elements of each parameter (the update ratio is measured on that slice);
  * after the update: one `_foreach_sub` and two `_foreach_norm` over the slices.
All numbers stay on the device and ride the next step's one read (`_deferred.DeferredFlags`).
The slices are freed after the update. A layer is the module that owns the parameter.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .._nonfinite._sentinel import foreach_norm

SLICE = 4096
VANISH = 1e-6  # a layer's grad norm below this fraction of the largest layer's, at two samples


def layer_names(session: Any, params: list[torch.Tensor]) -> list[str]:
    """Each parameter's layer: its owning module's path, from the session's parameter index
    ("?" for a tensor no watched module registers)."""
    infos = session.param_index.infos()
    out = []
    for p in params:
        info = infos.get(id(p))
        out.append(info.module if info is not None and info.module is not None else "?")
    return out


def layer_kind(session: Any, layer: str) -> str:
    """The class name of the module at `layer` in the first watched model that has one."""
    for model in session.models:
        try:
            return type(model.get_submodule(layer)).__name__
        except AttributeError:
            continue
    return ""


def grad_params(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for g in opt.param_groups for p in g["params"]
            if p.grad is not None and p.numel() and not p.grad.is_sparse]


def per_layer(names: list[str], norms: list[float]) -> dict[str, float]:
    """Per-parameter L2 norms combined into per-layer norms."""
    sq: dict[str, float] = {}
    for n, v in zip(names, norms):
        sq[n] = sq.get(n, 0.0) + v * v
    return {k: math.sqrt(v) for k, v in sq.items()}


class Sample:
    """One sampled step's tensors, between the pre- and post-update hooks."""

    def __init__(self, step: int, params: list[torch.Tensor], names: list[str]) -> None:
        self.step = step
        self.names = names
        with torch.no_grad():
            self.grad_norms = foreach_norm([_local(p.grad) for p in params])  # type: ignore[arg-type]
            self.params = params
            self.before = [None if (f := _flat(p)) is None else f[:SLICE].clone() for p in params]

    def update_norms(self) -> tuple[list[str], list[torch.Tensor]]:
        """After the update: per-parameter (|Δ slice|, |slice before|), interleaved, and their layers."""
        keep = [i for i, b in enumerate(self.before) if b is not None]
        if not keep:
            return [], []
        with torch.no_grad():
            before = [b for b in self.before if b is not None]  # the slices of `keep`, in order
            after = [_flat(self.params[i])[:SLICE] for i in keep]  # type: ignore[index]
            delta = list(torch._foreach_sub(after, before))
            norms = foreach_norm(delta) + foreach_norm(before)
        self.before, self.params = [], []
        return [self.names[i] for i in keep], norms


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a DTensor (FSDP2): plain tensors ride the step's read, DTensors cannot."""
    t = t.detach()
    local = getattr(t, "to_local", None)
    return local() if callable(local) else t


def _flat(p: torch.Tensor) -> torch.Tensor | None:
    """The parameter's elements as a flat view (this rank's shard for a DTensor), None when not
    contiguous."""
    t = _local(p)
    return t.view(-1) if t.is_contiguous() else None


def update_ratio(names: list[str], values: list[float]) -> tuple[float | None, dict[str, float]]:
    """The global and per-layer |Δp| / |p| from `update_norms`' numbers."""
    n = len(names)
    delta, base = values[:n], values[n:]
    d2 = sum(v * v for v in delta)
    b2 = sum(v * v for v in base)
    layers_d, layers_b = per_layer(names, delta), per_layer(names, base)
    per = {k: layers_d[k] / layers_b[k] for k in layers_d if layers_b.get(k)}
    return (math.sqrt(d2) / math.sqrt(b2) if b2 > 0 else None), per


class Vanishing:
    """Layers whose gradient stays ~VANISH below the largest layer's over two samples."""

    def __init__(self) -> None:
        self.previous: dict[str, float] = {}
        self.previous_step = -1
        self.reported = False

    def add(self, step: int, layers: dict[str, float]) -> dict[str, Any] | None:
        if self.reported or not layers:
            return None
        top_layer = max(layers, key=lambda k: layers[k])
        top = layers[top_layer]
        low = {k: v for k, v in layers.items() if 0 < v < VANISH * top}
        prev = self.previous
        prev_top = max(prev.values()) if prev else 0.0
        hit = [k for k in low if 0 < prev.get(k, 0.0) < VANISH * prev_top]
        out = None
        if hit and top > 0:
            worst = min(hit, key=lambda k: layers[k] / top)
            self.reported = True
            out = {"layer": worst, "norm": layers[worst], "ratio": layers[worst] / top, "largest_layer": top_layer,
                   "largest": top, "steps": [self.previous_step, step]}
        self.previous, self.previous_step = layers, step
        return out
