"""A graph that grows across steps: a state carried from batch to batch with its autograd graph.

`hidden` passed from one batch to the next without `.detach()` links each step's graph to the
previous one; with `loss.backward(retain_graph=True)` (what silences "backward through the graph
a second time") nothing fails, but every backward runs through every earlier batch: memory and
backward time grow with the step. The loss tensors themselves are not kept, so the kept-loss
check (`GraphKeeper`) does not see it.

The evidence is the graph itself. Autograd numbers its nodes as they are made
(`grad_fn._sequence_nr()`, per thread). Per backward call site (the user's line and the user's
lines that called it: a helper such as `manual_backward(loss)` called for a discriminator's loss,
then for the main loss of the same forward, is two sites, whose second call reaches the shared
forward made before the first's roots within one iteration), `GraphCarry`
keeps the largest number among the roots at its previous call: a node reachable from this call's
roots whose number is at most that one was made before the previous backward of this line, in
an earlier iteration. One step reaching a fixed old graph (an embedding computed once before the
loop and reused on purpose) is not growth; a number of old nodes that grows from one call to the
next (N, 2N, ...) is. The place to fix is where the old graph enters this step: the model call
(or, on a taped step, the op) of this step that took a tensor made before the previous backward;
a line that both reads and rebinds a name (`output, hidden = model(data, hidden)`) names it.

Cost: a Python walk over the backward graph (capped at `MAX_NODES`), on the silent check's
warm-up steps only.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import carried_name, in_user_file

MAX_NODES = 100_000
CALL_PATH_DEPTH = 4  # user frames that make a backward's call site


@dataclasses.dataclass(frozen=True)
class Carried:
    """A graph that grew across the calls of one backward line."""

    old_nodes: tuple[int, int]  # old nodes reached at the previous call and at this one
    frame: Any  # where the old graph entered this step (a model call or an op), or None
    name: str | None  # the carried variable, when that line reads and rebinds one


def call_path(frame: types.FrameType | None, depth: int = CALL_PATH_DEPTH) -> tuple[tuple[str, int], ...] | None:
    """(file, line) of the innermost user frame `frame` and of the user frames that called it."""
    out: list[tuple[str, int]] = []
    while frame is not None and len(out) < depth:
        if in_user_file(frame):
            out.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return tuple(out) or None


def _seq(node: Any) -> int | None:
    try:
        return int(node._sequence_nr())
    except Exception:  # a torch or a node type without it
        return None


def _roots_seq(roots: Iterable[Any]) -> int | None:
    seqs = [_seq(r.grad_fn) for r in roots if isinstance(r, torch.Tensor) and r.grad_fn is not None]
    numbers = [s for s in seqs if s is not None]
    return max(numbers) if numbers else None


def count_older(roots: Iterable[Any], horizon: int) -> int:
    """The nodes reachable from `roots` made at or before node number `horizon`."""
    seen: set[int] = set()
    stack = [r.grad_fn for r in roots if isinstance(r, torch.Tensor) and r.grad_fn is not None]
    old = 0
    while stack and len(seen) < MAX_NODES:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        seq = _seq(node)
        if seq is not None and seq <= horizon:
            old += 1
        stack += [n for n, _ in getattr(node, "next_functions", ()) if n is not None and id(n) not in seen]
    return old


class GraphCarry:
    """Per backward line: the previous call's node horizon and how many old nodes it reached."""

    def __init__(self) -> None:
        self._sites: dict[Any, tuple[int, int]] = {}
        self.reported: set[Any] = set()

    def backward(self, roots: tuple[Any, ...], site: Any, record: Any) -> Carried | None:
        horizon = _roots_seq(roots)
        if horizon is None:
            return None
        prev = self._sites.get(site)
        old = count_older(roots, prev[0]) if prev is not None else 0
        self._sites[site] = (horizon, old)
        if prev is None or not (old > prev[1] > 0) or site in self.reported:
            return None
        self.reported.add(site)
        frame = _entry(record, prev[0])
        name = carried_name(frame.source) if frame is not None and frame.source else None
        return Carried((prev[1], old), frame, name)


def _entry(record: Any, horizon: int) -> Any:
    """The frame of this step's first model call (else taped op) that took a tensor whose graph
    was made at or before `horizon`."""
    if record is None:
        return None
    for group in (record.calls, record.ops):
        for ev in group:
            for t in pytree.tree_leaves((ev.args, ev.kwargs)):
                if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                    seq = _seq(t.grad_fn)
                    if seq is not None and seq <= horizon and ev.frame is not None:
                        return ev.frame
    return None


def carried_finding(c: Carried, backward_frame: Any, step: int) -> Finding:
    """`silent.loss_graph_kept` (warning) at the line where the old graph enters the step."""
    key = "silent.loss_graph_kept.carried"
    name = c.name or "?"
    return from_catalogue(
        Category.SILENT, "silent.loss_graph_kept", key + ("" if c.name else ".unnamed"),
        fields={"name": name}, cause_key=key + ".cause", next_key=key + (".next" if c.name else ".next.unnamed"),
        frame=c.frame or backward_frame, source_line=True, severity=Severity.WARNING, stage=Stage.FORWARD,
        step=step, evidence={"old_nodes_reached": list(c.old_nodes), "carried": c.name,
                             "backward_line": f"{backward_frame.file}:{backward_frame.line}"
                             if backward_frame is not None else None})
