"""An evaluation pass that averages a value and reports the last batch's (session 18).

An evaluation loop keeps a running sum of a per-batch value (``metric_val += metric.item()``)
and divides it by the batches afterwards: the pass's figure. Reporting the per-batch name
after the loop (``logger.log_validation(step, metric, loss)``, ``return loss``) reports what
the last batch left in it, one batch of the split, while the average the loop built is there.
The curve logged is noisy, reads off the epoch's figure, and its best point is not the epoch
the trainer chose.

Measured when an evaluation pass ends (no optimizer step ran during it; `Denominators.on_stop`),
in the user's frame that iterates it: the loop body adds a name assigned in the loop, or its
``.item()`` / ``float()``, to a sum set to 0 before the loop, unconditionally (a statement of
the loop's own body); after the loop, a report call (print, a logger's log*, add_scalar, ...) or
a ``return`` carries the per-batch name itself while the sum is also read after the loop (the
average exists). Harm: the last batch's live value against the sum over the pass's batches
divided by their number: a warning when they differ by `OFF` of the mean or more; equal (a
constant metric), no finding. A call that reports the sum (or its average) beside the per-batch
value, a last-batch figure shown next to the mean on purpose, is not judged.
"""

from __future__ import annotations

import ast
import types
from typing import Any

import torch

from .._finding import from_catalogue
from .._frames import user_frame_of
from .._source import own_nodes, running_loop
from ._units import _base

OFF = 0.05
_REPORT_PREFIXES = ("log", "print", "add_scalar", "write", "info", "report", "record")


