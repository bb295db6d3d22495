"""Replaying a whole recorded step (issue 11): every root call, then the depth-0 tape, in order.

`replay_step` walks the `StepRecord` (`torchtriage._step`) from the step's first event to its
last backward call: each root call runs the model again on its recorded arguments, each tape op
runs its function again, and every tensor the original step produced is substituted by its
replayed counterpart (`env`: id(original) -> replayed), so the replay builds a fresh graph of
the whole step — hand-written losses, metrics, second model calls, functional code. Tensors
that entered the step from outside (batch, targets, masks, parameters) are used as they are.
An in-place op on such a tensor works on a copy: the user's tensors are never written.

Each replayed tape op's outputs map their `grad_fn` back to the op (`op_of_node`), which gives
the user's line of a backward node without anomaly mode. Ops before the step's first model call
(on the batch) are not replayed: they ran before the step's RNG snapshot; their outputs are
the batch the step saw.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.utils import _pytree as pytree

from .._step import BackwardCall, RootCall, StepRecord, TapeOp


class NotReplayable(Exception):
    """The record cannot be replayed (the reason is the message, a catalogue key)."""


@dataclasses.dataclass
class Replayed:
    env: dict[int, Any]
    calls: list[tuple[RootCall, Any]]  # each root call with its replayed output
    backwards: list[tuple[BackwardCall, list[torch.Tensor], Any]]  # replayed roots and grads
    op_of_node: dict[int, tuple[TapeOp, Any]]  # id(grad_fn) -> (tape op, the node, kept alive)
    ops: int = 0

    def sub(self, x: Any) -> Any:
        return self.env.get(id(x), x) if isinstance(x, torch.Tensor) else x


def _inplace(name: str) -> bool:
    return (name.endswith("_") and not name.startswith("__")) or name == "__setitem__" or (
        name.startswith("__i") and name not in ("__index__", "__int__", "__invert__"))


def usable(record: StepRecord | None) -> str | None:
    """None when `record` can be replayed, else why not (a catalogue key)."""
    if record is None or not record.calls and not record.ops:
        return "nonfinite.why.no_record"
    if not record.taped:
        return "nonfinite.why.not_taped"
    if record.truncated:
        return "nonfinite.why.truncated"
    return None


def replay_step(record: StepRecord, *, tracer: Any = None, until_backward: bool = True,
                on_call: Any = None) -> Replayed:
    """Run the step again (the caller sets RNG, modes and hooks: `_replay.replaying`)."""
    out = Replayed({}, [], [], {})
    env = out.env

    def sub(x: Any) -> Any:
        return env.get(id(x), x) if isinstance(x, torch.Tensor) else x

    def bind(old: Any, new: Any) -> list[torch.Tensor]:
        made = []
        for o, n in zip(pytree.tree_leaves(old), pytree.tree_leaves(new)):
            if isinstance(o, torch.Tensor) and isinstance(n, torch.Tensor):
                env[id(o)] = n
                made.append(n)
        return made

    events = [e for e in record.events() if not (isinstance(e, TapeOp) and e.before_step)]
    last = max((i for i, e in enumerate(events) if isinstance(e, BackwardCall)), default=len(events) - 1)
    if until_backward:
        events = events[:last + 1]
    for ev in events:
        if isinstance(ev, RootCall):
            if ev.output is None:
                raise NotReplayable("nonfinite.why.not_taped")
            if tracer is not None:
                tracer.frame_hint = ev.frame
            if on_call is not None:
                on_call(ev)
            args, kwargs = pytree.tree_map(sub, (ev.args, ev.kwargs))
            with torch.set_grad_enabled(ev.grad_enabled):
                new = ev.model(*args, **kwargs)
            if on_call is not None:
                on_call(None)
            bind(ev.output, new)
            out.calls.append((ev, new))
        elif isinstance(ev, TapeOp):
            args, kwargs = pytree.tree_map(sub, (ev.args, ev.kwargs))
            name = getattr(ev.func, "__name__", "")
            if _inplace(name) and args and isinstance(args[0], torch.Tensor) and id(ev.args[0]) not in env:
                # an in-place op on a tensor from outside the step: work on a copy
                first = args[0].clone()
                env[id(ev.args[0])] = first
                args = (first, *args[1:])
            if isinstance(kwargs.get("out"), torch.Tensor) and id(ev.kwargs["out"]) not in env:
                kwargs["out"] = env[id(ev.kwargs["out"])] = kwargs["out"].clone()
            if tracer is not None:
                tracer.frame_hint = ev.frame
            with torch.set_grad_enabled(ev.grad_enabled):
                new = ev.func(*args, **kwargs)
            out.ops += 1
            if _inplace(name) and isinstance(ev.output, torch.Tensor) and args and isinstance(args[0], torch.Tensor):
                new = args[0] if not isinstance(new, torch.Tensor) else new
            for t in bind(ev.output, new):
                if t.grad_fn is not None and id(t.grad_fn) not in out.op_of_node:
                    out.op_of_node[id(t.grad_fn)] = (ev, t.grad_fn)
        elif isinstance(ev, BackwardCall):
            roots = [sub(r) for r in ev.roots]
            grads = pytree.tree_map(sub, ev.grads)
            out.backwards.append((ev, roots, grads))
    if tracer is not None:
        tracer.frame_hint = None
    return out
