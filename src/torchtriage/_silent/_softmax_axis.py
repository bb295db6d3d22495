"""Normalizations over the wrong axis, read off the loss's autograd graph (issue 26 item 4).

A softmax inside the model leaves a `SoftmaxBackward0` (or `LogSoftmaxBackward0`) node on the
graph of every loss it feeds, with the axis it normalized (`_saved_dim`) and its result. Two
contracts of that op need no knowledge of the model's names:

- a normalization over an axis of size 1 is constant (softmax 1, log_softmax 0): everything
  computed from it is constant and every gradient through it is exactly zero;
- attention weights are a distribution over the axis the next matmul sums over (each query's
  weights over the keys, contracted with the values). A softmax whose result reaches a
  `bmm`/`mm` through views, transposes, expands and element-wise masks only (dropout), and whose
  normalized axis is not the contracted one, hands the matmul weights that do not sum to 1 over
  what it sums: measured on the saved result (the sums over the contracted axis).

Normalizing again before the matmul (slot attention's softmax over slots, then a weighted mean
over the inputs) puts a division between them: the walk stops there and stays quiet. The
walk runs on the silent check's warm-up backward calls, bounded; the only numbers read are the
contracted sums, with the step's read.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from .._findings import Category, Severity, Stage
from ._node_site import NodeSite, replay_site
from ._plans import Plan, Verdict

MAX_NODES = 20_000
_SOFTMAX = ("SoftmaxBackward", "LogSoftmaxBackward")
_MATMUL = ("BmmBackward", "MmBackward")
# shape-preserving ops between a softmax and its matmul (dropout is a Mul by a mask)
_SAME = ("CloneBackward", "NativeDropoutBackward", "MulBackward", "ToCopyBackward", "AliasBackward",
         "MaskedFillBackward", "DropoutBackward")
_RESHAPE = ("ViewBackward", "UnsafeViewBackward", "ReshapeAliasBackward", "SqueezeBackward")
_TOL = 1e-3


def _saved(node: Any, attr: str) -> Any:
    try:
        return getattr(node, attr)
    except Exception:  # freed, or not saved for this node
        return None


def walk(root: Any) -> tuple[list[Any], list[Any]]:
    """The softmax nodes and the matmul nodes of `root`'s graph (bounded)."""
    soft: list[Any] = []
    mats: list[Any] = []
    seen: set[int] = set()
    todo = [root] if root is not None else []
    while todo and len(seen) < MAX_NODES:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        name = n.name()
        if name.startswith(_SOFTMAX):
            soft.append(n)
        elif name.startswith(_MATMUL):
            mats.append(n)
        todo.extend(f for f, _ in n.next_functions if f is not None and id(f) not in seen)
    return soft, mats


def _signed(x: int) -> int:
    """A saved dim as given: autograd hands a negative one back as its uint64 two's complement."""
    return x - (1 << 64) if x >= 1 << 63 else x


def _dim(node: Any) -> int | None:
    dim = _saved(node, "_saved_dim")
    return _signed(dim) if isinstance(dim, int) else None


def _suffix(shape: tuple[int, ...], d: int) -> int:
    return math.prod(shape[d + 1:])


