"""When to run the probe of samples that mix across a batch (`_silent/_batchmix.py`): once per
watched root model, on a training step of the warm-up whose batch size is known.

The batch size is the DataLoader's count of sampler indices for the batch the step trains on
(a listener of `_loaderstream`), else the sample axis of the step's loss call (`cross_entropy`'s
N, CTC's N, a pointwise loss's leading axis shared by input and target). The call probed is
the root call that produced the loss: the call open when the loss is computed inside forward,
else the last root call that returned. The probe's two calls run at the step's end (the user's
step is over; two forwards under no_grad) and their numbers ride the next step's read
(`defer`); only when the other samples changed does the probe go on (reads of its own, once:
the finding's path).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.nn as nn

from .._checker import LossCall
from .._findings import Finding
from .._frames import UserFrame
from .._loaderstream import as_rows, stream
from .._silent._batchmix import Probe, finish_probe, loss_batch, start_probe

SAME_FAULT = frozenset({"silent.softmax_over_batch"})


class MixWatch:
    def __init__(self, session: Any, defer: Any) -> None:
        self.session = session
        self.defer = defer  # defer(values, done): device numbers read with the step's read
        self.loader_n: int | None = None  # samples of the batch the loader gave last
        self.done: weakref.WeakSet[nn.Module] = weakref.WeakSet()
        self.last: tuple[Any, ...] | None = None  # (model, args, kwargs, frame) of the last root call
        self.inner: dict[int, tuple[int, str, torch.Tensor]] = {}  # id(model) -> batch size of a loss inside its call
        self.pending: list[tuple[Any, ...]] = []
        self.read: list[tuple[Probe, list[float]]] = []  # probes whose numbers were read
        self.active = True
        stream(session).listen("dynamics.batchmix", self)

    def on_batch(self, it: Any, indices: Any, data: Any) -> None:  # a DataLoader batch (`_loaderstream`)
        if not self.active:
            return
        rows = as_rows(indices) if isinstance(indices, (list, tuple, torch.Tensor)) else None
        self.loader_n = len(rows) if rows is not None else None

    def called(self, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], frame: Any) -> None:
        """A root call returned in a warm-up step (`frame()` gives the user's line of the call)."""
        if model in self.done:
            return
        self.last = (model, args, dict(kwargs), frame())
        inner = self.inner.pop(id(model), None)
        if inner is not None:
            self._queue(self.last, *inner)

    def loss(self, call: LossCall, open_model: nn.Module | None) -> None:
        """A loss call of a warm-up step, computed with gradients (a training loss) against targets
        that differ between samples (a GAN discriminator's all-ones target, a contrastive
        loss's all-zeros one: no per-sample prediction to keep apart; read with the probe's numbers)."""
        target = call.target
        if not torch.is_grad_enabled() or not isinstance(target, torch.Tensor) or target.numel() < 2:
            return
        if self.loader_n is not None:
            n, source = self.loader_n, "loader"
        else:
            found = loss_batch(call.name, call.input, call.args, target)
            if found is None:
                return
            n, source = found, "loss"
        with torch.no_grad():
            flat = target.detach().reshape(-1)
            varies = (flat != flat[0]).any()
        if open_model is not None:
            if open_model not in self.done:
                self.inner.setdefault(id(open_model), (n, source, varies))
        elif self.last is not None and self.last[0] not in self.done:
            self._queue(self.last, n, source, varies)

    def _queue(self, call: tuple[Any, ...], n: int, source: str, varies: torch.Tensor) -> None:
        model, args, kwargs, frame = call
        self.done.add(model)
        self.pending.append((weakref.ref(model), args, kwargs, frame, n, source, self.session.step, varies))

    def step_end(self, step: int, warmup: int) -> list[Finding]:
        """The probes read at this step's read are judged; the calls queued in this step start."""
        self.last = None
        self.inner.clear()
        self.loader_n = None
        if step + 1 >= warmup:
            self.active = False
        found = self.judge()
        self.flush()
        return found

    @property
    def busy(self) -> bool:
        return bool(self.pending or self.read)

    def flush(self) -> list[Finding]:
        """At the session's end: the calls still queued start, their numbers read by the last read."""
        for probe, varies in self.start():
            self.defer([*probe.numbers, varies], lambda v, p=probe: self.read.append((p, v)))
        return []

    def start(self) -> list[tuple[Probe, torch.Tensor]]:
        probes = []
        pending, self.pending = self.pending, []
        for ref, args, kwargs, frame, n, source, step, varies in pending:
            model = ref()
            if model is not None:
                probe = start_probe(model, args, kwargs, n, source, frame if isinstance(frame, UserFrame) else None)
                if probe is not None:
                    probe.step = step
                    probes.append((probe, varies))
        return probes

    def judge(self) -> list[Finding]:
        found: list[Finding] = []
        read, self.read = self.read, []
        for probe, values in read:
            if not values[-1]:
                continue  # the targets of the loss are the same for every sample
            f = finish_probe(probe, values[:-1])
            if f is not None and any(g.code in SAME_FAULT and (g.file, g.line) == (f.file, f.line)
                                     for g in self.session.findings):
                continue  # that line's softmax over the batch axis is already reported, by its own name
            if f is not None:
                found.append(f.replace(step=probe.step))
        return found
