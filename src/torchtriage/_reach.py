"""Whether a backward reached a forward's output: the one piece of machinery behind "these rows
were trained on" (the runtime leakage check, `_leakage/_runtime`) and "this forward's rows were
never backpropagated" (the data ledger's coverage without a DataLoader, `_ledger/_unbackwarded`).

A pre-hook on the autograd node of each of the output's tensors (the base's node for a view): it
runs when a backward's gradient arrives there, returns nothing (the gradient is untouched), and
lives and dies with the graph. A forward whose outputs have no graph is not watchable (`False`)."""

from __future__ import annotations

import collections
from typing import Any, Callable

from ._loaderstream import tensors


def when_reached(output: Any, arrived: Callable[[], None]) -> list[Any]:
    """Calls `arrived()` each time a backward reaches `output`'s graph. The nodes watched (empty,
    so false, when the output has no graph)."""
    nodes: list[Any] = []
    for t in tensors(output):
        node = _node(t)
        if node is not None and all(n is not node for n in nodes):
            nodes.append(node)

    def hook(_grad_outputs: Any) -> None:
        arrived()

    for node in nodes:
        node.register_prehook(hook)
    return nodes


def upstream_tags(root: Any, key: str, limit: int = 64) -> list[Any]:
    """The values under `key` in the `metadata` of the autograd nodes behind tensor `root`
    (breadth first, at most `limit` nodes): which tagged forwards a loss was computed from,
    without a backward. A tagged node's own inputs are not walked: the nearest tagged forwards
    are the ones the loss was computed from (a forward that fed another tagged forward is
    reached through it), and the walk stops a few nodes behind a loss instead of 64 into the
    model. (A tag lives on its node and dies with its graph, unlike an id, which a new node reuses.)"""
    start = getattr(root, "grad_fn", None)
    if start is None:
        return []
    seen: set[int] = {id(start)}
    todo = collections.deque([start])
    found = []
    while todo:
        node = todo.popleft()
        value = node.metadata.get(key)
        if value is not None:
            found.append(value)
            continue
        for n, _ in node.next_functions:
            if n is not None and id(n) not in seen and len(seen) < limit:
                seen.add(id(n))
                todo.append(n)
    return found


def _node(t: Any) -> Any:
    """The node a backward through `t` passes, also after `t` is changed in place: for a view
    (a `Linear` over 3-D input returns one), its base's node, since writing into the view
    (`logits[pad] = -inf`) re-bases the view's own history and its node leaves the graph."""
    base = t._base if t._is_view() else None
    if base is not None and base.grad_fn is not None:
        return base.grad_fn
    return t.grad_fn
