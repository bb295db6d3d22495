"""The record of one training step, owned by the frame (issue 11): what ran, in order.

A step is not "one model call + one `torch.nn.functional` loss". It is every *root call* of a
watched model (a siamese net called twice, a GAN's G and D, a teacher and a student), the ops
that run *outside* the watched models between them and `backward()` (a hand-written loss, a
metric, a `torch.where`, functional code with no module at all, ops on the batch before the
model) and the backward calls. `StepRecord` keeps them with one sequence counter, so the step
can be replayed in order (`_nonfinite/_stepreplay.py`) and its inputs read off it.

The depth-0 tape (`StepTape`) is a `TorchFunctionMode` that only looks: each torch call made
from the user's code outside a root call is recorded as (func, args, kwargs, outputs, user
line). It is pushed while it is needed — the warm-up steps (`step_tape_steps`, default 3), the
steps after a non-finite value could not be localized without it (armed), or every step with
`step_tape="always"` — and popped otherwise. Inside a root call it records nothing (one flag
test per op: models call through their own code). Cost when on: a Python call and a stack
walk per depth-0 op (a hand-written loss is a handful of ops: ~10 us each), and references to
those ops' inputs and outputs until the step's update; the always-on tape on functional code
(every op at depth 0) costs that per op of the model and keeps every intermediate tensor of
the forward alive until `optimizer.step()` (about the memory of the activations once more).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
from types import FrameType
from typing import Any

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from ._frames import _HERE, _TORCH, UserFrame, find_frame, passed_through, user_frame_from_stack
from ._modestack import push_mode, remove_mode

MAX_OPS = 4096  # ops recorded per step; past this the tape stops (and says so)
# calls that compute nothing a replay needs (backward is recorded by its own event)
_SKIP = frozenset({"backward", "__repr__", "__format__", "__str__", "__len__", "__bool__", "dim", "size",
                   "numel", "__hash__", "__contains__", "register_hook", "retain_grad", "__set__"})


@dataclasses.dataclass
class RootCall:
    """One call of a watched model in the step."""

    seq: int
    model: nn.Module
    label: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    frame: UserFrame | None
    grad_enabled: bool
    inference: bool
    training: bool
    output: Any = None


@dataclasses.dataclass
class TapeOp:
    """One torch call made outside the watched models."""

    seq: int
    func: Any
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Any
    frame: UserFrame | None
    grad_enabled: bool
    before_step: bool = False  # ran before the step's first model call (ops on the batch)


@dataclasses.dataclass
class BackwardCall:
    seq: int
    roots: tuple[torch.Tensor, ...]
    grads: Any
    frame: UserFrame | None


@dataclasses.dataclass
class UpdateCall:
    """An `optimizer.step()` inside the step (a GAN steps D before G's backward)."""

    seq: int
    index: int  # the optimizer's position in the session's optimizers
    frame: UserFrame | None


def op_name(func: Any) -> str:
    """`sqrt`, `where`, `Tensor.data` (a property read), `cross_entropy`."""
    name = getattr(func, "__name__", None) or str(func)
    owner = getattr(func, "__self__", None)
    if name == "__get__" and owner is not None:
        return f"Tensor.{getattr(owner, '__name__', 'attr')}"
    return name


# torch code that calls torch functions on its own behalf (zero_grad, the profiler's record
# ranges, the data loader's collate): not the step's computation
_LIBRARY_CALLERS = tuple(os.path.join(_TORCH, d) + os.sep for d in ("optim", "autograd", "utils", "cuda", "amp"))


def _not_step_code() -> bool:
    """An op run by a check's hook (a sentinel's sum) or by torch's own machinery. Mode handlers
    (`__torch_function__`: ours and the user's, stacked) and torch's dispatch are transparent."""
    f: FrameType | None = sys._getframe(2)
    while f is not None:
        code = f.f_code
        file = code.co_filename
        if code.co_name == "__torch_function__":
            f = f.f_back
            continue
        if file.startswith(_TORCH):
            if file.startswith(_LIBRARY_CALLERS):
                return True
            f = f.f_back
            continue
        if file.startswith(_HERE + os.sep):
            if "__tracebackhide__" in code.co_varnames:  # our wrappers (F losses): transparent
                f = f.f_back
                continue
            return True
        return False
    return False


def called_functionally(depth: int = 12) -> bool:
    """True inside `torch.func.functional_call` (the module runs on parameters passed in, swapped
    in for the call): that module is functional code, not a model to discover and index."""
    return find_frame(lambda f: f.f_code.co_name == "functional_call" and f.f_code.co_filename.startswith(_TORCH),
                      sys._getframe(1), depth=depth) is not None


_seq = itertools.count(1)  # one order over all records (ops before a step are adopted by it)


class StepTape(TorchFunctionMode):
    """Records depth-0 torch calls into the current `StepRecord`; changes nothing."""

    def __init__(self, owner: Any) -> None:
        super().__init__()
        self.owner = owner  # the SnapshotKeeper: gives .record and .recording()
        self.inside = 0
        self.on_stack = False

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        __tracebackhide__ = True
        kwargs = kwargs or {}
        self.inside += 1
        try:
            out = func(*args, **kwargs)
        except BaseException as e:
            raise passed_through(e)  # noqa: B904 (the same exception, our frames below it unlinked)
        finally:
            self.inside -= 1
        try:
            rec = self.owner.recording()
            if rec is not None and not torch.compiler.is_compiling():
                name = getattr(func, "__name__", "")
                if name not in _SKIP and not (name == "__get__" and not isinstance(out, torch.Tensor)) \
                        and not _not_step_code():
                    rec.add_op(func, args, kwargs, out, user_frame_from_stack(2))
        except Exception:  # bookkeeping must never break the user's op
            self.owner.tape_failed()
        return out

    def push_mode(self) -> None:
        if not self.on_stack:
            push_mode(self)  # under the user's modes: their blocks pop their own
            self.on_stack = True

    def pop_mode(self) -> bool:
        """Take the mode off the stack (keeping modes pushed above it); False when that must wait
        (inside one of our own calls, where torch has popped us and will push us back)."""
        if not self.on_stack:
            return True
        if self.inside:
            return False
        remove_mode(self)
        self.on_stack = False
        return True


class StepRecord:
    """Everything one step ran, in order: root calls, depth-0 ops, backward calls."""

    def __init__(self) -> None:
        self.calls: list[RootCall] = []
        self.ops: list[TapeOp] = []
        self.backwards: list[BackwardCall] = []
        self.updates: list[UpdateCall] = []
        self.taped = False  # the tape was on for this whole step (from its first root call)
        self.truncated = False
        # RNG state before the first recorded op: a step with no model call (functional code)
        # opens only at backward, after its forward ops drew their random numbers
        self.early_rng: tuple[torch.Tensor, Any] | None = None

    def _next(self) -> int:
        return next(_seq)

    def add_call(self, model: nn.Module, label: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                 frame: UserFrame | None) -> RootCall:
        call = RootCall(self._next(), model, label, tuple(args), dict(kwargs), frame,
                        torch.is_grad_enabled(), torch.is_inference_mode_enabled(), model.training)
        if not self.calls:
            for op in self.ops:  # ops on the batch before the model: they made its inputs
                op.before_step = True
        self.calls.append(call)
        return call

    def add_op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
               frame: UserFrame | None, before_step: bool = False) -> None:
        if len(self.ops) >= MAX_OPS:
            self.truncated = True
            return
        self.ops.append(TapeOp(self._next(), func, op_name(func), tuple(args), dict(kwargs), out, frame,
                               torch.is_grad_enabled(), before_step))

    def add_backward(self, roots: tuple[torch.Tensor, ...], grads: Any, frame: UserFrame | None) -> None:
        self.backwards.append(BackwardCall(self._next(), tuple(roots), grads, frame))

    def add_update(self, index: int, frame: UserFrame | None) -> None:
        self.updates.append(UpdateCall(self._next(), index, frame))

    def adopt(self, earlier: StepRecord) -> None:
        """Ops that ran before the step opened belong to it: on the batch before the model, or
        (with no model call in the step) its whole forward."""
        self.ops[:0] = earlier.ops
        self.truncated |= earlier.truncated
        if earlier.ops:
            self.early_rng = earlier.early_rng

    def trailing_ops(self) -> list[TapeOp]:
        """The ops after the record's last backward call and last update (none without a
        backward): when no optimizer step closed the step, the next step's work before its model."""
        if not self.backwards:
            return []
        last = max([b.seq for b in self.backwards] + [u.seq for u in self.updates])
        return [op for op in self.ops if op.seq > last]

    def events(self) -> list[Any]:
        """Root calls, ops, backward calls and optimizer updates in execution order."""
        return sorted([*self.calls, *self.ops, *self.backwards, *self.updates], key=lambda e: e.seq)

    def sources_of(self, t: torch.Tensor) -> list[RootCall]:
        """The root calls whose outputs `t` was computed from, following the tape's ops back
        from `t` (nearest first); empty when the tape did not see `t` made. A loss without
        `grad_fn` names the forward that made its inputs this way, not another call."""
        made: dict[int, tuple[Any, Any]] = {}  # id(tensor) -> (tensor, producing event)
        for ev in self.events():
            if isinstance(ev, (RootCall, TapeOp)):
                for out in pytree.tree_leaves(ev.output):
                    if isinstance(out, torch.Tensor):
                        made[id(out)] = (out, ev)
        found: list[RootCall] = []
        seen: set[int] = set()
        queue = [t]
        while queue and len(seen) < MAX_OPS:
            x = queue.pop(0)
            entry = made.get(id(x))
            if entry is None or entry[0] is not x or id(entry[1]) in seen:
                continue
            ev = entry[1]
            seen.add(id(ev))
            if isinstance(ev, RootCall):
                found.append(ev)
            queue += [a for a in pytree.tree_leaves((ev.args, ev.kwargs)) if isinstance(a, torch.Tensor)]
        return found

    def external_inputs(self, internal: set[int]) -> list[tuple[torch.Tensor, str, UserFrame | None]]:
        """Tensors entering the step that it did not produce and that are no parameter, buffer or
        optimizer state (`internal`: their ids): model inputs, targets, masks, weights, second
        inputs, each once, with where it entered (`G(args[0])`, `sub`) and the user's line."""
        produced: set[int] = set()
        seen: set[int] = set()
        out: list[tuple[torch.Tensor, str, UserFrame | None]] = []
        for ev in self.events():
            if isinstance(ev, RootCall):
                where, leaves = ev.label, pytree.tree_leaves((ev.args, ev.kwargs))
            elif isinstance(ev, TapeOp):
                if ev.before_step:
                    continue  # before the model: its outputs are the batch the step saw
                where, leaves = ev.name, pytree.tree_leaves((ev.args, ev.kwargs))
            else:
                continue
            for t in leaves:
                if isinstance(t, torch.Tensor) and id(t) not in produced and id(t) not in internal \
                        and id(t) not in seen:
                    seen.add(id(t))
                    out.append((t, where, ev.frame))
            result = ev.output
            for t in pytree.tree_leaves(result):
                if isinstance(t, torch.Tensor):
                    produced.add(id(t))
        return out
