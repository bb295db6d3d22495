"""A reported running figure that is never accumulated (session 13).

A running loss reported over a pass (``total / n``, ``running / log_interval``) is a function of
the values the pass computed only when the loop adds each value into the sum. Two faults leave
the sum out of the loop: the ``total += loss.item()`` line is missing, so the name keeps the
``0.0`` it was set to and every report prints 0 (or a constant) while the losses fall; or the loop
assigns the value instead of adding it (``total = loss.item()``), so the figure divided by the
pass's batches is the LAST batch's value over N. The program runs and prints a plausible line.

Measured when a pass over a loader ends (`Denominators.on_stop`), in the user's frame that
iterates it (and the frames a generator feeds): the function's source gives each quotient
``X / D`` whose numerator is a plain name and

- (constant) every assignment of ``X`` in the function is the literal 0 (its initialization and
  its resets), nothing adds to it, and its live value is still 0; or
- (last batch) ``X`` is assigned in the loop from an expression that does not read ``X``, its live
  value is a number, nothing adds to it, and ``D`` counts the pass's batches or samples (a count
  the loop keeps, ``len()`` of the loader or its dataset); or
- (reset) a statement of the loop's own body sets ``X`` to 0 at every batch before the loop adds
  to it, and the quotient after the loop divides it by such a count (the last batch over N).

Harm measured: the reported figure (0, or the last value over the count) against the mean of the
training losses recorded over the pass's steps (the session's loss series); a warning when the
quotient is reported (printed, logged, formatted, returned, stored) and differs from that mean by
`OFF` or more, else an info.
"""

from __future__ import annotations

import ast
import types
from typing import Any

import torch

from .._finding import from_catalogue
from .._frames import user_frame_of
from .._source import running_loop
from ._batchmeans import _resolve
from ._units import _base, _denominator_unit, _loop_facts

OFF = 0.05
_REPORTS = frozenset({"print", "log", "info", "debug", "warning", "write", "format", "append", "add_scalar",
                      "add_scalars", "log_metrics", "log_dict", "set_postfix", "set_description", "extend",
                      "update", "put", "send", "dump", "dumps"})
_KEEP = (ast.AugAssign, ast.Global, ast.Nonlocal, ast.Delete)


def _zero(e: ast.expr) -> bool:
    return isinstance(e, ast.Constant) and type(e.value) in (int, float) and e.value == 0


def _assignments(scope: ast.AST, name: str) -> list[tuple[ast.AST, ast.expr | None]] | None:
    """(statement, value) of each assignment of `name` in `scope`; None when something else may
    change it (an augmented assignment, a loop or unpacking target, a `global`, a walrus, `del`)."""
    out: list[tuple[ast.AST, ast.expr | None]] = []
    for node in ast.walk(scope):
        if isinstance(node, _KEEP):
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                return None
            if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
                return None
            if isinstance(node, ast.Delete) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return None
        elif isinstance(node, ast.NamedExpr) and node.target.id == name:
            return None
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension, ast.With, ast.AsyncWith)):
            targets = [node.target] if not isinstance(node, (ast.With, ast.AsyncWith)) else [
                i.optional_vars for i in node.items if i.optional_vars is not None]
            if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t)):
                return None
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id == name:
                    out.append((node, node.value))
                elif (isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple)
                      and len(t.elts) == len(node.value.elts) and not any(isinstance(e, ast.Starred) for e in t.elts)):
                    for te, ve in zip(t.elts, node.value.elts):
                        if isinstance(te, ast.Name) and te.id == name:
                            out.append((node, ve))
                        elif any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(te)):
                            return None
                elif any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(t)):
                    return None  # (unpacked from a call that may sum)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and node is not scope:
            args = node.args
            if any(a.arg == name for a in [*args.args, *args.kwonlyargs, *args.posonlyargs]):
                continue
    return out


def _reset_each_batch(loop: ast.AST, name: str) -> bool:
    """`name` set to 0 by a statement of the loop's own body (every iteration, unconditionally)
    and added to in the loop."""
    body = getattr(loop, "body", [])
    reset = any(isinstance(n, ast.Assign) and _zero(n.value) and any(isinstance(t, ast.Name) and t.id == name
                                                                    for t in n.targets) for n in body)
    added = any(isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and isinstance(n.target, ast.Name)
                and n.target.id == name for n in ast.walk(loop))
    return reset and added


