"""A contrastive loss whose positive pairs are each an embedding with itself
(`silent.contrastive_self_pairs`).

The invariant: in a contrastive (InfoNCE / NT-Xent / CLIP / MoCo) loss the positive of row i is
another view of sample i, a different vector; the objective asks the encoder to bring the two
together. When both views are the same rows (a slice taken twice, the first view passed for the
second), every positive logit is the row's self-similarity: the loss is low from the first step
and teaches nothing about invariance.

Read from the cross-entropy call itself: its logits (N, C) and class indices y. The logits'
graph is walked back through elementwise scalings and column concatenations (bounded) to the
similarity products that make its columns: `A @ B.T` (an `mm` node: the labelled column of row i
pairs A[i] with B[y_i - offset]) and `(q * k).sum(1)` (a row-wise dot product: q[i] with k[i]).
The measured identity: the two vectors of every labelled pair equal bitwise. Numbers ride the
step's read; nothing is copied beyond one gather of the paired rows (the first MAX_ROWS).
"""

from __future__ import annotations

from typing import Any

import torch

from .._findings import Severity
from .._frames import UserFrame
from ._plans import Plan, Verdict

MAX_NODES = 48
MAX_ROWS = 4096  # rows compared: the first ones of a large batch (a 2-D LM head's tokens), one gather each
_PASS = frozenset({"DivBackward0", "DivBackward1", "MulBackward0", "MulBackward1", "SubBackward0", "SubBackward1",
                   "AddBackward0", "AddBackward1", "NegBackward0", "CloneBackward0", "ToCopyBackward0",
                   "MaskedFillBackward0", "MaskedFillBackward1"})


def _out_shape(node: Any, index: int = 0) -> tuple[int, ...] | None:
    try:
        return tuple(node._input_metadata[index].shape)
    except Exception:  # a node without metadata (a custom Function's): not followed
        return None


def _operands(node: Any, first: str, second: str, made: Any) -> tuple[Any, Any]:
    """A product node's two operands: as autograd saved them, else (an operand that needs no
    gradient is not saved: a queue, a no-grad key) the step tape's op whose output the node made."""
    a, b = getattr(node, first, None), getattr(node, second, None)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a, b
    op = made(node)
    args = [v for v in op.args if isinstance(v, torch.Tensor)] if op is not None else []
    return (args[0], args[1]) if len(args) == 2 else (None, None)


def _tape_by_node(record: Any) -> Any:
    cache: dict[int, Any] | None = None

    def made(node: Any) -> Any:
        nonlocal cache
        if cache is None:
            cache = {}
            for op in getattr(record, "ops", None) or ():
                out = op.output
                if isinstance(out, torch.Tensor) and out.grad_fn is not None:
                    cache[id(out.grad_fn)] = (out.grad_fn, op)
        hit = cache.get(id(node))
        return hit[1] if hit is not None and hit[0] is node else None
    return made


def _blocks(x: torch.Tensor, record: Any = None) -> list[tuple[str, torch.Tensor, torch.Tensor, int, torch.Tensor]]:
    """The similarity products behind the columns of the logits `x` (N, C): ("mm", A, B, offset):
    columns offset.. are A @ B.T; ("row", q, k, offset): column offset is (q * k).sum(1). Last:
    B as autograd saved it (B.T for a product: its graph, which a transpose made here lacks)."""
    found: list[tuple[str, torch.Tensor, torch.Tensor, int, torch.Tensor]] = []
    root = x.grad_fn
    if root is None:
        return found
    made = _tape_by_node(record)
    stack: list[tuple[Any, int, tuple[int, ...]]] = [(root, 0, tuple(x.shape))]
    seen = 0
    while stack and seen < MAX_NODES:
        node, off, shp = stack.pop()
        seen += 1
        name = node.name()
        if name == "MmBackward0":
            a, bt = _operands(node, "_saved_self", "_saved_mat2", made)
            if a is not None and a.dim() == 2 and bt.dim() == 2:
                found.append(("mm", a, bt.t(), off, bt))
        elif name == "SumBackward1" and len(shp) == 2 and shp[1] == 1 and tuple(node._saved_dim) in ((1,), (-1,)):
            child = node.next_functions[0][0]
            if child is not None and child.name() == "MulBackward0":
                q, k = _operands(child, "_saved_self", "_saved_other", made)
                if isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and q.dim() == 2 \
                        and q.shape == k.shape:
                    found.append(("row", q, k, off, k))
        elif name == "CatBackward0" and len(shp) == 2 and node._saved_dim in (1, -1):
            at = off
            for child, index in node.next_functions:
                width = _out_shape(child, index) if child is not None else None
                if width is None or len(width) != 2:
                    break  # a block of unknown width: the columns after it cannot be placed
                stack.append((child, at, width))
                at += width[1]
        elif name in _PASS:
            for child, index in node.next_functions:
                if child is not None and _out_shape(child, index) == shp:
                    stack.append((child, off, shp))
    return found


