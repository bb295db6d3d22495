"""Training phases: which parameters an optimizer steps, and when their training ends (session 8).

One script often trains several models one after the other: a teacher, then a student distilled
from it; a pretraining stage, then a fine-tuning model built afresh. The loss series is one
series for the session, but a loss of the first model and a loss of the second are no two points
of one curve: comparing the teacher's loss at a gradient spike with the student's last loss says
nothing about what the spike cost.

`Phases` groups the optimizers that step by the parameters they hold: optimizers sharing a
tensor are one trainer (an optimizer re-created at an lr drop over the same tensors continues
it; a GAN's two optimizers both keep stepping), each with the first and last step it stepped.
`end_of(step)` is the last step of the trainers active at `step` when all of them stopped before
the run did (a phase that ended), else None. Per step: one id set per new optimizer (cached by
its groups' sizes), a few set intersections.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

import torch


@dataclasses.dataclass
class Trainer:
    params: dict[int, weakref.ref[torch.Tensor]]  # id -> the tensor (ids of freed tensors are reused)
    first: int
    last: int

    def shares(self, tensors: list[torch.Tensor]) -> bool:
        return any((r := self.params.get(id(p))) is not None and r() is p for p in tensors)


class Phases:
    def __init__(self) -> None:
        self.trainers: list[Trainer] = []
        self._held: dict[int, tuple[weakref.ref[Any], tuple[int, ...], list[torch.Tensor]]] = {}
        self.last_step = -1

    def _tensors(self, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
        sig = tuple(len(g["params"]) for g in optimizer.param_groups)
        hit = self._held.get(id(optimizer))
        if hit is None or hit[0]() is not optimizer or hit[1] != sig:
            hit = (weakref.ref(optimizer), sig, [p for g in optimizer.param_groups for p in g["params"]])
            self._held[id(optimizer)] = hit
        return hit[2]

    def stepped(self, optimizer: torch.optim.Optimizer, step: int) -> bool:
        """Note `optimizer`'s step; True when it starts a new phase: parameters never stepped
        before, while every earlier trainer has stopped (none stepped in this step)."""
        tensors = self._tensors(optimizer)
        self.last_step = max(self.last_step, step)
        overlapping = [t for t in self.trainers if t.shares(tensors)]
        if not overlapping:
            new = bool(self.trainers) and all(t.last < step for t in self.trainers)
            self.trainers.append(Trainer({id(p): weakref.ref(p) for p in tensors}, step, step))
            return new
        keep = overlapping[0]
        for t in overlapping[1:]:
            keep.params.update(t.params)
            keep.first, keep.last = min(keep.first, t.first), max(keep.last, t.last)
            self.trainers.remove(t)
        if len(keep.params) < len(tensors) or not all(id(p) in keep.params for p in tensors):
            keep.params.update({id(p): weakref.ref(p) for p in tensors})
        keep.last = max(keep.last, step)
        return False

    def end_of(self, step: int | None) -> int | None:
        """The last step of the training going on at `step`, when it ended before the run did."""
        if step is None:
            return None
        active = [t for t in self.trainers if t.first <= step <= t.last]
        if not active:
            return None
        end = max(t.last for t in active)
        return end if end < self.last_step else None
