"""Which tensor a second backward() ran into: the graph it reuses, read from the graph itself.

"Trying to backward through the graph a second time" says that some node on the way from the
failing backward's root down to the leaves had its saved tensors freed by an earlier
backward(). The failing backward itself frees every node it ran before it stopped, so "freed"
alone does not tell old from new; creation order does. Autograd numbers its nodes as they are
made (`grad_fn._sequence_nr()`, per thread), and the session's triage check keeps, at the end
of each backward() that completed, the largest number among its roots (`freed_upto`): every
node made up to there and reached by that backward was freed by it. A node of the failing
graph is *old* when its number is at most that horizon and

  * reading one of its saved tensors (`node._saved_self`, ...) raises autograd's freed error, or
  * it saves no tensor (views, additions) and every node below it that is not a leaf is old.

Walking from the failing root breadth first gives each node its distance to the root. The
tensors the user holds (the locals of the user's frames in the traceback, innermost first)
and the tensors the step's record saw go into a call (root calls, depth-0 ops: where an old
tensor *entered* this step's graph) are matched to the old region by their `grad_fn`; the one
nearest to the root is named: `gen_imgs`, the generator's output a GAN's D step reuses after
`g_loss.backward()` freed its graph, with the line that made it and the line where it entered.
Outside a session the horizon is read from the user's tensors instead: the newest freed graph
that the failing backward does not reach (`g_loss`). Only the report path runs this.
"""

from __future__ import annotations

import dataclasses
import linecache
import os
import re
import types
from collections import deque
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from .._catalogue import msg
from .._frames import carried_name, is_user_file

_TORCH = os.path.dirname(os.path.abspath(torch.__file__))
_MAX_NODES = 20_000  # a graph walk stops here (a long unrolled RNN still fits)


@dataclasses.dataclass(frozen=True)
class FreedTensor:
    """An old tensor the failing backward reached: its name, where it was made, where it entered."""

    name: str | None  # the user's variable, None when no local holds it
    made_at: str | None  # "gan.py:37 gen_imgs = generator(z)"
    entered_at: str | None  # "gan.py:43" (the call of this step that took it), or None
    node: str  # the grad_fn's class, e.g. "TanhBackward0"
    carried: str | None = None  # the name a line both reads and reassigns (`h = f(x, h)`)
    is_root: bool = False  # the failing backward's own root: the same loss backpropagated twice


def reuse_fields(ctx: Any) -> dict[str, str]:
    """The message fields of `gradient.backward_twice`: the old tensor when the graph names it."""
    try:
        found = freed_tensor(ctx)
    except Exception as e:  # our bug must not hide the report: the generic reading stays
        from ._context import _internal

        _internal("triage.freed", e)
        found = None
    generic = {"through": "", "reuse": msg("freed.kept"), "reuse_next": msg("freed.next.generic")}
    if found is None:
        return generic
    if found.name is None:
        if found.entered_at is None:
            return generic
        if found.carried is not None:
            return {"through": msg("freed.through", name=found.carried),
                    "reuse": msg("freed.carried_named", name=found.carried, where=found.entered_at),
                    "reuse_next": msg("freed.next.carried", name=found.carried), "reused": found.carried}
        return {**generic, "reuse": msg("freed.carried", where=found.entered_at)}
    made = msg("freed.made", made=found.made_at) if found.made_at else ""
    if found.is_root:
        return {"through": msg("freed.through", name=found.name),
                "reuse": msg("freed.root", name=found.name, made=made),
                "reuse_next": msg("freed.next.root", name=found.name), "reused": found.name}
    entered = msg("freed.entered", where=found.entered_at) if found.entered_at else ""
    return {"through": msg("freed.through", name=found.name),
            "reuse": msg("freed.held", name=found.name, made=made, entered=entered),
            "reuse_next": msg("freed.next.held", name=found.name), "reused": found.name}


def freed_tensor(ctx: Any) -> FreedTensor | None:
    """The old tensor nearest to the root of the backward that raised, or None."""
    roots = _roots(ctx)
    if not roots:
        return None
    depth = _walk([t.grad_fn for t in roots if t.grad_fn is not None])
    if not depth:
        return None
    held = _held(ctx)  # (name, tensor, frame, line)
    horizon = _horizon(ctx, held, depth)
    if horizon is None:
        return None
    old = _OldRegion(horizon)
    entered = _entered(ctx)  # (tensor, UserFrame)
    best: tuple[int, FreedTensor] | None = None
    for name, t, frame, lineno in held:
        node = t.grad_fn
        if node in depth and old(node) and (best is None or depth[node] < best[0]):
            made = _assignment(frame, lineno, name)
            best = (depth[node], FreedTensor(name, made, _where_entered(t, entered), type(node).__name__,
                                             is_root=depth[node] == 0))
    if best is not None:
        return best[1]
    for t, frame in entered:  # no variable holds it (a state carried across steps): where it entered
        node = t.grad_fn
        if node in depth and old(node) and (best is None or depth[node] < best[0]):
            where = f"{os.path.basename(frame.file)}:{frame.line}" if frame is not None else None
            carried = carried_name(frame.source) if frame is not None else None
            best = (depth[node], FreedTensor(None, None, where, type(node).__name__, carried))
    return best[1] if best is not None else None


