"""A step's flags: what the sentinel reads once per step, and the tensors it keeps until then.

Two kinds of flag. A 0-dim tensor computed when its event arrives (the loss, as the backward
root itself; on a warm-up step or in `eager` mode the float32 `sum` of each batch tensor and
each root output), and a tensor KEPT by reference: in the steady state the batch tensors and
the root outputs are not reduced at the forward at all. They join the gradients in the one
`torch._foreach_norm` call of the read (`norms`): no op of their own, none of the cold-start
cost a distinct op kind pays inside a step.

A norm is finite exactly when the tensor's values are finite and their squares' sum does not
overflow; a float32 / float64 `sum` of values whose squares' sum stays in range cannot overflow
either, so a finite norm proves the sum rule (NaN or +Inf trips) would not trip. A non-finite
norm does not prove it would (a -Inf mask, values above ~1.8e19): that step, and only that
step, takes the kept tensors' sums and a second read (`exact`, the anomaly path). A run whose
batch or outputs make a norm non-finite without a trip is read eagerly from then on (one read
per step again).

The kept tensors must still hold the values the forward produced. Each one's version counter
is noted when it is kept (`watched`); a tensor written in place since (a mask applied to the
logits with `masked_fill_`) is seen at the read, and the run is read eagerly from then on. The
first `WARMUP_STEPS` steps are read eagerly and watched too, so that a loop that writes to its
outputs or batch, or whose batch or outputs hold -Inf, is known before any step is read late.
What stays out of reach: a write the version counter does not see (through `.data`, numpy
sharing the memory) that first happens after the warm-up, on the very step whose forward made
a NaN, and that overwrites it. `late_read` (`_late`) reads one step later still and is always
eager.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .._checker import LossCall
from .._frames import UserFrame

WARMUP_STEPS = 3  # steps read eagerly while the loop's habits (in-place writes, -Inf) are learned
# Larger tensors are summed at the forward, while they are still in cache: reading them again
# from memory at the read costs more than the op (a small GPT's 2 MB logits: ~0.2 ms more).
KEEP_MAX = 1 << 17

_KEEPABLE = (torch.Tensor, torch.nn.Parameter)  # exact types: a subclass (DTensor) is reduced at once


def sum_flag(t: torch.Tensor) -> torch.Tensor:
    """The float32 (float64 for float64) sum of `t`: NaN or +Inf in it trips, a -Inf does not."""
    if t.dtype is torch.float32:
        return t.detach().sum()  # the common case, without the keyword's parsing
    x = t.detach()
    if x.is_complex():
        x = torch.view_as_real(x)
    return x.sum(dtype=torch.float32) if x.dtype != torch.float64 else x.sum()


class StepFlags:
    """One step's flags and what its localization needs, until the step's read."""

    __slots__ = ("keys", "flags", "kept", "kept_kinds", "watched", "versions", "eager", "n_losses",
                 "outputs", "loss_calls", "loss_nodes", "autocast", "backward_frame",
                 "loss_value", "loss_sites", "seen_forward")

    def __init__(self, eager: bool = True) -> None:
        self.keys: list[str] = []  # kind of each flag, in order
        self.flags: list[torch.Tensor] = []  # 0-dim device scalars
        self.kept: list[torch.Tensor] = []  # batch / output tensors normed at the read
        self.kept_kinds: list[str] = []
        self.watched: list[torch.Tensor] = []  # tensors read by reference, with their versions
        self.versions: list[int] = []
        self.eager = eager
        self.n_losses = 0  # "loss_value" flags
        self.outputs: list[torch.Tensor] = []
        self.loss_calls: list[LossCall] = []
        self.loss_nodes: list[tuple[int, str, dict[str, torch.Tensor]]] = []
        self.autocast: list[tuple[str, torch.dtype]] = []
        self.backward_frame: UserFrame | None = None
        self.loss_value: float | None = None
        self.loss_sites: list[Any] = []  # (file, line) of each loss flag
        self.seen_forward = False

    def take(self, kind: str, tensors: list[torch.Tensor]) -> None:
        """The batch's or an output's flags: kept for the read's norms, or summed now (eager, a
        large tensor, a tensor subclass, a complex or sparse tensor, one without a version
        counter)."""
        for t in tensors:
            n = t.numel()
            if not n:
                continue
            try:
                version = t._version
            except RuntimeError:  # an inference tensor: no version counter to watch
                version = None
            if version is not None:
                self.watched.append(t)
                self.versions.append(version)
            if self.eager or n > KEEP_MAX or version is None or type(t) not in _KEEPABLE or t.is_complex() \
                    or t.is_sparse:
                self.keys.append(kind)
                self.flags.append(sum_flag(t))
            else:
                self.kept.append(t)
                self.kept_kinds.append(kind)

    def watch(self, t: torch.Tensor) -> None:
        try:
            self.versions.append(t._version)
        except RuntimeError:
            return
        self.watched.append(t)


class Read:
    """One read's flags and what is needed to judge them (now, or one step late)."""

    __slots__ = ("keys", "scalars", "sites", "step", "after", "updated", "n_grads", "grad_norms",
                 "pending", "kept", "kept_at", "n_losses")

    def __init__(self, keys: list[str], scalars: list[torch.Tensor], sites: list[Any], step: int,
                 after: tuple[list[torch.Tensor], int, int, bool] | None,
                 updated: list[tuple[int, bool, float | None, tuple[list[torch.Tensor], list[int]]]],
                 n_losses: int) -> None:
        self.keys, self.scalars, self.sites, self.step = keys, scalars, sites, step
        self.after, self.updated, self.n_losses = after, updated, n_losses
        self.n_grads = 0
        self.grad_norms: list[torch.Tensor] = []
        self.pending: Any = None  # a `_late.PendingRead`
        self.kept: list[torch.Tensor] = []  # the kept tensors whose norms are scalars[kept_at:...]
        self.kept_at = 0

    @property
    def wide(self) -> bool:
        """A float64 gradient: its norm may exceed float32's range without overflowing."""
        return any(g.dtype is torch.float64 for g in self.grad_norms)

    def kept_finite(self, values: list[float]) -> bool:
        return all(v - v == 0 for v in values[self.kept_at:self.kept_at + len(self.kept)])


def nan_or_posinf(v: float) -> bool:
    return v != v or v == math.inf
