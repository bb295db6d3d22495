"""Training-loop mistakes, each watched with near-zero cost:

    zero_grad missing      the grads the optimizer just used are the same tensors, with the same
                           version counter, at the next step's first backward (nothing zeroed or
                           replaced them): backward() accumulates. Python attribute reads only.
    loss graph kept        a token in each loss node's `metadata` dict lives exactly as long as
                           the node; tokens from two or more steps back still alive mean the user
                           holds old graphs (`total += loss`, `losses.append(loss)`).
    eval() while training  the stepped model's forward ran with training=False and holds
                           dropout / batch norm.
    train() while evaluating  repeated no-grad forwards in train mode with dropout / batch norm
                           and no backward in between.
    loss collapse          the loss of the first steps, kept on the device, read once.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

import torch
import torch.nn as nn

_STOCHASTIC = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm, nn.AlphaDropout)


def stochastic_modules(model: nn.Module) -> list[str]:
    """Modules whose behaviour depends on train()/eval(): dropout with p > 0, batch norm."""
    out = []
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) and getattr(m, "p", 0) > 0:
            out.append(f"{name or '<root>'} ({type(m).__name__} p={m.p})")
        elif isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
            out.append(f"{name or '<root>'} ({type(m).__name__})")
    return out


class _Token:
    __slots__ = ("step", "__weakref__")

    def __init__(self, step: int) -> None:
        self.step = step


class GraphKeeper:
    """Knows which steps' loss graphs are still alive."""

    KEY = "torchtriage.silent.step"

    def __init__(self) -> None:
        self._tokens: list[tuple[weakref.ref[_Token], int, Any]] = []

    def mark(self, t: Any, step: int, frame: Any) -> None:
        fn = getattr(t, "grad_fn", None)
        if fn is None:
            return
        meta = fn.metadata
        if self.KEY in meta:
            return
        tok = _Token(step)
        meta[self.KEY] = tok
        self._tokens.append((weakref.ref(tok), step, frame))

    def alive_before(self, step: int) -> list[tuple[int, Any]]:
        """(step, frame) of loss graphs made before `step - 1` and still alive; prunes dead ones."""
        self._tokens = [(r, s, f) for r, s, f in self._tokens if r() is not None]
        return [(s, f) for r, s, f in self._tokens if s <= step - 2]


class ZeroGradWatch:
    """Remembers a few gradients of each optimizer right after its step.

    Decided per optimizer at its next step, by the last backward before it: a GAN's generator
    backward adds into the discriminator's grads, which the discriminator's own zero_grad()
    clears before its backward, so a backward that touches another optimizer's untouched grads
    proves nothing until that optimizer steps. While no reset was seen, each backward's own
    accumulation refreshes the sampled versions (micro-batches without any zero_grad still count);
    once a reset was seen, the optimizer is clear until its step.
    """

    SAMPLE = 8

    def __init__(self) -> None:
        self._samples: dict[int, list[tuple[weakref.ref[torch.Tensor], weakref.ref[torch.Tensor], int]]] = {}
        self._carried: dict[int, tuple[list[torch.Tensor], Any, int]] = {}

    @property
    def armed(self) -> bool:
        return bool(self._samples)

    def after_step(self, optimizer: torch.optim.Optimizer) -> None:
        rec = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None and not p.grad.is_sparse:
                    rec.append((weakref.ref(p), weakref.ref(p.grad), p.grad._version))
                    if len(rec) >= self.SAMPLE:
                        break
            if len(rec) >= self.SAMPLE:
                break
        self._samples[id(optimizer)] = rec
        self._carried.pop(id(optimizer), None)

    def before_backward(self, frame_fn: Any, step: int) -> None:
        """At each backward: which optimizers' grads nobody zeroed since their step (or since the
        last backward). Empty unless ALL sampled grads are untouched (one zeroed grad means
        zero_grad ran)."""
        frame = None
        for oid, rec in self._samples.items():
            stale = _untouched(rec)
            if stale:
                # the last backward before the step is the line to fix (D's own, not G's)
                frame = frame or frame_fn()
                self._carried[oid] = (stale, frame, step)
            else:
                self._carried.pop(oid, None)

    def after_backward(self) -> None:
        for oid, rec in self._samples.items():
            if oid not in self._carried:
                continue  # reset since its step: decided, nothing to follow
            grads = [(pref(), gref()) for pref, gref, _ in rec]
            if all(p is not None and g is not None and p.grad is g for p, g in grads):
                self._samples[oid] = [(pref, gref, g._version) for (pref, gref, _), (_, g) in zip(rec, grads)]

    def at_step(self, optimizer: torch.optim.Optimizer) -> tuple[list[torch.Tensor], Any, int] | None:
        """At `optimizer.step()`: (parameters, backward frame, step) when its grads were never reset."""
        self._samples.pop(id(optimizer), None)
        return self._carried.pop(id(optimizer), None)


def _untouched(rec: list[tuple[Any, Any, int]]) -> list[torch.Tensor]:
    out = []
    for pref, gref, version in rec:
        p = pref()
        if p is None:
            return []
        g = p.grad
        if g is None or g is not gref() or g._version != version:
            return []
        out.append(p)
    return out


def in_update_bn() -> bool:
    """True inside `torch.optim.swa_utils.update_bn`, which runs train-mode no-grad forwards on purpose."""
    f = sys._getframe(1)
    for _ in range(12):
        if f is None:
            return False
        if f.f_code.co_name == "update_bn":
            return True
        f = f.f_back
    return False