def _roots(ctx: Any) -> list[torch.Tensor]:
    """The tensors the failing backward started from: autograd's own frames say (`backward`'s
    `tensors`, `grad`'s `outputs`, `Tensor.backward`'s `self`)."""
    for f, _ in reversed(ctx.frames):
        if not os.path.abspath(f.f_code.co_filename).startswith(_TORCH):
            continue
        if f.f_code.co_name not in ("backward", "grad"):
            continue
        for key in ("tensors", "outputs", "self"):
            value = f.f_locals.get(key)
            found = [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor) and t.grad_fn is not None]
            if found:
                return found
    return []


def _walk(start: list[Any]) -> dict[Any, int]:
    """Each node reachable from `start` with its distance to the root (breadth first)."""
    depth: dict[Any, int] = {}
    queue: deque[tuple[Any, int]] = deque((n, 0) for n in start)
    while queue and len(depth) < _MAX_NODES:
        node, d = queue.popleft()
        if node is None or node in depth:
            continue
        depth[node] = d
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is not None and nxt not in depth:
                queue.append((nxt, d + 1))
    return depth


def _seq(node: Any) -> int | None:
    try:
        return int(node._sequence_nr())
    except Exception:  # a torch without it, or a node type that has none
        return None


def _horizon(ctx: Any, held: list[tuple[str, torch.Tensor, types.FrameType, int]],
             depth: dict[Any, int]) -> int | None:
    """The largest node number an earlier, completed backward() freed."""
    triage = ctx.session.checker("triage") if ctx.session is not None else None
    known = getattr(triage, "freed_upto", None)
    if known is not None:
        return int(known)
    found = [_seq(t.grad_fn) for _, t, _, _ in held if t.grad_fn not in depth and _saved_state(t.grad_fn)]
    numbers = [n for n in found if n is not None]
    return max(numbers) if numbers else None


class _OldRegion:
    """Whether a node belongs to a graph an earlier backward already ran through (memoized)."""

    def __init__(self, horizon: int) -> None:
        self.horizon = horizon
        self._known: dict[Any, bool] = {}

    def __call__(self, node: Any, budget: int = 64) -> bool:
        if node in self._known:
            return self._known[node]
        seq = _seq(node)
        if seq is None or seq > self.horizon:
            self._known[node] = False
            return False
        state = _saved_state(node)
        if state is None and budget > 0:
            below = [n for n, _ in getattr(node, "next_functions", ())
                     if n is not None and type(n).__name__ != "AccumulateGrad"]
            state = bool(below) and all(self(n, budget - 1) for n in below)
        self._known[node] = bool(state)
        return bool(state)


def _saved_state(node: Any) -> bool | None:
    """True: a saved tensor was freed; False: one reads back; None: the node saves none."""
    state = None
    for attr in dir(node):
        if not attr.startswith("_saved_"):
            continue
        try:
            value = getattr(node, attr)
        except RuntimeError:
            return True
        except Exception:  # an attribute this torch cannot read: no evidence
            continue
        if isinstance(value, torch.Tensor) or (isinstance(value, (list, tuple))
                                               and any(isinstance(v, torch.Tensor) for v in value)):
            state = False
    return state


def _held(ctx: Any) -> list[tuple[str, torch.Tensor, types.FrameType, int]]:
    """Tensors with a graph held by the user's frames, innermost frame first (with its line)."""
    out: list[tuple[str, torch.Tensor, types.FrameType, int]] = []
    seen: set[int] = set()
    for f, lineno in reversed(ctx.frames):
        if not is_user_file(f.f_code.co_filename):
            continue
        for name, v in f.f_locals.items():
            if isinstance(v, torch.Tensor) and v.grad_fn is not None and id(v) not in seen:
                seen.add(id(v))
                out.append((name, v, f, lineno))
    return out


def _entered(ctx: Any) -> list[tuple[torch.Tensor, Any]]:
    """Tensors the step's record saw go into a call (root calls, depth-0 ops), in order."""
    snap = getattr(ctx.session, "snapshot", None) if ctx.session is not None else None
    record = getattr(snap, "record", None)
    if record is None:
        return []
    out: list[tuple[torch.Tensor, Any]] = []
    for ev in record.events():
        args = getattr(ev, "args", None)
        if args is None:
            continue
        for t in pytree.tree_leaves((args, getattr(ev, "kwargs", {}))):
            if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                out.append((t, ev.frame))
    return out


def _where_entered(t: torch.Tensor, entered: Iterable[tuple[torch.Tensor, Any]]) -> str | None:
    for u, frame in entered:
        if u is t and frame is not None:
            return f"{os.path.basename(frame.file)}:{frame.line}"
    return None


def _assignment(frame: types.FrameType, lineno: int, name: str) -> str | None:
    """`file:line source` of the last `name = ...` of the frame's function before `lineno` (the
    traceback's line: a frame that went on to run a `with` block's exit has moved past it)."""
    rx = re.compile(rf"^\s*{re.escape(name)}\s*=(?!=)")
    found = None
    for n in range(frame.f_code.co_firstlineno, lineno):
        text = linecache.getline(frame.f_code.co_filename, n)
        if rx.match(text):
            found = f"{os.path.basename(frame.f_code.co_filename)}:{n} {text.strip()}"
    return found