def _reads(e: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(e))


def _reported(node: ast.AST, scope: ast.AST, parents: dict[int, ast.AST]) -> str | None:
    """How the quotient leaves the function: the call or statement that carries it, or that
    carries the name it is assigned to."""
    names: set[str] = set()
    cur: ast.AST | None = node
    while cur is not None and cur is not scope:
        if isinstance(cur, ast.Call):
            callee = cur.func.attr if isinstance(cur.func, ast.Attribute) else getattr(cur.func, "id", "")
            if callee in _REPORTS:
                return callee
        if isinstance(cur, (ast.Return, ast.Yield, ast.JoinedStr)):
            return type(cur).__name__.lower()
        if isinstance(cur, (ast.Assign, ast.AnnAssign)):
            targets = cur.targets if isinstance(cur, ast.Assign) else [cur.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    names.add(t.id)
                elif isinstance(t, (ast.Subscript, ast.Attribute)):
                    return "stored"  # (history["loss"] = ..., self.loss = ...)
            break
        cur = parents.get(id(cur))
    if not names:
        return None
    for n in ast.walk(scope):
        if isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load):
            via = _reported(n, scope, parents)
            if via is not None:
                return via
    return None


def _is_loss_value(e: ast.expr | None, value: float, f: types.FrameType) -> bool:
    """The assigned expression reads the last loss (`loss.item()`, `float(loss)`): its base name
    is a one-element tensor of the live value."""
    if e is None:
        return False
    base = _base(e)
    if not isinstance(base, ast.Name):
        return False
    t = f.f_locals.get(base.id)
    if not isinstance(t, torch.Tensor) or t.numel() != 1 or not t.dtype.is_floating_point:
        return False
    try:
        return abs(float(t.detach()) - value) <= 1e-6 * max(1.0, abs(value))
    except Exception:
        return False


def _value(e: ast.expr, f: types.FrameType) -> Any:
    """A denominator's value in the live frame, when reading it runs no user code: names,
    attributes of them, constants, `len()` of a sized container, arithmetic of those."""
    if isinstance(e, ast.Constant) and type(e.value) in (int, float):
        return e.value
    if isinstance(e, ast.Name):
        v = f.f_locals.get(e.id, f.f_globals.get(e.id))
        return v if type(v) in (int, float) else None
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name):
        owner = f.f_locals.get(e.value.id, f.f_globals.get(e.value.id))
        v = getattr(owner, "__dict__", {}).get(e.attr) if owner is not None else None
        return v if type(v) in (int, float) else None
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "len" and len(e.args) == 1:
        try:
            of = _resolve(e.args[0], f)
            return len(of)
        except Exception:
            return None
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub, ast.Mult)):
        a, b = _value(e.left, f), _value(e.right, f)
        if a is None or b is None:
            return None
        return a + b if isinstance(e.op, ast.Add) else a - b if isinstance(e.op, ast.Sub) else a * b
    return None