def self_pair_plans(x: Any, y: Any, ignore_index: int, record: Any, seen: set[Any]) -> list[Plan]:
    """The plans for one cross-entropy call with logits `x` (N, C) and class indices `y` (N,);
    `seen`: the pairs of tensors already reported (the checker's, for the run)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.grad_fn is None or not isinstance(y, torch.Tensor) \
            or y.dim() != 1 or y.shape[0] != x.shape[0] or x.shape[0] < 2:
        return []
    rows = x.shape[0]
    n = min(rows, MAX_ROWS)
    y = y[:n]
    hits = None
    plans = []
    for kind, a, b, off, b_saved in _blocks(x, record):
        if a.shape[0] != rows or a.shape[1] < 2 or b.shape[1] != a.shape[1]:
            continue
        a_saved, a = a, a[:n]
        if kind == "row":
            b = b[:n]
        if kind == "mm":
            j = y - off
            valid = (y != ignore_index) & (j >= 0) & (j < b.shape[0])
            paired = b[j.clamp(0, b.shape[0] - 1)]
        else:
            valid = y == off
            paired = b
        if hits is None:
            hits = (x.detach()[:n].argmax(dim=1) == y).sum().float()
        same = ((a == paired).all(dim=1) & valid).sum().float()
        diff = torch.where(valid, (a.float() - paired.float()).abs().amax(dim=1), 0.0).amax()
        width = b.shape[0] if kind == "mm" else 1
        shared = a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        plans.append(Plan([valid.sum().float(), same, diff, hits],
                          _judge(kind, n, tuple(x.shape), (a_saved, b_saved), off, width, record, shared, seen)))
    return plans


def _judge(kind: str, n: int, logits: tuple[int, ...], pair: tuple[torch.Tensor, torch.Tensor], off: int,
           width: int, record: Any, shared: bool, seen: set[Any]) -> Any:
    """`pair`: A and B as autograd saved them (B.T for a product)."""
    a = tuple(pair[0].shape)
    b = tuple(pair[1].shape)[::-1] if kind == "mm" else tuple(pair[1].shape)

    def judge(v: list[float]) -> Verdict | None:
        valid, same, diff, hits = int(v[0]), int(v[1]), v[2], int(v[3])
        # every labelled pair of this product (most rows' positives are here) is a vector with itself
        if valid < 2 or 2 * valid < n or same != valid:
            return None
        ev: dict[str, Any] = {
            "logits": list(logits),
            "positives_in": f"columns {off}..{off + width - 1}" if width > 1 else f"column {off}",
            "product": "A @ B.T" if kind == "mm" else "(q * k).sum(1)", "A": list(a), "B": list(b),
            "identical_positive_pairs": f"{same}/{valid}", "max_abs_diff_positive_pairs": diff,
            "same_storage": shared, "positive_is_row_max": f"{hits}/{n}"}
        out: Verdict = dict(name="contrastive_self_pairs", severity=Severity.WARNING, same=same, rows=valid,
                            hits=hits, n=n, evidence=ev)
        key = frozenset(t.untyped_storage().data_ptr() for t in pair)
        if key in seen:
            return None  # the same two views' other direction (loss_a, loss_b): one finding
        seen.add(key)
        twice = _same_slice(*pair)
        if twice:
            ev["both_views_are"] = twice
        # (the step's record, read on this path only; B itself, else the B.T the product took)
        at = _made_at(record, pair[0], pair[1].t() if kind == "mm" else pair[1])
        if at is None and kind == "mm":
            at = _made_at(record, *pair)
        if at is not None:
            out["_frame"] = at
        return out
    return judge


def _slices(t: torch.Tensor) -> list[Any]:
    out, node = [], t.grad_fn
    for _ in range(10):
        if node is None:
            break
        if node.name() == "SliceBackward0":
            out.append(node)
        node = node.next_functions[0][0] if node.next_functions else None
    return out


def _same_slice(a: torch.Tensor, b: torch.Tensor) -> str:
    """'rows 0:64 of one (128, 32) tensor, taken twice' when A and B come (through one-input
    steps) from two slices of one tensor with the same bounds; '' otherwise."""
    for sa in _slices(a):
        for sb in _slices(b):
            if sa is not sb and sa.next_functions[0][0] is sb.next_functions[0][0] and \
                    (sa._saved_dim, sa._saved_start, sa._saved_end, sa._saved_step) == \
                    (sb._saved_dim, sb._saved_start, sb._saved_end, sb._saved_step):
                what = "rows" if sa._saved_dim == 0 else f"indices of dim {sa._saved_dim}"
                return (f"{what} {sa._saved_start}:{sa._saved_end} of one {tuple(sa._saved_self_sym_sizes)} tensor, "
                        "sliced twice")
    return ""


def _key(t: torch.Tensor) -> tuple[Any, ...]:
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()))


class _Call:
    """A root model call seen as an op of the tape: its output made from its arguments."""

    def __init__(self, call: Any) -> None:
        self.args, self.frame, self.output = tuple(call.args) + tuple(call.kwargs.values()), call.frame, call.output


def _made_at(record: Any, a: torch.Tensor, b: torch.Tensor) -> UserFrame | None:
    """The user's line that made B's rows again from the source of A's, from the step tape (ops
    and model calls, each followed back through its first tensor argument): the B-side op that
    took the first tensor both chains share (the same rows encoded twice: the second call), or
    of that tensor, the second making when it was made twice (a slice taken again)."""
    ops = getattr(record, "ops", None)
    if not ops:
        return None
    made: dict[tuple[Any, ...], list[Any]] = {}
    for op in [*ops, *(_Call(c) for c in getattr(record, "calls", ()))]:
        if isinstance(op.output, torch.Tensor):
            made.setdefault(_key(op.output), []).append(op)  # equal views made twice share a key

    def chain(t: torch.Tensor) -> list[list[Any]]:
        out = []
        for _ in range(8):
            by = made.get(_key(t))
            if by is None:
                break
            out.append(by)
            src = next((v for v in by[-1].args if isinstance(v, torch.Tensor)), None)
            if src is None:
                break
            t = src
        return out

    ops_a = {id(op) for by in chain(a) for op in by}
    cb = chain(b)
    for i, by in enumerate(cb):
        if any(id(op) in ops_a for op in by):
            if len(by) > 1:
                return by[-1].frame
            return cb[i - 1][-1].frame if i > 0 else None
    return None
