"""Where a model lets the future in: the op, module and line of a `check_causal` leak.

`check_causal` knows *that* the outputs at positions <= `pos` changed when only the tokens after
`pos` changed. To say *where*, both forwards run once more (only after a leak was found, on the
probe's rows, in eval mode under no_grad) under a `TorchFunctionMode` that compares them op by
op. The first run keeps each op's "past region" (every axis whose size is the sequence length
T, cut to its first `pos + 1` entries; the first axis only when the batch size differs from T:
`nn.MultiheadAttention` works time-first inside); the second run compares each op's past
region with it and follows the difference like a taint. The leak is the first op whose past
region changed while no input's past region had: the attention `softmax` over the query axis,
the `scaled_dot_product_attention` without a mask, a `flip` or a `mean` over time broadcast back.
A tensor with no axis of size T (flattened logits, a pooled vector) is never judged.

The module is the innermost module running the op. The line is the user's own line that ran it
when that line belongs to the module's code (its `forward` or a helper it calls); when the op ran
inside a library module (`nn.MultiheadAttention` called without a causal mask) there is no line
of the user's inside it, and the caller keeps the line that called the model.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from .._frames import UserFrame, in_user_file, trims_errors, user_frame_of
from .._nonfinite._trace import ModuleStack

BUDGET = 1 << 25  # elements of past regions kept from the first run (128 MB in float32)
_CALL_CODES = frozenset(f.__code__ for f in (nn.Module._call_impl, nn.Module._wrapped_call_impl))


@dataclasses.dataclass(frozen=True)
class LeakSite:
    op: str
    module: str | None
    frame: UserFrame | None  # None: the op ran inside a library module's own code


def leak_tolerance(out: torch.Tensor) -> torch.Tensor:
    """The largest change of a causal model's past outputs that is rounding, not a leak (a device
    scalar): 4 units in the last place of the output's dtype at the output's scale. A correct
    model's past outputs are computed from the same numbers in both runs (exactly equal as a
    rule); a freshly initialised GPT that sees the future changes its logits by ~1e-5 (weights of
    std 0.02), under the 1e-4 a fixed tolerance would need."""
    eps = torch.finfo(out.dtype).eps if out.is_floating_point() else 0.0
    scale = out.detach().abs().max().float() if out.numel() else torch.zeros((), device=out.device)
    return 4.0 * eps * scale.clamp_min(1e-3)


def _past(t: Any, length: int, pos: int, first: int) -> torch.Tensor | None:
    if not isinstance(t, torch.Tensor) or t.dim() < 2 or t.is_complex() or t.device.type == "meta":
        return None
    axes = [d for d in range(first, t.dim()) if t.shape[d] == length]
    if not axes:
        return None
    index = tuple(slice(0, pos + 1) if d in axes else slice(None) for d in range(t.dim()))
    return t[index]


def _differs(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return True
    if not a.is_floating_point():
        return not torch.equal(a, b)
    return bool((a.float() - b.float()).abs().max() > leak_tolerance(a)) if a.numel() else False


def _users_line(start: types.FrameType | None, calls: ModuleStack) -> UserFrame | None:
    """The user's line that ran the op when it lies in the innermost module's own code: walking
    out from the op, a user frame comes before the frame that called that module (else the op
    is library code, `nn.MultiheadAttention`'s)."""
    top = calls.top
    f = start
    while f is not None:
        if in_user_file(f):
            return user_frame_of(f)
        if f.f_code in _CALL_CODES and top is not None:
            caller = f.f_locals.get("self")
            if isinstance(caller, nn.Module) and calls.name_of(caller) == top:
                return None
        f = f.f_back
    return None


class _LeakSpy(TorchFunctionMode):
    def __init__(self, ids: torch.Tensor, pos: int, calls: ModuleStack, reference: list[Any] | None) -> None:
        super().__init__()
        self.length, self.pos, self.calls = ids.shape[1], pos, calls
        self.first_axis = 1 if ids.shape[0] == ids.shape[1] else 0
        self.reference = reference  # None: the first run, which fills `kept`
        self.kept: list[tuple[Any, list[torch.Tensor | None]] | None] = []
        self.size = 0
        self.index = 0
        self.tainted: dict[int, weakref.ref[torch.Tensor]] = {}
        self.site: LeakSite | None = None
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

    def _see(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        pasts = [_past(t, self.length, self.pos, self.first_axis) for t in outs]
        if self.reference is None:
            if self.size > BUDGET:
                self.stopped = True
                return
            kept = [p.clone() if p is not None else None for p in pasts]
            self.size += sum(p.numel() for p in kept if p is not None)
            self.kept.append((func, kept))
            return
        if self.index >= len(self.reference):
            self.stopped = True
            return
        ref_func, ref_pasts = self.reference[self.index]
        self.index += 1
        if ref_func != func or len(ref_pasts) != len(pasts):
            self.stopped = True  # the two runs took different paths: no op-by-op comparison
            return
        changed = [t for t, p, r in zip(outs, pasts, ref_pasts) if p is not None and r is not None and _differs(r, p)]
        if not changed:
            return
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if any(self._is_tainted(t) for t in inputs):
            for t in changed:
                self.tainted[id(t)] = weakref.ref(t)
            return
        self.site = LeakSite(getattr(func, "__name__", str(func)), self.calls.top,
                             _users_line(sys._getframe(2), self.calls))
        self.stopped = True

    def _is_tainted(self, t: torch.Tensor) -> bool:
        ref = self.tainted.get(id(t))
        return ref is not None and ref() is t


def locate_leak(run: Callable[[torch.Tensor], Any], names: nn.Module, ids: torch.Tensor, future: torch.Tensor,
                pos: int) -> LeakSite | None:
    """Run `run(ids)` then `run(future)` (the caller holds eval mode, no_grad and a paused
    session) and return the first op where the future reached a past position, or None."""
    named = {m: n for n, m in names.named_modules()}
    calls = ModuleStack(named.get)
    first = _LeakSpy(ids, pos, calls, None)
    with calls:
        with first:
            run(ids)
        if first.stopped and first.size <= BUDGET:
            return None
        second = _LeakSpy(ids, pos, calls, first.kept)
        with second:
            run(future)
    return second.site
