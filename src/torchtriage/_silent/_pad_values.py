"""`PadValues`: a module told which positions are padding lets their values reach the real ones.

The invariant: a module that takes a padded batch together with its lengths (or a padding mask)
computes each sequence's real positions from its real positions only; the values at the padded
positions (beyond `lengths[i]`, or where the mask is 0) must not change them. A masked mean that
sums every frame but divides by the number of valid ones (`x.sum(-1) / mask.sum(-1)`) breaks it:
the padded frames' values shift every real frame of the short sequences of the batch.

What is measured: the module replayed twice on the call's own inputs (eval mode, no grad, the RNG
restored after each replay, the session paused), once as given and once with the padded positions
of the sequence input set to zero; real-position outputs that differ are the harm. A call whose
padded positions already hold zeros cannot show it and is not judged.

Which modules: the user's own modules (a class defined outside torch) whose forward takes two or
more tensors. Which calls: a floating-point input `x` (two or more axes) and, among the other
arguments, either an integer vector of `x.shape[0]` lengths whose largest equals the size of an
axis of `x` (and some row is shorter), or a boolean / 0-1 `(B, T)` mask whose `T` is the size of
such an axis (a sequence axis). The output compared is the module's first tensor, when it has
`x`'s shape (position-aligned), at the real positions, or `x`'s shape without the padded axis
(pooled over it), everywhere.

Cost: a forward hook on those modules for their first `_CALLS` calls (a read of the lengths or
mask, two replays of the module when padding holds non-zero values), then removed.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from .._findings import Severity, Stage
from .._frames import user_frame_from_stack
from .._transparent import our_hook
from ._common import finding, first_tensor, shape
from ._still import held_still

if TYPE_CHECKING:
    from .._session import Session

_CALLS = 3  # calls looked at per module
_MODULES = 32  # modules watched per session
_TOL = 1e-4  # relative difference: two replays of one module on the same values are bitwise equal


def _takes_two(module: nn.Module) -> bool:
    """A user-defined module whose forward takes two or more arguments."""
    if type(module).__module__.startswith("torch."):
        return False
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


def valid_positions(x: torch.Tensor, other: torch.Tensor) -> tuple[torch.Tensor, str, int] | None:
    """A boolean mask of x's shape that is True at the real positions, what gave it (lengths or a
    mask) and the padded axis, when `other` is a lengths vector or a padding mask of `x`'s batch; else None.
    Reads `other` once (its largest and smallest value)."""
    b = x.shape[0]
    if other.dim() == 1 and other.shape[0] == b and not other.is_floating_point() and other.dtype != torch.bool:
        lo, hi = (int(v) for v in torch.stack([other.min(), other.max()]).tolist())
        axes = [a for a in range(1, x.dim()) if x.shape[a] == hi]
        if not axes or lo < 0 or lo >= hi:
            return None
        a = axes[-1]
        keep = torch.arange(hi, device=x.device).view(1, hi) < other.view(b, 1).to(x.device)
        view = [1] * x.dim()
        view[0], view[a] = b, hi
        return keep.view(view).expand(x.shape), "lengths", a
    if other.dim() == 2 and other.shape[0] == b and other.shape[1] >= 2:
        t = other.shape[1]
        axes = [a for a in range(1, x.dim()) if x.shape[a] == t]
        if not axes:
            return None
        m = other
        if m.dtype != torch.bool:
            if m.is_floating_point() or m.is_complex():
                return None
            lo, hi = (int(v) for v in torch.stack([m.min(), m.max()]).tolist())
            if lo != 0 or hi != 1:
                return None
            m = m.bool()
        a = axes[-1]
        view = [1] * x.dim()
        view[0], view[a] = b, t
        return m.to(x.device).view(view).expand(x.shape), "mask", a
    return None


class PadValues:
    """Watches the user's modules that take a padded sequence with its lengths or mask."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._handles: dict[int, Any] = {}
        self._calls: dict[int, int] = {}

    def watch(self, model: nn.Module) -> None:
        for m in model.modules():
            if len(self._handles) >= _MODULES:
                break
            if id(m) in self._handles or not _takes_two(m):
                continue
            self._handles[id(m)] = m.register_forward_hook(our_hook(self._hook()), with_kwargs=True)

    def _hook(self) -> Any:
        def post(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
            __tracebackhide__ = True
            self._post(module, args, kwargs, output)
        return post

    def _post(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        __tracebackhide__ = True
        if self.session.busy or self._handles.get(id(module)) is None:
            return
        n = self._calls.get(id(module), 0) + 1
        self._calls[id(module)] = n
        if n >= _CALLS:
            self._unhook(module)
        try:
            self._judge(module, args, kwargs, output)
        except Exception as e:  # our bug: report it, the user's forward goes on
            self._unhook(module)
            self.session.internal_error("silent.padding_reaches_real", e)

    def _unhook(self, module: nn.Module) -> None:
        h = self._handles.pop(id(module), None)
        if h is not None:
            h.remove()
        self._handles[id(module)] = None  # (not watched again)

    def _judge(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        if kwargs or len(args) < 2:
            return
        tensors = [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        if len(tensors) != len(args):
            return  # a replay with some arguments that are not tensors: not this call's shape of inputs
        out = first_tensor(output)
        xs = [(i, t) for i, t in tensors if t.is_floating_point() and t.dim() >= 2]
        if len(xs) != 1 or not isinstance(out, torch.Tensor):
            return
        xi, x = xs[0]
        for i, other in tensors:
            if i == xi or other.shape[0:1] != x.shape[0:1]:
                continue
            found = valid_positions(x, other)
            if found is None:
                continue
            real, source, axis = found
            pooled = tuple(x.shape[:axis]) + tuple(x.shape[axis + 1:])
            if tuple(out.shape) == tuple(x.shape):
                self._probe(module, args, xi, x, real, source, i, real)
            elif tuple(out.shape) == pooled:  # the padded axis reduced: every output is a real one
                self._probe(module, args, xi, x, real, source, i, torch.ones(pooled, dtype=torch.bool))
            return

    def _probe(self, module: nn.Module, args: tuple[Any, ...], xi: int, x: torch.Tensor, real: torch.Tensor,
               source: str, mi: int, keep: torch.Tensor) -> None:
        """Replays with the padded values as given and zeroed; `keep`: the outputs compared."""
        pad_abs = float(x.detach().masked_fill(real, 0).abs().amax())
        if not pad_abs > 0:
            return  # the padding holds zeros: zeroing it cannot show anything
        zeroed = x.detach().masked_fill(~real, 0)
        given = self._replay(module, args)
        changed = self._replay(module, args[:xi] + (zeroed,) + args[xi + 1:])
        if given is None or changed is None or given.shape != keep.shape or changed.shape != keep.shape:
            return
        keep = keep.to(given.device)
        diff = float((given.float() - changed.float()).masked_fill(~keep, 0).abs().amax())
        scale = float(given.float().masked_fill(~keep, 0).abs().amax())
        self._unhook(module)
        if not diff > _TOL * max(1.0, scale):
            return
        path = self.session.module_name(module)
        name = type(module).__name__
        self.session.add(finding(
            "padding_reaches_real", severity=Severity.WARNING, stage=Stage.FORWARD, frame=user_frame_from_stack(2),
            module=path or name, step=self.session.step, where=f"{path} ({name})" if path else name,
            source=source, diff=f"{diff:.4g}", scale=f"{scale:.4g}",
            evidence={"module": f"{path} ({name})" if path else name, "input_shape": shape(x),
                      "padding_from": f"argument {mi} ({source}, shape {list(shape(args[mi]))})",
                      "padded_positions": int((~real).sum()), "padding_max_abs": round(pad_abs, 6),
                      "max_abs_real_output_change": round(diff, 6), "real_output_max_abs": round(scale, 6)}))

    def _replay(self, module: nn.Module, args: tuple[Any, ...]) -> torch.Tensor | None:
        """The module's first output on `args` in eval mode, leaving the module as it was
        (`held_still`: attributes, buffers, parameters and the RNG streams)."""
        device = next((t.device for t in args if isinstance(t, torch.Tensor) and t.is_cuda), torch.device("cpu"))
        try:
            with held_still(module, device) as before_call:
                before_call()
                out = first_tensor(module(*args))
        except Exception:
            return None  # not replayable alone
        return out if isinstance(out, torch.Tensor) else None

    def close(self) -> None:
        for h in self._handles.values():
            if h is not None:
                h.remove()
        self._handles.clear()
