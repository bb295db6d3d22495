"""FSDP (`fully_shard`) support: its parameters, gradients and optimizer state are DTensors.

A DTensor's numbers live in its local shard; reading a reduction of the DTensor itself would
need a collective (or fails: `.tolist()` refuses tensor subclasses). The checks read the local
shards: a NaN anywhere is a NaN in some rank's shard, and the merged report holds every rank.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn


def local_shards(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    out = []
    for t in tensors:
        local = getattr(t, "_local_tensor", None)
        out.append(local if isinstance(local, torch.Tensor) else t)
    return out


def is_sharded(model: nn.Module) -> bool:
    """True for a model managed by FSDP2's `fully_shard` (its root or any submodule)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:
        return False
    return any(isinstance(m, FSDPModule) for m in model.modules())


def is_dtensor(t: Any) -> bool:
    return isinstance(getattr(t, "_local_tensor", None), torch.Tensor)
