"""Walking an autograd graph without running backward: which leaves a tensor depends on.

`loss.grad_fn` is the root of the backward graph; each node's `next_functions` are its inputs;
an `AccumulateGrad` node holds the leaf tensor it writes `.grad` into (`.variable`). Collecting
those leaves tells which parameters a backward of this tensor would reach, at the cost of a
Python walk over the nodes (no kernel, no sync). The graph's edges survive `backward()` (only
saved tensors are freed), so the walk also works after it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

# A cap on nodes visited per walk: graphs of real models have 1e2..1e5 nodes; beyond the cap
# the walk stops and reports what it found (a partial set never invents a cut: see `complete`).
MAX_NODES = 200_000


class Reach:
    """The leaves (tensors requiring grad) that a set of roots depends on, by id."""

    __slots__ = ("leaves", "complete", "nodes")

    def __init__(self) -> None:
        self.leaves: dict[int, torch.Tensor] = {}
        self.complete = True
        self.nodes = 0

    def __contains__(self, t: Any) -> bool:
        return id(t) in self.leaves


def reach(roots: Iterable[Any], *, max_nodes: int = MAX_NODES) -> Reach:
    """Leaves reachable backward from `roots` (tensors; others are ignored).

    A root that is itself a leaf requiring grad counts as reached (its `.grad` is written).
    """
    out = Reach()
    seen: set[int] = set()
    stack: list[Any] = []
    for r in roots:
        if not isinstance(r, torch.Tensor) or not r.requires_grad:
            continue
        try:
            fn = r.grad_fn
        except RuntimeError:
            # A view made under no_grad whose base was then modified in place with grad on
            # (a model's init ties or fills weights that way): torch refuses to give its
            # grad_fn. It cannot be backpropagated through either, so it leads nowhere.
            out.complete = False
            continue
        if fn is None:
            out.leaves[id(r)] = r
        else:
            stack.append(fn)
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        out.nodes += 1
        if out.nodes > max_nodes:
            out.complete = False
            break
        var = getattr(node, "variable", None)
        if isinstance(var, torch.Tensor):
            out.leaves[id(var)] = var
            continue
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is not None and id(nxt) not in seen:
                stack.append(nxt)
    return out


def leaves_of(t: Any) -> set[int]:
    """Ids of the leaves requiring grad that tensor `t` depends on (itself if it is one)."""
    if not isinstance(t, torch.Tensor) or not t.requires_grad:
        return set()
    return set(reach([t]).leaves)
