"""A backpropagated loss as a sum of terms, and what each term reaches (issue 26).

`loss = recon + 0.1 * adv`, `sum(loss_dict.values())`, `torch.stack(losses).sum()`: the
autograd graph of the loss says it is a sum at its top. Starting from the root's node, a sum
(`AddBackward`, `SubBackward`), a scaling by a constant (`MulBackward` / `DivBackward` /
`NegBackward` with one input that needs grad) and a reduction of a stack (`SumBackward` /
`MeanBackward` over `StackBackward` / `CatBackward`) are looked through; every other node is
a term. Each term's leaves come from a walk of its own subgraph (`next_functions` down to the
`AccumulateGrad` nodes, as `_gradients/_graph.reach` does): no backward, no kernel, no sync.

The step's tape names a term: the taped op (or the model call) whose output's `grad_fn` is
the term's node gives the user's line and the tensor, and `Flow` follows that tensor back to
the model calls it was computed from, including through a `.detach()`, which the graph cannot
see (by tensor ids, over this step's record and the previous step's `skeleton`).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

import torch
from torch.utils import _pytree as pytree

from .._frames import UserFrame
from .._gradients._graph import grad_fn_of

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
    sources: list[tuple[int, str]] = dataclasses.field(default_factory=list)  # models it was computed from
    cut: UserFrame | None = None  # the taped detach on its way back to a model's output
    cut_op: str | None = None


def _kids(node: Any) -> list[Any]:
    return [f for f, _ in getattr(node, "next_functions", ()) if f is not None]


def split(root: torch.Tensor, sums: list[Any] | None = None) -> list[Any]:
    """The term nodes of `root` (one node when the loss is no sum); the sum nodes looked through
    go to `sums`."""
    fn, _ = grad_fn_of(root)
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
            if sums is not None:
                sums.append(node)
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
            if isinstance(t, torch.Tensor) and t.requires_grad:
                fn, _ = grad_fn_of(t)  # (torch refuses some views' grad_fn)
                if fn is not None:
                    out.setdefault(id(fn), (t, ev))
    return out


_CUTS = frozenset({"detach", "detach_", "Tensor.data"})
_SCALING = frozenset({"mul", "div", "truediv", "neg", "Tensor.mul", "Tensor.div", "Tensor.__mul__"})


@dataclasses.dataclass(frozen=True)
class Event:
    """A model call or taped op reduced to tensor ids: it keeps no tensor (and no graph) alive."""

    call: bool
    name: str  # the model's label or the op's name
    model: int  # id(model) for a call
    frame: UserFrame | None
    outs: tuple[weakref.ref[torch.Tensor], ...]  # alive only while the user holds them
    args: tuple[int, ...]
    # the model calls it was computed from, resolved while the record held every output: a
    # tensor the user rebound (`x = G(z); x = x[..., 2:]`) is dead by the next step, and the
    # link from the view to the call that made its base with it
    upstream: tuple[tuple[int, str], ...] = ()


def _ids(tree: Any) -> tuple[int, ...]:
    return tuple(id(t) for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor))


def _refs(tree: Any) -> tuple[weakref.ref[torch.Tensor], ...]:
    return tuple(weakref.ref(t) for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor))


def skeleton(record: Any, upstream: bool = False) -> list[Event]:
    """The record's data flow by tensor id. The step is closed by the first optimizer that
    steps, so a GAN's generator update runs on a `G(z)` called in the step before: that step's
    skeleton is joined to the current record (the tensors the user still holds keep their ids).
    With `upstream` (the skeleton kept past the step), each event also carries the model calls
    it was computed from, resolved now while the record holds every output alive."""
    if record is None:
        return []
    out = [Event(True, c.label, id(c.model), c.frame, _refs(c.output), _ids((c.args, c.kwargs)))
           for c in record.calls]
    out += [Event(False, o.name, 0, o.frame, _refs(o.output), _ids((o.args, o.kwargs))) for o in record.ops]
    if upstream:
        events = [*record.calls, *record.ops]
        made = {i: k for k, ev in enumerate(events) for i in _ids(ev.output)}
        ups = _upstream(out, made)
        out = [dataclasses.replace(ev, upstream=tuple(sorted(ups[k]))) if ups[k] else ev for k, ev in enumerate(out)]
    return out


def _upstream(events: list[Event], made: dict[int, int]) -> list[set[tuple[int, str]]]:
    """Per event, the model calls it was computed from (itself included), over `made`
    (id(output) -> event index): one pass per event in a depth-first order, memoised."""
    ups: list[set[tuple[int, str]] | None] = [None] * len(events)
    for start in range(len(events)):
        if ups[start] is not None:
            continue
        stack: list[tuple[int, bool]] = [(start, False)]
        on_path: set[int] = set()
        while stack:
            k, done = stack.pop()
            if done:
                ev = events[k]
                got: set[tuple[int, str]] = {(ev.model, ev.name)} if ev.call else set()
                for a in ev.args:
                    j = made.get(a)
                    up = ups[j] if j is not None and j != k else None
                    if up is not None:
                        got |= up
                ups[k] = got
                on_path.discard(k)
                continue
            if ups[k] is not None or k in on_path:
                continue
            on_path.add(k)
            stack.append((k, True))
            for a in events[k].args:
                j = made.get(a)
                if j is not None and ups[j] is None and j not in on_path:
                    stack.append((j, False))
    return [u or set() for u in ups]


class Flow:
    """Where a tensor came from, over the previous step's skeleton and the current record."""

    def __init__(self, previous: list[Event], record: Any) -> None:
        self.made: dict[int, Event] = {}
        for ev in [*previous, *skeleton(record)]:
            for ref in ev.outs:
                t = ref()
                if t is not None:  # a dead tensor's id may be another tensor's now
                    self.made[id(t)] = ev

    def _walk(self, t: torch.Tensor) -> list[Event]:
        seen: set[int] = set()
        order: list[Event] = []
        queue = [id(t)]
        while queue and len(seen) < 4096:
            ev = self.made.get(queue.pop(0))
            if ev is None or id(ev) in seen:
                continue
            seen.add(id(ev))
            order.append(ev)
            queue += list(ev.args)
        return order

    def sources(self, t: torch.Tensor) -> list[tuple[int, str]]:
        """(id(model), label) of the model calls `t` was computed from, through detaches."""
        out: list[tuple[int, str]] = []
        for ev in self._walk(t):
            if ev.call:
                out.append((ev.model, ev.name))
            out += [u for u in ev.upstream if u not in out]
        return out

    def cut(self, t: torch.Tensor) -> tuple[UserFrame | None, str | None]:
        """The taped `.detach()` / `.data` nearest to `t` on its way back."""
        for ev in self._walk(t):
            if not ev.call and ev.name in _CUTS:
                return ev.frame, ev.name
        return None, None