def unsummed_findings(f: types.FrameType, batches: int, samples: int, loader: Any, losses: list[float],
                      step: int | None) -> list[Any]:
    """Findings for the quotients of a never-accumulated name in the function `f` runs, for the
    loop that iterates the pass now ending. `losses`: the training losses recorded over the pass."""
    if batches < 2:
        return []
    found = running_loop(f)
    if found is None:
        return []
    _, scope, loop = found
    sums, counts, _, _ = _loop_facts(loop)
    running = set(sums) | set(counts) | {  # names the loop accumulates (`x += ...`, `x = x + ...`)
        t.id for n in ast.walk(loop) if isinstance(n, ast.Assign) for t in n.targets
        if isinstance(t, ast.Name) and t.id in {m.id for m in ast.walk(n.value) if isinstance(m, ast.Name)}}
    mine = (loader, getattr(loader, "dataset", None))
    parents = {id(c): p for p in ast.walk(scope) for c in ast.iter_child_nodes(p)}
    in_loop = {id(n) for n in ast.walk(loop)}
    out = []
    seen: set[str] = set()
    for node in ast.walk(scope):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.left, ast.Name)):
            continue
        name = node.left.id
        if name in seen or name not in f.f_locals:
            continue
        value = f.f_locals[name]
        if type(value) not in (int, float):
            continue
        assigned = _assignments(scope, name)
        if assigned is None and _reset_each_batch(loop, name) and node.lineno > (loop.end_lineno or loop.lineno):
            unit, _ = _denominator_unit(node.right, f, counts, mine)
            if unit is not None:  # (`total = 0` at the top of the loop body, `total += ...`, `total / len(loader)`)
                seen.add(name)
                resets = [n for n in loop.body if isinstance(n, ast.Assign) and _zero(n.value)
                          and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)]
                out.append(_finding(f, node, name, "reset", value, loop, batches, samples, losses,
                                    _reported(node, scope, parents), step, [(r, r.value) for r in resets]))
            continue
        if not assigned:
            continue
        kind = None
        if all(v is not None and _zero(v) for _, v in assigned) and value == 0:
            kind = "constant"
        else:
            inner = [(s, v) for s, v in assigned if id(s) in in_loop]
            if inner and all(v is not None and not _reads(v, name) and not _zero(v)
                             and not any(_reads(v, r) for r in running) for s, v in inner) and all(
                    v is not None and _zero(v) for s, v in assigned if id(s) not in in_loop):
                unit, _ = _denominator_unit(node.right, f, counts, mine)
                if unit is not None:
                    kind = "last"
        if kind is None:
            continue
        seen.add(name)
        via = _reported(node, scope, parents)
        of_loss = kind == "constant" or any(_is_loss_value(v, value, f) for s, v in assigned if id(s) in in_loop)
        out.append(_finding(f, node, name, kind, value, loop, batches, samples, losses if of_loss else [], via, step,
                            assigned))
    return out


def _finding(f: types.FrameType, node: ast.BinOp, name: str, kind: str, value: float, loop: ast.AST,
             batches: int, samples: int, losses: list[float], via: str | None, step: int | None,
             assigned: list[tuple[ast.AST, ast.expr | None]]) -> Any:
    frame = user_frame_of(f, node.lineno)
    denom = ast.unparse(node.right)
    d = _value(node.right, f)
    reported = value / d if isinstance(d, (int, float)) and d else None
    mean = sum(losses) / len(losses) if losses else None
    off = (mean is not None and reported is not None and abs(mean) > 0
           and abs(reported - mean) >= OFF * abs(mean))
    harmful = via is not None and (off or (mean is None and kind == "constant"))
    lines = sorted({getattr(s, "lineno", 0) for s, _ in assigned})
    evidence: dict[str, Any] = {
        "name": name, "kind": {"constant": "never changes from 0", "last": "assigned, not added, each batch",
                               "reset": "reset to 0 at every batch"}[kind],
        "assignments_at_lines": lines, "quotient": ast.unparse(node), "denominator": denom,
        "live_value": value, "reported_value": reported, "reported_by": via, "pass_batches": batches,
        "pass_samples": samples}
    if losses:
        evidence.update({"pass_losses": len(losses), "pass_loss_mean": round(mean, 6) if mean is not None else None,
                         "pass_loss_min": round(min(losses), 6), "pass_loss_max": round(max(losses), 6)})
    if harmful:
        evidence["harm"] = (f"{ast.unparse(node)} reports {reported:.6g}" if reported is not None else
                            f"{ast.unparse(node)} reports a constant") + (
            f" while the pass's {len(losses)} training losses average {mean:.6g}" if mean is not None else "")
    fields = {"name": name, "quotient": ast.unparse(node), "reported": f"{reported:.6g}" if reported is not None
              else "n/a", "batches": batches, "lines": ", ".join(map(str, lines)),
              "mean": f"{mean:.6g}" if mean is not None else "n/a", "count": len(losses)}
    key = f"unsummed.{kind}"
    if mean is not None:
        key += ".losses"
    return from_catalogue("silent", "silent.reported_loss_never_accumulated", key, fields=fields,
                          cause_key="unsummed.cause", next_key="unsummed.next", frame=frame, evidence=evidence,
                          severity="warning" if harmful else "info", stage="data", step=step, parameter=name,
                          source_line=True)
