"""What the user's code calls a scheduler, and whether it ever writes `<that name>.step()`
(session 15).

A scheduler never stepped during a run is either one the code never steps (the call is missing)
or one whose `step()` sits behind a test that never held in this run (a period longer than the
run: `_periodic`'s question). The names come from the statement that built it: the assignment
around the constructor's line, followed out through `return` lines to the caller's assignment
(`self.lr_scheduler = get_schedule(...)`). Read from the parsed source (`_source`), once per
scheduler at the end.
"""

from __future__ import annotations

import ast
import types

from .._source import own_nodes, parsed
from ._groups import scope_of

MAX_FRAMES = 4


def _terminal(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _statement(scope: ast.AST, line: int) -> ast.stmt | None:
    """The innermost statement of `scope` that holds `line`."""
    best: ast.stmt | None = None
    for n in ast.walk(scope):
        if isinstance(n, ast.stmt) and n is not scope and n.lineno <= line <= (n.end_lineno or n.lineno):
            end = n.end_lineno or n.lineno
            if best is None or n.lineno >= best.lineno and end <= (best.end_lineno or best.lineno):
                best = n
    return best


def assigned_names(frames: list[types.FrameType]) -> set[str]:
    """The names the scheduler built on the innermost frame's line is bound to (innermost first)."""
    names: set[str] = set()
    for f in frames[:MAX_FRAMES]:
        tree = parsed(f.f_code.co_filename)
        if tree is None:
            return names
        stmt = _statement(scope_of(tree, f.f_code), f.f_lineno)
        if isinstance(stmt, ast.Return):
            continue  # built in a helper: the caller binds it
        targets: list[ast.AST] = []
        if isinstance(stmt, ast.Assign):
            targets = list(stmt.targets)
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            targets = [stmt.target]
        for t in targets:
            for n in ast.walk(t):
                name = _terminal(n)
                if name is not None and isinstance(getattr(n, "ctx", None), ast.Store):
                    names.add(name)
        if stmt is not None:
            for n in ast.walk(stmt):  # handed on by keyword: `Trainer(lr_scheduler=LambdaLR(...))`
                if isinstance(n, ast.keyword) and n.arg:
                    names.add(n.arg)
        return names
    return names


def step_called(codes: set[types.CodeType], names: set[str]) -> bool:
    """Some `<name>.step(...)` call, for one of `names`, in the functions these code objects run
    (the frames that built the scheduler and those that stepped its optimizer)."""
    if not names:
        return False
    for code in codes:
        tree = parsed(code.co_filename)
        if tree is None:
            continue
        for n in own_nodes(scope_of(tree, code)):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step" \
                    and _terminal(n.func.value) in names:
                return True
    return False
