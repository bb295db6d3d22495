"""Op-level witnesses of a cut gradient path, recorded during the first steps only.

A `TorchFunctionMode` sees every torch call made from Python (tensor methods, factories and
property reads included) and passes it through unchanged: it only looks at the result. It
records the calls that cut a path to the loss, with the user's line and the leaves (usually
parameters) whose gradient path ends there:

    detach        `t.detach()` / `t.detach_()` / `t.data` on a tensor that requires grad (a leaf's
                  `.data` only when the next op reads it: `p.data.zero_()`, `init.normal_(p.data)`,
                  `p.data[mask] = 0` write the parameter's values, an init or a hand update, and
                  cut no path to any loss)
    to_python     `.item()`, `.tolist()`, `.numpy()`, `float(t)`, `int(t)` on such a tensor, and
                  `torch.tensor([...])` of tensors requiring grad (it copies their values)
    no_grad       an op run under `torch.no_grad()` / `inference_mode` with an input requiring grad
    rebuild       `torch.tensor(...)` / `as_tensor` / `from_numpy` building a tensor from data
    leaf_created  a factory call with `requires_grad=True` (a leaf that is no parameter)
    nonleaf_grad  `.grad` read on a non-leaf tensor that does not retain its grad

Each (kind, module, line) is one record per step; a detach inside a loop (one per block) adds
the leaves of at most `MAX_WALKS_PER_KEY` calls to it, so it costs a few graph walks per step.
Python runs per op while the mode is on: the checker turns it on for the analysis window (the
first steps) and off afterwards.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .._frames import _HERE, _TORCH, UserFrame, trims_errors, user_frame_from_stack
from .._modestack import push_mode, remove_mode
from ._graph import grad_fn_of, leaves_of

_GRAD_DESCRIPTOR = torch._C.TensorBase.grad
_DATA_DESCRIPTOR = torch._C.TensorBase.data
_DETACH = {"detach", "detach_"}
_TO_PYTHON = {"item", "tolist", "numpy", "__float__", "__int__"}
_REBUILD = {"tensor", "as_tensor", "from_numpy", "asarray", "new_tensor"}
_IN_PLACE_DUNDER = {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ipow__"}


def _in_place(name: str) -> bool:
    """An op that writes its first argument (`zero_`, `normal_`, `copy_`, `init.zeros_`, `t[i] = v`)."""
    return (name.endswith("_") and not name.endswith("__")) or name in _IN_PLACE_DUNDER
MAX_RECORDS_PER_STEP = 256
MAX_WALKS_PER_KEY = 8


def _called_by_torchtriage(depth: int = 2) -> bool:
    """True when the op was called by another check's hook (a sentinel's sum, a probe's
    detach), not by the user's code: those must not read as cuts on the user's line.
    `depth`: frames from this one up to the op's caller (2: called from `__torch_function__`)."""
    f: FrameType | None = sys._getframe(depth)  # skip up to __torch_function__; then torch's own frames
    # and other modes' __torch_function__ (a mode stacked above this one calls down into it)
    while f is not None and (f.f_code.co_filename.startswith(_TORCH) or f.f_code.co_name == "__torch_function__"):
        f = f.f_back
    return f is not None and f.f_code.co_filename.startswith(_HERE + os.sep)


@dataclasses.dataclass
class CutRecord:
    """One place where a gradient path may end."""

    kind: str
    op: str
    module: str | None
    frame: UserFrame | None
    step: int | None
    leaves: set[int] = dataclasses.field(default_factory=set)
    count: int = 1
    shape: tuple[int, ...] | None = None

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.kind, self.op, self.module,
                self.frame.file if self.frame else None, self.frame.line if self.frame else None)


def _tensors(args: Any, kwargs: dict[str, Any]) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(x for x in a[:64] if isinstance(x, torch.Tensor))
    return out


