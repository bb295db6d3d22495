"""Where a no-grad forward run in train() mode goes: evaluation, or a sample (issue 13).

A model in train() mode under `torch.no_grad()` is either evaluated by mistake (dropout still on,
batch norm normalising with the batch and updating its running statistics), or used on purpose:
a GAN draws an image grid from fixed noise, a target network makes regression targets. The
difference is what the output feeds. `TrainModeOutputs` is a pass-through `TorchFunctionMode`
put on the stack only after such a forward and taken off when training resumes (the next
forward with grad, backward, the end of the run). It follows the forward's outputs through the
ops that use them (taint by tensor identity) and notes, per model, the first

    evaluation loss   a loss function given a followed tensor whose result needs no grad
                      (a loss that is backpropagated is a training target, not evaluation);
                      a loss then handed to backward() (without a graph: the forward was cut by
                      no_grad, the gradient check's error) was a training forward, not evaluation;
    metric            argmax / topk / sort / comparisons / max or min along a dim.

Nothing else counts: an image grid's clamp, normalisation and host copy feed no loss or metric.
The mode changes no argument and no result; it only keeps weak references.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .._checker import LOSS_FUNCTIONS
from .._frames import trims_errors
from .._modestack import push_mode, remove_mode

_METRICS = frozenset({
    "argmax", "argmin", "topk", "sort", "argsort", "eq", "ne", "gt", "lt", "ge", "le",
    "__eq__", "__ne__", "__gt__", "__lt__", "__ge__", "__le__", "equal", "isclose", "allclose",
})
_ALONG_DIM = frozenset({"max", "min"})  # with a dim they return indices: a prediction
_LOSSES = frozenset(LOSS_FUNCTIONS)
MAX_OPS = 4096  # a sample pipeline runs a handful of ops; past this, stop following (no verdict)
MAX_TAINTED = 4096


def _tensors(x: Any, limit: int = 64) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for t in x[:limit] if isinstance(t, torch.Tensor)]
    if isinstance(x, dict):
        return [t for t in list(x.values())[:limit] if isinstance(t, torch.Tensor)]
    return []


class TrainModeOutputs(TorchFunctionMode):
    """Follows the outputs of train-mode no-grad forwards; records what they feed, per model key."""

    def __init__(self) -> None:
        super().__init__()
        self.active = True
        self.inside = 0
        self.ops = 0
        self._tainted: dict[int, tuple[weakref.ref[torch.Tensor], frozenset[int]]] = {}
        self.fed: dict[int, str] = {}  # model key -> "loss:<name>" or "metric:<name>"

    # ------------------------------------------------------------------ following
    def follow(self, key: int, output: Any) -> None:
        for t in _tensors(output):
            self._taint(t, frozenset({key}))

    def _taint(self, t: torch.Tensor, keys: frozenset[int]) -> None:
        if len(self._tainted) >= MAX_TAINTED:
            return
        old = self._tainted.get(id(t))
        if old is not None and old[0]() is t:
            keys = keys | old[1]
        self._tainted[id(t)] = (weakref.ref(t), keys)

    def _keys(self, ts: list[torch.Tensor]) -> frozenset[int]:
        keys: frozenset[int] = frozenset()
        for t in ts:
            rec = self._tainted.get(id(t))
            if rec is not None and rec[0]() is t:
                keys |= rec[1]
        return keys

    @trims_errors
    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        __tracebackhide__ = True
        kwargs = kwargs or {}
        if not self.active:
            return func(*args, **kwargs)
        self.inside += 1
        try:
            out = func(*args, **kwargs)
        finally:
            self.inside -= 1
        if self.active:
            try:
                self._observe(func, args, kwargs, out)
            except Exception:  # bookkeeping must never break the user's op
                self.active = False
        return out

    def _observe(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        self.ops += 1
        if self.ops > MAX_OPS:
            self.active = False
            return
        ins = [t for a in (*args, *kwargs.values()) for t in _tensors(a)]
        keys = self._keys(ins)
        if not keys:
            return
        name = getattr(func, "__name__", "")
        if name in _LOSSES:
            if isinstance(out, torch.Tensor) and not out.requires_grad:
                for k in keys:
                    self.fed.setdefault(k, f"loss:{name}")
                self._taint(out, keys)  # followed on: whether backward() is given it decides
            return
        if name in _METRICS or (name in _ALONG_DIM and (len(args) > 1 or "dim" in kwargs)):
            for k in keys:
                self.fed.setdefault(k, f"metric:{name}")
        for t in _tensors(out):
            self._taint(t, keys)

    def keys_of(self, tensors: Any) -> frozenset[int]:
        """The models whose followed outputs `tensors` were computed from."""
        return self._keys(_tensors(tensors))

    # ------------------------------------------------------------------ stack
    def enter(self) -> None:
        push_mode(self)

    def leave(self) -> bool:
        """Stop following and take the mode off the stack; False when that must wait (we are
        inside one of our own calls, where torch has popped us and will push us back)."""
        self.active = False
        self._tainted.clear()
        if self.inside:
            return False
        remove_mode(self)
        return True
