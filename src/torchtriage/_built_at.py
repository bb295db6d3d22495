"""Where an object handed to `watch()` was built: the user's line, read from the source.

(Also where a dataset split made before the session was drawn: `split_line`.)

A discovering session (`torchtriage run`) sees an optimizer being built and keeps the user's
line (`_frames.note_optimizer_frame`). An optimizer built before `watch(model, opt)` was not
seen; its line is still in the user's files. `construction_line` reads them (the files of the
user's frames on the stack when the session starts, and those defining the watched models'
classes) for calls of the object's class — `optim.SGD(...)`, `torch.optim.AdamW(...)` — and
scores each by its literal keyword arguments against the object's settings (`lr=5e-4` against
`opt.defaults["lr"]`). The line is given only when one call scores best: two equally likely
lines are no answer.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import Any

from ._frames import UserFrame, user_frame_of_line, user_functions_on_stack
from ._source import parsed


def _callee(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _UNKNOWN


_UNKNOWN = object()


def _agreement(call: ast.Call, settings: dict[str, Any]) -> int:
    """+1 for each literal keyword argument equal to the object's setting, -1 for each that
    differs; arguments that are not literals say nothing."""
    score = 0
    for kw in call.keywords:
        if kw.arg is None or kw.arg not in settings:
            continue
        value = _literal(kw.value)
        if value is _UNKNOWN:
            continue
        want = settings[kw.arg]
        same = value == want if not isinstance(want, tuple) else tuple(value) == want if isinstance(
            value, (list, tuple)) else False
        score += 1 if same else -1
    return score


def _functions(tree: ast.Module) -> list[tuple[int, int, str]]:
    return [(n.lineno, n.end_lineno or n.lineno, n.name) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def construction_line(obj: Any, files: Iterable[str], names: Iterable[str] = ()) -> UserFrame | None:
    """The one line among `files` that calls `type(obj)` with arguments agreeing best with the
    object's settings (`obj.defaults` for an optimizer) and naming one of `names` (the user's
    variables of the models it optimizes: `SGD(encoder.parameters(), ...)`), or None when there
    is none or a tie."""
    settings = getattr(obj, "defaults", None)
    settings = settings if isinstance(settings, dict) else {}
    wanted = set(names)

    def score(call: ast.Call) -> int:
        named = wanted and any(isinstance(n, ast.Name) and n.id in wanted
                               for arg in [*call.args, *(k.value for k in call.keywords)] for n in ast.walk(arg))
        return _agreement(call, settings) + (1 if named else 0)

    return call_line(files, {type(obj).__name__}, score)


def split_line(sizes: list[int], files: Iterable[str]) -> UserFrame | None:
    """The line that split a dataset into parts of `sizes` (some of them: a part may be
    unknown): a `random_split` whose literal lengths hold them scores best, a `Subset(...)`
    or a `random_split` with lengths that are not literals next."""
    def score(call: ast.Call) -> int:
        if _callee(call.func) != "random_split" or len(call.args) < 2:
            return 0
        lengths = _literal(call.args[1])
        if not isinstance(lengths, (list, tuple)):
            return 0
        return 1 if all(n in lengths for n in sizes) else -1

    return call_line(files, {"random_split", "Subset"}, score)


def call_line(files: Iterable[str], names: set[str], score: Any) -> UserFrame | None:
    """The one call among `files` of a function or class named in `names` that `score` (call
    node -> int) ranks highest; between equal scores, a call inside a function that is running
    now (the user's `main()`, the test function) ranks above one that is not. None when there
    is no such call, or a tie."""
    running = user_functions_on_stack()
    scored: list[tuple[tuple[int, bool], str, int, str]] = []
    for path in dict.fromkeys(files):
        tree = parsed(path)
        if tree is None:
            continue
        functions = None
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _callee(node.func) in names:
                functions = functions if functions is not None else _functions(tree)
                inner = [f for f in functions if f[0] <= node.lineno <= f[1]]
                where = max(inner)[2] if inner else "<module>"
                scored.append(((score(node), (path, where) in running), path, node.lineno, where))
    if not scored:
        return None
    best = max(s[0] for s in scored)
    top = [s for s in scored if s[0] == best]
    if len({(s[1], s[2]) for s in top}) != 1:  # (two calls on one line are one line)
        return None
    _, path, line, function = top[0]
    return user_frame_of_line(path, line, function)
