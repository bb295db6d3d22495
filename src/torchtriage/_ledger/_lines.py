"""What the user's source says about a loop over a loader: the loader's variable name, and the
statements that leave a batch out (`continue`) or end the epoch early (`break`).

Read once per loop line, from the parsed source (`_source.parsed`) of the file of the user's frame
that iterates the loader; a file that cannot be read or parsed gives no lines.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import linecache
import re

from .._source import parsed

_FOR_IN = re.compile(r"\bin\s+(?:enumerate\(|tqdm\(|zip\()?\s*([A-Za-z_][\w.]*)")
_ASSIGN = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?::[^=]*)?=\s*(?:[\w.]+\.)?DataLoader\(")


@dataclasses.dataclass(frozen=True)
class Skip:
    """A `continue` or `break` inside the loop: the line of the `if` that guards it (its own
    line when unguarded) and the guard's source."""

    kind: str  # "continue" or "break"
    line: int
    source: str


def loop_name(source: str) -> str | None:
    """`train_loader` in `for x, y in train_loader:` (or `enumerate(train_loader)`)."""
    m = _FOR_IN.search(source or "")
    return m.group(1) if m else None


def assigned_name(source: str) -> str | None:
    """`val_loader` in `val_loader = DataLoader(...)`."""
    m = _ASSIGN.match(source or "")
    return m.group(1) if m else None


def skips(file: str, line: int) -> tuple[Skip, ...]:
    """The `continue` / `break` statements of the `for` loop on `line` (not those of loops
    nested in it), each with the line of its innermost enclosing `if`."""
    return _skips(file, line)


@functools.lru_cache(maxsize=256)
def _skips(file: str, line: int) -> tuple[Skip, ...]:
    tree = parsed(file)
    if tree is None:
        return ()
    loop = next((n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.AsyncFor)) and n.lineno == line), None)
    if loop is None:
        return ()
    out: list[Skip] = []

    def visit(node: ast.AST, guard: ast.If | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef,
                                  ast.Lambda, ast.ClassDef)):
                continue  # their continue/break are theirs
            if isinstance(child, (ast.Continue, ast.Break)):
                at = guard.lineno if guard is not None else child.lineno
                src = linecache.getline(file, at).strip()
                out.append(Skip("continue" if isinstance(child, ast.Continue) else "break", at, src))
                continue
            visit(child, child if isinstance(child, ast.If) else guard)

    for stmt in loop.body:
        visit(ast.Module(body=[stmt], type_ignores=[]), None)
    return tuple(out)


def keyword_line(file: str, line: int, keyword: str) -> int | None:
    """The line of `keyword=` in the call that begins on `line` (`drop_last=True` several lines
    into a `DataLoader(...)` call), or None."""
    return _keyword_line(file, line, keyword)


@functools.lru_cache(maxsize=256)
def _keyword_line(file: str, line: int, keyword: str) -> int | None:
    tree = parsed(file)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.lineno <= line <= (node.end_lineno or node.lineno):
            for kw in node.keywords:
                if kw.arg == keyword:
                    return kw.value.lineno
    return None


def loops_at(file: str, line: int) -> bool:
    """Whether a `for` statement or a comprehension begins its iteration on `line` (a loop that
    may `break` after its first batch), as opposed to an explicit `iter(loader)` call."""
    return _loops_at(file, line)


@functools.lru_cache(maxsize=256)
def _loops_at(file: str, line: int) -> bool:
    tree = parsed(file)
    if tree is None:
        return True  # unknown: not judged
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            it = node.iter
            if node.iter.lineno <= line <= (it.end_lineno or it.lineno) or getattr(node, "lineno", -1) == line:
                return True
    return False
