"""The loss region: a `TorchFunctionMode` alive only between the root model's forward end and
`backward`, i.e. around the user's own loss code, and only on the first steps.

Hand-written losses (`((pred - y) ** 2).mean()`) call no loss function the session could wrap,
and after backward starts the operands' shapes are gone (a constant target leaves no trace in
the autograd graph). So for a few steps the region sees the loss code's ops as they run: the
elementwise binary ops are checked for the `(N, 1)` vs `(N,)` outer broadcast (shape arithmetic
only, no tensor is read), and every op is recorded so that a suspect can be replayed with its
operands aligned, which gives "the loss you would have had". The mode passes everything through
unchanged; after the warm-up steps it is never entered again.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from .._frames import _HERE, UserFrame, user_frame_from_stack
from .._step import remove_mode
from ._exp_site import EXP_FUNCS, storage_of
from ._shapes import outer_sample_broadcast

_BINARY = frozenset({
    torch.sub, torch.subtract, torch.Tensor.sub, torch.Tensor.__sub__, torch.Tensor.__rsub__,
    torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__,
    torch.mul, torch.multiply, torch.Tensor.mul, torch.Tensor.__mul__, torch.Tensor.__rmul__,
    torch.div, torch.true_divide, torch.Tensor.div, torch.Tensor.__truediv__, torch.Tensor.__rtruediv__,
})
_MAX_OPS = 512  # the loss code is a handful of ops; past this we stop recording, not checking


@dataclasses.dataclass
class Suspect:
    index: int  # position in the recorded ops
    op: str
    lo: torch.Tensor  # the lower-rank operand (the one broadcasting by accident)
    hi: torch.Tensor
    result: torch.Tensor
    result_shape: tuple[int, ...]
    frame: UserFrame | None


def _op_name(func: Any) -> str:
    name = getattr(func, "__name__", str(func))
    return {"__sub__": "sub", "__rsub__": "rsub", "__add__": "add", "__radd__": "add", "__mul__": "mul",
            "__rmul__": "mul", "__truediv__": "div", "__rtruediv__": "div"}.get(name, name)


class LossRegion(TorchFunctionMode):
    """Watches the ops between the end of forward and backward; changes nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.active = True
        self.inside = 0
        self.ops: list[tuple[Any, tuple[Any, ...], dict[str, Any], Any]] = []
        self.suspects: list[Suspect] = []
        self.exp_sites: list[tuple[int, UserFrame | None]] = []
        # The session's loss wrappers dispatch back here through `handle_torch_function`;
        # calling the function they wrap avoids running (and reporting) the loss twice.
        self._unwrap = {}
        for name in dir(F):
            fn = getattr(F, name, None)
            inner = getattr(fn, "__wrapped__", None)
            code = getattr(fn, "__code__", None)
            if inner is not None and code is not None and code.co_filename.startswith(_HERE):
                self._unwrap[fn] = inner

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not self.active or torch.compiler.is_compiling():
            return func(*args, **kwargs)
        real = self._unwrap.get(func, func)
        self.inside += 1
        try:
            out = real(*args, **kwargs)
        finally:
            self.inside -= 1
        if not self.active:  # backward ran inside this call
            return out
        try:
            if func in EXP_FUNCS and isinstance(out, torch.Tensor):
                # (where a hand-written softmax's exp was written, for the overflow check)
                self.exp_sites.append((storage_of(out), user_frame_from_stack(2)))
            if func in _BINARY and len(args) >= 2:
                self._check(func, args[0], args[1], out)
            if len(self.ops) < _MAX_OPS:
                self.ops.append((real, args, kwargs, out))
        except Exception:  # bookkeeping must never break the user's op
            self.active = False
        return out

    def _check(self, func: Any, a: Any, b: Any, out: Any) -> None:
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and isinstance(out, torch.Tensor)):
            return
        r = outer_sample_broadcast(tuple(a.shape), tuple(b.shape))
        if r is None or len(self.ops) >= _MAX_OPS:
            return
        lo, hi = (a, b) if a.dim() < b.dim() else (b, a)
        self.suspects.append(Suspect(len(self.ops), _op_name(func), lo, hi, out, r, user_frame_from_stack(3)))

    # ------------------------------------------------------------------ analysis
    def reaches(self, suspect: Suspect, root: torch.Tensor, depth: int = 16, limit: int = 400) -> bool:
        """Does the suspect's result feed `root`? A bounded walk of root's autograd graph."""
        target = suspect.result.grad_fn
        if target is None or root.grad_fn is None:
            return False
        seen: set[int] = set()
        frontier = [root.grad_fn]
        for _ in range(depth):
            nxt = []
            for node in frontier:
                if node is target:
                    return True
                for child, _ in node.next_functions:
                    if child is not None and id(child) not in seen and len(seen) < limit:
                        seen.add(id(child))
                        nxt.append(child)
            frontier = nxt
            if not frontier:
                break
        return False

    @torch.no_grad()
    def replay(self, suspect: Suspect, root: torch.Tensor) -> float | None:
        """The root loss recomputed with the suspect's operands aligned; None when not replayable."""
        env: dict[int, Any] = {id(suspect.lo): suspect.lo.reshape(suspect.hi.shape)}
        for func, args, kwargs, out in self.ops[suspect.index:]:
            leaves = pytree.tree_leaves((args, kwargs))
            if not any(isinstance(x, torch.Tensor) and id(x) in env for x in leaves):
                continue
            name = getattr(func, "__name__", "")
            if name.endswith("_") and not name.endswith("__") or name.startswith("__i"):
                return None  # an in-place op would touch the user's tensors
            a2, k2 = pytree.tree_map(lambda x: env.get(id(x), x) if isinstance(x, torch.Tensor) else x,
                                     (args, kwargs))
            new = func(*a2, **k2)
            for old_t, new_t in zip(pytree.tree_leaves(out), pytree.tree_leaves(new)):
                if isinstance(old_t, torch.Tensor):
                    env[id(old_t)] = new_t
        value = env.get(id(root))
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            return None
        return float(value)

    # ------------------------------------------------------------------ leaving
    def leave(self) -> bool:
        """Stop watching and take the mode off the stack; False when that must wait (we are inside
        one of our own calls, where torch has popped us and will push us back)."""
        self.active = False
        self.ops.clear()
        self.suspects.clear()
        self.exp_sites.clear()
        if self.inside:
            return False
        take_off_stack(self)
        return True

    def enter(self) -> None:
        torch._C._push_on_torch_function_stack(self)


def take_off_stack(mode: TorchFunctionMode) -> None:
    """Remove `mode` from the torch-function mode stack wherever it sits, keeping the others."""
    remove_mode(mode)