class CutTracer(TorchFunctionMode):
    """Records `CutRecord`s into `sink(record)`; never changes a call's arguments or result.

    Arguments:
        sink: called with each new record.
        context: returns (step, module path) for the current call.
        ignore: returns True while the tracer should not look (optimizer step, our own probes).
    """

    def __init__(self, sink: Callable[[CutRecord], None],
                 context: Callable[[], tuple[int | None, str | None]],
                 ignore: Callable[[], bool] = lambda: False) -> None:
        super().__init__()
        self.sink = sink
        self.context = context
        self.ignore = ignore
        self.enabled = True
        self.seen: dict[tuple[Any, ...], tuple[CutRecord, int]] = {}
        self.records = 0
        self.failed: BaseException | None = None
        # ids of leaves whose `.grad` the user's code read: a gradient read on purpose (issue 11)
        self.grad_reads: set[int] = set()
        # a leaf's `.data` read, held until the next op says whether it reads the alias (a cut) or
        # writes it in place (an init / hand update): (the alias, its record, its source)
        self.pending: tuple[torch.Tensor, CutRecord, Any] | None = None

    def new_step(self) -> None:
        self.seen.clear()
        self.records = 0

    @trims_errors
    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        __tracebackhide__ = True
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.pending is not None and _tensors(args, kwargs):  # (`no_grad()`'s switch reads none)
            alias, rec, src = self.pending
            self.pending = None
            try:
                written = args[0] if args else next(iter(kwargs.values()), None)  # (`init.zeros_(tensor=...)`)
                if not (written is alias and _in_place(getattr(func, "__name__", ""))):
                    self._send(rec, src)
            except Exception as e:  # our bookkeeping must never break the user's op
                self.failed = e
        if getattr(func, "__self__", None) is _GRAD_DESCRIPTOR and self.failed is None:
            self._grad_read(args)  # (at any stage: a `.grad` read after optimizer.step() counts)
        if self.enabled and self.failed is None and self.records < MAX_RECORDS_PER_STEP:
            try:
                if not self.ignore():
                    # (who called the op, a walk up the stack, is asked only of an op that records)
                    self._observe(func, args, kwargs, out)
            except Exception as e:  # our bookkeeping must never break the user's op
                self.failed = e
        return out

    def _grad_read(self, args: tuple[Any, ...]) -> None:
        first = args[0] if args else None
        try:
            if isinstance(first, torch.Tensor) and first.requires_grad and first.grad_fn is None \
                    and len(self.grad_reads) < 4096 and not _called_by_torchtriage():
                self.grad_reads.add(id(first))  # an id-set insert: no device read
        except Exception as e:  # our bookkeeping must never break the user's op
            self.failed = e

    def _observe(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        name = getattr(func, "__name__", "")
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if name == "__get__":  # a property read: only .grad and .data matter
            owner = getattr(func, "__self__", None)
            if owner is _GRAD_DESCRIPTOR and first is not None and grad_fn_of(first)[0] is not None \
                    and not first.retains_grad:
                self._record("nonleaf_grad", "Tensor.grad", None, shape=tuple(first.shape))
            elif owner is _DATA_DESCRIPTOR and first is not None and first.requires_grad:
                held = out if isinstance(out, torch.Tensor) and first.grad_fn is None else None
                self._record("detach", "Tensor.data", first, hold=held)
            return
        if name in _DETACH and first is not None and first.requires_grad:
            self._record("detach", f"Tensor.{name}", first)
            return
        if name in _TO_PYTHON and first is not None and first.requires_grad:
            self._record("to_python", f"Tensor.{name.strip('_')}", first)
            return
        if name in _REBUILD:
            if isinstance(out, torch.Tensor) and not out.requires_grad:
                # torch.tensor([a, b]) of tensors requiring grad copies their values (an item() each)
                data = args[0] if args else kwargs.get("data")
                srcs = [t for t in data[:64] if isinstance(t, torch.Tensor) and t.requires_grad] \
                    if isinstance(data, (list, tuple)) else []
                if isinstance(data, torch.Tensor) and data.requires_grad:
                    srcs = [data]  # torch.tensor(param): a copy of its values (issue 11)
                if srcs:
                    self._record("to_python", f"torch.{name}", srcs)
                self._record("rebuild", f"torch.{name}", None)
            return
        if kwargs.get("requires_grad") is True and isinstance(out, torch.Tensor) and out.is_leaf:
            self._record("leaf_created", f"torch.{name}", None, produced=out)
            return
        if not torch.is_grad_enabled():
            if not _holds_tensor(out) or (isinstance(out, torch.Tensor) and out.requires_grad):
                # a query (`is_contiguous`, `size`) gives no tensor to cut; an op in place on a
                # leaf (an init's `fill_`, a hand-written update) gives the leaf back: nothing is cut
                return
            srcs = [t for t in _tensors(args, kwargs) if t.requires_grad]
            if srcs:
                kind = "inference_mode" if torch.is_inference_mode_enabled() else "no_grad"
                self._record(kind, name or str(func), srcs)

    def _record(self, kind: str, op: str, src: Any, *, shape: tuple[int, ...] | None = None,
                produced: torch.Tensor | None = None, hold: torch.Tensor | None = None) -> None:
        if _called_by_torchtriage(4):  # (this, _observe, __torch_function__, the op's caller)
            return
        step, module = self.context()
        frame = user_frame_from_stack(3)
        rec = CutRecord(kind, op, module, frame, step, shape=shape)
        if hold is not None:
            self.pending = (hold, rec, src)  # sent (or not) when the next op is seen
            return
        self._send(rec, src, produced)

    def _send(self, rec: CutRecord, src: Any, produced: torch.Tensor | None = None) -> None:
        old = self.seen.get(rec.key) if produced is None else None
        if old is not None:
            # The same line again this step (a loop): add its leaves to the record already sent.
            first, walks = old
            if walks < MAX_WALKS_PER_KEY and src is not None:
                self.seen[rec.key] = (first, walks + 1)
                first.leaves |= _leaves(src)
                first.count += 1
            return
        self.seen[rec.key] = (rec, 1)
        self.records += 1
        rec.leaves = {id(produced)} if produced is not None else _leaves(src)
        self.sink(rec)


_CALL_IMPL = torch.nn.Module._call_impl.__code__


def module_being_called(name_of: Callable[[Any], str | None]) -> str | None:
    """The path of the innermost watched module whose call is running (what a stack kept by
    forward hooks would hold), found by walking the Python stack: `Module._call_impl` frames
    hold the module called (`self`). For the rare op that records a cut while no module hook
    runs (the screening step): no hook on every module call for it. `name_of(module)` gives a
    watched module's path, None for a module no watched model holds (skipped, as hooks do)."""
    f: FrameType | None = sys._getframe(1)
    while f is not None:
        if f.f_code is _CALL_IMPL:
            mod = f.f_locals.get("self")
            name = name_of(mod) if mod is not None else None
            if name is not None:
                return name
        f = f.f_back
    return None


def _holds_tensor(out: Any) -> bool:
    if isinstance(out, torch.Tensor):
        return True
    return isinstance(out, (list, tuple)) and any(isinstance(o, torch.Tensor) for o in out)


def _leaves(src: Any) -> set[int]:
    if isinstance(src, list):
        out: set[int] = set()
        for t in src:
            out |= leaves_of(t)
        return out
    return leaves_of(src) if src is not None else set()


def push(tracer: CutTracer) -> None:
    push_mode(tracer)  # under the user's modes: a `with torch.device(...)` block pops its own


def pop(tracer: CutTracer) -> bool:
    """Take `tracer` off the stack wherever it sits (modes pushed after it stay); not found (we
    are inside its own call) leaves it passive. True if taken off."""
    tracer.enabled = False
    return remove_mode(tracer)
