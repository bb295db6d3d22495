"""Where the samples of a batch first mix: the op, module and line of a `samples_mixed` finding.

The probe (`_batchmix.py`) knows *that* the outputs of the other samples changed when only
sample 0 of the batch changed. To say *where*, both calls run once more (after a finding only,
in eval mode under no_grad, the session paused) under a `TorchFunctionMode` that compares them
op by op. Each op's output is judged on its *other samples*: the slices 1.. of the tensor's one
axis whose size is the batch size (a tensor with no such axis, or with two, is not judged). The
first run keeps them; the second compares and follows a difference like a taint. The site is the
first op whose other samples changed while one of its inputs was judged and had not changed and
none had been tainted: the GRU that reads the batch axis as time, the `view` that interleaves
the samples, the softmax over the batch axis. An op whose inputs could not be judged is kept as
the fallback site.

The line is the innermost line of the user's code running the op: the line of a hand-written
`view` or `softmax`, or, for an op inside a library module (`nn.GRU`, `nn.MultiheadAttention`),
the user's line that called that module.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from .._frames import UserFrame, trims_errors, user_frame_of, user_stack_frame

BUDGET = 1 << 25  # elements kept from the first run (128 MB in float32)


@dataclasses.dataclass(frozen=True)
class MixSite:
    op: str
    module: str | None
    layer: nn.Module | None  # the innermost module running the op
    frame: UserFrame | None
    shape: tuple[int, ...]  # the op's first judged input there (the layout the op was given)
    axis: int | None  # that input's batch axis


def batch_axis(t: Any, n: int) -> int | None:
    """The one axis of `t` whose size is `n`, else None (none, or two: ambiguous)."""
    if not isinstance(t, torch.Tensor) or t.dim() < 1:
        return None
    axes = [d for d, s in enumerate(t.shape) if s == n]
    return axes[0] if len(axes) == 1 else None


def others(t: torch.Tensor, axis: int) -> torch.Tensor:
    """The slices 1.. of `t` along `axis` (the samples the probe did not touch)."""
    return t.narrow(axis, 1, t.shape[axis] - 1)


def tolerance(t: torch.Tensor) -> float:
    """Rounding at the tensor's scale: 32 units in the last place of its dtype times its
    largest magnitude (the untouched samples are computed from the same numbers in both runs;
    equal as a rule, a kernel's order aside)."""
    if not t.is_floating_point() or not t.numel():
        return 0.0
    return 32.0 * torch.finfo(t.dtype).eps * max(float(t.detach().abs().max()), 1e-3)


def _differs(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return True
    if not a.is_floating_point():
        return not torch.equal(a, b)
    return bool((a.float() - b.float()).abs().max() > tolerance(a)) if a.numel() else False


class _Calls:
    """The module running now (name and object), through global forward hooks."""

    def __init__(self, names: dict[nn.Module, str]) -> None:
        self.names = names
        self.stack: list[tuple[str, nn.Module]] = []
        self.handles: list[Any] = []

    def __enter__(self) -> _Calls:
        from torch.nn.modules import module as module_mod

        def pre(module: nn.Module, args: Any) -> None:
            name = self.names.get(module)
            self.stack.append((name if name is not None else (self.stack[-1][0] if self.stack else ""), module))

        def post(module: nn.Module, args: Any, output: Any) -> None:
            if self.stack:
                self.stack.pop()

        self.handles = [module_mod.register_module_forward_pre_hook(pre),
                        module_mod.register_module_forward_hook(post, always_call=True)]
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()


class _MixSpy(TorchFunctionMode):
    def __init__(self, n: int, calls: _Calls, reference: list[Any] | None) -> None:
        super().__init__()
        self.n, self.calls = n, calls
        self.reference = reference  # None: the first run, which fills `kept`
        self.kept: list[tuple[Any, list[torch.Tensor | None]]] = []
        self.size = 0
        self.index = 0
        self.tainted: dict[int, weakref.ref[torch.Tensor]] = {}  # other samples differ, from a site before
        self.same: dict[int, weakref.ref[torch.Tensor]] = {}  # judged and unchanged
        self.site: MixSite | None = None
        self.fallback: MixSite | None = None
        self.stopped = False

    @trims_errors
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self.stopped:
            try:
                self._see(func, args, kwargs, out)
            except Exception:  # locating is best effort: the finding keeps the model's line
                self.stopped = True
        return out

    def _part(self, t: Any) -> torch.Tensor | None:
        if not isinstance(t, torch.Tensor) or t.is_complex() or t.device.type == "meta" or t.dim() < 2:
            return None
        axis = batch_axis(t, self.n)
        return None if axis is None else others(t, axis)

    def given(self, tensors: list[Any]) -> None:
        """The call's own tensors: judged unchanged on their other samples (only sample 0 was replaced)."""
        for t in tensors:
            if self._part(t) is not None:
                self.same[id(t)] = weakref.ref(t)

    def _see(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        parts = [self._part(t) for t in outs]
        if self.reference is None:
            if self.size > BUDGET:
                self.stopped = True
                return
            kept = [p.detach().clone() if p is not None else None for p in parts]
            self.size += sum(p.numel() for p in kept if p is not None)
            self.kept.append((func, kept))
            return
        if self.index >= len(self.reference):
            self.stopped = True
            return
        ref_func, ref_parts = self.reference[self.index]
        self.index += 1
        if ref_func != func or len(ref_parts) != len(parts):
            self.stopped = True  # the two runs took different paths: no op-by-op comparison
            return
        changed = []
        for t, p, r in zip(outs, parts, ref_parts):
            if p is None or r is None:
                continue
            if _differs(r, p):
                changed.append(t)
            else:
                self.same[id(t)] = weakref.ref(t)
        if not changed:
            return
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if any(self._holds(self.tainted, t) for t in inputs):
            for t in changed:
                self.tainted[id(t)] = weakref.ref(t)
            return
        clean = [t for t in inputs if self._holds(self.same, t)]
        site = self._site(func, clean[0] if clean else None)
        if clean:
            self.site = site
            self.stopped = True
            return
        if self.fallback is None:
            self.fallback = site
        for t in changed:
            self.tainted[id(t)] = weakref.ref(t)

    def _site(self, func: Any, given: torch.Tensor | None) -> MixSite:
        name, layer = self.calls.stack[-1] if self.calls.stack else ("", None)
        f = user_stack_frame()
        frame = user_frame_of(f) if f is not None else None
        return MixSite(getattr(func, "__name__", str(func)), name, layer, frame,
                       tuple(given.shape) if given is not None else (),
                       batch_axis(given, self.n) if given is not None else None)

    @staticmethod
    def _holds(table: dict[int, weakref.ref[torch.Tensor]], t: torch.Tensor) -> bool:
        ref = table.get(id(t))
        return ref is not None and ref() is t


def locate_mix(run: Callable[[int], Any], names: nn.Module, n: int, given: list[Any]) -> MixSite | None:
    """Run `run(0)` (the batch as it was) then `run(1)` (sample 0 replaced in `given`, the
    second call's tensors, whose other samples are the first's) — the caller holds eval mode,
    no_grad, the RNG and a paused session — and return the first op where the change reached
    the other samples, or None."""
    calls = _Calls({m: name for name, m in names.named_modules()})
    first = _MixSpy(n, calls, None)
    with calls:
        with first:
            run(0)
        if first.stopped:
            return None
        second = _MixSpy(n, calls, first.kept)
        second.given(given)
        with second:
            run(1)
    return second.site or second.fallback
