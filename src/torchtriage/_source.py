"""The user's source as a syntax tree: one parse per file, kept while the file's mtime holds, and
the places in it a check asks about (the function a frame runs, the loop on its line).

Files that are not on disk (a notebook cell, code given to `exec` with a `linecache` entry) are
read through `linecache`. A file that does not parse gives None.
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import os
import types

_trees: dict[str, tuple[float, ast.Module | None]] = {}  # file -> (mtime, parsed source)
_MAX = 256


def parsed(path: str) -> ast.Module | None:
    """The parsed source of `path`, or None (no source, or it does not parse)."""
    try:
        mtime = os.stat(path).st_mtime
    except (OSError, ValueError):
        mtime = -1.0  # not on disk: linecache's copy
    hit = _trees.get(path)
    if hit is not None and hit[0] == mtime:
        return hit[1]
    text = None
    if mtime >= 0:
        with contextlib.suppress(OSError, ValueError, UnicodeDecodeError):
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
    if text is None:
        text = "".join(linecache.getlines(path)) or None
    tree = None
    if text is not None:
        with contextlib.suppress(SyntaxError, ValueError):
            tree = ast.parse(text, path)
    if len(_trees) > _MAX:
        _trees.clear()
    _trees[path] = (mtime, tree)
    return tree


def running_loop(f: types.FrameType) -> tuple[ast.Module, ast.AST, ast.For | ast.AsyncFor] | None:
    """(tree, scope, loop): the `for` loop whose header holds the line frame `f` runs, inside the
    function `f` runs (its scope; the module for module-level code)."""
    tree = parsed(f.f_code.co_filename)
    if tree is None:
        return None
    line = f.f_lineno
    func = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.lineno <= line <= (n.end_lineno or n.lineno) and n.name == f.f_code.co_name), None)
    scope: ast.AST = func if func is not None else tree
    loop = next((n for n in ast.walk(scope) if isinstance(n, (ast.For, ast.AsyncFor))
                 and n.lineno <= line <= (n.iter.end_lineno or n.lineno)), None)
    return None if loop is None else (tree, scope, loop)


def scope_at(tree: ast.Module, code: types.CodeType, line: int) -> ast.AST | None:
    """The innermost definition of `code`'s function in `tree` that holds `line` (the module for
    module-level code); None when no definition of that name holds it."""
    if code.co_name == "<module>":
        return tree
    best = None
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == code.co_name \
                and n.lineno <= line <= (n.end_lineno or n.lineno):
            if best is None or n.lineno > best.lineno:
                best = n
    return best


def own_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of a function (or module) body, without those of the functions, classes and
    lambdas it defines."""
    out: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        out.append(n)
        todo.extend(ast.iter_child_nodes(n))
    return out
