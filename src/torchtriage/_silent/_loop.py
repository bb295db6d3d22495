"""Training-loop mistakes, each watched with near-zero cost:

    zero_grad missing      the grads an optimizer used are the same tensors when it steps again,
                           nothing reset them in between (their version counter moved only inside
                           backward calls), and a backward added into them. Python attribute
                           reads only.
    loss graph kept        a token in each loss node's `metadata` dict lives exactly as long as
                           the node; tokens from two or more steps back still alive, from a set
                           of steps that grows while keeping the older ones, mean the user holds
                           every old graph (`total += loss`, `losses.append(loss)`); a loss that
                           lives until the next iteration reassigns it is normal. The line named
                           is the op on a loss whose outputs stay alive the same way (the
                           `total += loss`, from the step tape of the warm-up steps), else the
                           line that made the loss.
    eval() while training  the stepped model's forward ran with training=False and holds
                           dropout / batch norm.
    train() while evaluating  no-grad forwards in train mode with dropout / batch norm whose
                           outputs feed an evaluation loss or a metric (`_sampling.py`); a
                           sample grid or a target network's output feeds neither.
    loss collapse          the loss of the first steps, kept on the device, read once.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

import torch
import torch.nn as nn
from torch.utils._pytree import tree_leaves

from .._frames import find_frame

_STOCHASTIC = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm, nn.AlphaDropout)


def _stochastic(model: nn.Module) -> list[tuple[str, str]]:
    """(path, description) of the modules whose behaviour depends on train()/eval()."""
    out = []
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) and getattr(m, "p", 0) > 0:
            out.append((name, f"{name or '<root>'} ({type(m).__name__} p={m.p})"))
        elif isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
            out.append((name, f"{name or '<root>'} ({type(m).__name__})"))
    return out


def stochastic_modules(model: nn.Module) -> list[str]:
    """Modules whose behaviour depends on train()/eval(): dropout with p > 0, batch norm."""
    return [desc for _, desc in _stochastic(model)]


def trainable_stochastic_modules(model: nn.Module) -> list[str]:
    """The stochastic modules that sit in a trainable part of `model`: the module itself, or its
    nearest ancestor holding parameters, has a parameter with requires_grad. Dropout and batch
    norm inside a frozen backbone belong in eval() mode (linear probing, frozen features)."""
    modules = dict(model.named_modules())
    out = []
    for path, desc in _stochastic(model):
        parts = path.split(".") if path else []
        for k in range(len(parts), -1, -1):
            holder = modules.get(".".join(parts[:k]))
            params = list(holder.parameters()) if holder is not None else []
            if params:
                if any(p.requires_grad for p in params):
                    out.append(desc)
                break
    return out


class _Token:
    __slots__ = ("step", "__weakref__")

    def __init__(self, step: int) -> None:
        self.step = step


def _node(t: Any) -> Any:
    """`t.grad_fn` for a tensor in a graph, else None (reading it raises for a no_grad view whose
    base was later changed in place with grad on)."""
    if not isinstance(t, torch.Tensor) or not t.requires_grad:
        return None
    try:
        return t.grad_fn
    except RuntimeError:
        return None


def _loss_step(t: Any, key: str | None = None) -> int | None:
    """The step of the loss `t` is (its node carries a GraphKeeper token, or a token under
    `key`), else None."""
    fn = _node(t)
    tok = fn.metadata.get(key or GraphKeeper.KEY) if fn is not None else None
    return tok.step if isinstance(tok, _Token) else None


class GraphKeeper:
    """Knows which steps' loss graphs are still alive, and which lines' ops on a loss hold them.

    A holder is the output of a taped op of the user's code that took a loss as input
    (`total_loss += loss`, `total = total + loss`, `running = 0.9 * running + 0.1 * loss`): its
    node gets a token as well. An accumulator's nodes chain to each other, so its tokens from
    every earlier step stay alive; a loss scaled for backward (`(loss / 4).backward()`) dies
    with the next iteration. The holder line is the one to change (`loss.item()`), not the line
    that made the loss."""

    KEY = "torchtriage.silent.step"
    HOLD = "torchtriage.silent.holder"

    def __init__(self) -> None:
        self._tokens: list[tuple[weakref.ref[_Token], int, Any]] = []
        self._holders: list[tuple[weakref.ref[_Token], int, Any]] = []

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

    def mark_holders(self, ops: list[Any]) -> None:
        """Tokens on the outputs of the taped ops (`TapeOp`) that took a loss as input."""
        for op in ops:
            steps = [s for t in tree_leaves((op.args, op.kwargs)) if (s := _loss_step(t, self.KEY)) is not None]
            if not steps or op.frame is None:
                continue
            for t in tree_leaves(op.output):
                fn = _node(t)
                if fn is None or self.HOLD in fn.metadata:
                    continue
                tok = _Token(max(steps))
                fn.metadata[self.HOLD] = tok
                self._holders.append((weakref.ref(tok), tok.step, op.frame))

    def alive_before(self, step: int) -> list[tuple[int, Any]]:
        """(step, frame) of loss graphs made before `step - 1` and still alive; prunes dead ones."""
        self._tokens = [(r, s, f) for r, s, f in self._tokens if r() is not None]
        return [(s, f) for r, s, f in self._tokens if s <= step - 2]

    def holder_before(self, step: int) -> Any:
        """The frame of a line whose ops on losses from two or more steps before `step - 1` are
        still alive (the accumulator), or None; prunes dead ones."""
        self._holders = [(r, s, f) for r, s, f in self._holders if r() is not None]
        by_line: dict[Any, set[int]] = {}
        for _, s, f in self._holders:
            if s <= step - 2:
                by_line.setdefault((f.file, f.line), set()).add(s)
        line = next((k for k, v in by_line.items() if len(v) >= 2), None)
        return next((f for _, _, f in self._holders if (f.file, f.line) == line), None) if line else None


class _Sample:
    """A few of one optimizer's grads as they were when it last stepped."""

    __slots__ = ("grads", "accumulated", "frame", "step")

    def __init__(self, grads: list[tuple[weakref.ref[torch.Tensor], weakref.ref[torch.Tensor], int, int]]) -> None:
        self.grads = grads  # (param, grad, version at the step, version after the last backward)
        self.accumulated = False
        self.frame: Any = None
        self.step: int | None = None