def _down(node: Any, shape: tuple[int, ...], d: int) -> tuple[tuple[int, ...], int] | None:
    """The shape of `node`'s input and the position of dim `d` of its output there; None when
    the node is no view-like op or the dim cannot be followed."""
    name = node.name()
    if name.startswith(_SAME):
        return shape, d
    if name.startswith(("TransposeBackward", "TBackward")):
        a, b = (_saved(node, "_saved_dim0"), _saved(node, "_saved_dim1")) if name.startswith("Transpose") else (0, 1)
        if a is None or b is None:
            return None
        a, b = _signed(a) % len(shape), _signed(b) % len(shape)
        s = list(shape)
        s[a], s[b] = s[b], s[a]
        return tuple(s), (b if d == a else a if d == b else d)
    if name.startswith("PermuteBackward"):
        dims = _saved(node, "_saved_dims")
        if dims is None or len(dims) != len(shape):
            return None
        dims = [_signed(x) % len(shape) for x in dims]
        inp = [0] * len(shape)
        for i, src in enumerate(dims):  # output dim i is input dim dims[i]
            inp[src] = shape[i]
        return tuple(inp), dims[d]
    if name.startswith("UnsqueezeBackward"):
        u = _saved(node, "_saved_dim")
        if not isinstance(u, int):
            return None
        u = _signed(u) % len(shape)
        if d == u:
            return None
        return shape[:u] + shape[u + 1:], d - (d > u)
    if name.startswith("ExpandBackward"):
        sizes = _saved(node, "_saved_self_sym_sizes")
        if sizes is None:
            return None
        sizes = tuple(int(x) for x in sizes)
        k = d - len(shape) + len(sizes)
        if k < 0 or sizes[k] != shape[d]:
            return None  # the dim was broadcast from 1 (or prepended)
        return sizes, k
    if name.startswith(_RESHAPE):
        sizes = _saved(node, "_saved_self_sym_sizes")
        if sizes is None:
            return None
        sizes = tuple(int(x) for x in sizes)
        want = (shape[d], _suffix(shape, d))
        at = next((i for i in range(len(sizes)) if (sizes[i], _suffix(sizes, i)) == want), None)
        return (sizes, at) if at is not None else None
    return None


def _operands(mm: Any) -> list[tuple[Any, tuple[int, ...], int]]:
    """(input node, its shape, the contracted dim) for each operand of a bmm/mm node."""
    a, b = _saved(mm, "_saved_self"), _saved(mm, "_saved_mat2")
    nxt = [f for f, _ in mm.next_functions]
    out = []
    if isinstance(a, torch.Tensor) and len(nxt) > 0 and nxt[0] is not None:
        out.append((nxt[0], tuple(a.shape), a.dim() - 1))
    if isinstance(b, torch.Tensor) and len(nxt) > 1 and nxt[1] is not None:
        out.append((nxt[1], tuple(b.shape), b.dim() - 2))
    return out


def _reach_softmax(node: Any, shape: tuple[int, ...], d: int,
                   depth: int = 12) -> tuple[Any, tuple[int, ...], int] | None:
    for _ in range(depth):
        if node.name().startswith(_SOFTMAX):
            return node, shape, d
        step = _down(node, shape, d)
        nxt = next((f for f, _ in node.next_functions if f is not None), None)
        if step is None or nxt is None:
            return None
        shape, d = step
        node = nxt
    return None


def singleton_verdicts(soft: list[Any], skip: set[int]) -> list[tuple[Any, Verdict]]:
    """Softmax / log_softmax nodes over a size-1 axis whose input is computed with grad."""
    found = []
    for n in soft:
        r, dim = _saved(n, "_saved_result"), _dim(n)
        if id(n) in skip or not isinstance(r, torch.Tensor) or dim is None or r.dim() < 2:
            continue
        dim %= r.dim()
        if r.shape[dim] != 1 or all(f is None for f, _ in n.next_functions):
            continue
        log = n.name().startswith("Log")
        found.append((n, dict(name="softmax_over_singleton", severity=Severity.WARNING, stage=Stage.FORWARD,
                              category=Category.SHAPE, op="log_softmax" if log else "softmax", dim=dim,
                              shape=tuple(r.shape), constant="0" if log else "1",
                              evidence={"shape": tuple(r.shape), "dim": dim, "dim_size": 1,
                                        "output": 0.0 if log else 1.0, "gradient_through_it": 0.0})))
    return found


def axis_plans(mats: list[Any], skip: set[int]) -> list[tuple[Any, Plan]]:
    """Softmax results that a matmul contracts over another axis than the one normalized."""
    found, done = [], set()
    for mm in mats:
        for node, shape, d in _operands(mm):
            hit = _reach_softmax(node, shape, d)
            if hit is None:
                continue
            soft, at, c = hit
            r, dim = _saved(soft, "_saved_result"), _dim(soft)
            if id(soft) in done or id(soft) in skip or not isinstance(r, torch.Tensor) or dim is None \
                    or soft.name().startswith("Log") or tuple(r.shape) != at:
                continue
            dim %= r.dim()
            if c >= r.dim() or c == dim or r.shape[c] < 2 or r.shape[dim] < 2:
                continue
            done.add(id(soft))
            found.append((soft, _plan(r, dim, c, mm.name(), learned=weights_only(soft))))
    return found


