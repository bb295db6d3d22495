"""A backpropagated loss as a sum of terms, and what each term reaches (issue 26).

`loss = recon + 0.1 * adv`, `sum(loss_dict.values())`, `torch.stack(losses).sum()`: the
autograd graph of the loss says it is a sum at its top. Starting from the root's node, a sum
(`AddBackward`, `SubBackward`), a scaling by a constant (`MulBackward` / `DivBackward` /
`NegBackward` with one input that needs grad) and a reduction of a stack (`SumBackward` /
`MeanBackward` over `StackBackward` / `CatBackward`) are looked through; every other node is
a term. Each term's leaves come from a walk of its own subgraph (`next_functions` down to the
`AccumulateGrad` nodes, as `_gradients/_graph.reach` does): no backward, no kernel, no sync.

The step's tape names a term: the taped op (or the model call) whose output's `grad_fn` is
the term's node gives the user's line and the tensor, and the step record follows that tensor
back to the model calls it was computed from (`StepRecord.sources_of`), including through a
`.detach()`, which the graph cannot see.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.utils import _pytree as pytree

from .._frames import UserFrame

MAX_TERMS = 12  # terms walked per backward; more are one term ("the rest")
MAX_NODES = 100_000  # nodes per term walk; a term past it is left unjudged

_SUM = ("AddBackward", "SubBackward")
_SCALE = ("MulBackward", "DivBackward", "NegBackward")
_REDUCE = ("SumBackward", "MeanBackward")
_STACK = ("StackBackward", "CatBackward")


@dataclasses.dataclass
class Term:
    """One additive term of a backpropagated loss."""

    node: Any
    leaves: dict[int, torch.Tensor]
    complete: bool
    tensor: torch.Tensor | None = None  # the taped output whose grad_fn is the node
    frame: UserFrame | None = None  # where it was computed
    op: str | None = None  # the taped op (or model label) that made it
    sources: list[Any] = dataclasses.field(default_factory=list)  # RootCalls it was computed from


def _kids(node: Any) -> list[Any]:
    return [f for f, _ in getattr(node, "next_functions", ()) if f is not None]


def split(root: torch.Tensor) -> list[Any]:
    """The term nodes of `root` (one node when the loss is no sum)."""
    fn = root.grad_fn
    if fn is None:
        return []
    out: list[Any] = []
    seen: set[int] = set()
    stack = [fn]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        name = type(node).__name__
        kids = _kids(node)
        if len(out) + len(stack) >= MAX_TERMS:
            out.append(node)
        elif name.startswith(_SUM) and kids:
            stack += reversed(kids)
        elif name.startswith(_SCALE) and len(kids) == 1:
            stack.append(kids[0])
        elif name.startswith(_REDUCE) and len(kids) == 1 and type(kids[0]).__name__.startswith(_STACK):
            stack += reversed(_kids(kids[0]))
        else:
            out.append(node)
    return out


def leaves_of(node: Any) -> tuple[dict[int, torch.Tensor], bool]:
    """The leaves a node reaches (by id) and whether the walk was complete."""
    leaves: dict[int, torch.Tensor] = {}
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if len(seen) > MAX_NODES:
            return leaves, False
        var = getattr(n, "variable", None)
        if isinstance(var, torch.Tensor):
            leaves[id(var)] = var
            continue
        stack += [k for k in _kids(n) if id(k) not in seen]
    return leaves, True


def made_by(record: Any) -> dict[int, tuple[torch.Tensor, Any]]:
    """id(grad_fn) -> (tensor, event) for every output of the record's root calls and ops."""
    out: dict[int, tuple[torch.Tensor, Any]] = {}
    if record is None:
        return out
    for ev in [*record.calls, *record.ops]:
        for t in pytree.tree_leaves(ev.output):
            if isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is not None:
                out.setdefault(id(t.grad_fn), (t, ev))
    return out


def joined(previous: Any, record: Any) -> Any:
    """One record of two consecutive steps: the step is closed by the first optimizer that
    steps, so a GAN's generator update runs on a `G(z)` called in the step before."""
    from .._step import StepRecord

    both = StepRecord()
    both.calls = [*previous.calls, *record.calls]
    both.ops = [*previous.ops, *record.ops]
    both.taped = True
    return both


def terms_of(root: torch.Tensor, record: Any) -> list[Term]:
    """The terms of `root`, each with its leaves and, when the tape saw it made, its line and
    the model calls it was computed from."""
    nodes = split(root)
    if len(nodes) < 2:
        return []
    made = made_by(record)
    out = []
    for node in nodes:
        leaves, complete = leaves_of(node)
        term = Term(node, leaves, complete)
        hit = made.get(id(node))
        if hit is not None:
            t, ev = hit
            term.tensor, term.frame = t, ev.frame
            term.op = getattr(ev, "name", None) or getattr(ev, "label", None)
            try:
                term.sources = record.sources_of(t)
            except Exception:
                term.sources = []
        out.append(term)
    return out
