"""Models that are copies of a trained model by structure: same class, same parameters by name,
shape and dtype, none of them trained by an optimizer (a target network, an EMA model, a teacher
built beside the model). Used by `_averaged` for the copies its value match cannot pair."""

from __future__ import annotations

from typing import Any

import torch.nn as nn


def _signature(m: nn.Module) -> tuple[Any, ...]:
    return tuple((n, tuple(p.shape), p.dtype, p.device) for n, p in m.named_parameters())


def structural_twins(models: list[nn.Module], trained: set[int],
                     paired: set[int]) -> list[tuple[nn.Module, nn.Module]]:
    """(copy, model) for each watched model none of whose parameters is in `trained` (ids of the
    optimizers' parameters) or `paired`, with exactly one watched model of its class whose
    trainable parameters are all in `trained` and whose signature is the same."""
    online: dict[tuple[type, tuple[Any, ...]], list[nn.Module]] = {}
    copies: list[tuple[nn.Module, tuple[Any, ...]]] = []
    for m in models:
        params = list(m.parameters())
        if not params:
            continue
        sig = _signature(m)
        if all(id(p) in trained for p in params if p.requires_grad) and any(id(p) in trained for p in params):
            online.setdefault((type(m), sig), []).append(m)
        elif not any(id(p) in trained or id(p) in paired for p in params):
            copies.append((m, sig))
    out = []
    for m, sig in copies:
        match = online.get((type(m), sig), [])
        if len(match) == 1:
            out.append((m, match[0]))
    return out
