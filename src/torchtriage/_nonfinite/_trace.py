"""Op-level tracing for a replayed step: which aten op first made a value non-finite.

`OpTracer` is a `TorchDispatchMode` that checks every op's floating outputs (a host sync per op:
it only runs while replaying a step already known to be bad). It follows non-finiteness like a
taint: each non-finite tensor carries the `Origin` that produced it, so the producer reported is
the op whose value actually *reaches* the failing output, not an intentional -inf that softmax
turned finite again.

Origin kinds:
    computed  finite inputs → non-finite output (log(0), exp(100), x/0, fp16 overflow), or a NaN
              made from -inf constants (softmax over a fully masked row): a producer;
    constant  a non-finite value written on purpose (masked_fill(mask, -inf), torch.full(-inf)),
              or a non-finite tensor that existed before the replay (batch, parameter);
              `external="host"`: made from host data during the step (`torch.tensor`,
              `torch.as_tensor`, `torch.from_numpy` of an array numpy or Python computed: the
              value was born outside torch, where no op can be traced).
`ModuleStack` keeps the module path of the op being run (global module hooks, replay only).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import weakref
from typing import Any, Callable

import torch
import torch.nn as nn
from torch.nn.modules import module as _module_mod
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from .._frames import UserFrame, find_frame, in_user_file, user_frame_of


@dataclasses.dataclass
class Origin:
    kind: str  # "computed" | "constant"
    op: str
    module: str | None
    frame: UserFrame | None = None
    inputs: list[torch.Tensor] = dataclasses.field(default_factory=list)
    output: torch.Tensor | None = None
    scalars: tuple[Any, ...] = ()
    external: str | None = None  # "parameter <name>" / "input" for pre-existing tensors
    sources: list[Origin] = dataclasses.field(default_factory=list)  # non-finite inputs it came from
    # Modules that received this value and passed it on, in execution order (not the producer,
    # nor the modules that contain it): the HTML model tree marks them "propagated".
    propagated_by: list[str] = dataclasses.field(default_factory=list)


_LIFTS = frozenset({"aten::lift_fresh", "aten::lift", "aten::lift_fresh_copy"})


class ModuleStack:
    """The module path of the code running now, through global forward hooks (replay only)."""

    def __init__(self, name_of: Callable[[nn.Module], str | None]) -> None:
        self.name_of = name_of
        self.stack: list[str] = []
        self._handles: list[Any] = []

    @property
    def top(self) -> str | None:
        return self.stack[-1] if self.stack else None

    def __enter__(self) -> ModuleStack:
        def pre(module: nn.Module, args: Any) -> None:
            name = self.name_of(module)
            self.stack.append(name if name is not None else (self.top or ""))

        def post(module: nn.Module, args: Any, output: Any) -> None:
            if self.stack:
                self.stack.pop()

        self._handles = [_module_mod.register_module_forward_pre_hook(pre),
                         _module_mod.register_module_forward_hook(post, always_call=True)]
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()


def nonfinite(t: torch.Tensor, any_kind: bool = True) -> bool:
    """The one non-finite test of a tensor (one host read: localization only, never a hot hook):
    any NaN or ±Inf; with `any_kind=False` NaN or +Inf only, the sentinel's trip rule for model
    outputs (a -Inf there is a mask, written on purpose)."""
    x = torch.view_as_real(t) if t.is_complex() else t
    if any_kind:
        return not bool(torch.isfinite(x).all())
    return bool(torch.isnan(x).any() or torch.isposinf(x).any())


def _is_float(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and t.numel() > 0 \
        and t.device.type != "meta"


class OpTracer(TorchDispatchMode):
    """Records the first op whose non-finite output comes from finite (or only constant) inputs."""

    def __init__(self, modules: ModuleStack, externals: dict[int, str] | None = None) -> None:
        super().__init__()
        self.modules = modules
        # id(tensor) -> (weak ref, origin); tensors compare elementwise, so no WeakKeyDictionary.
        self.status: dict[int, tuple[weakref.ref[torch.Tensor], Origin | None]] = {}
        self.externals = externals or {}  # id(tensor) -> description, for parameters and batch
        self.producers: list[Origin] = []
        self.failed = False
        # The frame that started the replay: user frames above it (e.g. `opt.step()`, where the
        # sentinel tripped) are not where the op was written, so the search stops there.
        self.stop_frame: Any = None
        # The user's line of the recorded call being replayed (a step replay runs the tape's ops
        # from torchtriage's code, where no user frame is on the stack).
        self.frame_hint: UserFrame | None = None

    def __exit__(self, *exc: Any) -> None:
        # The stop frame's locals hold this tracer (and through its origins, the user's step
        # tensors): kept past the replay, it is a reference cycle that keeps a step's autograd
        # graph alive until the cycle collector happens to run.
        try:
            super().__exit__(*exc)
        finally:
            self.stop_frame = None

    def origin_of(self, t: Any) -> Origin | None:
        if not isinstance(t, torch.Tensor):
            return None
        entry = self.status.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None

    def producer_of(self, t: Any) -> Origin | None:
        """The op that made `t` non-finite: its origin when computed there, else the first
        producer seen (a constant origin is a mask or an input, not where the value was born)."""
        origin = self.origin_of(t)
        if origin is None or origin.kind != "computed":
            host = origin if origin is not None and origin.external == "host" else None
            origin = self.producers[0] if self.producers else host
        return origin

    def _known(self, t: torch.Tensor) -> bool:
        entry = self.status.get(id(t))
        return entry is not None and entry[0]() is t

    def _state(self, t: torch.Tensor) -> Origin | None:
        if self._known(t):
            return self.status[id(t)][1]
        origin = None
        if nonfinite(t):
            origin = Origin("constant", "", self.modules.top, external=self.externals.get(id(t), "input"))
        self._remember(t, origin)
        return origin

    def _remember(self, t: torch.Tensor, origin: Origin | None) -> None:
        try:
            self.status[id(t)] = (weakref.ref(t), origin)
        except TypeError:  # a tensor type without weak references
            pass

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self.failed:
            try:
                self._inspect(func, args, kwargs, out)
            except Exception:  # tracing is best effort; the replay's numerics are unaffected
                self.failed = True
        return out

    def _inspect(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        outs = [t for t in tree_leaves(out) if _is_float(t)]
        if not outs:
            return
        leaves = tree_leaves((args, kwargs))
        tensors = [t for t in leaves if _is_float(t)]
        scalars = tuple(v for v in leaves if not isinstance(v, torch.Tensor))
        const = any(isinstance(v, float) and not math.isfinite(v) for v in scalars)
        bad_out = [t for t in outs if nonfinite(t)]
        if not bad_out:
            for t in outs:
                self._remember(t, None)
            return
        # every operand for the evidence: a count or a mask divides as an integer tensor
        operands = [t for t in leaves if isinstance(t, torch.Tensor) and t.numel() > 0 and t.device.type != "meta"]
        states = [self._state(t) for t in tensors]
        bad_in = [s for s in states if s is not None]
        computed = [s for s in bad_in if s.kind == "computed"]
        name = f"aten::{func._schema.name.split('::')[-1]}" if hasattr(func, "_schema") else str(func)
        if name in _LIFTS:
            # host data becoming a tensor (`torch.tensor(array)`): the value was born outside torch
            origin = self._new("constant", name, operands, bad_out[0], scalars)
            origin.external = "host"
        elif computed:
            origin = computed[0]
            self._propagated(origin)
        elif bad_in or const:
            in_nan = any(bool(torch.isnan(t).any()) for t, s in zip(tensors, states) if s is not None)
            out_nan = any(bool(torch.isnan(torch.view_as_real(t) if t.is_complex() else t).any()) for t in bad_out)
            if out_nan and not in_nan:
                origin = self._new("computed", name, operands, bad_out[0], scalars)
                origin.sources = bad_in
            else:
                origin = bad_in[0] if bad_in else self._new("constant", name, tensors, bad_out[0], scalars)
        else:
            origin = self._new("computed", name, operands, bad_out[0], scalars)
        for t in outs:
            self._remember(t, origin if any(t is b for b in bad_out) else None)

    def _propagated(self, origin: Origin) -> None:
        producer = origin.module
        for name in self.modules.stack:
            if producer is not None and (name == producer or producer.startswith(name + ".") or name == ""):
                continue  # the producer itself, or a module containing it
            if name not in origin.propagated_by:
                origin.propagated_by.append(name)

    def _new(self, kind: str, op: str, inputs: list[torch.Tensor], output: torch.Tensor,
             scalars: tuple[Any, ...]) -> Origin:
        user = find_frame(in_user_file, sys._getframe(1), stop=self.stop_frame)
        frame = (user_frame_of(user) if user is not None else None) or self.frame_hint
        o = Origin(kind, op, self.modules.top, frame, [t.detach() for t in inputs[:4]], output.detach(),
                   scalars)
        if kind == "computed":
            self.producers.append(o)
        return o
