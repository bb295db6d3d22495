"""The comparison that guards a "save the best" call, read from the user's source (session 15).

A best-model save is the body of a decision: `if val_loss < min_loss: torch.save(...)`, or an
early exit before it (`if score < self.best_score: return`). The decision compares a score
with a running best, and the running best is assigned from the score somewhere in the same
function (`min_loss = val_loss`, `self.best_score = score`, `best = min(best, loss)`). From the
function the saving frame runs (`_source.parsed`), `guard_of` gives:

- `scores`: the names compared that feed the running best (the metric the file is chosen on);
- `records`: the running best's names;
- `unguarded`: the line of an assignment of the running best from the score that no guard of the
  save encloses (the record moves on every pass, not only on an improvement), or None;
- `sources`: per score name, the call that produced it in this function (`score = self.score_fn(engine)`),
  resolved in the frame to a function of the user's code: the line of its `return`.

Names are source text: `val_loss`, `self.best_score`, `best["acc"]`. Nothing is evaluated but
names and attribute chains on the frame's locals (no call is made).
"""

from __future__ import annotations

import ast
import dataclasses
import types
from typing import Any

from .._frames import is_user_file
from .._source import own_nodes, parsed, scope_at

_ORDER = (ast.Lt, ast.Gt, ast.LtE, ast.GtE)
_EXITS = (ast.Return, ast.Continue, ast.Break)


@dataclasses.dataclass(frozen=True)
class Guard:
    scores: frozenset[str]
    records: frozenset[str]
    unguarded: int | None  # the line that sets the running best outside the guard
    sources: tuple[tuple[str, str, int], ...]  # (score name, file, line of the function producing it)


_cache: dict[tuple[types.CodeType, int], Guard | None] = {}


def guard_of(frame: types.FrameType) -> Guard | None:
    key = (frame.f_code, frame.f_lineno)
    if key in _cache:
        g = _cache[key]
    else:
        try:
            g = _guard(frame)
        except Exception:  # a source we cannot read: no guard
            g = None
        if len(_cache) > 512:
            _cache.clear()
        _cache[key] = g
    if g is None or not g.scores:
        return g
    return dataclasses.replace(g, sources=_sources(frame, g))


def _scope(frame: types.FrameType) -> ast.AST | None:
    tree = parsed(frame.f_code.co_filename)
    if tree is None:
        return None
    return scope_at(tree, frame.f_code, frame.f_lineno)


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, (ast.Attribute, ast.Subscript)):
        inner = node.value
        while isinstance(inner, (ast.Attribute, ast.Subscript)):
            inner = inner.value
        return ast.unparse(node) if isinstance(inner, ast.Name) else None
    return None


def _leaves(node: ast.AST) -> set[str]:
    """The names an operand reads (`best - delta` -> best, delta; `-score` -> score)."""
    n = _name(node)
    if n is not None:
        return {n}
    if isinstance(node, ast.UnaryOp):
        return _leaves(node.operand)
    if isinstance(node, ast.BinOp):
        return _leaves(node.left) | _leaves(node.right)
    if isinstance(node, ast.Call):
        out: set[str] = set()
        for a in node.args:
            out |= _leaves(a)
        return out
    return set()


def _holds(node: ast.AST, line: int) -> bool:
    block = getattr(node, "body", []) + getattr(node, "orelse", [])
    return any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in block)


def _exits(block: list[ast.stmt]) -> bool:
    return bool(block) and isinstance(block[-1], _EXITS)


def _guard(frame: types.FrameType) -> Guard | None:
    scope = _scope(frame)
    if scope is None:
        return None
    line = frame.f_lineno
    nodes = own_nodes(scope)
    guards: list[ast.If] = []
    for n in nodes:
        if not isinstance(n, ast.If):
            continue
        if _holds(n, line) or ((n.end_lineno or n.lineno) < line and (_exits(n.body) or _exits(n.orelse))):
            guards.append(n)
    pairs: list[tuple[set[str], set[str]]] = []
    for g in guards:
        for c in ast.walk(g.test):
            if isinstance(c, ast.Compare) and len(c.ops) == 1 and isinstance(c.ops[0], _ORDER):
                pairs.append((_leaves(c.left), _leaves(c.comparators[0])))
    if not pairs:
        return None
    compared = set().union(*(a | b for a, b in pairs))
    scores: set[str] = set()
    records: set[str] = set()
    unguarded: int | None = None
    enclosing = [g for g in guards if _holds(g, line)]
    exits = [g for g in guards if not _holds(g, line)]
    for n in nodes:
        if not isinstance(n, ast.Assign) or len(n.targets) != 1:
            continue
        target = _name(n.targets[0])
        if target is None or target not in compared:
            continue
        fed = _leaves(n.value) - {target}
        for a, b in pairs:
            side = b if target in a else a if target in b else set()
            if fed & side:
                records.add(target)
                scores |= fed & side
                guarded = any(_holds(g, n.lineno) for g in enclosing) \
                    or any((g.end_lineno or g.lineno) < n.lineno for g in exits)
                if not guarded:
                    unguarded = unguarded or n.lineno
    return Guard(frozenset(scores), frozenset(records), unguarded, ())


def _sources(frame: types.FrameType, g: Guard) -> tuple[tuple[str, str, int], ...]:
    scope = _scope(frame)
    if scope is None:
        return ()
    out = []
    for n in own_nodes(scope):
        if not (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.value, ast.Call)):
            continue
        target = _name(n.targets[0])
        if target not in g.scores:
            continue
        fn = _resolve(n.value.func, frame)
        code = getattr(fn, "__code__", None)
        if code is None or not is_user_file(code.co_filename):
            continue
        out.append((target, code.co_filename, _return_line(code)))
    return tuple(out)


def resolve_name(name: str, frame: types.FrameType) -> Any:
    """The value of a guard's name (`val_loss`, `self.best`, `best["acc"]`) in the frame, or None."""
    try:
        node = ast.parse(name, mode="eval").body
    except SyntaxError:
        return None
    return _resolve(node, frame)


def _resolve(node: ast.AST, frame: types.FrameType) -> Any:
    """A name or an attribute chain on the frame's locals / globals; no call made."""
    if isinstance(node, ast.Name):
        if node.id in frame.f_locals:
            return frame.f_locals[node.id]
        return frame.f_globals.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, frame)
        if base is None:
            return None
        try:
            return vars(base).get(node.attr) if hasattr(base, "__dict__") else None
        except TypeError:
            return None
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        base = _resolve(node.value, frame)
        if isinstance(base, dict):
            return base.get(node.slice.value)
    return None


def _return_line(code: types.CodeType) -> int:
    """The line of the last `return` of the function `code` runs (its first line for a lambda)."""
    tree = parsed(code.co_filename)
    if tree is None or code.co_name == "<lambda>":
        return code.co_firstlineno
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == code.co_name \
                and (n.decorator_list[0].lineno if n.decorator_list else n.lineno) == code.co_firstlineno:
            rets = [r for r in own_nodes(n) if isinstance(r, ast.Return) and r.value is not None]
            return max(r.lineno for r in rets) if rets else n.lineno
    return code.co_firstlineno