def _callee(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")


def _reporter(call: ast.Call) -> bool:
    name = _callee(call).lower()
    return any(name.startswith(p) for p in _REPORT_PREFIXES) or name in ("set_postfix", "set_description")


def _assigned_names(loop: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(loop):
        if isinstance(n, (ast.Assign, ast.AnnAssign)):
            for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                for m in ast.walk(t):
                    if isinstance(m, ast.Name):
                        out.add(m.id)
    return out


def _sums(loop: ast.For | ast.AsyncFor) -> dict[str, tuple[str, ast.AugAssign]]:
    """per-batch name -> (the sum it is added to, the statement), for `S += V` / `S += V.item()`
    statements of the loop's own body (or of a `with` block directly in it)."""
    body: list[ast.stmt] = []
    for s in loop.body:
        body.extend(s.body if isinstance(s, (ast.With, ast.AsyncWith)) else [s])
    inner = _assigned_names(loop)
    out: dict[str, tuple[str, ast.AugAssign]] = {}
    for s in body:
        if isinstance(s, ast.AugAssign) and isinstance(s.op, ast.Add) and isinstance(s.target, ast.Name):
            base = _base(s.value)
            if isinstance(base, ast.Name) and base.id in inner and base.id != s.target.id:
                out.setdefault(base.id, (s.target.id, s))
    return out


def _zeroed_before(scope: ast.AST, name: str, line: int) -> bool:
    """`name = 0` (or `a, name = 0.0, 0.0`) before `line`."""
    for n in own_nodes(scope):
        if not isinstance(n, ast.Assign) or n.lineno >= line:
            continue
        for t in n.targets:
            pairs = zip(t.elts, n.value.elts) if isinstance(t, ast.Tuple) and isinstance(n.value, ast.Tuple) \
                and len(t.elts) == len(n.value.elts) else [(t, n.value)]
            if any(isinstance(te, ast.Name) and te.id == name and isinstance(v, ast.Constant)
                   and type(v.value) in (int, float) and v.value == 0 for te, v in pairs):
                return True
    return False


def _number(v: Any) -> float | None:
    if type(v) in (int, float):
        return float(v)
    if isinstance(v, torch.Tensor) and v.numel() == 1 and v.dtype.is_floating_point:
        return float(v.detach())  # (one read, at an evaluation pass's end)
    return None


def _carried(e: ast.expr, name: str) -> bool:
    base = _base(e)
    return isinstance(base, ast.Name) and base.id == name


def last_logged_findings(f: types.FrameType, batches: int, step: int | None) -> list[Any]:
    """At a DataLoader pass's end: `f` runs the loop's header (the sampler just ran out)."""
    if batches < 2:
        return []
    found = running_loop(f)
    if found is None:
        return []
    _, scope, loop = found
    return loop_findings(f, scope, loop, batches, step, ran_to=None)


def loop_findings(f: types.FrameType, scope: ast.AST, loop: ast.For | ast.AsyncFor, batches: int,
                  step: int | None, *, ran_to: int | None) -> list[Any]:
    """The pass of `loop` in frame `f` ended; `ran_to`: the line the frame has run to since (it left
    the loop, or returned: its locals are their last values, and a sum divided after the loop
    already holds the average); None at the loop's header."""
    sums = _sums(loop)
    if not sums or batches < 2:
        return []
    end = loop.end_lineno or loop.lineno
    after = sorted((n for n in own_nodes(scope) if getattr(n, "lineno", 0) > end),
                   key=lambda n: getattr(n, "lineno", 0))
    read_after = {n.id for n in after if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    out = []
    for per_batch, (total, stmt) in sums.items():
        if total not in read_after or not _zeroed_before(scope, total, loop.lineno):
            continue
        ran = [n for n in after if ran_to is not None and getattr(n, "lineno", 0) <= ran_to]
        divided = _divided_after(ran, total)
        if not divided and _reassigned_after(ran, total):
            continue  # (the sum became something else after the loop: its live value is no sum)
        for node in after:
            if isinstance(node, ast.Call) and _reporter(node):
                args = [*node.args, *(k.value for k in node.keywords)]
            elif isinstance(node, ast.Return) and node.value is not None:
                args = list(node.value.elts) if isinstance(node.value, ast.Tuple) else [node.value]
            else:
                continue
            if not any(_carried(a, per_batch) for a in args):
                continue
            if any(isinstance(m, ast.Name) and m.id == total for a in args for m in ast.walk(a)):
                continue  # the average reported beside it: the last batch shown on purpose
            last, acc = _number(f.f_locals.get(per_batch)), _number(f.f_locals.get(total))
            if last is None or acc is None:
                continue
            mean = acc if divided else acc / batches
            if abs(last - mean) < OFF * max(abs(mean), 1e-12):
                continue
            out.append(_finding(f, node, per_batch, total, stmt, last, mean, batches, step))
            break
    return out


def _divided_after(after: list[ast.AST], total: str) -> bool:
    """`total /= n` or `total = total / n` after the loop: the name holds the pass's average."""
    for n in after:
        if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Div) and isinstance(n.target, ast.Name) \
                and n.target.id == total:
            return True
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                and n.targets[0].id == total and isinstance(n.value, ast.BinOp) and isinstance(n.value.op, ast.Div) \
                and isinstance(n.value.left, ast.Name) and n.value.left.id == total:
            return True
    return False


def _reassigned_after(after: list[ast.AST], total: str) -> bool:
    return any(isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
               and any(isinstance(t, ast.Name) and t.id == total
                       for t in (n.targets if isinstance(n, ast.Assign) else [n.target])) for n in after)


def _finding(f: types.FrameType, node: ast.AST, per_batch: str, total: str, stmt: ast.AugAssign, last: float,
             mean: float, batches: int, step: int | None) -> Any:
    via = "return" if isinstance(node, ast.Return) else _callee(node)  # type: ignore[arg-type]
    evidence = {"reported_name": per_batch, "sum_name": total, "sum_at_line": stmt.lineno, "reported_by": via,
                "last_batch_value": round(last, 6), "pass_mean": round(mean, 6), "pass_batches": batches,
                "harm": f"{per_batch} holds the last of {batches} batches, {last:.6g}, while {total} over the pass "
                        f"averages {mean:.6g}"}
    fields = {"name": per_batch, "total": total, "via": via, "line": stmt.lineno, "batches": batches,
              "last": f"{last:.6g}", "mean": f"{mean:.6g}"}
    return from_catalogue("silent", "silent.last_batch_reported", "lastlogged.message", fields=fields,
                          cause_key="lastlogged.cause", next_key="lastlogged.next",
                          frame=user_frame_of(f, getattr(node, "lineno", f.f_lineno)), evidence=evidence,
                          severity="warning", stage="data", step=step, parameter=per_batch, source_line=True)
