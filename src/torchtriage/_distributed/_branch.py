"""The `if` on the rank that a collective sits under (issue 15: rank-dependent control flow).

When the ranks wait in different collectives, or call them in a different order, the usual
cause is a branch on the rank (`if rank == 0: dist.all_reduce(...)`, an early stop decided from
one rank's own loss under `if dist.get_rank() == 1 and ...`). Given the line of a collective,
the innermost enclosing `if` / `while` / conditional expression whose condition reads the rank
is found in the file's source (parsed, never run) and returned as "train.py:9 if rank == 0:".
"""

from __future__ import annotations

import ast
import linecache
import os
import re

from .._source import parsed

_RANKISH = re.compile(r"\b(?:\w*rank\w*|RANK|is_(?:local_)?main_process|(?:local_)?process_index|"
                      r"is_global_zero|is_(?:local_)?zero)\b", re.IGNORECASE)


def rank_branch(path: str | None, line: int | None) -> str | None:
    """The innermost branch on the rank around `path:line`, as "file.py:N <source line>"."""
    if not path or not line:
        return None
    tree = parsed(path)
    if tree is None:
        return None
    found: ast.If | ast.While | ast.IfExp | None = None
    for node in ast.walk(tree):
        if not isinstance(node, (ast.If, ast.While, ast.IfExp)):
            continue
        end = getattr(node, "end_lineno", None) or node.lineno
        if not node.lineno <= line <= end or line == node.test.lineno:
            continue
        if not _RANKISH.search(ast.unparse(node.test)):
            continue
        if found is None or node.lineno >= found.lineno:  # the innermost
            found = node
    if found is None:
        return None
    source = linecache.getline(path, found.lineno).strip()
    return f"{os.path.basename(path)}:{found.lineno} {source}"
