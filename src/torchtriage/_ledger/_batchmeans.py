"""A metric over a pass weighs every row once (session 11).

A loop that turns each batch into a ratio over that batch's rows (``correct / pred.size(0)``)
and keeps the ratios, then averages them (``np.mean(accs)``), weighs each *batch* once: when
the batches differ in size (the last one of a pass that does not divide evenly), a row of the
small batch counts as much as a whole batch of the others. Accuracy over 64 + 64 + 2 samples
gives the 2 samples a third of the score.

Measured when a pass over a loader ends (`Denominators.on_stop`), in the user's frame that
iterates it. The function's source (`ast`) gives, inside the loop, a quotient whose
denominator is the batch's size (``x.size(0)``, ``x.shape[0]``, ``len(x)`` of a name the loop
assigns) appended to a collection (``L += [q]``, ``L.append(q)``), and, after the loop, the
collection averaged (``np.mean(L)``, ``statistics.mean(L)``, ``sum(L) / len(L)``). The live
frame gives the collection's last values (one per batch of the pass) and the ledger the pass's
batch sizes: the harm is the difference between the mean of the batches and the mean over the
rows. Quiet when the batches are all of one size. A warning when the two differ by 1 % of the
row mean or more, else `info`.
"""

from __future__ import annotations

import ast
import math
import types
from typing import Any

from .._finding import from_catalogue
from .._frames import user_frame_of
from .._source import running_loop

REL = 0.01  # the means differ by this share of the row mean: a warning
_MEANS = frozenset({"mean", "average", "nanmean", "fmean"})


def batch_ratio_means(f: types.FrameType, sizes: list[int]) -> list[tuple[int, int, dict[str, Any]]]:
    """(ratio line, mean line, fields) for each per-batch ratio the loop `f` runs averages over
    the pass's batches of unequal `sizes`."""
    if len(sizes) < 2 or min(sizes) == max(sizes):
        return []
    found = running_loop(f)
    if found is None:
        return []
    _, scope, loop = found
    assigned = _assigned(loop)
    after = [n for stmt in _following(getattr(scope, "body", []), loop) for n in ast.walk(stmt)]
    out = []
    for target, q in _kept_ratios(loop):
        if not _batch_size(q.right, assigned):
            continue
        key = ast.unparse(target)  # (a Store target and a Load use dump differently)
        mean = next((n for n in after if _averages(n, key)), None)
        if mean is None:
            continue
        try:
            values = _resolve(target, f)
            vals = [float(v) for v in list(values)[-len(sizes):]]
        except Exception:
            continue
        if len(vals) != len(sizes) or not all(math.isfinite(v) for v in vals):
            continue
        by_batch = sum(vals) / len(vals)
        by_row = sum(v * n for v, n in zip(vals, sizes)) / sum(sizes)
        at = getattr(mean, "lineno", q.lineno)
        out.append((q.lineno, at, {
            "collection": ast.unparse(target), "ratio": ast.unparse(q), "by_batch": by_batch, "by_row": by_row,
            "sizes": sizes, "mean_line": at}))
    return out


def finding_of(f: types.FrameType, ratio_line: int, fields: dict[str, Any], step: int | None) -> Any:
    sizes = fields["sizes"]
    by_batch, by_row = fields["by_batch"], fields["by_row"]
    gap = abs(by_batch - by_row)
    harmful = gap >= REL * max(abs(by_row), 1e-12)
    smallest = min(sizes)
    shown = sizes if len(sizes) <= 8 else [*sizes[:3], "...", *sizes[-3:]]
    evidence = {"collection": fields["collection"], "per_batch_ratio": fields["ratio"],
                "averaged_at_line": fields["mean_line"], "batch_sizes": shown, "batches": len(sizes),
                "samples": sum(sizes), "mean_of_batches": round(by_batch, 6), "mean_over_samples": round(by_row, 6)}
    return from_catalogue("silent", "silent.mean_of_batch_ratios", "batchmeans.message",
                          fields={"collection": fields["collection"], "ratio": fields["ratio"],
                                  "line": fields["mean_line"], "batches": len(sizes), "samples": sum(sizes),
                                  "smallest": smallest, "largest": max(sizes), "by_batch": f"{by_batch:.4g}",
                                  "by_row": f"{by_row:.4g}"},
                          cause_key="batchmeans.cause", next_key="batchmeans.next",
                          frame=user_frame_of(f, ratio_line), evidence=evidence,
                          severity="warning" if harmful else "info", stage="data", step=step,
                          source_line=True)