def terms_of(root: torch.Tensor, record: Any, flow: Flow) -> list[Term]:
    """The terms of `root`, each with its leaves and, when the tape saw it made, its line and
    the model calls it was computed from."""
    sums: list[Any] = []
    nodes = split(root, sums)
    made = made_by(record)
    consts = constants(sums, made, flow, numbers_of(record))
    if len(nodes) + len(consts) < 2:
        return []
    out = []
    for node in nodes:
        leaves, complete = leaves_of(node)
        term = Term(node, leaves, complete)
        hit = made.get(id(node))
        if hit is not None:
            t, ev = hit
            term.tensor, term.frame = t, ev.frame
            term.op = getattr(ev, "name", None) or getattr(ev, "label", None)
            term.sources = flow.sources(t)
            term.cut, term.cut_op = flow.cut(t)
        out.append(term)
    return out + consts


_READS = ("item", "__float__")


def numbers_of(record: Any) -> dict[int, tuple[torch.Tensor, Any]]:
    """id(number) -> (tensor, taped op) for the Python numbers the step read out of a tensor
    (`.item()`, `float(t)`); the record holds each number, so its id stays its own."""
    out: dict[int, tuple[torch.Tensor, Any]] = {}
    for op in getattr(record, "ops", ()) if record is not None else ():
        if op.name in _READS and isinstance(op.output, float) and op.args and isinstance(op.args[0], torch.Tensor):
            out[id(op.output)] = (op.args[0], op)
    return out


def _number_term(a: float, numbers: dict[int, tuple[torch.Tensor, Any]], flow: Flow) -> Term | None:
    """A number read out of a model's output (`.item()`) and added to the loss: a constant term."""
    hit = numbers.get(id(a))
    if hit is None:
        return None
    t, op = hit
    sources = flow.sources(t)
    if not sources:
        return None
    term = Term(None, {}, True, frame=op.frame, op=op.name, sources=sources)
    term.cut, term.cut_op = op.frame, op.name
    return term


def constants(sums: list[Any], made: dict[int, tuple[torch.Tensor, Any]], flow: Flow,
              numbers: dict[int, tuple[torch.Tensor, Any]] | None = None) -> list[Term]:
    """Terms added to the loss that do not require grad although they were computed from a
    model's output (`loss = shape + 10 * reg(out["weight"])` with the weights detached inside
    the model; `loss = l1 + adv.detach().item()`): the graph has no node for them; the taped
    sum names them. They reach nothing."""
    out: list[Term] = []
    seen: set[int] = set()
    for node in sums:
        hit = made.get(id(node))
        if hit is None:
            continue
        ev = hit[1]
        for a in pytree.tree_leaves((getattr(ev, "args", ()), getattr(ev, "kwargs", {}))):
            if isinstance(a, float) and numbers and id(a) not in seen:
                seen.add(id(a))
                if not any(a is x for x in getattr(ev, "args", ())):
                    continue  # a keyword (`alpha=`) scales the other operand: not a term
                term = _number_term(a, numbers, flow)
                if term is not None:
                    out.append(term)
                continue
            if not isinstance(a, torch.Tensor) or a.requires_grad or not a.is_floating_point() \
                    or a.numel() != 1 or id(a) in seen:
                continue
            seen.add(id(a))
            sources = flow.sources(a)
            if not sources:
                continue
            producer = flow.made.get(id(a))
            for _ in range(4):  # through a scaling by a number (`10 * reg`) to the line that computed it
                if producer is None or producer.call or producer.name.strip("_").removeprefix("r") \
                        not in _SCALING or len(producer.args) != 1:
                    break
                producer = flow.made.get(producer.args[0]) or producer
            term = Term(None, {}, True, tensor=a, frame=producer.frame if producer is not None else ev.frame,
                        op=producer.name if producer is not None else None, sources=sources)
            term.cut, term.cut_op = flow.cut(a)
            out.append(term)
    return out
