"""Where the statistics of rows standardized before their split were computed (session 14).

The statistics form of `data.preprocessing_fit_on_all` measures that the split rows are at
mean 0 / std 1 over all rows; the line to change is the one that took the statistics, not the
split. Read with `ast` from the split's file: in the function that makes the split (or the
module), the last statement before the split that reduces over the rows (`X.mean(0)`,
`X.mean(dim=0)`, `np.mean(X, axis=0)`, `torch.std_mean(X, 0)`): a mean first, else a spread.
A file that cannot be read or parsed, or statistics taken in another function, give None (the
finding keeps the split's line).
"""

from __future__ import annotations

import ast
import functools

from ..._source import parsed

_MEANS = frozenset({"mean", "nanmean", "std_mean", "var_mean"})
_SPREADS = frozenset({"std", "var", "nanstd", "nanvar"})


def _zero(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0 and not isinstance(node.value, bool)


def _over_rows(call: ast.Call) -> bool:
    """A reduction over axis 0: a first positional 0 (method form) or `dim=0` / `axis=0`."""
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    if "dim" in kw or "axis" in kw:
        return _zero(kw.get("dim", kw.get("axis")))
    method = isinstance(call.func, ast.Attribute) and not (
        isinstance(call.func.value, ast.Name) and call.func.value.id in ("np", "numpy", "torch"))
    args = call.args if method else call.args[1:]
    return bool(args) and _zero(args[0])


def _kind(node: ast.AST) -> str | None:
    found = None
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, (ast.Attribute, ast.Name)):
            name = sub.func.attr if isinstance(sub.func, ast.Attribute) else sub.func.id
            if name in _MEANS and _over_rows(sub):
                return "mean"
            if name in _SPREADS and _over_rows(sub):
                found = "spread"
    return found


def _scope(tree: ast.Module, line: int) -> list[ast.stmt]:
    """The body of the innermost function holding `line` (the module's when none)."""
    body, start = tree.body, 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                start < node.lineno <= line <= (node.end_lineno or node.lineno):
            body, start = node.body, node.lineno
    return body


@functools.lru_cache(maxsize=64)
def statistics_line(file: str, split_line: int) -> int | None:
    """The line where the rows split at `split_line` had their statistics taken, or None."""
    tree = parsed(file)
    if tree is None:
        return None
    best: dict[str, int] = {}
    for stmt in _scope(tree, split_line):
        for node in ast.walk(stmt):
            if isinstance(node, ast.stmt) and getattr(node, "lineno", split_line) < split_line:
                kind = _kind(node) if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr)) else None
                if kind is not None:
                    best[kind] = max(best.get(kind, 0), node.lineno)
    return best.get("mean") or best.get("spread")