_SCALAR_SIDE = ("MulBackward", "DivBackward")  # a None edge whose operand is saved as `_saved_other`


def weights_only(node: Any, limit: int = 256) -> bool:
    """Whether the graph above `node` holds parameters only: every path ends at a leaf that
    requires grad, and every input that does not require grad is provably a scalar (saved as a
    0-d or 1-element `_saved_other`). A softmax of learned weights alone (an adaptive adjacency
    `softmax(relu(E1 @ E2))`) is a parameterisation of one matrix shared by every sample: the
    optimizer fits whichever axis it normalizes. Attention scores computed from the data are not."""
    seen: set[int] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if len(seen) > limit:
            return False
        edges = [f for f, _ in n.next_functions]
        if None in edges:
            other = _saved(n, "_saved_other") if n.name().startswith(_SCALAR_SIDE) else None
            if not (isinstance(other, torch.Tensor) and other.numel() <= 1):
                return False
        if not edges and not hasattr(n, "variable"):
            return False  # a leaf of another kind
        todo.extend(f for f in edges if f is not None)
    return True


def _plan(r: torch.Tensor, dim: int, c: int, consumer: str, learned: bool = False) -> Plan:
    sums = r.detach().float().sum(c)
    rshape = tuple(r.shape)

    def judge(v: list[float]) -> Verdict | None:
        lo, hi = v
        if abs(lo - 1) <= _TOL and abs(hi - 1) <= _TOL:
            return None
        # (learned weights alone: unusual, not wrong; the optimizer fits either axis)
        return dict(name="softmax_not_contracted_axis", severity=Severity.INFO if learned else Severity.WARNING,
                    stage=Stage.FORWARD,
                    category=Category.SHAPE, op="softmax", dim=dim, contracted=c, shape=rshape,
                    lo=f"{lo:.3g}", hi=f"{hi:.3g}",
                    evidence={"shape": rshape, "normalized_dim": dim, "contracted_dim": c,
                              "consumer": consumer.replace("Backward0", "").lower(),
                              "weights_sum_over_contracted_min": round(lo, 6),
                              "weights_sum_over_contracted_max": round(hi, 6),
                              "inputs": "parameters only" if learned else "computed from the data"})

    return Plan([sums.amin(), sums.amax()], judge)


def root_output_nodes(calls: list[Any]) -> set[int]:
    """The nodes of the root calls' outputs themselves (the dynamics check judges a softmax
    there: `_dynamics._evalcode.node_checks`)."""
    out: set[int] = set()
    for call in calls:
        try:
            leaves = tree_leaves(call.output)
        except Exception:
            continue
        out.update(id(t.grad_fn) for t in leaves if isinstance(t, torch.Tensor) and t.grad_fn is not None)
    return out


def signature(node: Any) -> tuple[str, int, tuple[int, ...]] | None:
    """(node kind, normalized axis, result shape): what a replay's node must match (read
    before backward frees the saved result)."""
    r, dim = _saved(node, "_saved_result"), _dim(node)
    if not isinstance(r, torch.Tensor) or dim is None or r.dim() == 0:
        return None
    return node.name(), dim % r.dim(), tuple(r.shape)


def locate(session: Any, want: tuple[str, int, tuple[int, ...]],
           autocast: list[tuple[str, torch.dtype]]) -> NodeSite | None:
    """Where a softmax node inside a model call was made: the step's root calls (latest first)
    are replayed until one makes a node of the same kind, axis and result shape."""
    snap = session.snapshot
    if snap is None:
        return None
    for call in reversed(snap.record.calls):
        site = replay_site(session, call.model, call.args, call.kwargs, autocast, lambda n: signature(n) == want)
        if site is not None:
            return site
    return None
