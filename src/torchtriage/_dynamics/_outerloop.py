"""How many times the training's outermost loop ran, read from the user's frames (session 15).

A scheduler that is never stepped is judged against the steps that were due (`_unstepped`). A
DataLoader's passes tell the epochs; a loop over a hand-made batch source (`next_batch()`, a
generator, an index range) tells nothing that way. The loops the user's code runs around
`optimizer.step()` do: from the frame that built the scheduler (or, when that frame is gone, the
outermost user frame) down to the line that steps the optimizer, the loops whose body holds each
frame's current line.

  * One loop only: every optimizer step is one of its iterations. A per-epoch schedule has no
    other place to be stepped than that loop (after it, training is over), so the steps due are
    the optimizer steps.
  * Several: the outermost is the epoch loop; a `for` whose target is names counts an iteration
    each time their values change between two optimizer steps (an undercount at worst). An
    outermost `while`, or a structure that changes between steps, tells nothing (`unknown`).

Cost while it is asked (a scheduler made and never stepped, no DataLoader seen): one walk of
the stack a step, the loops of each frame's line cached per (code, line), and the outer loop's
target read from its frame (`released_locals`, so nothing is pinned).
"""

from __future__ import annotations

import ast
import types
from typing import Any

from .._frames import is_user_file, released_locals
from .._source import parsed
from ._groups import scope_of

MAX_FRAMES = 12
_Loop = ast.For | ast.AsyncFor | ast.While
_loops: dict[tuple[types.CodeType, int], tuple[_Loop, ...]] = {}


def loops_at(f: types.FrameType) -> tuple[_Loop, ...]:
    """The `for` / `while` loops whose body holds `f`'s current line, outermost first."""
    key = (f.f_code, f.f_lineno)
    hit = _loops.get(key)
    if hit is not None:
        return hit
    out: tuple[_Loop, ...] = ()
    tree = parsed(f.f_code.co_filename)
    if tree is not None:
        scope = scope_of(tree, f.f_code)
        line = f.f_lineno
        found: list[_Loop] = []
        for n in ast.walk(scope):
            if n is not scope and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            if isinstance(n, (ast.For, ast.AsyncFor, ast.While)) and n.body and \
                    n.body[0].lineno <= line <= (n.end_lineno or n.lineno):
                found.append(n)
        # (a nested function's loops are not this frame's: ast.walk still enters them, drop those)
        inner_defs = [n for n in ast.walk(scope) if n is not scope
                      and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
        found = [n for n in found if not any(d.lineno <= n.lineno <= (d.end_lineno or d.lineno) for d in inner_defs)]
        out = tuple(sorted(found, key=lambda n: n.lineno))
    if len(_loops) > 4096:
        _loops.clear()
    _loops[key] = out
    return out


def _names(target: ast.AST) -> list[str] | None:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        out: list[str] = []
        for e in target.elts:
            sub = _names(e)
            if sub is None:
                return None
            out += sub
        return out
    return None


def _same(a: Any, b: Any) -> bool:
    if isinstance(b, _Ident):
        return id(a) == b.id
    if a is b:
        return True
    if isinstance(a, (int, float, str)) and type(a) is type(b):
        return bool(a == b)
    return False


class OuterLoop:
    """The iterations of the outermost user loop around one optimizer's steps."""

    def __init__(self, built: set[tuple[int, types.CodeType]]) -> None:
        self.built = built  # (id, code) of the user frames on the stack when the scheduler was built
        self.key: tuple[types.CodeType, int] | None = None  # the outer loop: (code, line)
        self.nested = False
        self.line: int | None = None
        self.iterations = 0
        self.steps = 0
        self.unknown = False
        self._last: list[Any] | None = None
        self.codes: set[types.CodeType] = set()  # the user's functions on the stack at the steps

    def step(self, start: types.FrameType | None) -> None:
        """An optimizer step was called from the frames above `start`."""
        if self.unknown:
            return
        self.steps += 1
        frames: list[types.FrameType] = []
        f = start
        while f is not None and len(frames) < MAX_FRAMES:
            if is_user_file(f.f_code.co_filename):
                frames.append(f)
                self.codes.add(f.f_code)
                if (id(f), f.f_code) in self.built:
                    break
            f = f.f_back
        count = 0
        outer: tuple[types.FrameType, _Loop] | None = None
        for fr in frames:  # innermost first: the last frame with loops holds the outermost
            loops = loops_at(fr)
            count += len(loops)
            if loops:
                outer = (fr, loops[0])
        if outer is None:
            self.unknown = True  # no loop around the step: nothing to count
            return
        key = (outer[0].f_code, outer[1].lineno)
        nested = count > 1
        if self.key is None:
            self.key, self.nested, self.line = key, nested, outer[1].lineno
        elif key != self.key or nested != self.nested:
            self.unknown = True
            return
        if not nested:
            self.iterations += 1
            return
        loop = outer[1]
        names = _names(loop.target) if isinstance(loop, (ast.For, ast.AsyncFor)) else None
        if names is None:
            self.unknown = True
            return
        scope = released_locals(outer[0])
        values = [scope.get(n) for n in names]
        del scope
        if self._last is None or not all(_same(a, b) for a, b in zip(values, self._last)):
            self.iterations += 1
        # keep only what cannot pin tensors: numbers and strings; other values by identity
        self._last = [v if isinstance(v, (int, float, str)) else _Ident(v) for v in values]


class _Ident:
    """An object's identity without keeping the object (compared with `is` via its id)."""

    __slots__ = ("id",)

    def __init__(self, v: Any) -> None:
        self.id = id(v)
