"""The loss region: the ops of the user's loss code on the first steps, read off the step tape.

Hand-written losses (`((pred - y) ** 2).mean()`) call no loss function the session could wrap,
and after backward starts the operands' shapes are gone (a constant target leaves no trace in
the autograd graph). The frame's step record (`_step.py`) already keeps the depth-0 tape: every
torch call the user's code makes outside the watched models, with its operands, result and
line. A `LossRegion` is a window on that tape, from a root model's forward end to `backward`,
on the silent check's warm-up steps (the check asks the frame to keep the tape on for them:
`SnapshotKeeper.hold_tape`). At backward the window's elementwise binary ops are checked for
the `(N, 1)` vs `(N,)` outer broadcast (shape arithmetic only, no tensor is read), and a suspect
is replayed from the tape with its operands aligned, which gives "the loss you would have had".
There is no mode of its own on the torch-function stack and no second op list.

`RegionMode` is the pass-through `TorchFunctionMode` base of the dynamics check's metric region
(which also watches evaluation code outside any step, where there is no step tape).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from .._checker import LOSS_FUNCTIONS
from .._frames import _HERE, UserFrame
from .._modestack import push_mode, remove_mode
from .._replayable import replayable
from ._exp_site import EXP_FUNCS, storage_of
from ._shapes import grows, outer_sample_broadcast, paired_batch_broadcast

_BINARY = frozenset({
    torch.sub, torch.subtract, torch.Tensor.sub, torch.Tensor.__sub__, torch.Tensor.__rsub__,
    torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__,
    torch.mul, torch.multiply, torch.Tensor.mul, torch.Tensor.__mul__, torch.Tensor.__rmul__,
    torch.div, torch.true_divide, torch.Tensor.div, torch.Tensor.__truediv__, torch.Tensor.__rtruediv__,
})
_SELECT = frozenset({torch.masked_select, torch.Tensor.masked_select})
_MAX_OPS = 512  # the loss code is a handful of ops; past this we stop checking


@dataclasses.dataclass
class Suspect:
    index: int  # position in the region's ops
    op: str
    lo: torch.Tensor  # the lower-rank operand (the one broadcasting by accident)
    hi: torch.Tensor
    result: torch.Tensor
    result_shape: tuple[int, ...]
    frame: UserFrame | None
    kind: str = "outer"  # "outer": (N, 1) vs (N,); "paired": both sample axes kept, at two positions;
    # "select": a masked_select whose input and mask both broadcast (the mask selects nothing)


def _op_name(func: Any) -> str:
    name = getattr(func, "__name__", str(func))
    return {"__sub__": "sub", "__rsub__": "rsub", "__add__": "add", "__radd__": "add", "__mul__": "mul",
            "__rmul__": "mul", "__truediv__": "div", "__rtruediv__": "div"}.get(name, name)


def outer_broadcast_suspect(index: int, func: Any, a: Any, b: Any, out: Any,
                            frame: UserFrame | None) -> Suspect | None:
    """An elementwise binary op whose operands broadcast `(N, 1)` against `(N,)`, or None."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and isinstance(out, torch.Tensor)):
        return None
    r = outer_sample_broadcast(tuple(a.shape), tuple(b.shape))
    if r is not None:
        lo, hi = (a, b) if a.dim() < b.dim() else (b, a)
        return Suspect(index, _op_name(func), lo, hi, out, r, frame)
    # The general case, a prediction against a target: exactly one operand carries the graph
    # (two predictions or two targets paired on purpose, a pairwise distance, stay out).
    if a.requires_grad == b.requires_grad:
        return None
    r = paired_batch_broadcast(tuple(a.shape), tuple(b.shape))
    if r is None:
        return None
    lo, hi = (b, a) if a.requires_grad else (a, b)  # the target is re-laid out as the prediction
    return Suspect(index, _op_name(func), lo, hi, out, r, frame, kind="paired")