class ZeroGradWatch:
    """Remembers a few gradients of each optimizer right after it steps.

    The verdict waits for that optimizer's next step: a backward that adds into another
    network's stale grads is harmless when they are reset before their own optimizer steps
    (the DCGAN generator step writes into D's grads; `netD.zero_grad()` clears them next)."""

    SAMPLE = 8

    def __init__(self) -> None:
        self._samples: dict[int, _Sample] = {}

    @property
    def armed(self) -> bool:
        return bool(self._samples)

    def after_step(self, optimizer: torch.optim.Optimizer) -> None:
        rec = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None and not p.grad.is_sparse:
                    v = p.grad._version
                    rec.append((weakref.ref(p), weakref.ref(p.grad), v, v))
                    if len(rec) >= self.SAMPLE:
                        break
            if len(rec) >= self.SAMPLE:
                break
        if rec:
            self._samples[id(optimizer)] = _Sample(rec)
        else:
            self._samples.pop(id(optimizer), None)

    def backward_begins(self) -> list[_Sample]:
        """Drops the samples something reset since the step or since the last backward (one reset
        grad means zero_grad ran); returns the samples this backward may add onto."""
        for oid in list(self._samples):
            sample = self._samples[oid]
            for pref, gref, _, seen in sample.grads:
                p = pref()
                g = p.grad if p is not None else None
                if g is None or g is not gref() or g._version != seen:
                    del self._samples[oid]
                    break
        return list(self._samples.values())

    def backward_ends(self) -> None:
        for sample in self._samples.values():
            grads = []
            for pref, gref, at_step, _ in sample.grads:
                g = gref()
                now = g._version if g is not None else -1
                sample.accumulated = sample.accumulated or now != at_step
                grads.append((pref, gref, at_step, now))
            sample.grads = grads

    def stepping(self, optimizer: torch.optim.Optimizer) -> tuple[torch.Tensor | None, _Sample] | None:
        """At the optimizer's step: its sampled grads, never reset, hold gradients of backward
        calls from before its previous step. Returns (a parameter, the sample) or None."""
        sample = self._samples.pop(id(optimizer), None)
        if sample is None or not sample.accumulated:
            return None
        return sample.grads[0][0](), sample


def in_update_bn() -> bool:
    """True inside `torch.optim.swa_utils.update_bn`, which runs train-mode no-grad forwards on purpose."""
    return find_frame(lambda f: f.f_code.co_name == "update_bn", sys._getframe(1), depth=12) is not None
