"""Evaluation passes over the user's own loaders: their end, for the pass-end checks (session 19).

A DataLoader's pass ends when its sampler runs out (`_loaderstream`), and the loop's frame is
judged there. A validation loop over anything else (a loader class of the project's own, a list
of batches, a generator) has no such event. Its pass is known from the evaluation forwards: a
root forward in eval() mode without gradients, called from a user frame whose current line lies
in the body of a `for` loop over something that is not a DataLoader (the loop's iterable, a
name or attribute chain, read without a call). The forwards of one frame and loop are the pass's
batches. The pass has ended when that frame left the loop (its line is outside it) or returned
(it is no longer on the stack: its locals keep their last values), which is looked at on the
next root forward and at the end. Then the frame is judged as at a DataLoader's pass end
(`_lastlogged.loop_findings`).

Cost: on an evaluation forward, a walk of at most `FRAMES` user frames and one cached parse per
code object; one frame held (with its locals) from the pass until the next root forward.
"""

from __future__ import annotations

import ast
import sys
import types
from typing import Any

from .._frames import find_frame, in_user_file
from .._source import parsed, scope_at
from ._lastlogged import loop_findings

FRAMES = 4
MAX_LOOPS = 64  # code objects remembered


def _body_loop(scope: ast.AST, line: int) -> ast.For | None:
    """The innermost `for` whose body (not its header) holds `line`, in the scope's own code."""
    from .._source import own_nodes

    best: ast.For | None = None
    for n in own_nodes(scope):
        if isinstance(n, ast.For) and n.body and n.body[0].lineno <= line <= (n.end_lineno or n.lineno):
            if best is None or n.lineno > best.lineno:
                best = n
    return best


def _iterable(node: ast.expr, f: types.FrameType) -> Any:
    """What the loop iterates, when its header names it (`self.val_loader`, `enumerate(loader)`,
    `tqdm(loader)`: the call's first argument); no call is made. `_MISSING` when unknown."""
    from ._batchmeans import _resolve

    if isinstance(node, ast.Call) and node.args:
        node = node.args[0]
    try:
        if isinstance(node, (ast.Name, ast.Attribute)):
            return _resolve(node, f)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, (ast.Name, ast.Constant)):
            key = _resolve(node.slice, f) if isinstance(node.slice, ast.Name) else node.slice.value
            return _resolve(node.value, f)[key]  # `dataloaders[phase]`
    except Exception:
        return _MISSING
    return _MISSING


_MISSING = object()


class HandPasses:
    def __init__(self, ledger: Any) -> None:
        self.ledger = ledger
        self.loops: dict[tuple[types.CodeType, int], ast.For | None] = {}
        self.scopes: dict[types.CodeType, ast.AST | None] = {}
        self.held: tuple[types.FrameType, ast.AST, ast.For] | None = None
        self.batches = 0

    def on_forward(self, evaluating: bool) -> None:
        if self.held is not None:
            self._poll()
        if evaluating:
            self._note()

    def _note(self) -> None:
        f = find_frame(in_user_file, sys._getframe(2), depth=64)
        seen = 0
        while f is not None and seen < FRAMES:
            seen += 1
            found = self._loop_of(f)
            if found is not None:
                scope, loop = found
                if self.held is not None and self.held[0] is f and self.held[2] is loop:
                    self.batches += 1
                    return
                self._poll(force=True)
                it = _iterable(loop.iter, f)
                from torch.utils.data import DataLoader

                if isinstance(it, DataLoader):
                    return  # its pass end is the loader stream's
                self.held, self.batches = (f, scope, loop), 1
                return
            f = find_frame(in_user_file, f.f_back, depth=64)

    def _loop_of(self, f: types.FrameType) -> tuple[ast.AST, ast.For] | None:
        code = f.f_code
        key = (code, f.f_lineno)
        if key not in self.loops:
            if len(self.loops) > 4 * MAX_LOOPS:
                self.loops.clear()
            scope = self.scopes.get(code)
            if code not in self.scopes:
                tree = parsed(code.co_filename)
                scope = scope_at(tree, code, f.f_lineno) if tree is not None else None
                if len(self.scopes) < MAX_LOOPS:
                    self.scopes[code] = scope
            self.loops[key] = _body_loop(scope, f.f_lineno) if scope is not None else None
        loop = self.loops[key]
        if loop is None:
            return None
        scope = self.scopes.get(code)
        return (scope, loop) if scope is not None else None

    def _poll(self, force: bool = False) -> None:
        """Judge the held pass when its frame left the loop or returned (`force`: a new pass begins)."""
        if self.held is None:
            return
        f, scope, loop = self.held
        on_stack = _on_stack(f)
        inside = on_stack and loop.lineno <= f.f_lineno <= (loop.end_lineno or loop.lineno)
        if inside and not force:
            return
        self.held = None
        if inside:
            return  # (a new pass of another loop inside this one's body: this pass is not over)
        session = getattr(self.ledger, "session", None)
        step = getattr(session, "step", None)
        found = loop_findings(f, scope, loop, self.batches, step, ran_to=f.f_lineno)
        denominators = getattr(self.ledger, "denominators", None)
        for finding in found:
            if denominators is not None:
                denominators.found.setdefault((finding.file, finding.line), finding)

    def end(self) -> None:
        self._poll(force=True)


def _on_stack(frame: types.FrameType) -> bool:
    f: types.FrameType | None = sys._getframe(1)
    while f is not None:
        if f is frame:
            return True
        f = f.f_back
    return False