def select_broadcast_suspect(index: int, a: Any, mask: Any, out: Any,
                             frame: UserFrame | None) -> Suspect | None:
    """A `masked_select(input, mask)` whose input and mask both broadcast (`(N, 1)` against a
    `(N,)` mask gives `(N, N)`): every input element is selected once per True of the mask, so
    the mask removes nothing, or None. A mask broadcast over a feature axis (`(N, D)` against
    `(N, 1)`) does not grow past the input and is not matched."""
    if not (isinstance(a, torch.Tensor) and isinstance(mask, torch.Tensor) and isinstance(out, torch.Tensor)):
        return None
    r = grows(tuple(a.shape), tuple(mask.shape))
    if r is None:
        return None
    return Suspect(index, "masked_select", mask, a, out, r, frame, kind="select")


class LossRegion:
    """A window on the step tape, from a root forward's end to backward; reads, changes nothing."""

    def __init__(self, record: Any) -> None:
        self.record = record  # the step's StepRecord
        self.start = len(record.ops)

    def ops(self) -> list[Any]:
        return self.record.ops[self.start:self.start + _MAX_OPS]

    @property
    def suspects(self) -> list[Suspect]:
        found = []
        for i, op in enumerate(self.ops()):
            if op.func in _BINARY and len(op.args) >= 2:
                s = outer_broadcast_suspect(i, op.func, op.args[0], op.args[1], op.output, op.frame)
                if s is not None:
                    found.append(s)
            elif op.func in _SELECT and len(op.args) + len(op.kwargs) >= 2:
                mask = op.args[1] if len(op.args) >= 2 else op.kwargs.get("mask")
                s = select_broadcast_suspect(i, op.args[0], mask, op.output, op.frame)
                if s is not None:
                    found.append(s)
        return found

    @property
    def exp_sites(self) -> list[tuple[int, UserFrame | None]]:
        """Where a hand-written softmax's exp was written (for the overflow check), by storage."""
        return [(storage_of(op.output), op.frame) for op in self.ops()
                if op.func in EXP_FUNCS and isinstance(op.output, torch.Tensor)]

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
        """The root loss recomputed with the suspect's operands aligned; None when not replayable.
        Run with the session paused (its loss wrappers then call the function they wrap)."""
        if suspect.lo.numel() != suspect.hi.numel():
            return None
        env: dict[int, Any] = {id(suspect.lo): suspect.lo.reshape(suspect.hi.shape)}
        for op in self.ops()[suspect.index:]:
            leaves = pytree.tree_leaves((op.args, op.kwargs))
            if not any(isinstance(x, torch.Tensor) and id(x) in env for x in leaves):
                continue
            if not replayable(op.func):
                return None  # an in-place op would touch the user's tensors; a collective would wait
            a2, k2 = pytree.tree_map(lambda x: env.get(id(x), x) if isinstance(x, torch.Tensor) else x,
                                     (op.args, op.kwargs))
            new = op.func(*a2, **k2)
            for old_t, new_t in zip(pytree.tree_leaves(op.output), pytree.tree_leaves(new)):
                if isinstance(old_t, torch.Tensor):
                    env[id(old_t)] = new_t
        value = env.get(id(root))
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            return None
        return float(value)


class RegionMode(TorchFunctionMode):
    """A pass-through mode that records the ops it sees (`ops`) while `active`; subclasses check
    them. Pushed under the user's modes (`_modestack`), taken off by identity."""

    def __init__(self) -> None:
        super().__init__()
        self.active = True
        self.inside = 0
        self.ops: list[tuple[Any, tuple[Any, ...], dict[str, Any], Any]] = []
        # The session's loss wrappers dispatch back here through `handle_torch_function`;
        # calling the function they wrap avoids running (and reporting) the loss twice.
        self._unwrap = {}
        for name in LOSS_FUNCTIONS:  # (the only functions of F that torchtriage wraps; not dir(F): 0.2 ms)
            fn = getattr(F, name, None)
            inner = getattr(fn, "__wrapped__", None)
            code = getattr(fn, "__code__", None)
            if inner is not None and code is not None and code.co_filename.startswith(_HERE):
                self._unwrap[fn] = inner

    def leave(self) -> bool:
        """Stop watching and take the mode off the stack; False when that must wait (we are inside
        one of our own calls, where torch has popped us and will push us back)."""
        self.active = False
        self.ops.clear()
        if self.inside:
            return False
        remove_mode(self)
        return True

    def enter(self) -> None:
        push_mode(self)

