"""A per-batch collection averaged every pass but never emptied (session 17).

A loop that keeps one value per batch (``accs.append(correct / n)``, ``losses += [loss.item()]``)
and averages the collection after the loop (``np.mean(accs)``) reports that pass's figure only
when the collection starts empty at every pass. Created once before the epoch loop, it carries
every earlier epoch's values: epoch k's "train accuracy" is the running mean since the start of
training, lagging behind the model.

Measured when a pass over a loader ends (`Denominators.on_stop`), in the user's frame that
iterates it. The function's source gives, inside the loop, a collection kept per batch, and
after the loop (still inside the loop that repeats the pass, when the function holds one) its
mean. The live frame gives the collection's length: it grew by exactly the pass's batches this
pass and holds more than them (the values of earlier passes). Harm: the mean over the whole
collection against the mean over this pass's values (its last entries); a warning when they
differ by 1 % of the pass's mean or more, else `info`. One finding per collection.
"""

from __future__ import annotations

import ast
import math
import types
from typing import Any

from .._finding import from_catalogue
from .._frames import user_frame_of
from .._source import running_loop
from ._batchmeans import _averages, _following, _resolve

REL = 0.01


class Unreset:
    """Lengths of the per-batch collections seen at each pass's end, per loop and collection."""

    def __init__(self) -> None:
        self.lengths: dict[tuple[str, int, str], int] = {}
        self.found: dict[tuple[str, int, str], Any] = {}

    def on_pass(self, f: types.FrameType, batches: int, step: int | None) -> None:
        found = running_loop(f)
        if found is None or batches < 2:
            return
        _, scope, loop = found
        outer = _enclosing_loop(scope, loop)
        region = outer if outer is not None else scope
        after = [n for stmt in _following(getattr(scope, "body", []), loop) for n in ast.walk(stmt)
                 if _within(n, region)]
        for target, line in _kept(loop):
            key = ast.unparse(target)
            ident = (f.f_code.co_filename, loop.lineno, key)
            if ident in self.found:
                continue
            mean = next((n for n in after if _averages(n, key)), None)
            if mean is None:
                continue
            try:
                values = list(_resolve(target, f))
            except Exception:
                continue
            before = self.lengths.get(ident)
            self.lengths[ident] = len(values)
            if before is None or len(values) - before != batches or len(values) <= batches:
                continue  # (not one value per batch, or emptied since the last pass)
            try:
                vals = [float(v) for v in values]
            except Exception:
                continue
            if not all(math.isfinite(v) for v in vals):
                continue
            whole = sum(vals) / len(vals)
            own = sum(vals[-batches:]) / batches
            if abs(whole - own) <= 1e-12:
                continue
            harmful = abs(whole - own) >= REL * max(abs(own), 1e-12)
            at = getattr(mean, "lineno", line)
            made = _created(scope, key, loop)
            evidence = {"collection": key, "kept_at_line": line, "averaged_at_line": at, "values_kept": len(vals),
                        "pass_batches": batches, "earlier_values": len(vals) - batches,
                        "mean_reported": round(whole, 6), "mean_of_this_pass": round(own, 6)}
            if made is not None:
                evidence["created_at_line"] = made
            self.found[ident] = from_catalogue(
                "silent", "silent.metric_never_reset", "unreset.message",
                fields={"collection": key, "line": at, "kept": len(vals), "batches": batches,
                        "earlier": len(vals) - batches, "whole": f"{whole:.4g}", "own": f"{own:.4g}",
                        "made": made if made is not None else "?"},
                cause_key="unreset.cause", next_key="unreset.next", frame=user_frame_of(f, at),
                evidence=evidence, severity="warning" if harmful else "info", stage="data", step=step,
                source_line=True)

    def end(self) -> list[Any]:
        return list(self.found.values())


def _kept(loop: ast.AST) -> list[tuple[ast.expr, int]]:
    """(collection, line) of each `L.append(v)` / `L += [v]` in the loop."""
    out: list[tuple[ast.expr, int]] = []
    for node in ast.walk(loop):
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.value, ast.List) \
                and len(node.value.elts) == 1:
            out.append((node.target, node.lineno))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append" \
                and len(node.args) == 1 and isinstance(node.func.value, (ast.Name, ast.Attribute)):
            out.append((node.func.value, node.lineno))
    return out


def _enclosing_loop(scope: ast.AST, loop: ast.AST) -> ast.AST | None:
    """The innermost `for` / `while` of `scope` that holds `loop` (the loop repeating the pass)."""
    best: ast.AST | None = None
    for n in ast.walk(scope):
        if n is not loop and isinstance(n, (ast.For, ast.AsyncFor, ast.While)) and _within(loop, n):
            if best is None or _within(n, best):
                best = n
    return best


def _within(n: ast.AST, region: ast.AST) -> bool:
    line = getattr(n, "lineno", None)
    return line is not None and region is not None and \
        getattr(region, "lineno", 0) <= line <= (getattr(region, "end_lineno", None) or line)


def _created(scope: ast.AST, key: str, loop: ast.AST) -> int | None:
    """The line of `key = []` (or `list()`) in the scope, before the loop."""
    for n in ast.walk(scope):
        if isinstance(n, ast.Assign) and any(ast.unparse(t) == key for t in n.targets) \
                and getattr(n, "lineno", 0) < getattr(loop, "lineno", 0) \
                and (isinstance(n.value, ast.List) or (isinstance(n.value, ast.Call)
                                                       and isinstance(n.value.func, ast.Name)
                                                       and n.value.func.id == "list")):
            return n.lineno
    return None