def _following(body: list[ast.stmt], loop: ast.AST) -> list[ast.stmt]:
    """The statements after `loop` in the innermost statement list that holds it."""
    for i, stmt in enumerate(body):
        if stmt is loop:
            return body[i + 1:]
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list) and any(loop is n for s in inner for n in ast.walk(s)):
                return _following(inner, loop) + body[i + 1:]
    return []


def _assigned(loop: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(loop):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.comprehension)):
            targets = [node.target]
        for t in targets:
            names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def _unwrap(e: ast.expr) -> ast.expr:
    """`float(q)`, `q.item()`, `(q)`: the quotient inside."""
    while True:
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "float" and len(e.args) == 1:
            e = e.args[0]
        elif isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "item" and not e.args:
            e = e.func.value
        else:
            return e


def _kept_ratios(loop: ast.AST) -> list[tuple[ast.expr, ast.BinOp]]:
    """(collection, quotient) of each `L += [a / b]` / `L.append(a / b)` in the loop."""
    out = []
    for node in ast.walk(loop):
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.value, ast.List) \
                and len(node.value.elts) == 1:
            target, value = node.target, node.value.elts[0]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append" \
                and len(node.args) == 1:
            target, value = node.func.value, node.args[0]
        if target is None or value is None:
            continue
        q = _unwrap(value)
        if isinstance(q, ast.BinOp) and isinstance(q.op, ast.Div):
            out.append((target, q))
    return out


def _batch_size(e: ast.expr, assigned: set[str]) -> bool:
    """`x.size(0)`, `x.shape[0]`, `len(x)`, `x.size()[0]` of a name the loop assigns."""
    base: ast.expr | None = None
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "size" \
            and len(e.args) == 1 and isinstance(e.args[0], ast.Constant) and e.args[0].value == 0:
        base = e.func.value
    elif isinstance(e, ast.Subscript) and isinstance(e.slice, ast.Constant) and e.slice.value == 0:
        inner = e.value
        if isinstance(inner, ast.Attribute) and inner.attr == "shape":
            base = inner.value
        elif isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "size" \
                and not inner.args:
            base = inner.func.value
    elif isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "len" and len(e.args) == 1:
        base = e.args[0]
    return isinstance(base, ast.Name) and base.id in assigned


def _averages(n: ast.AST, key: str) -> bool:
    """`np.mean(L)`, `statistics.mean(L)`, `mean(L)`, `torch.tensor(L).mean()`, `sum(L) / len(L)`."""
    if isinstance(n, ast.Call):
        name = n.func.attr if isinstance(n.func, ast.Attribute) else n.func.id if isinstance(n.func, ast.Name) else ""
        if name in _MEANS and n.args and ast.unparse(n.args[0]) == key:
            return True
        if name in _MEANS and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Call) \
                and n.func.value.args and ast.unparse(n.func.value.args[0]) == key:
            return True
    if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
        left, right = n.left, n.right
        return (isinstance(left, ast.Call) and isinstance(left.func, ast.Name) and left.func.id == "sum"
                and len(left.args) == 1 and ast.unparse(left.args[0]) == key
                and isinstance(right, ast.Call) and isinstance(right.func, ast.Name) and right.func.id == "len"
                and len(right.args) == 1 and ast.unparse(right.args[0]) == key)
    return False


_MISSING = object()


def _resolve(e: ast.expr, f: types.FrameType) -> Any:
    """A name, an attribute of one or a constant subscript of one, in the live frame."""
    if isinstance(e, ast.Name):
        value = f.f_locals.get(e.id, _MISSING)
        if value is _MISSING:
            value = f.f_globals.get(e.id, _MISSING)
        if value is _MISSING:
            raise LookupError(e.id)
        return value
    if isinstance(e, ast.Attribute):
        return getattr(_resolve(e.value, f), e.attr)
    if isinstance(e, ast.Subscript) and isinstance(e.slice, ast.Constant):
        return _resolve(e.value, f)[e.slice.value]
    raise LookupError("not a name")
