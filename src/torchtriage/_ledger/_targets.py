"""Targets are no evaluation (issue 25, the hand-fed split verdict of `_handfed.py`).

Knowledge distillation, a mean teacher, a momentum encoder: next to a training forward of one
model, another model runs without gradients (often in eval() mode) on the very same input to
compute the targets the trained model learns from. Its rows are training rows by design; counted
as an evaluation of the other model they would be "evaluation rows that were trained on".

The invariant kept here: an evaluation forward's input is not the input of a training forward of
another model in the same step. The same view (storage, offset, shape) of the same live tensor,
given to a training forward of another model just before or just after, makes the forward without
gradients a target's computation: before, it is not kept; after, the rows it left are taken back.
Same-model pairs are not exempt (a model evaluated on the batch it trains on is left to the
verdict). Bookkeeping only: no device work, no host read.
"""

from __future__ import annotations

import collections
import weakref
from typing import TYPE_CHECKING

import torch
import torch.nn as nn

if TYPE_CHECKING:
    from ._handfed import HandFed, Side

RECENT = 4  # training inputs remembered (a step's student forwards: one per view, a few views)

View = tuple[int, int, tuple[int, ...]]


def _view(x: torch.Tensor) -> tuple[View, torch.Tensor]:
    try:
        key: View = (x.untyped_storage().data_ptr(), int(x.storage_offset()), tuple(x.shape))
    except (RuntimeError, NotImplementedError):
        key = (0, 0, ())
    base = x._base if x._base is not None else x
    return key, base


class _Pending:
    def __init__(self, model: nn.Module, view: View, base: torch.Tensor, side: Side, index: int,
                 marks: tuple[int, int, dict[int, int]], rows: int) -> None:
        self.model = weakref.ref(model)
        self.view = view
        self.base = weakref.ref(base)
        self.side = side
        self.index = index
        self.marks = marks
        self.rows = rows


class Targets:
    def __init__(self, hf: HandFed) -> None:
        self.hf = hf
        self.recent: collections.deque[tuple[View, weakref.ref[torch.Tensor], weakref.ref[nn.Module]]] = \
            collections.deque(maxlen=RECENT)
        self.pending: _Pending | None = None

    def on_forward(self, model: nn.Module, x: torch.Tensor, training: bool) -> bool:
        """True for a forward without gradients on the input of another model's training forward."""
        view, base = _view(x)
        if view[0] == 0:
            return False
        if training:
            p, self.pending = self.pending, None
            if p is not None and p.view == view and p.base() is base and p.model() is not model:
                self._take_back(p)
            self.recent.append((view, weakref.ref(base), weakref.ref(model)))
            return False
        return any(v == view and b() is base and m() is not model for v, b, m in self.recent)

    def evaluated(self, model: nn.Module, x: torch.Tensor, side: Side, marks: tuple[int, int, dict[int, int]]) -> None:
        """An evaluation forward's rows were just kept: the next training forward may show them a target's."""
        view, base = _view(x)
        if view[0] == 0:
            self.pending = None
            return
        self.pending = _Pending(model, view, base, side, len(side.chunks) - 1, marks, int(side.chunks[-1].shape[0]))

    def _take_back(self, p: _Pending) -> None:
        side = p.side
        if p.index != len(side.chunks) - 1:
            return
        side.chunks.pop()
        side.repeats.pop()
        filled, padded, slices = p.marks
        del side.filled[filled:]
        del side.padded[padded:]
        for axis in list(side.slices):
            del side.slices[axis][slices.get(axis, 0):]
        side.kept -= p.rows
        self.hf.kept -= p.rows
        for k, entry in list(self.hf.last.items()):
            if entry[2] is side and entry[3] == p.index:
                del self.hf.last[k]

